"""MCP tools: the debugging journal and regression tests (journal_append, journal_search, write_regression_test)."""

from pathlib import Path
from typing import Annotated, Any

from mcp.server.mcpserver import Context
from mcp_types import CallToolResult
from pydantic import Field

from server.core import progress_reporter, reply, tool, ws
from tools.errors import TriageError
from tools.journal import JournalAppendReport, JournalSearchReport
from tools.journal import journal_append as _journal_append
from tools.journal import journal_search as _journal_search
from tools.regression import RegressionTestReport
from tools.regression import write_regression_test as _write_regression_test

JournalPath = Annotated[str, Field(description="the journal file, relative to the workspace")]


@tool
def journal_append(
    title: Annotated[str, Field(description="one line: what broke, with a number, e.g. 'NaN loss at step 512 from log(0)'")],
    failure_mode: Annotated[str, Field(description="the failure-mode id (nan_inf, broken_graph, lr_too_high, ...)")],
    symptom: Annotated[str, Field(description="what was observed, with numbers (step, value)")],
    root_cause: Annotated[str, Field(description="the mechanism, not just the location")],
    fix: Annotated[str, Field(description="file:line and the change")],
    evidence: Annotated[str | list[str] | None, Field(description="measured facts and the tool that measured each")] = None,
    resolution: Annotated[str | None, Field(description="before/after numbers that show the fix worked")] = None,
    test_path: Annotated[str | None, Field(description="the regression test, e.g. tests/test_entropy_stays_finite.py")] = None,
    tags: Annotated[list[str] | None, Field(description="keywords for journal_search")] = None,
    path: JournalPath = "journal.md",
) -> Annotated[CallToolResult, JournalAppendReport]:
    """Record a fixed training bug in the workspace's journal.md (created with a header if missing).

    Call it once the fix is validated. The entry is appended (earlier entries and hand-written notes
    are never touched) and is safe against concurrent writers. Returns the entry's markdown and its
    anchor (journal.md#<anchor>) to cite in a commit or a follow-up entry.
    """
    return reply(_journal_append(
        ws().write_path(path), title=title, failure_mode=failure_mode, symptom=symptom, root_cause=root_cause,
        fix=fix, evidence=evidence, resolution=resolution, test_path=test_path, tags=tags))


@tool
def journal_search(
    query: Annotated[str | None, Field(description="words to look for (any of them; entries matching more rank first)")] = None,
    failure_mode: Annotated[str | None, Field(description="only entries with this failure-mode id")] = None,
    path: JournalPath = "journal.md",
    limit: Annotated[int, Field(ge=1, le=200, description="at most this many entries")] = 20,
) -> Annotated[CallToolResult, JournalSearchReport]:
    """Has this happened before? Search the journal before fixing; returns matching entries as records.

    Each record has title, date, failure_mode, symptom, evidence, root_cause, fix, resolution,
    test_path and tags. A match gives a root cause to check first and a regression test that should
    have caught the recurrence. A missing journal is not an error: it returns no entries.
    """
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


@tool
async def write_regression_test(
    failure_mode: Annotated[str, Field(description="the failure-mode id the fix addressed; picks the template")],
    name: Annotated[str, Field(description="what the test pins down, e.g. 'entropy_stays_finite' (no path)")],
    target: Annotated[str | None, Field(description="target factory, e.g. 'train.py:make_target' (workspace-relative)")] = None,
    function: Annotated[str | None, Field(
        description="a function under test, e.g. 'model.py:entropy' (nan_inf edge inputs) or 'train.py:train_step' "
                    "(missing_zero_grad, train_eval_mode)")] = None,
    params: Annotated[dict[str, Any] | None, Field(
        description="template parameters (bounds, steps, tolerance, edge inputs); unknown keys are rejected with the list")] = None,
    python: Annotated[str | None, Field(description="the user's interpreter (default: MLTRIAGE_PYTHON, the workspace .venv, ours)")] = None,
    timeout_s: Annotated[float, Field(gt=0, le=1800, description="wall-clock limit for the pytest run")] = 120.0,
    ctx: Context | None = None,
) -> Annotated[CallToolResult, RegressionTestReport]:
    """Write tests/test_<name>.py from the failure mode's template and run it with pytest; after a validated fix.

    The test imports the user's code through `target` and/or `function`, is seeded, CPU-only and takes
    seconds. The code is import-checked first (nothing is written if it does not import); an existing
    file is never overwritten (a _2 suffix is used). Returns passed/failed/error/timeout with the output
    tail. It must PASS now; prove it catches the bug by reverting the fix once and seeing it fail.
    """
    return reply(await _write_regression_test(
        workspace_root=ws().root, failure_mode=failure_mode, name=name, target=target, function=function,
        target_file=_spec_file(target), function_file=_spec_file(function), params=params, python=python,
        timeout_s=timeout_s, on_progress=progress_reporter(ctx)))
