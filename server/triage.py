"""MCP tools: static_scan and triage (the decision tree as one call)."""

from typing import Annotated

from mcp.server.mcpserver import Context
from mcp_types import CallToolResult
from pydantic import Field

from server.core import READS, RUNS_SCRIPT, progress_reporter, reply, tool, ws
from server.probes import Command, Python, Target, _command, _target
from tools.static_scan import StaticScanReport, static_scan as _static_scan
from tools.triage import TriageReport, run_triage, source_paths_for


@tool(title="Scan training code for silent bugs", hints=READS, group="core")
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


@tool(title="Triage a failing run (whole decision tree)", hints=RUNS_SCRIPT, group="core")
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
    """Walk the whole triage decision tree in one call and get ranked, evidenced hypotheses. Give it everything you
    have: the target factory AND the user's training command (both run: the factory probes measure model, data and
    loss; the script, run for a bounded number of steps under the instruments, shows bugs that live in the loop),
    plus the log. Cheap checks always run (static_scan, the log, init_loss_check with the model's train/eval mode,
    a 12-step grad_norm_snapshot, sequence_check, schedule_check on an LR-schedule function in the sources). A
    measured finding >= 0.8 ends the costly probes (nan_hook_run, overfit_test, data_check); a static or log finding
    >= 0.8 is a hypothesis, so only the probe that confirms it still runs. Returns findings ranked by confidence
    (failure_mode, confidence, summary, evidence, fix, avoid, location); `healthy` on top when nothing reaches 0.5
    (weaker hypotheses follow it), the steps with timings, and next_steps. Then write the suggested regression
    test BEFORE fixing (it must fail), fix, re-run it, compare_runs, journal_append."""
    w = ws()
    log_file = w.existing_file(log_path) if log_path else None
    sources = source_paths if source_paths is not None else source_paths_for(target, command, w.root)
    rep = await run_triage(w.root, _target(target), _command(command), log_file, log_path,
                           [w.read_path(p) for p in sources], python, budget_s, progress_reporter(ctx),
                           target_label=target)
    return reply(rep)
