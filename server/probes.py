"""MCP tools: the in-training probes (they run the user's model in the user's interpreter)."""

from typing import Annotated

from mcp.server.mcpserver import Context
from mcp_types import CallToolResult
from pydantic import Field

from server.core import RUNS_SCRIPT, RUNS_TARGET, Detail, Python, progress_reporter, reply, tool, ws
from tools import probes as P

# Shared by many tools and read by the model for each: short, the instructions explain targets and commands.
Target = Annotated[str | None, Field(description="factory 'train.py:make_target'")]
Command = Annotated[list[str] | None, Field(description="or the training script, e.g. ['python', 'train.py']")]
Timeout = Annotated[float, Field(gt=0, le=3600)]  # seconds (the name says so), then the probe is killed


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
    steps: Annotated[int, Field(ge=1, le=10000, description="the optimizer step to snapshot")] = 1,
    python: Python = None,
    timeout_s: Timeout = 120.0,
    ctx: Context = None,
) -> Annotated[CallToolResult, P.GradNormReport]:
    """When the loss does not move or overfit_test fails: per-parameter grad norm, weight norm, update/weight ratio
    (healthy ~1e-3), activation statistics; findings name the parameters."""
    rep = await P.grad_norm_snapshot(ws().root, _target(target), _command(command), steps, python, timeout_s,
                                     progress_reporter(ctx))
    return reply(rep)


@tool(title="Find the first NaN/Inf", hints=RUNS_SCRIPT, group="core")
async def nan_hook_run(
    target: Target = None,
    command: Command = None,
    max_steps: Annotated[int, Field(ge=1, le=100000, description="give up after this many steps")] = 200,
    python: Python = None,
    timeout_s: Timeout = 300.0,
    ctx: Context = None,
) -> Annotated[CallToolResult, P.NanHookReport]:
    """First call on a NaN/Inf loss: the first non-finite value's step, module, op (file:line), inputs and cause
    (log(0), 0/0, exp overflow, LR) with the fix."""
    rep = await P.nan_hook_run(ws().root, _target(target), _command(command), max_steps, python, timeout_s,
                               progress_reporter(ctx))
    return reply(rep)


@tool(title="Overfit one batch", hints=RUNS_TARGET, group="core")
async def overfit_test(
    target: Target,
    steps: Annotated[int, Field(ge=1, le=100000, description="steps on the one batch")] = 300,
    lr: Annotated[float | None, Field(gt=0, description="override the LR")] = None,
    python: Python = None,
    timeout_s: Timeout = 300.0,
    ctx: Context = None,
) -> Annotated[CallToolResult, P.OverfitReport]:
    """Can the model memorise one batch? passed, or how it failed (flat, slow, diverged, nan). If it cannot, there is a
    bug: next grad_norm_snapshot."""
    rep = await P.overfit_test(ws().root, _target(target), steps, lr, python, timeout_s, progress_reporter(ctx))
    return reply(rep)


@tool(title="Loss at initialisation", hints=RUNS_TARGET, group="core")
async def init_loss_check(
    target: Target,
    python: Python = None,
    timeout_s: Timeout = 180.0,
    ctx: Context = None,
) -> Annotated[CallToolResult, P.InitLossReport]:
    """Seconds: loss at init against chance (ln C, ln 2): ok, too_high (bad_init, naming the layer) or too_low
    (data_leakage); logit scale, constant outputs."""
    rep = await P.init_loss_check(ws().root, _target(target), python, timeout_s, progress_reporter(ctx))
    return reply(rep)


@tool(title="Check the training data", hints=RUNS_TARGET, group="core")
async def data_check(
    target: Target,
    python: Python = None,
    timeout_s: Timeout = 180.0,
    ctx: Context = None,
) -> Annotated[CallToolResult, P.DataCheckReport]:
    """When the loss is too good or stuck at chance: input NaN/Inf and scales, label balance, leakage, real vs
    permuted labels, padding the model reads, eval-mode layers."""
    rep = await P.data_check(ws().root, _target(target), python, timeout_s, progress_reporter(ctx))
    return reply(rep)


@tool(title="LR range test", hints=RUNS_TARGET, group="core")
async def lr_range_test(
    target: Target,
    min_lr: Annotated[float, Field(gt=0, description="sweep start")] = 1e-7,
    max_lr: Annotated[float, Field(gt=0, description="sweep end")] = 10.0,
    steps: Annotated[int, Field(ge=10, le=10000, description="steps of the sweep")] = 100,
    python: Python = None,
    timeout_s: Timeout = 300.0,
    ctx: Context = None,
) -> Annotated[CallToolResult, P.LrRangeReport]:
    """Only after overfit_test passes: Smith's LR range test on a copy of the model; the suggested LR and where the
    current one sits. It finds no bugs."""
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
    """For a token model ((B, T) -> (B, T, V)) with a suspiciously low loss: causality (which module or mask lets
    the future in), unshifted targets, padding in the loss; a one-step forecaster's past outputs reading later
    inputs."""
    rep = await L.sequence_check(ws().root, _target(target), python, timeout_s, progress_reporter(ctx), detail)
    return reply(rep)


@tool(title="Evaluate the LR schedule", hints=RUNS_TARGET, group="core")
async def schedule_check(
    lr_schedule: Annotated[str | None, Field(description=(
        "LR as a function of the step, 'train.py:get_lr' (the file is not run)"))] = None,
    target: Annotated[str | None, Field(description=(
        "or a factory returning {'scheduler', 'max_steps'}"))] = None,
    horizon: Annotated[int | None, Field(ge=1, le=100_000_000, description=(
        "steps (default: the run's max_iters/T_max)"))] = None,
    python: Python = None,
    timeout_s: Timeout = 120.0,
    detail: Detail = "summary",
    ctx: Context = None,
) -> Annotated[CallToolResult, L.ScheduleCheckReport]:
    """When the loss diverges mid-run or stalls early, before touching the LR: the LR schedule over the whole run,
    without training; the step and line where it goes wrong."""
    spec = P.resolve_target(lr_schedule, ws()) if lr_schedule else None
    rep = await L.schedule_check(ws().root, spec, _target(target), horizon, python, timeout_s, progress_reporter(ctx),
                                 detail)
    return reply(rep)
