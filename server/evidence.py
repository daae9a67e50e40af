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
from tools.slurm import slurm_check as _slurm_check


@tool(title="Tail a training log", hints=READS, group="core")
def tail_log(
    path: Annotated[str, Field(description="the run's log, e.g. 'logs/train.log'")],
    lines: Annotated[int, Field(ge=1, le=5000, description="how many lines from the end to return")] = 50,
) -> Annotated[CallToolResult, TailLogReport]:
    """Start here on any failing run: the log's last lines with typed events (traceback, nan_inf, oom, nccl, killed,
    segfault), the last step, seconds since the last write and run_state (active, ended, crashed, stalled = a hang
    candidate). Fast on any size."""
    return reply(_tail_log(ws().existing_file(path), lines))


@tool(title="Parse metrics and loss-curve shape", hints=READS, group="core")
async def log_metrics(
    ctx: Context,
    path: Annotated[str, Field(description="log or metrics file (text, JSON lines, CSV)")],
    names: Annotated[list[str] | None, Field(description="only these series, e.g. ['loss', 'val_loss', 'lr']; default all")] = None,
    plot: Annotated[bool, Field(description="also return a PNG of the curves (raw + moving average, LR on a second axis)")] = False,
) -> Annotated[CallToolResult, LogMetricsReport]:
    """Every metric series of a training log (any common framework's format; streamed) summarised, the loss curve's
    shape (converged, plateau, diverging, nan_death, ...) and LR-schedule findings. The shape picks the triage
    branch; confirm with the probe a finding names."""
    file = ws().existing_file(path)
    report_progress = progress_reporter(ctx)
    stop = threading.Event()

    def progress(done: int, total: int) -> None:
        anyio.from_thread.run(report_progress, done, total, "bytes parsed")

    try:
        report = await anyio.to_thread.run_sync(
            lambda: _log_metrics(file, names, plot, progress=progress, cancelled=stop.is_set), abandon_on_cancel=True)
    except BaseException:
        stop.set()  # a cancelled call stops its parsing thread at the next chunk
        raise
    return reply(report, images=[report.png] if report.png else None)


@tool(title="GPU status (NVML)", hints=READS, group="core")
def gpu_status() -> Annotated[CallToolResult, GpuStatusReport]:
    """Per NVIDIA GPU: memory, utilisation, temperature, power, clocks, throttle reasons, ECC, and the processes
    holding memory; available=false with the reason when there is none. Call it for OOM (who holds the memory?) and
    slow runs (utilisation well below 90% -> profile_steps)."""
    return reply(_gpu_status())


@tool(title="Check training processes", hints=READS, group="core")
async def process_check(
    pid: Annotated[int | None, Field(ge=1, description="one process id; default: find the training processes")] = None,
    pattern: Annotated[str | None, Field(description="regex over the command line (default: python/torchrun/... running a train script)")] = None,
    stack: Annotated[bool, Field(description="add each thread's Python stack (py-spy dump) when permitted; for a "
                                             "distributed job, compare every rank's stack and name the odd rank")] = False,
    job: Annotated[str | None, Field(description="a Slurm job id: collect every node's processes and stacks with "
                                                 "srun --overlap (one step per node)")] = None,
    python: Python = None,
) -> Annotated[CallToolResult, ProcessCheckReport]:
    """Is the training process running, possibly_hung, zombie, stopped or gone? Per process: status, CPU %, RSS, loader
    workers, open logs and their staleness, a verdict. For possibly_hung ask again with stack=True before restarting
    anything: for a torchrun/Slurm job every rank's stack is compared and the odd rank of a hang is named (waiting in
    another collective, at another line, or in none), and flight-recorder dumps, when the job has them, are read with
    torch's analyser (the mismatched collective's sequence number, op, sizes, ranks). job=<Slurm id> does the same
    on every node of the job."""
    if job is not None:
        report = await anyio.to_thread.run_sync(lambda: _slurm_check(job, stack=stack))
    else:
        report = await anyio.to_thread.run_sync(lambda: _process_check(pid=pid, pattern=pattern, stack=stack))
    if stack:
        report = await read_flight_recorder(report, ws().read_path, ws().root, python)
    return reply(report)
