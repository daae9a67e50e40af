"""`mltriage serve --http HOST:PORT`: the same server over streamable HTTP, on loopback."""

import socket
import subprocess
import sys
import time

import anyio

from conftest import ROOT, run, text_of


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_streamable_http_serves_the_tools_on_loopback(workspace):
    (workspace / "train.log").write_text("step 1 | loss 2.30\nstep 2 | loss 2.10\n")
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "server", "serve", "--http", f"127.0.0.1:{port}",
                               "--workspace", str(workspace)], cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
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

        async def body():
            from mcp.client import Client

            with anyio.fail_after(60):
                async with Client(f"http://127.0.0.1:{port}/mcp") as c:
                    names = {t.name for t in (await c.list_tools()).tools}
                    r = await c.call_tool("tail_log", {"path": "train.log"})
                    bad = await c.call_tool("tail_log", {"path": "../escape.log"})
                    return names, r, bad

        names, r, bad = run(body)
        assert {"tail_log", "triage", "nan_hook_run"} <= names
        assert r.structured_content["last_step"] == 2
        assert bad.is_error and "outside" in text_of(bad)
    finally:
        server.terminate()
        server.wait(timeout=10)
