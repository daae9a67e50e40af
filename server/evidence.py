"""MCP tools: evidence. Read what the run left behind (its log) and what it is doing now (GPU, processes)."""

import threading
from typing import Annotated

import anyio
from mcp.server.mcpserver import Context
from mcp_types import CallToolResult
from pydantic import Field

from server.core import READS, Python, progress_reporter, reply, tool, ws
from tools.gpu import GpuStatusReport, gpu_status as _gpu_status
from tools.logs import LogMetricsReport, TailLogReport, log_metrics as _log_metrics, tail_log as _tail_log
from tools.processes import ProcessCheckReport, process_check as _process_check, read_flight_recorder
from tools.ranks import is_rank_spec, log_source, metrics_ranks, rank_files, tail_ranks
from tools.slurm import slurm_check as _slurm_check


@tool(title="Tail a training log", hints=READS, group="core")
def tail_log(
    path: Annotated[str, Field(description="the run's log, or rank logs (dir/glob)")],
    lines: Annotated[int, Field(ge=1, le=5000, description="lines from the end")] = 50,
) -> Annotated[CallToolResult, TailLogReport]:
    """Start here: the log's last lines, typed events (traceback, nan_inf, oom, nccl, killed), last step, seconds since
    the last write, run_state. Rank logs: the culprit rank apart from its victims."""
    w = ws()
    if is_rank_spec(w, path):
        return reply(tail_ranks(rank_files(w, path), lines, path, w.root))
    return reply(_tail_log(w.existing_file(path), lines))


@tool(title="Parse metrics and loss-curve shape", hints=READS, group="core")
async def log_metrics(
    ctx: Context,
    path: Annotated[str, Field(description="log, metrics file, run directory (TensorBoard, W&B, MLflow, ...) or rank logs")],
    names: Annotated[list[str] | None, Field(description="only these series; default all")] = None,
    plot: Annotated[bool, Field(description="also return a PNG of the curves")] = False,
    run: Annotated[str | None, Field(description="which run of several; default the newest")] = None,
) -> Annotated[CallToolResult, LogMetricsReport]:
    """Every metric series of a training log or metrics store summarised, the loss curve's shape (converged,
    plateau, diverging, nan_death, ...) and LR-schedule findings. The shape picks the triage branch."""
    source = log_source(ws(), path)
    ranked, file = (source, None) if isinstance(source, list) else (None, source)
    report_progress = progress_reporter(ctx)
    stop = threading.Event()

    def progress(done: int, total: int) -> None:
        anyio.from_thread.run(report_progress, done, total, "bytes parsed")

    try:
        report = await anyio.to_thread.run_sync(
            lambda: metrics_ranks(ranked, names, plot, path, ws().root, progress, stop.is_set) if ranked is not None else
            _log_metrics(file, names, plot, progress=progress, cancelled=stop.is_set, run=run), abandon_on_cancel=True)
    except BaseException:
        stop.set()  # a cancelled call stops its parsing thread at the next chunk
        raise
    return reply(report, images=[report.png] if report.png else None)


@tool(title="GPU status (NVML)", hints=READS, group="core")
def gpu_status() -> Annotated[CallToolResult, GpuStatusReport]:
    """Per GPU (NVML): memory, utilisation, temperature, power, throttling, ECC, processes holding memory. For OOM and
    slow runs."""
    return reply(_gpu_status())


@tool(title="Check training processes", hints=READS, group="core")
async def process_check(
    pid: Annotated[int | None, Field(ge=1, description="one process; default: find training processes")] = None,
    pattern: Annotated[str | None, Field(description="regex over the command line")] = None,
    stack: Annotated[bool, Field(description="each thread's Python stack (py-spy); ranks compared")] = False,
    job: Annotated[str | None, Field(description="a Slurm job id: every node of the job")] = None,
    python: Python = None,
) -> Annotated[CallToolResult, ProcessCheckReport]:
    """Is the training process running, possibly_hung, zombie or gone? Status, CPU, RSS, loader workers, log staleness.
    If possibly_hung, ask again with stack=True before a restart: a distributed job's odd rank is named."""
    if job is not None:
        report = await anyio.to_thread.run_sync(lambda: _slurm_check(job, stack=stack))
    else:
        report = await anyio.to_thread.run_sync(lambda: _process_check(pid=pid, pattern=pattern, stack=stack))
    if stack:
        report = await read_flight_recorder(report, ws().read_path, ws().root, python)
    return reply(report)
