"""HTTP as a hostile client sees it: no token or a wrong one is 401, a rebinding Host is refused,
a network bind without an explicit token and a bad address are one-line errors."""

import json
import subprocess
import sys
import urllib.error
import urllib.request

import anyio
import pytest

from conftest import ROOT, run
from test_http import TOKEN, client, http_server

pytestmark = pytest.mark.usefixtures("no_stray_processes")

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "probe", "version": "0"}}}


def _post(port: int, headers: dict) -> int:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/mcp", data=json.dumps(INIT).encode(), method="POST",
                                 headers={"Content-Type": "application/json",
                                          "Accept": "application/json, text/event-stream", **headers})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def _tool_names(port: int, token: str) -> set[str]:
    async def body():
        with anyio.fail_after(60):
            async with client(port, token) as c:
                return {t.name for t in (await c.list_tools()).tools}

    return run(body)


def test_no_token_and_wrong_token_are_401_right_token_lists_tools(workspace):
    with http_server(workspace) as (port, _):
        assert _post(port, {}) == 401
        assert _post(port, {"Authorization": "Bearer wrong"}) == 401
        assert _post(port, {"Authorization": f"Bearer {TOKEN}x"}) == 401
        assert _post(port, {"Authorization": f"Basic {TOKEN}"}) == 401
        assert _post(port, {"Authorization": f"Bearer {TOKEN}"}) == 200
        assert "run_training" in _tool_names(port, TOKEN)


def test_mcp_client_without_token_cannot_connect(workspace):
    with http_server(workspace) as (port, _):
        async def body():
            with anyio.fail_after(60):
                async with client(port, None) as c:
                    await c.list_tools()

        with pytest.raises(BaseException) as refused:  # noqa: B017 - the SDK wraps the 401 in task groups
            run(body)

    def leaves(e):
        return [x for sub in e.exceptions for x in leaves(sub)] if hasattr(e, "exceptions") else [e]

    from mcp.shared.exceptions import MCPError

    assert any(isinstance(e, MCPError) and "error response" in e.message for e in leaves(refused.value)), refused.value


def test_generated_token_is_printed_once_and_works(workspace):
    with http_server(workspace, token=None) as (port, server):
        line = server.stderr.readline().decode()
        assert "bearer token" in line
        token = line.rsplit(" ", 1)[1].strip()
        assert len(token) >= 32
        assert _post(port, {}) == 401
        assert "tail_log" in _tool_names(port, token)


def test_rebinding_host_is_refused_unless_allowed(workspace):
    with http_server(workspace, "--allow-host", "mltriage.internal") as (port, _):
        auth = {"Authorization": f"Bearer {TOKEN}"}
        assert _post(port, {**auth, "Host": f"evil.example:{port}"}) in (400, 403, 421)
        assert _post(port, {**auth, "Origin": "http://evil.example"}) in (400, 403)
        assert _post(port, {**auth, "Host": f"mltriage.internal:{port}"}) == 200


def _serve(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "server", "serve", *args], cwd=ROOT, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", **(env or {})}, timeout=60)


def test_network_bind_without_explicit_token_is_refused():
    done = _serve("--http", "0.0.0.0:8765")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "MLTRIAGE_HTTP_TOKEN" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_http_port_that_is_not_a_number_is_one_line():
    done = _serve("--http", "127.0.0.1:notaport")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        "mltriage: --http '127.0.0.1:notaport': the port must be a number from 1 to 65535, e.g. 127.0.0.1:8765"]
