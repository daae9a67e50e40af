"""`mltriage serve --http HOST:PORT`: the same server over streamable HTTP, on loopback, behind a bearer token."""

import socket
import subprocess
import sys
import time
from contextlib import contextmanager

import anyio

from conftest import ROOT, run, text_of

TOKEN = "test-token-" + "x" * 32


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def http_server(workspace, *args: str, token: str | None = TOKEN, host: str = "127.0.0.1"):
    """`python -m server serve --http` on a free port; yields (port, process) once it accepts connections."""
    port = _free_port()
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", **({"MLTRIAGE_HTTP_TOKEN": token} if token else {})}
    server = subprocess.Popen([sys.executable, "-m", "server", "serve", "--http", f"{host}:{port}",
                               "--workspace", str(workspace), *args], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert server.poll() is None, server.stderr.read().decode()[-2000:]
                time.sleep(0.1)
        yield port, server
    finally:
        server.terminate()
        server.wait(timeout=10)
        server.stderr.close()


def client(port: int, token: str | None = TOKEN):
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return Client(streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=create_mcp_http_client(headers=headers)))


def test_streamable_http_serves_the_tools_on_loopback(workspace):
    (workspace / "train.log").write_text("step 1 | loss 2.30\nstep 2 | loss 2.10\n")
    with http_server(workspace) as (port, _):
        async def body():
            with anyio.fail_after(60):
                async with client(port) as c:
                    names = {t.name for t in (await c.list_tools()).tools}
                    r = await c.call_tool("tail_log", {"path": "train.log"})
                    bad = await c.call_tool("tail_log", {"path": "../escape.log"})
                    return names, r, bad

        names, r, bad = run(body)
    assert {"tail_log", "triage", "nan_hook_run"} <= names
    assert r.structured_content["last_step"] == 2
    assert bad.is_error and "outside" in text_of(bad)
