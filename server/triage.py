"""MCP tools: static_scan and triage (the decision tree as one call)."""

from typing import Annotated

from mcp.server.mcpserver import Context
from mcp_types import CallToolResult
from pydantic import Field

from server.core import progress_reporter, reply, tool, ws
from server.probes import Command, Python, Target, _command, _target
from tools.static_scan import StaticScanReport, static_scan as _static_scan
from tools.triage import TriageReport, run_triage, source_paths_for


@tool
def static_scan(
    paths: Annotated[list[str], Field(min_length=1, description=(
        "Python files or directories of training code, relative to the workspace (directories are scanned "
        "recursively, skipping virtual environments)"))],
) -> Annotated[CallToolResult, StaticScanReport]:
    """Read training code (with Python's ast, nothing is executed) for the silent bugs practitioners grep for: a loop
    without zero_grad, step() before backward(), softmax fed to CrossEntropyLoss, sigmoid + BCELoss, .detach()/.item()
    on the path to the loss, log/sqrt/division without eps, eval() left on, an optimizer over a subset of the
    parameters, a negated loss, .view after permute, host syncs inside the loop. Each issue has file:line, rule, failure
    mode, why and the fix. Call it first on any training script: it is instant. Confirm a hit with the matching probe."""
    return reply(_static_scan([ws().read_path(p) for p in paths]))


@tool
async def triage(
    target: Target = None,
    command: Command = None,
    log_path: Annotated[str | None, Field(description="the failing run's log, relative to the workspace")] = None,
    source_paths: Annotated[list[str] | None, Field(description=(
        "training code to scan statically (default: the target's file and the script in command)"))] = None,
    python: Python = None,
    budget_s: Annotated[float, Field(gt=0, le=3600, description="wall-clock budget for all steps together")] = 180.0,
    ctx: Context = None,
) -> Annotated[CallToolResult, TriageReport]:
    """Walk the whole triage decision tree in one call and get ranked, evidenced hypotheses. Runs what the inputs allow,
    in order: static_scan, the log (tail_log, log_metrics), nan_hook_run, init_loss_check, overfit_test,
    grad_norm_snapshot, data_check — stopping the probes early once one finding is decisive (>= 80%). Returns findings
    ranked by confidence (failure_mode, confidence, summary, evidence, fix, avoid, location; `healthy` on top when nothing
    is wrong), the steps it ran with timings, and next_steps. Start here when you have a target factory, a training
    command or a log; then confirm the top finding with the tool named in next_steps, fix it, and call journal_append
    and write_regression_test."""
    w = ws()
    log_file = w.existing_file(log_path) if log_path else None
    sources = source_paths if source_paths is not None else source_paths_for(target, command, w.root)
    rep = await run_triage(w.root, _target(target), _command(command), log_file, log_path,
                           [w.read_path(p) for p in sources], python, budget_s, progress_reporter(ctx),
                           target_label=target)
    return reply(rep)
