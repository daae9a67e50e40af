"""MCP tools: the in-training probes (they run the user's model in the user's interpreter)."""

from typing import Annotated

from mcp.server.mcpserver import Context
from mcp_types import CallToolResult
from pydantic import Field

from server.core import RUNS_SCRIPT, RUNS_TARGET, Detail, progress_reporter, reply, tool, ws
from tools import probes as P

Target = Annotated[str | None, Field(description=(
    "target factory 'file.py:make_target' (relative to the workspace) or 'package.module:make_target': a function "
    "with no arguments returning {'model', 'batch' or 'data', 'loss_fn(model, batch)', 'optimizer' or "
    "'make_optimizer(params)', optional 'num_classes', 'task'}"))]
Command = Annotated[list[str] | None, Field(description=(
    "script mode instead of target: the unmodified training command, e.g. ['python', 'train.py', '--steps', '50'] "
    "or ['torchrun', '--nproc-per-node', '2', 'train.py']; run in the workspace with instruments injected"))]
Python = Annotated[str | None, Field(description=(
    "the interpreter that has the user's torch (default: $MLTRIAGE_PYTHON, else the workspace's .venv/bin/python, "
    "else the server's)"))]


Timeout = Annotated[float, Field(gt=0, le=3600, description="wall-clock limit in seconds; the probe's whole "
                                                           "process group is killed when it runs out")]


def _target(target: str | None) -> str | None:
    return P.resolve_target(target, ws()) if target else None


def _command(command: list[str] | None) -> list[str] | None:
    if command:
        for arg in command[1:]:
            if arg.endswith(".py") and not arg.startswith("-"):
                ws().existing_file(arg)
    return command


@tool(title="Gradient and update norms", hints=RUNS_SCRIPT, group="core")
async def grad_norm_snapshot(
    target: Target = None,
    command: Command = None,
    steps: Annotated[int, Field(ge=1, le=10000, description="take the snapshot at this optimizer step (1 = the first)")] = 1,
    python: Python = None,
    timeout_s: Timeout = 120.0,
    ctx: Context = None,
) -> Annotated[CallToolResult, P.GradNormReport]:
    """Measure gradients from the inside: per parameter the gradient norm, weight norm and update/weight ratio of one
    optimizer step (healthy ~1e-3), flags (grad None/zero/non-finite, requires_grad=False, not in the optimizer, lr 0),
    per-module aggregates in forward order, the global pre-clip norm, and activation statistics (dead ReLU units,
    saturated sigmoid/tanh, constant output). Findings: broken_graph, frozen_params, exploding_gradients,
    vanishing_gradients, lr_too_low/high, dead_units. Call it when the loss does not move or overfit_test fails;
    the findings name the parameters and modules to look at."""
    rep = await P.grad_norm_snapshot(ws().root, _target(target), _command(command), steps, python, timeout_s,
                                     progress_reporter(ctx))
    return reply(rep)


@tool(title="Find the first NaN/Inf", hints=RUNS_SCRIPT, group="core")
async def nan_hook_run(
    target: Target = None,
    command: Command = None,
    max_steps: Annotated[int, Field(ge=1, le=100000, description="stop after this many steps if nothing goes non-finite")] = 200,
    python: Python = None,
    timeout_s: Timeout = 300.0,
    ctx: Context = None,
) -> Annotated[CallToolResult, P.NanHookReport]:
    """Train until the first NaN/Inf and localise it: the step, the phase (forward, loss, backward, optimizer_step),
    the first module (name and type) whose output went non-finite, the op and its file:line, the statistics of what
    the op was fed (zeros for log/div, large values for exp), the loss and grad-norm history before, and the likely
    cause (log(0), 0/0, exp overflow, LR) with its fix. Cheap while nothing is wrong (one host sync per step).
    Under torchrun every rank is watched and the first rank is named. Call it first whenever a loss is NaN/Inf;
    fix the op it names instead of lowering the LR or clipping."""
    rep = await P.nan_hook_run(ws().root, _target(target), _command(command), max_steps, python, timeout_s,
                               progress_reporter(ctx))
    return reply(rep)


@tool(title="Overfit one batch", hints=RUNS_TARGET, group="core")
async def overfit_test(
    target: Target,
    steps: Annotated[int, Field(ge=1, le=100000, description="maximum training steps on the one batch")] = 300,
    lr: Annotated[float | None, Field(gt=0, description="override the optimizer's learning rate")] = None,
    python: Python = None,
    timeout_s: Timeout = 300.0,
    ctx: Context = None,
) -> Annotated[CallToolResult, P.OverfitReport]:
    """Overfit ONE fixed batch (the first batch of the target): `passed` when the loss falls by >= 95% or below a
    task-aware floor, stopping early. A failure says how (flat, slow, diverged, nan) with what to check next; the
    loss trajectory and wall time come back too. A model that cannot memorise one batch has a bug: run this before
    tuning anything, then grad_norm_snapshot if it fails."""
    rep = await P.overfit_test(ws().root, _target(target), steps, lr, python, timeout_s, progress_reporter(ctx))
    return reply(rep)


