"""MCP tools: evidence. Read what the run left behind (its log) and what it is doing now (GPU, processes)."""

import threading
from typing import Annotated

import anyio
from mcp.server.mcpserver import Context
from mcp_types import CallToolResult
from pydantic import Field

from server.core import READS, progress_reporter, reply, tool, ws
from tools.gpu import GpuStatusReport, gpu_status as _gpu_status
from tools.logs import LogMetricsReport, TailLogReport, log_metrics as _log_metrics, tail_log as _tail_log
from tools.processes import ProcessCheckReport, process_check as _process_check


@tool(title="Tail a training log", hints=READS, group="core")
def tail_log(
    path: Annotated[str, Field(description="the run's log file, relative to the workspace (e.g. 'logs/train.log')")],
    lines: Annotated[int, Field(ge=1, le=5000, description="how many lines from the end to return")] = 50,
) -> Annotated[CallToolResult, TailLogReport]:
    """Start here: the last lines of a training log, read from the end (fast on any size), with typed `events`.

    Events: traceback (one per crash, with exception type, message and innermost frame), nan_inf, oom, nccl,
    killed, segfault, warning, each with its line. Also `last_step` seen, `stale_s` (seconds since the file was
    written) and `run_state`: active, crashed (ends in a traceback/kill/segfault), ended (quiet and no process
    writes it: the run finished, not a hang), stalled (quiet while a live process still holds it open for
    writing: a hang candidate, with `writers`). Findings map the events to failure modes. Next: a traceback ->
    open its frame; NaN/Inf or a curve question -> log_metrics; OOM -> gpu_status; stalled ->
    process_check(pid=..., stack=True). Use lines=200 to see a whole traceback."""
    return reply(_tail_log(ws().existing_file(path), lines))


@tool(title="Parse metrics and loss-curve shape", hints=READS, group="core")
async def log_metrics(
    ctx: Context,
    path: Annotated[str, Field(description="log or metrics file (text log, JSON lines, CSV), relative to the workspace")],
    names: Annotated[list[str] | None, Field(description="only these series, e.g. ['loss', 'val_loss', 'lr']; default all")] = None,
    plot: Annotated[bool, Field(description="also return a PNG of the curves (raw + moving average, LR on a second axis)")] = False,
) -> Annotated[CallToolResult, LogMetricsReport]:
    """Parse every metric series in a training log and classify the loss curve's shape and the LR schedule.

    Reads logs as frameworks print them (nanoGPT, HF Trainer lines and trainer_state.json, Lightning bars and
    metrics.csv, torchtitan, Megatron-LM, timm, fairseq, Keras, logging/print lines, JSON lines, CSV): steps from
    the line's own iter/step/iteration/epoch field, train and validation series apart (`loss_series`,
    `val_series`), header/config numbers not series. Per series: kind (loss, lr, grad_norm, throughput, memory,
    metric), count, first, last, min, max, non-finite count and first non-finite step, smoothed last, trend;
    at most 8 shown, the rest named in `other_series` (ask with `names`). `shape` is one of decreasing,
    converged, plateau, slow_burn, hockey_stick, oscillating, spike_and_recover, nan_death, spike_then_nan,
    diverging, train_val_divergence. `findings` name the failure mode with the numbers; LR findings from the
    curve shape alone stay below 0.5, those from the LR series against the configured LR/warmup name the step.
    A shape picks the branch of the triage tree; it does not locate the bug: confirm with the probe the finding
    names (nan_hook_run, grad_norm_snapshot, overfit_test, init_loss_check). Streams: fine on multi-GB logs."""
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
    """Every NVIDIA GPU on this machine through NVML: memory used/total, utilisation, temperature, power,
    SM clock, decoded throttle reasons, ECC errors, and the processes holding memory (pid, MiB, command line);
    driver and CUDA versions. Fields a GPU does not support are null. No driver or no GPU: available=false
    and the reason. Call it for OOM (who holds the memory?) and slow runs (utilisation well below ~90% means
    the GPU waits for data or for host syncs -> profile_steps)."""
    return reply(_gpu_status())


@tool(title="Check training processes", hints=READS, group="core")
def process_check(
    pid: Annotated[int | None, Field(ge=1, description="one process id; default: find the training processes")] = None,
    pattern: Annotated[str | None, Field(description="regex over the command line, e.g. 'train.py'; default matches python/torchrun/accelerate/deepspeed running a train script")] = None,
    stack: Annotated[bool, Field(description="add each thread's Python stack (py-spy dump) when permitted")] = False,
) -> Annotated[CallToolResult, ProcessCheckReport]:
    """Is the training run alive, working, hung, stopped or a zombie? Per process: status, CPU % sampled over
    ~0.5 s (all processes in one window), RSS, threads, age, children (data-loader workers) and their states,
    log files it has open (and how stale), GPU memory, and a `verdict`: running, possibly_hung (alive, ~0% CPU,
    log not written recently), zombie, stopped, not_found. For possibly_hung call again with stack=True: the
    stack shows where it waits (DataLoader queue, lock, NCCL collective) before you restart anything."""
    return reply(_process_check(pid=pid, pattern=pattern, stack=stack))
