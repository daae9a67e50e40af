"""The stdio front: opening requests answered from the real server's cached answers, everything forwarded.

Raw JSON-RPC over the pipes of a real `python -m server` speaks the 2025 handshake the way Claude Code
and Gemini CLI do; the SDK's own stdio client speaks the 2026-07-28 envelope. Each test gets its own
cache directory, so "cold" and "warm" mean what they say.
"""

import json
import os
import queue
import subprocess
import threading
from pathlib import Path

import pytest

from conftest import PYTHON, ROOT, run, stdio_client, text_of
from server.fast_stdio import Front, ResponseCache, cache_path, fingerprint, warm

VERSION = "2025-06-18"
TIMEOUT = 60


class RawClient:
    """A line-at-a-time JSON-RPC peer on a real server process; every message it reads is kept."""

    def __init__(self, workspace: Path, cache: Path, **env: str):
        self.proc = subprocess.Popen(
            [PYTHON, "-m", "server", "--workspace", str(workspace)], cwd=ROOT,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(ROOT), "MLTRIAGE_CACHE_DIR": str(cache),
                 "MLTRIAGE_STDIO_TRACE": "1", **env})
        self.inbox: queue.Queue = queue.Queue()
        self.seen: list[dict] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.inbox.put(json.loads(line))
        self.inbox.put(None)

    def send(self, msg: dict) -> None:
        self.proc.stdin.write((json.dumps({"jsonrpc": "2.0", **msg}) + "\n").encode())
        self.proc.stdin.flush()

    def request(self, rid, method: str, params: dict | None = None) -> dict:
        self.send({"id": rid, "method": method, **({"params": params} if params is not None else {})})
        return self.wait_for(rid)

    def wait_for(self, rid) -> dict:
        for m in self.seen:
            if m.get("id") == rid and "method" not in m:
                return m
        while True:
            m = self.inbox.get(timeout=TIMEOUT)
            assert m is not None, f"server closed stdout before answering {rid}: {self.stderr()}"
            self.seen.append(m)
            if m.get("id") == rid and "method" not in m:
                return m

    def wait_for_notification(self, method: str) -> dict:
        for m in self.seen:
            if m.get("method") == method:
                return m
        while True:
            m = self.inbox.get(timeout=TIMEOUT)
            assert m is not None, f"server closed stdout before sending {method}: {self.stderr()}"
            self.seen.append(m)
            if m.get("method") == method:
                return m

    def handshake(self) -> tuple[dict, dict]:
        init = self.request(1, "initialize", {"protocolVersion": VERSION, "capabilities": {},
                                              "clientInfo": {"name": "raw-test", "version": "1"}})
        self.send({"method": "notifications/initialized"})
        return init, self.request(2, "tools/list")

    def close(self) -> str:
        self.proc.stdin.close()
        self.proc.wait(timeout=TIMEOUT)
        while (m := self.inbox.get(timeout=TIMEOUT)) is not None:
            self.seen.append(m)
        return self.stderr()

    def stderr(self) -> str:
        if self.proc.poll() is None:
            return "(still running)"
        return self.proc.stderr.read().decode(errors="replace")


def _cache_file(cache: Path) -> Path:
    files = list(cache.glob("stdio-*.json"))
    assert len(files) == 1, files
    return files[0]


def _log(workspace: Path) -> str:
    (workspace / "train.log").write_text("step 1 loss 2.3\nstep 2 loss nan\n")
    return "train.log"


