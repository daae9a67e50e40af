"""Shared test helpers: a real MCP client, in-process or over stdio against `python -m server`."""

import os
import sys
import textwrap
from contextlib import asynccontextmanager
from pathlib import Path

import time

import anyio
import psutil
import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
PYTHON = sys.executable
@asynccontextmanager
async def stdio_client(workspace: Path, *server_args: str, env: dict | None = None):
    """A real MCP client talking to `python -m server --workspace W` over stdio."""
    from mcp.client import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(
        command=PYTHON, args=["-m", "server", "--workspace", str(workspace), *server_args],
        cwd=str(ROOT), env={"PYTHONPATH": str(ROOT), **(env or {})},
    )
    async with Client(params) as client:
        yield client


@asynccontextmanager
async def inprocess_client(workspace: Path, allow_read: list[str] | None = None):
    """The in-process client (`mcp.client.Client(server)`) with the server confined to `workspace`."""
    from mcp.client import Client

    from server.app import configure, mcp

    configure(workspace, allow_read)
    async with Client(mcp) as client:
        yield client


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Make `--dist loadgroup` group again: a worker names each `xdist_group` test `<nodeid>@<group>` so the
    controller sends a group's tests to one worker, in one batch.

    pytest-xdist does it by assigning `item._nodeid`, which pytest >= 9 no longer reads (the id lives in
    `item._id`): every grouped test was scheduled on its own, so a module-scoped fixture meant to run once (the
    acceptance run, the gallery runs) ran on both workers, and again whenever other modules' tests came between.
    """
    if not hasattr(config, "workerinput") or not config.getvalue("loadgroup"):
        return
    try:
        from _pytest.nodeid import coerce_node_id
    except ImportError:  # pytest < 9: xdist's own suffix took effect
        return
    for item in items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                        for m in item.iter_markers("xdist_group")})
        suffix = "@" + "_".join(names)
        if names and not item.nodeid.endswith(suffix):
            item._id = coerce_node_id(item.nodeid + suffix)


def run(coro_fn, *args):
    """Run an async test body: `run(body)` where `async def body(): ...`."""
    return anyio.run(coro_fn, *args)


def text_of(result) -> str:
    return "\n".join(getattr(b, "text", "") for b in result.content)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.fixture
def no_stray_processes():
    """Fails the test if it leaves a child process of the test runner behind.

    The shared fork servers (tools.probe_runner.SHARED_FORKS) live as long as this process by design; what they
    forked does not.
    """
    from tools.probe_runner import SHARED_FORKS

    before = {p.pid for p in psutil.Process(os.getpid()).children(recursive=True)}
    yield
    for _ in range(50):
        forks = {s.proc.pid for s in SHARED_FORKS.servers.values()}
        left = [p for p in psutil.Process(os.getpid()).children(recursive=True)
                if p.pid not in before | forks and p.status() != psutil.STATUS_ZOMBIE]
        if not left:
            break
        time.sleep(0.1)
    assert not left, f"stray processes: {[(p.pid, p.cmdline()) for p in left]}"


def inline_target(ws, body, name="target.py"):
    """Write a target factory's source (indented freely) into the workspace; return its `file:make_target` spec."""
    (ws / name).write_text(textwrap.dedent(body))
    return f"{ws / name}:make_target"
