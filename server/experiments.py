"""MCP tools: experiments -- did the fix help, is a sweep's effect real, what does a loss look like, where does a step go."""

from typing import Annotated

from mcp.server.mcpserver import Context
from mcp_types import CallToolResult
from pydantic import Field

from server.core import Python, READS, RUNS_SCRIPT, RUNS_TARGET, progress_reporter, reply, tool, ws
from tools.compare import CompareReport, compare_runs as _compare_runs
from tools.errors import TriageError
from tools.profiling import ProfileReport, profile_steps as _profile_steps
from tools.surface import SurfaceReport, loss_surface as _loss_surface, split_function_spec
from tools.stores import resolve_log
from tools.sweeps import SweepReport, sweep_analysis as _sweep_analysis



def _check_spec(spec: str, kind: str) -> str:
    """A 'file.py:name' spec must name a file inside the workspace; 'pkg.module:name' is imported as is."""
    where, _ = split_function_spec(spec) if kind == "function" else _split_target(spec)
    if where:
        ws().existing_file(where)
    return spec.strip()


def _split_target(spec: str) -> tuple[str, str]:
    spec = (spec or "").strip()
    if ":" not in spec or not spec.rsplit(":", 1)[1].isidentifier():
        raise TriageError(f"target {spec!r} must look like 'train.py:make_target' or 'pkg.module:make_target'",
                          "Name a no-argument function returning {'model', 'batch' or 'data', 'loss_fn', ...}")
    where, name = spec.rsplit(":", 1)
    return (where, name) if where.endswith(".py") else ("", spec)


@tool(title="Compare runs before/after a fix", hints=READS, group="core")
def compare_runs(
    before: Annotated[str, Field(description="log or run directory before the fix")],
    after: Annotated[str, Field(description="log or run directory after the fix")],
    metric: Annotated[str | None, Field(description="series name (loss, val_loss, 'val'); default by failure_mode")] = None,
    plot: Annotated[bool, Field(description="attach a PNG of both curves")] = False,
    failure_mode: Annotated[str | None, Field(description="what the fix was for")] = None,
) -> Annotated[CallToolResult, CompareReport]:
    """After a fix and a short re-run: did it help? One metric of two runs aligned by step: improved / no_change /
    worse. Pass failure_mode (leakage is judged on validation loss)."""
    report, png = _compare_runs(resolve_log(ws(), before), resolve_log(ws(), after), metric, plot, failure_mode)
    return reply(report, images=[png] if png else None)


@tool(title="Seed-aware sweep analysis", hints=READS, group="experiments")
def sweep_analysis(
    path: Annotated[str, Field(description="sweep results: CSV/TSV, JSON lines, a JSON list, a folder of per-run .json "
                                           "files, or a directory of runs (W&B, MLflow experiment, TensorBoard logdir, "
                                           "Trackio .db): one row per run, its config and each series' last value")],
    metric: Annotated[str, Field(description="the outcome column, e.g. 'val_loss' (nested JSON keys as 'summary.val_loss')")],
    param: Annotated[str, Field(description="the swept parameter column, e.g. 'lr'")],
    group: Annotated[str | None, Field(description="column naming the sweep/group; comparisons stay within a group")] = None,
    seed: Annotated[str, Field(description="the seed column")] = "seed",
) -> Annotated[CallToolResult, SweepReport]:
    """Is a hyperparameter effect real or a lucky seed? Per value, t-statistics of within-seed z-scores, a trend for
    numeric values, and warnings (single seeds, confounders, diverged runs): read the warnings first."""
    p = ws().read_path(path)
    if not p.exists():
        raise TriageError(f"{path!r} does not exist (looked at {p})", "Paths are relative to the workspace " + str(ws().root))
    return reply(_sweep_analysis(p, metric, param, group, seed))


@tool(title="Map a loss function's surface", hints=RUNS_TARGET, group="experiments")
async def loss_surface(
    function: Annotated[str, Field(description="'losses.py:my_loss' (relative to the workspace) or 'pkg.module:my_loss': "
                                               "a function of two tensors (x, y) returning the loss per point")],
    x_range: Annotated[list[float], Field(min_length=2, max_length=2, description="[low, high] of the first input")],
    y_range: Annotated[list[float], Field(min_length=2, max_length=2, description="[low, high] of the second input")],
    n: Annotated[int, Field(ge=2, le=200, description="grid points per axis")] = 60,
    plot: Annotated[bool, Field(description="attach the contour + descent-arrow PNG")] = True,
    python: Python = None,
    timeout_s: Annotated[float, Field(ge=1, le=3600, description="wall-clock limit for the evaluation")] = 120.0,
    ctx: Context | None = None,
) -> Annotated[CallToolResult, SurfaceReport]:
    """Before training on a new loss component, or when one goes NaN or will not move: its values and gradients on a
    grid, non-finite regions, dead zones and axis imbalance, with a contour PNG."""
    report, png = await _loss_surface(_check_spec(function, "function"), x_range, y_range, n, plot,
                                      workspace_root=ws().root, python=python, timeout_s=timeout_s,
                                      on_progress=progress_reporter(ctx))
    return reply(report, images=[png] if png else None)


@tool(title="Profile training steps", hints=RUNS_SCRIPT, group="experiments")
async def profile_steps(
    target: Annotated[str | None, Field(description="factory 'train.py:make_target'")] = None,
    command: Annotated[list[str] | None, Field(description="your training command instead, e.g. ['python', 'train.py', '--steps', '100']; "
                                                          "a leading 'python' becomes your interpreter")] = None,
    steps: Annotated[int, Field(ge=1, le=1000, description="optimizer steps to profile after 2 warmup steps")] = 20,
    python: Python = None,
    timeout_s: Annotated[float, Field(ge=1, le=3600, description="wall-clock limit; the process group is killed after it")] = 300.0,
    ctx: Context | None = None,
) -> Annotated[CallToolResult, ProfileReport]:
    """For slow training steps: torch.profiler over a few steps; top ops and modules, the optimizer's and data loader's
    share, and every host-device sync with its file:line; a slow_throughput finding names the cause."""
    if target is not None:
        target = _check_spec(target, "target")
    return reply(await _profile_steps(target, command, steps, workspace_root=ws().root, python=python,
                                      timeout_s=timeout_s, on_progress=progress_reporter(ctx)))