def test_handshake_cold_then_warm_gives_the_same_answers_and_each_answer_once(tmp_path, workspace, no_stray_processes):
    cache = tmp_path / "cache"
    log = _log(workspace)
    cold = RawClient(workspace, cache)
    init_cold, tools_cold = cold.handshake()
    call = cold.request(3, "tools/call", {"name": "tail_log", "arguments": {"path": log}})
    err = cold.close()
    assert cold.proc.returncode == 0, err
    assert "from the response cache" not in err
    assert init_cold["result"]["protocolVersion"] == VERSION
    assert init_cold["result"]["serverInfo"]["name"] == "mltriage"
    assert len(tools_cold["result"]["tools"]) >= 20
    assert "nan" in json.dumps(call["result"]["structuredContent"]["events"])
    assert set(json.loads(_cache_file(cache).read_text())["entries"]) == {f"initialize@{VERSION}", f"tools/list@{VERSION}"}

    warm = RawClient(workspace, cache)
    init_warm, tools_warm = warm.handshake()
    # sent at once, while the real server is still importing: queued and answered by it
    call = warm.request(3, "tools/call", {"name": "tail_log", "arguments": {"path": log}})
    err = warm.close()
    assert warm.proc.returncode == 0, err
    assert f"answered initialize@{VERSION} from the response cache" in err
    assert f"answered tools/list@{VERSION} from the response cache" in err
    assert init_warm["result"] == init_cold["result"]
    assert tools_warm["result"] == tools_cold["result"]
    assert "nan" in json.dumps(call["result"]["structuredContent"]["events"])
    ids = [m["id"] for m in warm.seen if "method" not in m]
    assert sorted(ids) == [1, 2, 3], "the real server's answer to a request answered early must be dropped"
    assert not [m for m in warm.seen if m.get("method", "").endswith("list_changed")]


def test_stale_cache_is_refreshed_and_the_client_told_the_list_changed(tmp_path, workspace, no_stray_processes):
    cache = tmp_path / "cache"
    first = RawClient(workspace, cache)
    _, tools = first.handshake()
    first.close()
    f = _cache_file(cache)
    data = json.loads(f.read_text())
    data["entries"][f"tools/list@{VERSION}"]["tools"] = data["entries"][f"tools/list@{VERSION}"]["tools"][:1]
    f.write_text(json.dumps(data))

    stale = RawClient(workspace, cache)
    _, short = stale.handshake()
    assert len(short["result"]["tools"]) == 1  # what the stale cache said
    stale.wait_for_notification("notifications/tools/list_changed")
    again = stale.request(4, "tools/list")  # as a client does on list_changed
    stale.close()
    assert again["result"] == tools["result"]
    assert json.loads(f.read_text())["entries"][f"tools/list@{VERSION}"] == tools["result"]


def test_damaged_cache_file_is_ignored_and_rewritten(tmp_path, workspace, no_stray_processes):
    cache = tmp_path / "cache"
    cache.mkdir()
    f = cache / f"stdio-{fingerprint()}.json"
    f.write_bytes(b"\x00\xffnot json")
    c = RawClient(workspace, cache)
    init, tools = c.handshake()
    err = c.close()
    assert c.proc.returncode == 0, err
    assert len(tools["result"]["tools"]) >= 20
    assert "from the response cache" not in err
    assert json.loads(f.read_text())["entries"][f"tools/list@{VERSION}"] == tools["result"]


def test_unwritable_cache_dir_still_serves(tmp_path, workspace, no_stray_processes):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache directory should be")
    c = RawClient(workspace, blocker / "cache")
    _, tools = c.handshake()
    err = c.close()
    assert c.proc.returncode == 0, err
    assert len(tools["result"]["tools"]) >= 20
    assert err.count("response cache not written") == 1
    assert blocker.read_text() == "a file where the cache directory should be"


def test_cache_can_be_switched_off(tmp_path, workspace, no_stray_processes):
    cache = tmp_path / "cache"
    c = RawClient(workspace, cache, MLTRIAGE_STDIO_CACHE="0")
    _, tools = c.handshake()
    c.close()
    assert len(tools["result"]["tools"]) >= 20
    assert not cache.exists()


def test_client_leaving_during_import_ends_the_server(tmp_path, workspace, no_stray_processes):
    c = RawClient(workspace, tmp_path / "cache")
    c.send({"id": 1, "method": "initialize", "params": {"protocolVersion": VERSION, "capabilities": {},
                                                          "clientInfo": {"name": "raw-test", "version": "1"}}})
    err = c.close()
    assert c.proc.returncode == 0, err


