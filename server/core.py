"""The one MCPServer, the workspace it is confined to, and the adapters every tool module shares."""

import functools
import inspect
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, ImageContent, TextContent

from server.skills_extension import SkillsExtension
from tools.errors import TriageError
from tools.report import Report
from tools.workspace import Workspace

INSTRUCTIONS = """\
mltriage debugs failing PyTorch training runs the way a senior research engineer would.
Start with the skill resource skill://ml-training-triage/SKILL.md (or the prompt
triage_training_failure). Gather evidence first: tail_log on the run's log, then gpu_status and
process_check; then localise with the probes (nan_hook_run, init_loss_check, overfit_test,
grad_norm_snapshot, data_check) or let triage walk the decision tree. Do not change
hyperparameters before the probes have ruled out a bug. After a fix: journal_append and
write_regression_test. Paths are relative to the workspace."""

def _version() -> str:
    """The installed package's version, or pyproject's when run from a checkout that is not installed."""
    from importlib import metadata

    try:
        return metadata.version("mltriage")
    except metadata.PackageNotFoundError:
        import re  # tomllib is 3.11+; the [project] version line is all that is needed

        try:
            text = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
        except OSError:
            return "unknown"
        found = re.search(r'^version\s*=\s*"([^"]+)"', text, re.M)
        return found.group(1) if found else "unknown"


mcp = MCPServer("mltriage", version=_version(), instructions=INSTRUCTIONS, extensions=[SkillsExtension()])

workspace = Workspace(Path.cwd())


def configure(root: str | Path, allow_read: list[str] | None = None) -> Workspace:
    """Point the server at its workspace (the --workspace option); tools read this module global."""
    global workspace
    root = Path(root).resolve()
    if not root.is_dir():
        raise SystemExit(f"mltriage: workspace {root} is not a directory")
    workspace = Workspace(root, [Path(p) for p in allow_read or []])
    return workspace


def ws() -> Workspace:
    return workspace


def reply(report: Report, images: list[bytes] | None = None) -> CallToolResult:
    """A report as structured content plus its short human summary (and PNGs as image content)."""
    content: list[Any] = [TextContent(type="text", text=report.text())]
    import base64
    for png in images or []:
        content.append(ImageContent(type="image", data=base64.b64encode(png).decode(), mime_type="image/png"))
    return CallToolResult(content=content, structured_content=report.model_dump(mode="json"))


def tool(fn):
    """Register `fn` as an MCP tool; a TriageError from the tools layer reaches the agent as a ToolError.

    Sync functions run on a worker thread so a slow read never blocks the event loop.
    """

    @functools.wraps(fn)
    async def wrapper(*args, **kwargs):
        try:
            if inspect.iscoroutinefunction(fn):
                return await fn(*args, **kwargs)
            return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))
        except TriageError as e:
            raise ToolError(str(e)) from e

    mcp.tool()(wrapper)
    return fn


def progress_reporter(ctx: Context | None):
    """An async progress callback for tools/probe_runner that never fails the tool."""

    async def report(progress: float, total: float | None = None, message: str | None = None):
        if ctx is None:
            return
        try:
            await ctx.report_progress(progress, total, message)
        except Exception:  # noqa: BLE001 - progress is best effort (no request context, closed stream)
            pass

    return report