@tool(title="Loss at initialisation", hints=RUNS_TARGET, group="core")
async def init_loss_check(
    target: Target,
    python: Python = None,
    timeout_s: Timeout = 180.0,
    ctx: Context = None,
) -> Annotated[CallToolResult, P.InitLossReport]:
    """Compare the loss at initialisation with its chance value (ln C for C-class cross-entropy, ln 2 for binary,
    E[y^2] for MSE): verdict ok / too_high (bad_init, naming the layer whose output scale blows up) / too_low
    (data_leakage). Also the logit std, constant outputs, and the random-input test (a briefly trained copy scores
    random inputs as well as real ones -> data_pipeline). Call it at the start of triage: it costs seconds."""
    rep = await P.init_loss_check(ws().root, _target(target), python, timeout_s, progress_reporter(ctx))
    return reply(rep)


@tool(title="Check the training data", hints=RUNS_TARGET, group="core")
async def data_check(
    target: Target,
    python: Python = None,
    timeout_s: Timeout = 180.0,
    ctx: Context = None,
) -> Annotated[CallToolResult, P.DataCheckReport]:
    """Check the data the target trains on: NaN/Inf in inputs, per-feature mean/std (unnormalised inputs), the label
    distribution and imbalance, a single feature that predicts the label (data_leakage), labels aligned with
    inputs (copies trained on real vs permuted labels, scored on a held-out batch -> data_pipeline), and a model
    left in eval mode with dropout/batch-norm (train_eval_mode). Call it when the loss is suspiciously good or
    stuck near chance."""
    rep = await P.data_check(ws().root, _target(target), python, timeout_s, progress_reporter(ctx))
    return reply(rep)


@tool(title="LR range test", hints=RUNS_TARGET, group="core")
async def lr_range_test(
    target: Target,
    min_lr: Annotated[float, Field(gt=0, description="first learning rate of the sweep")] = 1e-7,
    max_lr: Annotated[float, Field(gt=0, description="last learning rate of the sweep")] = 10.0,
    steps: Annotated[int, Field(ge=10, le=10000, description="training steps over the sweep")] = 100,
    python: Python = None,
    timeout_s: Timeout = 300.0,
    ctx: Context = None,
) -> Annotated[CallToolResult, P.LrRangeReport]:
    """The LR range test (Smith 2015) on a copy of the model: raise the LR exponentially from min_lr to max_lr and
    record the loss; returns the loss-vs-LR curve, a suggested LR (minimum / 10), where the loss blows up, and where
    the current LR sits (below / near / above / diverging). Call it only after overfit_test passes: it places the
    LR, it does not find bugs."""
    rep = await P.lr_range_test(ws().root, _target(target), min_lr, max_lr, steps, python, timeout_s,
                                progress_reporter(ctx))
    return reply(rep)


# ---------------------------------------------------------------- the training loop around the model (issue #14)

from tools import loop_checks as L  # noqa: E402 - appended with the tools it serves



@tool(title="Causality, targets and padding of a token model", hints=RUNS_TARGET, group="core")
async def sequence_check(
    target: Target,
    python: Python = None,
    timeout_s: Timeout = 120.0,
    detail: Detail = "summary",
    ctx: Context = None,
) -> Annotated[CallToolResult, L.SequenceCheckReport]:
    """Check a token model ((B, T) integer tokens -> (B, T, V) logits: GPT, LSTM LM, tagger) on the target's batch:
    causality (tokens after t are randomised; logits at <= t must not move, else data_leakage naming the first module
    and line that lets the future in, e.g. a discarded masked_fill), what the loss scores each position against (read
    from d loss / d logits: the next token is right, the input token itself is data_leakage) and whether padding
    counts in the loss (loss_function). Bidirectional models whose targets are not the next token are not flagged.
    Call it for any language/sequence model whose loss is suspiciously low or whose samples are garbage."""
    rep = await L.sequence_check(ws().root, _target(target), python, timeout_s, progress_reporter(ctx), detail)
    return reply(rep)


@tool(title="Evaluate the LR schedule", hints=RUNS_TARGET, group="core")
async def schedule_check(
    lr_schedule: Annotated[str | None, Field(description=(
        "a function of the step returning the LR, 'train.py:get_lr' (relative to the workspace) or 'pkg.module:fn'; "
        "the file is not run, only the function and the module-level names it uses (max_iters, warmup_iters, "
        "learning_rate, ... are read from there)"))] = None,
    target: Annotated[str | None, Field(description=(
        "instead of lr_schedule: a factory 'file.py:make_target' returning {'scheduler'} or {'optimizer', "
        "'make_scheduler(optimizer)'}, plus 'max_steps' = the number of scheduler.step() calls of the run"))] = None,
    horizon: Annotated[int | None, Field(ge=1, le=100_000_000, description=(
        "steps to evaluate (default: max_iters / lr_decay_iters of the file, the target's max_steps, or the "
        "scheduler's own T_max / total_steps)"))] = None,
    python: Python = None,
    timeout_s: Timeout = 120.0,
    detail: Detail = "summary",
    ctx: Context = None,
) -> Annotated[CallToolResult, L.ScheduleCheckReport]:
    """Evaluate the LR schedule at every step of the run without training: a curve (<= 32 points) plus findings
    naming the step and the return line where it goes wrong: LR rising after the warmup, a peak far above the
    configured LR (lr_too_high), a decay asked for but never happening, the LR falling to ~0 in the first few % of
    the run (a scheduler set in epochs but stepped per batch: lr_too_low), one-step jumps > 10x. Call it when the
    loss diverges mid-run or stops improving early, before touching the LR itself."""
    spec = P.resolve_target(lr_schedule, ws()) if lr_schedule else None
    rep = await L.schedule_check(ws().root, spec, _target(target), horizon, python, timeout_s, progress_reporter(ctx),
                                 detail)
    return reply(rep)
