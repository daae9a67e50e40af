"""MCP tools: live runs (launch, watch, steer) and checkpoint inspection."""

from typing import Annotated

from mcp.server.mcpserver import Context
from mcp_types import CallToolResult
from pydantic import Field

from server.core import Python, LAUNCHES, READS, RUNS_TARGET, STEERS, progress_reporter, reply, tool, ws
from tools import live as _live
from tools.checkpoints import CheckpointReport, inspect_checkpoint as _inspect_checkpoint
from tools.live import Action, LiveActionReport, LiveStatus, RunList, RunStarted, What


@tool(title="Launch a training run in the background", hints=LAUNCHES, group="live")
def run_training(
    command: Annotated[list[str] | str, Field(description="the training command, unmodified, e.g. "
                                              "['python', 'train.py', '--lr', '3e-4'] or 'torchrun --nproc-per-node 2 train.py'; "
                                              "no shell: pipes and redirections are not interpreted")],
    log_path: Annotated[str, Field(description="file for the run's stdout+stderr (appended)")],
    name: Annotated[str | None, Field(description="a short label for the run id")] = None,
    python: Python = None,
) -> Annotated[CallToolResult, RunStarted]:
    """Launch a training command in the background with the live instrument injected (no code change); returns its run
    id at once. Watch it with live_status, steer it with live_action, find it again with list_runs."""
    root = ws().root
    return reply(_live.launch(root, command, ws().write_path(log_path), name, python))


@tool(title="List launched runs", hints=READS, group="live")
def list_runs() -> Annotated[CallToolResult, RunList]:
    """The runs started with run_training in this workspace, newest first: status, step, last loss, age. Reads files
    only, so it answers even while a run hangs."""
    return reply(_live.list_runs(ws().root))


@tool(title="Look inside a live run", hints=READS, group="live")
async def live_status(
    run: Annotated[str, Field(description="run id from run_training/list_runs, or 'pid:<n>' for a process we did "
                                          "not launch (working in the workspace; stack only, via py-spy), or "
                                          "'job:<Slurm id>' (every rank's stack on every node, via srun --overlap)")],
    what: Annotated[list[What], Field(description="progress (step, steps/s, loss, time since the last step), stack, "
                                                  "memory (trend), modules (time per module over `steps` steps), "
                                                  "optimizer, grads (per layer), ranks (which rank lags or hangs the "
                                                  "others, per-rank step/data-wait/compute time and memory)")] = ["progress"],
    steps: Annotated[int, Field(ge=1, le=200, description="steps to time for 'modules'")] = 5,
    wait_s: Annotated[float, Field(ge=1, le=300, description="longest wait for 'modules' to collect its steps")] = 30.0,
    ctx: Context | None = None,
) -> Annotated[CallToolResult, LiveStatus]:
    """Look inside a live run without stopping it (each part in about a second, or why not): progress, stack,
    memory trend, per-module time, optimizer, grads, ranks. Start with progress; a frozen step counter -> stack
    (and ranks under torchrun/srun: the rank holding the others back, or a straggler, in data wait or compute)."""
    return reply(await _live.status(ws().root, run, list(what), steps, wait_s, progress_reporter(ctx)))


@tool(title="Steer a live run", hints=STEERS, group="live")
async def live_action(
    run: Annotated[str, Field(description="run id from run_training/list_runs")],
    action: Annotated[Action, Field(description="scale_lr (every group's lr and the scheduler's base lrs "
                                                "times factor), set_grad_clip (max_norm; omitted = off), "
                                                "save_checkpoint (to path), stop (at a step boundary, no process left)")],
    factor: Annotated[float | None, Field(gt=0, le=100, description="for scale_lr, e.g. 0.5")] = None,
    max_norm: Annotated[float | None, Field(gt=0, description="for set_grad_clip, e.g. 1.0")] = None,
    path: Annotated[str | None, Field(description="for save_checkpoint: a new file inside the workspace")] = None,
    wait_s: Annotated[float, Field(ge=0.5, le=120, description="how long to wait for the step boundary")] = 10.0,
    ctx: Context | None = None,
) -> Annotated[CallToolResult, LiveActionReport]:
    """Steer a live run at its next step boundary: scale_lr, set_grad_clip, save_checkpoint or stop; returns the values
    before and after. No arbitrary code. Change hyperparameters only once the evidence points there."""
    target = ws().write_path(path) if path else None
    return reply(await _live.action(ws().root, run, action, factor=factor, max_norm=max_norm, path=target,
                                    wait_s=wait_s, on_progress=progress_reporter(ctx)))


@tool(title="Inspect a checkpoint safely", hints=RUNS_TARGET, group="live")
async def inspect_checkpoint(
    path: Annotated[str, Field(description="checkpoint file (torch.save)")],
    compare_to: Annotated[str | None, Field(description="a second checkpoint: report which tensors changed and by how much")] = None,
    python: Python = None,
    ctx: Context | None = None,
) -> Annotated[CallToolResult, CheckpointReport]:
    """Read a torch checkpoint safely (weights_only: nothing is executed): keys, step, parameter count and shapes per
    module, NaN/Inf and all-zero tensors, optimizer state; with compare_to, which tensors changed."""
    p = ws().existing_file(path)
    other = ws().existing_file(compare_to) if compare_to else None
    return reply(await _inspect_checkpoint(p, other, workspace_root=ws().root, python=python,
                                           on_progress=progress_reporter(ctx), shown_as=(path, compare_to)))
