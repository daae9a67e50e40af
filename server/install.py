"""`mltriage install --client claude|gemini|cursor|vscode`: the MCP server config plus the skills, where each client reads them.

Every client also gets the skills in the shared Agent Skills location, `.agents/skills/` in the
project (`~/.agents/skills/` for --scope user), which Codex, Cursor, Gemini CLI and other clients of
the standard read, so one install serves the other agents on the machine too.

A config file is merged, never replaced: other servers and settings stay, the old file is
backed up to `<file>.bak-<timestamp>` before it changes, a second run changes nothing, and a
config that is not valid JSON stops the install before anything is written.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from server.skillpack import SKILLS_DIR, discover, parse_frontmatter

SERVER_NAME = "mltriage"
SHARED_SKILLS = Path(".agents") / "skills"  # the Agent Skills location several clients share
CLIENTS = ("claude", "gemini", "cursor", "vscode")


class InstallError(Exception):
    pass


@dataclass
class ConfigChange:
    """One JSON config: where it lives, which top-level key holds the servers, our entry."""

    path: Path
    key: str
    entry: dict[str, Any]


@dataclass
class FileChange:
    path: Path
    data: bytes


@dataclass
class Plan:
    config: ConfigChange
    files: list[FileChange]
    notes: list[str]
    dirs: list[Path] = field(default_factory=list)  # where the files go, for the report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--client", required=True, choices=CLIENTS, help="which agent client to configure")
    parser.add_argument("--scope", choices=("project", "user"), default="project",
                        help="project: files inside --workspace (default); user: files in your home directory")
    parser.add_argument("--dry-run", action="store_true", help="print what would change and write nothing")
    parser.add_argument("--workspace", default=None, metavar="DIR",
                        help="the project directory (default: the current directory)")
    parser.add_argument("--tools", default=None, metavar="SET",
                        help="tools the client gets: core, all (default) or a comma list of sets and tool names; "
                             "written into the server's args as `serve --tools SET`")


def server_command() -> tuple[str, list[str]]:
    """The command that starts the server: the `mltriage` console script when we can find it."""
    candidates = [shutil.which("mltriage"), str(Path(sys.executable).parent / "mltriage")]
    for exe in candidates:
        if exe and os.access(exe, os.X_OK):
            return str(Path(exe).absolute()), ["serve"]
    return sys.executable, ["-m", "server", "serve"]


def _vscode_user_dir(home: Path) -> Path:
    if sys.platform == "darwin":
        return home / "Library" / "Application Support" / "Code" / "User"
    if sys.platform == "win32":
        return Path(os.environ.get("APPDATA", home / "AppData" / "Roaming")) / "Code" / "User"
    return Path(os.environ.get("XDG_CONFIG_HOME", home / ".config")) / "Code" / "User"


def _skill_files(dest: Path) -> list[FileChange]:
    """Every file of every skill, copied byte for byte under `dest/<skill>/`."""
    return [FileChange(dest / s.name / f.rel, f.path.read_bytes()) for s in discover(SKILLS_DIR) for f in s.files]


def _cursor_rules(dest: Path) -> list[FileChange]:
    """Each skill as an agent-requested Cursor rule (`.mdc`): the description decides when it loads."""
    out = []
    for s in discover(SKILLS_DIR):
        meta, body = parse_frontmatter((s.dir / "SKILL.md").read_text(encoding="utf-8"))
        refs = [f.uri for f in s.files if f.rel != "SKILL.md"]
        footer = ("\n\nReference files for this rule are resources of the mltriage MCP server: "
                  + ", ".join(refs) + "\n") if refs else "\n"
        text = ("---\ndescription: " + json.dumps(meta["description"]) + "\nglobs:\nalwaysApply: false\n---\n"
                + body.strip("\n") + footer)
        out.append(FileChange(dest / f"mltriage-{s.name}.mdc", text.encode()))
    return out


VSCODE_INSTRUCTIONS = """\
---
applyTo: "**/*.py"
---
When a PyTorch training run fails (crash, NaN/Inf loss, loss stuck or exploding, hang, out of
memory, slow steps), use the mltriage MCP server and its skills instead of guessing: start with
the ml-training-triage skill (also the resource skill://ml-training-triage/SKILL.md), gather
evidence with tail_log, gpu_status and process_check, localise with the probes, and finish every
fix with journal_append and write_regression_test. Do not change hyperparameters before the
probes have ruled out a bug.
"""


def _tools_args(tools: str | None) -> list[str]:
    """`--tools SET` for the server's args (nothing for all); an unknown name is an InstallError."""
    if not tools or tools.strip() == "all":
        return []
    from server.app import mcp  # noqa: F401 - registers every tool, so the names can be checked
    from server.core import resolve_tools

    try:
        resolve_tools(tools)
    except ValueError as e:
        raise InstallError(str(e)) from None
    return ["--tools", tools.replace(" ", "")]


def plan(client: str, scope: str, workspace: Path | None, home: Path | None = None,
         tools: str | None = None) -> Plan:
    home = home or Path.home()
    explicit = workspace is not None
    ws = (workspace or Path.cwd()).resolve()
    if not ws.is_dir():
        raise InstallError(f"workspace {ws} is not a directory")
    command, args = server_command()
    args = args + _tools_args(tools)
    project = scope == "project"
    notes: list[str] = []

    def entry(workspace_arg: str | None, **extra: Any) -> dict[str, Any]:
        a = args + (["--workspace", workspace_arg] if workspace_arg else [])
        return {**extra, "command": command, "args": a}

    # Project configs name the project; user configs let the server default to the directory the
    # client starts it in (its project), unless a workspace was given on purpose.
    ws_arg = str(ws) if project or explicit else None
    if client == "claude":
        cfg = ConfigChange(ws / ".mcp.json" if project else home / ".claude.json", "mcpServers",
                           entry(ws_arg, type="stdio"))
        files = _skill_files((ws if project else home) / ".claude" / "skills")
    elif client == "gemini":
        cfg = ConfigChange((ws if project else home) / ".gemini" / "settings.json", "mcpServers", entry(ws_arg))
        files = _skill_files((ws if project else home) / ".gemini" / "skills")
    elif client == "cursor":
        cfg = ConfigChange((ws if project else home) / ".cursor" / "mcp.json", "mcpServers",
                           entry("${workspaceFolder}", type="stdio"))
        # project: agent-requested rules (Cursor before 2.4 has no skills; newer reads .agents/skills too);
        # user: ~/.cursor/skills, the user-level folder https://cursor.com/docs/context/skills documents
        files = _cursor_rules(ws / ".cursor" / "rules") if project else _skill_files(home / ".cursor" / "skills")
    elif client == "vscode":
        cfg = ConfigChange(ws / ".vscode" / "mcp.json" if project else _vscode_user_dir(home) / "mcp.json", "servers",
                           entry("${workspaceFolder}", type="stdio"))
        if project:
            files = _skill_files(ws / ".github" / "skills")
            files.append(FileChange(ws / ".github" / "instructions" / "mltriage.instructions.md",
                                    VSCODE_INSTRUCTIONS.encode()))
        else:
            files = _skill_files(home / ".copilot" / "skills")
    else:
        raise InstallError(f"unknown client {client!r}; choose one of {', '.join(CLIENTS)}")
    shared = (ws if project else home) / SHARED_SKILLS
    dirs = list(dict.fromkeys([*(_top(f.path, ws if project else home) for f in files), shared]))
    return Plan(cfg, files + _skill_files(shared), notes, dirs)


def _top(path: Path, base: Path) -> Path:
    """The install directory a file goes into: its first two components under `base` (`.claude/skills`)."""
    return base.joinpath(*path.relative_to(base).parts[:2])


def _load(path: Path) -> tuple[dict[str, Any] | None, str]:
    """The existing config (None if absent) and its text; a clear error if it is not a JSON object."""
    if not path.exists():
        return None, ""
    text = path.read_text(encoding="utf-8")
    if not text.strip():
        return {}, text
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise InstallError(
            f"{path} is not valid JSON ({e.msg} at line {e.lineno}, column {e.colno}); nothing was written. "
            f"Fix the file (comments and trailing commas are not JSON) or add the '{SERVER_NAME}' server by hand."
        ) from None
    if not isinstance(data, dict):
        raise InstallError(f"{path} holds a JSON {type(data).__name__}, not an object; nothing was written")
    return data, text


def _merged(cfg: ConfigChange, data: dict[str, Any] | None) -> dict[str, Any]:
    data = dict(data or {})
    servers = data.get(cfg.key, {})
    if not isinstance(servers, dict):
        raise InstallError(f"{cfg.path}: '{cfg.key}' is a {type(servers).__name__}, not an object; nothing was written")
    data[cfg.key] = {**servers, SERVER_NAME: cfg.entry}
    return data


def _dump(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def _backup(path: Path) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    backup = path.with_name(f"{path.name}.bak-{stamp}")
    n = 1
    while backup.exists():
        backup = path.with_name(f"{path.name}.bak-{stamp}-{n}")
        n += 1
    shutil.copy2(path, backup)
    return backup


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.mltriage-tmp")
    tmp.write_bytes(data)
    if path.exists():
        shutil.copymode(path, tmp)
    os.replace(tmp, path)


def apply(p: Plan, dry_run: bool = False, out=sys.stdout) -> int:
    """Carry out (or with dry_run, show) the plan. Returns the number of files that changed or would."""
    cfg = p.config
    old, old_text = _load(cfg.path)  # raises before anything is written
    new = _merged(cfg, old)
    config_changes = old != new
    file_changes = [f for f in p.files if not f.path.exists() or f.path.read_bytes() != f.data]
    changed = int(config_changes) + len(file_changes)

    if dry_run:
        if config_changes:
            out.writelines(difflib.unified_diff(
                old_text.splitlines(keepends=True) if old is not None else [], _dump(new).splitlines(keepends=True),
                fromfile=str(cfg.path) if old is not None else "/dev/null", tofile=str(cfg.path)))
        else:
            print(f"unchanged: {cfg.path}", file=out)
        for f in file_changes:
            print(f"would {'update' if f.path.exists() else 'create'}: {f.path}", file=out)
        print(f"dry run: {changed} file(s) would change; nothing written", file=out)
    else:
        if config_changes:
            backup = _backup(cfg.path) if cfg.path.exists() else None
            _write_atomic(cfg.path, _dump(new).encode())
            print(f"{'updated' if backup else 'created'}: {cfg.path}" + (f" (backup: {backup.name})" if backup else ""),
                  file=out)
        else:
            print(f"unchanged: {cfg.path}", file=out)
        for f in file_changes:
            _write_atomic(f.path, f.data)
        print(f"{len(file_changes)} skill file(s) written, {len(p.files) - len(file_changes)} already current"
              + (f" ({', '.join(map(str, p.dirs))})" if p.dirs else ""), file=out)
    for note in p.notes:
        print(f"note: {note}", file=out)
    return changed


def run(args: argparse.Namespace) -> int:
    try:
        p = plan(args.client, args.scope, Path(args.workspace) if args.workspace else None,
                 tools=getattr(args, "tools", None))
        apply(p, dry_run=args.dry_run)
    except InstallError as e:
        print(f"mltriage install: {e}", file=sys.stderr)
        return 2
    if not args.dry_run:
        print(f"mltriage is installed for {args.client} ({args.scope} scope); restart or reload the client to pick it up.")
    return 0

