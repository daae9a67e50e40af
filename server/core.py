"""The one MCPServer, the workspace it is confined to, and the adapters every tool module shares."""

import functools
import inspect
import json
import os
import time
import typing
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.context_injection import find_context_parameter
from mcp_types import CallToolResult, ImageContent, ResourceLink, TextContent, ToolAnnotations
from mcp_types.version import is_version_at_least
from pydantic import Field

from server.skills_extension import SkillsExtension
from tools import compact
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
write_regression_test. Paths are relative to the workspace.
A target is a factory 'train.py:make_target' (or 'pkg.module:make_target'): a no-argument function
returning {'model', 'batch' or 'data', 'loss_fn(model, batch)', 'optimizer' or 'make_optimizer(params)',
optional 'num_classes', 'task'}. A command is the user's unmodified script, e.g. ['python', 'train.py',
'--steps', '50'] (torchrun too), run in the workspace with instruments injected. Probes run in the
user's interpreter: `python`, else $MLTRIAGE_PYTHON, else the workspace's .venv/bin/python.
Results are compact (detail='summary'); pass detail='full' for everything."""

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


class _Server(MCPServer):
    """The SDK's server, plus a clear refusal for a tool left out by `--tools` (instead of 'Unknown tool')."""

    unloaded: dict[str, str] = {}
    _listed: tuple[tuple[str, ...], list] | None = None

    async def list_tools(self):
        """The SDK's listing with lighter schemas (server/schemas.py), built once per tool set."""
        tools = await super().list_tools()
        names = tuple(t.name for t in tools)
        if self._listed is None or self._listed[0] != names:
            from server.schemas import slim

            self._listed = (names, [t.model_copy(update={"input_schema": slim(t.input_schema)}) for t in tools])
        return self._listed[1]

    async def call_tool(self, name, arguments, context=None):
        if name in self.unloaded:
            raise ToolError(f"{name} is not loaded: this server was started with --tools {self.unloaded[name]}. "
                            f"Restart it with --tools all (or add {name} to the --tools list)")
        return await super().call_tool(name, arguments, context)


mcp = _Server("mltriage", version=_version(), instructions=INSTRUCTIONS, extensions=[SkillsExtension()])

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


Detail = compact.Detail  # the instructions say what detail="full" does; described per tool it cost 2k characters
# Parameters many tools share: described once here, short, since the model reads them for every tool.
Python = str | None  # the instructions say which interpreter runs a probe; described per tool it cost 300 characters

# (tool name, detail, the client takes resource links) of the call being answered: `tool` sets it,
# `reply` shapes the report by it. Context variables follow the call onto the worker thread of a sync
# tool (anyio copies the context).
_CALL: ContextVar[tuple[str, str, bool]] = ContextVar("mltriage_call", default=("", "full", True))
LINKS_SINCE = "2025-06-18"  # the protocol revision that added resource_link content
FULL_INLINE_MAX = 8_000  # characters of JSON a full report may take inline (~2k tokens); above it goes to a file


def reply(report: Report, images: list[bytes] | None = None) -> CallToolResult:
    """A report as structured content plus its short human summary (and PNGs as image content).

    Shaped by the call's `detail`: 'summary' through tools/compact.py; 'full' as it is, or, when large,
    the summary plus the whole report written to a workspace file (named in `full_data` and linked).
    """
    name, detail, links_ok = _CALL.get()
    if detail == "summary":
        text, links = report.summary_text(), []
        structured = compact.fitted_summary(report, text)
    else:
        structured = report.model_dump(mode="json", exclude=set(compact.BOOKKEEPING))
        text, links = report.text(), []
        raw = json.dumps(structured)
        if len(raw) > FULL_INLINE_MAX:
            path = _save_full(name or "report", raw)
            structured = {**compact.summary(report), "full_data": path}
            text += f"\nfull report ({len(raw)} characters of JSON): {path}"
            links = [ResourceLink(type="resource_link", name=Path(path).name, uri=(ws().root / path).as_uri(),
                                  mime_type="application/json", size=len(raw.encode()))] if links_ok else []
    content: list[Any] = [TextContent(type="text", text=text), *links]
    import base64
    for png in images or []:
        content.append(ImageContent(type="image", data=base64.b64encode(png).decode(), mime_type="image/png"))
    return CallToolResult(content=content, structured_content=structured)


def _save_full(name: str, raw: str) -> str:
    """Write a full report to a new file under the workspace's .mltriage/reports; its workspace-relative path.

    The directory comes through the workspace's confinement (no link out); the file is created
    exclusively, so nothing is ever overwritten.
    """
    folder = ws().directory(".mltriage/reports", create=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1, 1000):
        file = folder / f"{name}-{stamp}{'' if n == 1 else f'-{n}'}.json"
        try:
            fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
        except FileExistsError:
            continue
        with os.fdopen(fd, "w") as out:
            out.write(raw)
        return str(file.relative_to(ws().root))
    raise TriageError(f"no free file name for {name} in {folder}", "Clean up .mltriage/reports")


# ToolAnnotations presets (hints for clients; the spec reads destructive/idempotent only when not read-only).
READS = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
# Runs the user's target factory in their interpreter; the probe itself writes nothing.
RUNS_TARGET = READS
# Can run the user's own script, which may write or overwrite its own outputs (a nanoGPT run saves ckpt.pt).
RUNS_SCRIPT = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False,
                              open_world_hint=False)
