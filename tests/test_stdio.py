"""stdio is served by the SDK's own transport: every answer comes from the real server.

The SDK client (`mcp.client.stdio`) checks the normal path; a raw line-at-a-time peer checks what a
hostile or broken client sends, since the SDK client cannot send malformed JSON-RPC.
"""

import json
import os
import queue
import subprocess
import threading
from pathlib import Path

import anyio
import pytest

from conftest import PYTHON, ROOT, run, stdio_client, text_of

VERSION = "2025-06-18"
TIMEOUT = 60


class RawPeer:
    """A real `python -m server` on pipes; we write bytes, it answers JSON lines."""

    def __init__(self, workspace: Path, pythonpath: str = str(ROOT)):
        self.proc = subprocess.Popen(
            [PYTHON, "-m", "server", "--workspace", str(workspace)], cwd=ROOT,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": pythonpath})
        self.inbox: queue.Queue = queue.Queue()
        self.seen: list[dict] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.inbox.put(json.loads(line))
        self.inbox.put(None)

    def send_line(self, raw: bytes) -> None:
        self.proc.stdin.write(raw + b"\n")
        self.proc.stdin.flush()

    def send(self, msg: dict) -> None:
        self.send_line(json.dumps(msg).encode())

    def request(self, rid, method: str, params: dict | None = None) -> dict:
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, **({"params": params} if params is not None else {})})
        while True:
            m = self.inbox.get(timeout=TIMEOUT)
            assert m is not None, f"server closed stdout before answering {rid}: {self.close()[-3000:]}"
            self.seen.append(m)
            if m.get("id") == rid and "method" not in m:
                return m

    def handshake(self) -> dict:
        init = self.request(1, "initialize", {"protocolVersion": VERSION, "capabilities": {},
                                              "clientInfo": {"name": "raw-test", "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return init

    def close(self) -> str:
        if not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=TIMEOUT)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        while (m := self.inbox.get(timeout=TIMEOUT)) is not None:
            self.seen.append(m)
        return self.proc.stderr.read().decode(errors="replace")


def test_sdk_stdio_client_initializes_lists_and_calls_a_tool(workspace, no_stray_processes):
    (workspace / "train.log").write_text("step 1 loss 2.3\nstep 2 loss nan\n")

    async def body():
        with anyio.fail_after(TIMEOUT):
            async with stdio_client(workspace) as client:
                names = {t.name for t in (await client.list_tools()).tools}
                result = await client.call_tool("tail_log", {"path": "train.log"})
                return names, result

    names, result = run(body)
    assert {"tail_log", "triage", "nan_hook_run", "write_regression_test"} <= names
    assert not result.is_error
    assert result.structured_content["last_step"] == 2
    assert "nan" in text_of(result).lower()


def test_handshake_in_the_2025_envelope_is_answered_by_the_real_server(workspace, no_stray_processes):
    peer = RawPeer(workspace)
    init = peer.handshake()
    tools = peer.request(2, "tools/list")
    err = peer.close()
    assert peer.proc.returncode == 0, err
    assert init["result"]["protocolVersion"] == VERSION
    assert init["result"]["serverInfo"]["name"] == "mltriage"
    assert len(tools["result"]["tools"]) >= 20
    assert sorted(m["id"] for m in peer.seen if "method" not in m) == [1, 2], "each request answered exactly once"


BAD_LINES = {
    "null id": json.dumps({"jsonrpc": "2.0", "id": None, "method": "tools/list"}).encode(),
    "float id": json.dumps({"jsonrpc": "2.0", "id": 1.5, "method": "tools/list"}).encode(),
    "bool id": json.dumps({"jsonrpc": "2.0", "id": True, "method": "tools/list"}).encode(),
    "object id": json.dumps({"jsonrpc": "2.0", "id": {}, "method": "tools/list"}).encode(),
    "missing jsonrpc": json.dumps({"id": 11, "method": "tools/list"}).encode(),
    "wrong jsonrpc": json.dumps({"jsonrpc": "1.0", "id": 12, "method": "tools/list"}).encode(),
    "params as a list": json.dumps({"jsonrpc": "2.0", "id": 13, "method": "tools/list", "params": []}).encode(),
    "BOM before the line": b"\xef\xbb\xbf" + json.dumps({"jsonrpc": "2.0", "id": 14, "method": "tools/list"}).encode(),
    "1,500 nested arrays": b"[" * 1500 + b"]" * 1500,
    "1,500 nested objects in params": (b'{"jsonrpc": "2.0", "id": 15, "method": "tools/list", "params": {"_meta": '
                                       + b'{"a": ' * 1500 + b"1" + b"}" * 1500 + b"}}"),
    "not JSON": b"this is not json",
}


@pytest.mark.parametrize("name", BAD_LINES)
def test_a_malformed_line_gets_no_result_and_the_session_survives(name, workspace, no_stray_processes):
    peer = RawPeer(workspace)
    peer.handshake()
    peer.send_line(BAD_LINES[name])
    # two good requests after it: the answer to the second proves everything before it was handled
    assert "tools" in peer.request(100, "tools/list")["result"]
    assert peer.request(101, "ping")["result"] == {}
    err = peer.close()
    assert peer.proc.returncode == 0, err
    answered = [m for m in peer.seen if "method" not in m and m.get("id") not in (1, 100, 101)]
    # the SDK drops what it cannot validate as JSON-RPC; anything it does answer must be an error
    assert all("error" in m and "result" not in m for m in answered), answered
    assert "RecursionError" not in err


def test_initialize_without_capabilities_is_refused_by_the_server_not_answered(workspace, no_stray_processes):
    peer = RawPeer(workspace)
    bad = peer.request(1, "initialize", {"protocolVersion": VERSION, "clientInfo": {"name": "raw", "version": "1"}})
    assert "result" not in bad and bad["error"]["code"] == -32602
    good = peer.request(2, "initialize", {"protocolVersion": VERSION, "capabilities": {},
                                          "clientInfo": {"name": "raw", "version": "1"}})
    assert good["result"]["serverInfo"]["name"] == "mltriage"
    peer.close()


@pytest.fixture
def broken_sdk(tmp_path) -> str:
    """A PYTHONPATH on which the MCP SDK's types package fails to import, as a broken install does."""
    shadow = tmp_path / "shadow" / "mcp_types"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('mcp_types is broken in this environment')\n")
    return os.pathsep.join([str(shadow.parent), str(ROOT)])


def test_an_import_failure_of_the_server_is_an_error_not_a_handshake(workspace, broken_sdk, no_stray_processes):
    peer = RawPeer(workspace, pythonpath=broken_sdk)
    peer.send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
               "params": {"protocolVersion": VERSION, "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}})
    err = peer.close()
    assert peer.seen == [], "nothing may answer for a server that never started"
    assert peer.proc.returncode != 0
    assert "mcp_types is broken in this environment" in err


def test_the_sdk_client_sees_a_server_that_cannot_import_as_a_failed_connection(workspace, broken_sdk,
                                                                              no_stray_processes):
    async def body():
        with anyio.fail_after(TIMEOUT):
            async with stdio_client(workspace, env={"PYTHONPATH": broken_sdk}) as client:
                await client.list_tools()

    with pytest.raises(Exception) as info:
        run(body)
    assert not isinstance(info.value, TimeoutError), "the client must learn of the failure, not wait for it"