def test_sdk_client_in_the_2026_envelope_is_served_from_cache_the_second_time(tmp_path, workspace, no_stray_processes):
    cache = tmp_path / "cache"
    log = _log(workspace)

    async def body():
        listings = []
        for _ in range(2):
            async with stdio_client(workspace, env={"MLTRIAGE_CACHE_DIR": str(cache)}) as client:
                listings.append(sorted(t.name for t in (await client.list_tools()).tools))
                result = await client.call_tool("tail_log", {"path": log})
                assert "nan" in text_of(result).lower()
        return listings

    cold, warm = run(body)
    assert cold == warm and "triage" in cold
    keys = set(json.loads(_cache_file(cache).read_text())["entries"])
    assert {"server/discover@2026-07-28", "tools/list@2026-07-28"} <= keys


@pytest.mark.parametrize("msg, key", [
    ({"id": 1, "method": "initialize", "params": {"protocolVersion": VERSION}}, f"initialize@{VERSION}"),
    ({"id": 2, "method": "tools/list", "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}},
     "tools/list@2026-07-28"),
    ({"id": 3, "method": "tools/list", "params": {"cursor": "abc"}}, None),
    ({"id": 4, "method": "tools/call", "params": {"name": "tail_log"}}, None),
    ({"method": "tools/list"}, None),
    ({"id": 5, "method": "tools/list", "params": ["not", "a", "dict"]}, None),
    ({"id": 6, "method": "tools/list"}, None),  # no version known yet: nothing to key on
])
def test_only_version_keyed_list_requests_are_cacheable(msg, key):
    assert Front(ResponseCache(None), -1, -1, -1, -1).key(msg) == key


def test_legacy_list_requests_take_the_version_of_the_handshake():
    front = Front(ResponseCache(None), -1, -1, -1, -1)
    front.key({"id": 1, "method": "initialize", "params": {"protocolVersion": "2024-11-05"}})
    assert front.key({"id": 2, "method": "prompts/list"}) == "prompts/list@2024-11-05"


def test_fingerprint_follows_every_file_of_the_code(tmp_path):
    pkg = tmp_path / "pkg" / "sub"
    pkg.mkdir(parents=True)
    (pkg / "a.py").write_text("x = 1\n")
    before = fingerprint(tmp_path, ("pkg",))
    assert fingerprint(tmp_path, ("pkg",)) == before
    (pkg / "a.py").write_text("x = 22\n")
    assert fingerprint(tmp_path, ("pkg",)) != before


def test_warming_caches_every_version_so_even_the_first_start_is_answered_early(tmp_path, workspace, monkeypatch,
                                                                                no_stray_processes):
    cache = tmp_path / "cache"
    monkeypatch.setenv("MLTRIAGE_CACHE_DIR", str(cache))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    assert warm([PYTHON, "-m", "server"], ["2024-11-05", VERSION], ["2026-07-28"]) == ["2024-11-05", VERSION, "2026-07-28"]
    keys = set(json.loads(_cache_file(cache).read_text())["entries"])
    for v in ("2024-11-05", VERSION):
        assert {f"initialize@{v}", f"tools/list@{v}", f"prompts/list@{v}", f"resources/list@{v}"} <= keys
    assert {"server/discover@2026-07-28", "tools/list@2026-07-28"} <= keys

    c = RawClient(workspace, cache)
    c.handshake()
    err = c.close()
    assert f"answered tools/list@{VERSION} from the response cache" in err


def test_no_home_directory_means_no_cache_not_a_crash(monkeypatch):
    monkeypatch.delenv("MLTRIAGE_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)

    def no_home():
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    assert cache_path() is None
    ResponseCache(None).put("tools/list@x", {"tools": []})  # an uncached front still records in memory
