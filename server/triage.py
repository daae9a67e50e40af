"""MCP tools: static_scan and triage (the decision tree as one call)."""

from typing import Annotated

from mcp.server.mcpserver import Context
from mcp_types import CallToolResult
from pydantic import Field

from server.core import READS, RUNS_SCRIPT, progress_reporter, reply, tool, ws
from server.probes import Command, Python, Target, _command, _target
from tools.ranks import log_source
from tools.static_scan import StaticScanReport, static_scan as _static_scan
from tools.triage import TriageReport, run_triage, source_paths_for


@tool(title="Scan training code for silent bugs", hints=READS, group="core")
def static_scan(
    paths: Annotated[list[str], Field(min_length=1, description=(
        "training code: files or directories (recursive, virtual environments skipped)"))],
) -> Annotated[CallToolResult, StaticScanReport]:
    """Instant, nothing executed: silent bugs in training code (no zero_grad, softmax into CrossEntropyLoss, detach on
    the loss path, ...) with file:line and fix."""
    return reply(_static_scan([ws().read_path(p) for p in paths]))


@tool(title="Triage a failing run (whole decision tree)", hints=RUNS_SCRIPT, group="core")
async def triage(
    target: Target = None,
    command: Command = None,
    log_path: Annotated[str | None, Field(description="the run's log, run directory or rank logs")] = None,
    source_paths: Annotated[list[str] | None, Field(description=(
        "code to scan (default: target's file, command's script)"))] = None,
    python: Python = None,
    budget_s: Annotated[float, Field(gt=0, le=3600, description="seconds for all steps")] = 180.0,
    ctx: Context = None,
) -> Annotated[CallToolResult, TriageReport]:
    """The whole decision tree in one call: pass the target AND the command AND the log. Cheap checks, then the probes
    the evidence calls for, within budget_s. Ranked findings and next_steps."""
    w = ws()
    log_file = log_source(w, log_path) if log_path else None
    sources = source_paths if source_paths is not None else source_paths_for(target, command, w.root)
    rep = await run_triage(w.root, _target(target), _command(command), log_file, log_path,
                           [w.read_path(p) for p in sources], python, budget_s, progress_reporter(ctx),
                           target_label=target)
    return reply(rep)