# Adds a file (journal entry, test); never overwrites or deletes one.
APPENDS = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)

# Starts the user's script in the background; it may write or overwrite its own outputs.
LAUNCHES = RUNS_SCRIPT
# Changes a live run (its LR, clipping) or ends it.
STEERS = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False)

TOOL_GROUPS: dict[str, list[str]] = {}  # group name -> tool names, filled by `tool`; see select_tools


def tool(fn=None, *, title: str | None = None, hints: ToolAnnotations | None = None, group: str = "core"):
    """Register `fn` as an MCP tool; a TriageError from the tools layer reaches the agent as a ToolError.

    Every tool gets the `detail` argument (unless it declares its own, which then also receives it);
    `reply` shapes the report by it. `group` is the tool set it belongs to (`serve --tools`).
    Sync functions run on a worker thread so a slow read never blocks the event loop.
    """
    if fn is None:
        return functools.partial(tool, title=title, hints=hints, group=group)
    # the docstring as the model reads it: paragraphs kept, the source's line breaks and indentation not
    doc = "\n\n".join(" ".join(p.split()) for p in inspect.cleandoc(fn.__doc__ or "").split("\n\n"))
    sig = inspect.signature(fn)
    own_detail = "detail" in sig.parameters
    # the request's Context tells which protocol the client speaks (resource links need 2025-06-18);
    # a tool that does not take one gets a hidden parameter the SDK fills and the wrapper removes
    own_ctx = find_context_parameter(fn)

    @functools.wraps(fn)
    async def wrapper(*args, **kwargs):
        detail = kwargs.get("detail", "summary") if own_detail else kwargs.pop("detail", "summary")
        ctx = kwargs.get(own_ctx) if own_ctx else kwargs.pop("mltriage_ctx", None)
        version = getattr(ctx, "protocol_version", None) if ctx is not None else None
        _CALL.set((fn.__name__, detail, version is None or is_version_at_least(version, LINKS_SINCE)))
        try:
            if inspect.iscoroutinefunction(fn):
                return await fn(*args, **kwargs)
            return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))
        except TriageError as e:
            raise ToolError(str(e)) from e

    extra = [] if own_detail else [
        inspect.Parameter("detail", inspect.Parameter.KEYWORD_ONLY, default="summary", annotation=Detail)]
    if not own_ctx:
        extra.append(inspect.Parameter("mltriage_ctx", inspect.Parameter.KEYWORD_ONLY, default=None,
                                       annotation=Context | None))
        wrapper.__annotations__ = {**fn.__annotations__, "mltriage_ctx": Context | None}
    # The SDK would derive the output schema from `Annotated[CallToolResult, SomeReport]` with pydantic's
    # generator, the largest part of start-up; it gets a bare CallToolResult and the report model is
    # attached after: its light schema (server/output_schema.py) published, the model validating results.
    report = _report_model(sig)
    wrapper.__signature__ = sig.replace(parameters=[*sig.parameters.values(), *extra],
                                        return_annotation=CallToolResult if report else sig.return_annotation)
    mcp.tool(title=title, description=doc, annotations=hints)(wrapper)
    if report is not None:
        from server.output_schema import output_schema

        meta = mcp._tool_manager.get_tool(fn.__name__).fn_metadata
        meta.output_model, meta.output_schema = report, output_schema(report)
    TOOL_GROUPS.setdefault(group, []).append(fn.__name__)
    return fn


def _report_model(sig: inspect.Signature) -> type[Report] | None:
    """SomeReport of a tool annotated `-> Annotated[CallToolResult, SomeReport]`."""
    ann = sig.return_annotation
    if typing.get_origin(ann) is Annotated:
        base, *meta = typing.get_args(ann)
        if base is CallToolResult and meta and isinstance(meta[0], type) and issubclass(meta[0], Report):
            return meta[0]
    return None


def resolve_tools(spec: str) -> list[str]:
    """The tool names `spec` names: 'core', 'all', the sets live/experiments and tool names, comma-separated.

    An unknown name raises ValueError with a one-line message listing what exists.
    """
    every = [name for names in TOOL_GROUPS.values() for name in names]
    wanted: set[str] = set()
    for part in filter(None, (p.strip() for p in spec.split(","))):
        if part == "all":
            wanted.update(every)
        elif part in TOOL_GROUPS:
            wanted.update(TOOL_GROUPS[part])
        elif part in every:
            wanted.add(part)
        else:
            raise ValueError(f"unknown tool or tool set {part!r} in --tools; use all, {', '.join(TOOL_GROUPS)} "
                             f"or tool names ({', '.join(every)})")
    if not wanted:
        raise ValueError("--tools names no tool; use core, all or a comma-separated list")
    return [n for n in every if n in wanted]


def select_tools(spec: str) -> list[str]:
    """Serve only the tools `spec` names (see resolve_tools); the others leave tools/list, and a call to one
    gets a clear refusal (`_Server.call_tool`) instead of the SDK's 'Unknown tool'."""
    kept = resolve_tools(spec)
    for name in [n for names in TOOL_GROUPS.values() for n in names]:
        if name not in kept and name not in mcp.unloaded:
            mcp.remove_tool(name)
            mcp.unloaded[name] = spec
    return kept


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
