"""MCP tools: the debugging journal and regression tests (journal_append, journal_search, write_regression_test,
run_regression_test)."""

from pathlib import Path
from typing import Annotated, Any

from mcp.server.mcpserver import Context
from mcp_types import CallToolResult
from pydantic import Field

from server.core import Python, APPENDS, READS, RUNS_SCRIPT, progress_reporter, reply, tool, ws
from tools.errors import TriageError
from tools.journal import JournalAppendReport, JournalSearchReport
from tools.journal import journal_append as _journal_append
from tools.journal import journal_search as _journal_search
from tools.regression import RegressionRunReport, RegressionTestReport
from tools.regression import run_regression_test as _run_regression_test
from tools.regression import write_regression_test as _write_regression_test

JournalPath = Annotated[str, Field(description="the journal file")]


@tool(title="Append a journal entry", hints=APPENDS, group="core")
def journal_append(
    title: Annotated[str, Field(description="e.g. 'NaN loss at step 512 from log(0)'")],
    failure_mode: Annotated[str, Field(description="failure-mode id")],
    symptom: Annotated[str, Field(description="what was observed, with numbers")],
    root_cause: Annotated[str, Field(description="the mechanism, not just the place")],
    fix: Annotated[str, Field(description="file:line and the change")],
    evidence: Annotated[str | list[str] | None, Field(description="measured facts, each with its tool")] = None,
    resolution: Annotated[str | None, Field(description="before/after numbers")] = None,
    test_path: str | None = None,
    tags: list[str] | None = None,
    path: JournalPath = "journal.md",
) -> Annotated[CallToolResult, JournalAppendReport]:
    """After a validated fix: append an entry to journal.md (earlier entries untouched, safe with concurrent writers).
    Returns the anchor to cite."""
    return reply(_journal_append(
        ws().write_path(path), title=title, failure_mode=failure_mode, symptom=symptom, root_cause=root_cause,
        fix=fix, evidence=evidence, resolution=resolution, test_path=test_path, tags=tags))


@tool(title="Search the debugging journal", hints=READS, group="core")
def journal_search(
    query: Annotated[str | None, Field(description="words to look for (any of them; entries matching more rank first)")] = None,
    failure_mode: Annotated[str | None, Field(description="only entries with this failure-mode id")] = None,
    path: JournalPath = "journal.md",
    limit: Annotated[int, Field(ge=1, le=200, description="at most this many entries")] = 20,
) -> Annotated[CallToolResult, JournalSearchReport]:
    """Before fixing: has this happened before? Matching journal entries, best first."""
    return reply(_journal_search(ws().read_path(path), query=query, failure_mode=failure_mode, limit=limit))


def _spec_file(spec: str | None) -> Path | None:
    """The workspace file of a 'path/file.py:name' spec (confined, must exist); None for 'pkg.module:name'."""
    if not spec:
        return None
    where = spec.rsplit(":", 1)[0] if ":" in spec else spec
    if not where.endswith(".py"):
        return None
    file = ws().existing_file(where)
    if not file.is_relative_to(ws().root):
        raise TriageError(f"{where!r} lies outside the workspace", "Regression tests import code from the workspace")
    return file


@tool(title="Write and run a regression test", hints=APPENDS, group="core")
async def write_regression_test(
    failure_mode: Annotated[str, Field(description="the bug's failure-mode id; picks what the test asserts")],
    name: Annotated[str | None, Field(
        description="e.g. 'lr_never_exceeds_peak'")] = None,
    target: Annotated[str | None, Field(description="target factory 'train.py:make_target'")] = None,
    function: Annotated[str | None, Field(
        description="the buggy code: 'train.py:get_lr' (schedule), 'model.py:GPT' (causality), "
                    "'model.py:entropy' (nan_inf); with target: 'train.py:train_step', 'train.py:val_batches' "
                    "(data_pipeline)")] = None,
    command: Annotated[list[str] | None, Field(
        description="the training script, run params['steps'] (50) steps; asserts on the real loop")] = None,
    template: Annotated[str | None, Field(
        description="force a template; try_next names them")] = None,
    params: Annotated[dict[str, Any] | None, Field(
        description="settings baked into the test (steps, peak, max_lr, ...; 'script.X' for the script run)")] = None,
    python: Python = None,
    timeout_s: Annotated[float | None, Field(gt=0, le=1800, description="pytest's limit (default 300, plus the script's)")] = None,
    ctx: Context | None = None,
) -> Annotated[CallToolResult, RegressionTestReport]:
    """Before the fix: writes tests/test_<name>.py against the user's code (target, function or script) and runs it. It
    must fail now (catches_bug); if not, try_next lists sharper tests."""
    return reply(await _write_regression_test(
        workspace_root=ws().root, failure_mode=failure_mode, name=name, target=target, function=function,
        command=command, template=template, target_file=_spec_file(target), function_file=_spec_file(function),
        params=params, python=python, timeout_s=timeout_s, on_progress=progress_reporter(ctx)))


@tool(title="Re-run a regression test", hints=RUNS_SCRIPT, group="core")
async def run_regression_test(
    path: Annotated[str, Field(description="the test file write_regression_test wrote")],
    python: Python = None,
    timeout_s: Annotated[float, Field(gt=0, le=1800, description="wall-clock limit for the pytest run")] = 600.0,
) -> Annotated[CallToolResult, RegressionRunReport]:
    """After the fix: re-runs that test; passes_now must be true. Never loosen its bounds to make it pass."""
    test_file = ws().existing_file(path)
    return reply(await _run_regression_test(workspace_root=ws().root, test_file=test_file, python=python,
                                            timeout_s=timeout_s))
