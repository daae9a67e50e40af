"""stdio serving that answers an agent's opening requests while the MCP SDK is still importing.

Importing the SDK costs about a second (mostly the pydantic models of every protocol revision), and an
agent client waits for `initialize` (or `server/discover`) and `tools/list` before it does anything.
This front answers those list-type requests from the real server's own earlier answers, cached per
method and protocol version and keyed on the installed code, while the real server imports on the
main thread. Every client message is still forwarded, in order, to the real server, which runs the
SDK's own stdio transport unchanged on a pipe put in place of fd 0 and fd 1. The real server's answer
to a request already answered here is dropped after refreshing the cache; if it differs from what the
client was given, the client is told the list changed. Stdlib only: anything heavier defeats the point.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import select
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

CACHEABLE = frozenset({"initialize", "server/discover", "tools/list", "prompts/list", "resources/list",
                       "resources/templates/list"})
LIST_CHANGED = {"tools/list": "notifications/tools/list_changed",
                "prompts/list": "notifications/prompts/list_changed",
                "resources/list": "notifications/resources/list_changed"}
_VERSION_META = "io.modelcontextprotocol/protocolVersion"
_END = b'{"mltriage-front": "end"}\n'  # written by us after the SDK has finished writing
_KEEP_FILES = 8
_ROOT = Path(__file__).resolve().parent.parent
_PACKAGES = ("server", "tools", "skills", "journal_templates")


def cache_dir() -> Path:
    if d := os.environ.get("MLTRIAGE_CACHE_DIR"):
        return Path(d)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mltriage"


def cache_path() -> Path | None:
    """This code's cache file; None (serve uncached) when there is no home to put it in."""
    try:
        return cache_dir() / f"stdio-{fingerprint()}.json"
    except (OSError, RuntimeError, KeyError) as e:  # Path.home() raises RuntimeError without HOME or passwd entry
        _log(f"no response cache ({e}); the server works, only its start stays slow")
        return None


def fingerprint(root: Path = _ROOT, packages: tuple[str, ...] = _PACKAGES) -> str:
    """Changes whenever our code, the skills or the installed SDK change (size and mtime of every file)."""
    h = hashlib.sha256(sys.version.encode())
    for pkg in packages:
        for dirpath, dirnames, filenames in os.walk(root / pkg):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in sorted(filenames):
                st = os.stat(os.path.join(dirpath, name))
                h.update(f"{dirpath}/{name}:{st.st_size}:{st.st_mtime_ns};".encode())
    for mod in ("mcp", "mcp_types", "pydantic"):
        spec = importlib.util.find_spec(mod)
        origin = spec.origin if spec else None
        st = os.stat(origin) if origin else None
        h.update(f"{mod}:{origin}:{st and st.st_size}:{st and st.st_mtime_ns};".encode())
    return h.hexdigest()[:20]


class ResponseCache:
    """The real server's results, by "method@protocolVersion", in one small JSON file per code fingerprint."""

    def __init__(self, path: Path | None):
        self.path = path
        self.lock = threading.Lock()
        self.failed = False
        self.entries: dict[str, Any] = self._read()

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_bytes()) if self.path else None
        except (OSError, ValueError):
            return {}  # no cache yet, or a damaged one: it is rebuilt from this session's answers
        return data["entries"] if isinstance(data, dict) and isinstance(data.get("entries"), dict) else {}

    def get(self, key: str) -> Any:
        with self.lock:
            return self.entries.get(key)

    def put(self, key: str, result: Any) -> None:
        with self.lock:
            self.entries[key] = result
            if self.path is None:
                return
            try:
                import fcntl  # POSIX only, like the front itself

                self.path.parent.mkdir(parents=True, exist_ok=True)
                with open(self.path.with_suffix(".lock"), "a") as lock:
                    # servers starting together (mltriage install warms one per protocol version) merge, not clobber
                    fcntl.flock(lock, fcntl.LOCK_EX)
                    self.entries = {**self._read(), key: result}
                    fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".stdio-", suffix=".tmp")
                    with os.fdopen(fd, "w") as f:
                        json.dump({"entries": self.entries}, f)
                    os.replace(tmp, self.path)
                self._prune()
            except OSError as e:
                if not self.failed:  # once: a read-only home would otherwise say it at every answer
                    _log(f"response cache not written ({e}); the server works, only its start stays slow")
                self.failed = True

    def _prune(self) -> None:
        olds = sorted(self.path.parent.glob("stdio-*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
        for p in olds[_KEEP_FILES:]:
            p.unlink(missing_ok=True)
            p.with_suffix(".lock").unlink(missing_ok=True)


def _log(msg: str) -> None:
    print(f"mltriage: {msg}", file=sys.stderr, flush=True)


def _loads(line: bytes) -> dict | None:
    try:
        msg = json.loads(line)
    except ValueError:
        return None
    return msg if isinstance(msg, dict) else None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class Front:
    """Two pumps between the wire and the real server; answers cacheable requests until the server is ready."""

    def __init__(self, cache: ResponseCache, wire_in: int, wire_out: int, to_server: int, from_server: int,
                 trace: bool = False):
        self.cache, self.trace = cache, trace
        self.wire_in, self.wire_out, self.to_server, self.from_server = wire_in, wire_out, to_server, from_server
        self.ready = threading.Event()
        self.lock = threading.Lock()
        self.write_lock = threading.Lock()
        self.answered: dict[str, str] = {}  # request id -> cache key, answered here: drop the server's answer
        self.capture: dict[str, str] = {}  # request id -> cache key, forwarded: record the server's answer
        self.legacy_version: str | None = None

    def start(self) -> list[threading.Thread]:
        threads = [threading.Thread(target=self._pump_in, name="mltriage-stdin", daemon=True),
                   threading.Thread(target=self._pump_out, name="mltriage-stdout", daemon=True)]
        for t in threads:
            t.start()
        return threads

    def key(self, msg: dict) -> str | None:
        """The cache key of a request whose result depends only on its method and protocol version."""
        method, params = msg.get("method"), msg.get("params") or {}
        if method not in CACHEABLE or "id" not in msg or not isinstance(params, dict):
            return None
        if method == "initialize":
            v = params.get("protocolVersion")
            if not isinstance(v, str):
                return None
            self.legacy_version = v
            return f"initialize@{v}"
        if set(params) - {"_meta"}:
            return None  # a cursor or a filter: only the plain first page is cached
        meta = params.get("_meta")
        v = meta.get(_VERSION_META) if isinstance(meta, dict) else None
        v = v or self.legacy_version
        return f"{method}@{v}" if isinstance(v, str) else None

    def _send(self, data: bytes) -> None:
        with self.write_lock:
            _write_all(self.wire_out, data)

    def on_client_line(self, line: bytes) -> None:
        msg = _loads(line)
        key = self.key(msg) if msg else None
        if key:
            rid = json.dumps(msg["id"])
            cached = None if self.ready.is_set() else self.cache.get(key)
            with self.lock:
                (self.answered if cached is not None else self.capture)[rid] = key
            if cached is not None:
                self._send(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": cached}).encode() + b"\n")
                if self.trace:
                    _log(f"answered {key} from the response cache")
        _write_all(self.to_server, line if line.endswith(b"\n") else line + b"\n")

    def on_server_line(self, line: bytes) -> None:
        if self.answered or self.capture:
            msg = _loads(line)
            if msg is not None and "id" in msg and "method" not in msg:
                rid = json.dumps(msg["id"])
                with self.lock:
                    early, key = rid in self.answered, self.answered.pop(rid, None) or self.capture.pop(rid, None)
                if key and "result" in msg:
                    stale = early and self.cache.get(key) != msg["result"]
                    if stale or not early:
                        self.cache.put(key, msg["result"])
                    if stale:
                        _log(f"cached {key} was stale; refreshed it")
                        if (method := key.split("@")[0]) in LIST_CHANGED:
                            self._send(json.dumps({"jsonrpc": "2.0", "method": LIST_CHANGED[method]}).encode() + b"\n")
                if early and "error" in msg:
                    _log(f"the server refused {key} after it was answered from the cache: {msg['error']}")
                if early:
                    return  # the client already has this answer
        self._send(line)

    def _pump_in(self) -> None:
        try:
            with os.fdopen(self.wire_in, "rb", closefd=False) as wire:
                for line in wire:
                    self.on_client_line(line)
        except OSError:
            pass  # the server side went away; the main thread reports why
        finally:
            os.close(self.to_server)  # EOF for the real server: the client has gone

    def _pump_out(self) -> None:
        try:
            with os.fdopen(self.from_server, "rb", closefd=False) as out:
                for line in out:
                    if line == _END:
                        return
                    self.on_server_line(line)
        except OSError:
            pass  # the client went away


def _claim_wire() -> tuple[int, int, int, int]:
    """Move the real stdin/stdout to private descriptors and put pipes to the real server on fd 0/1."""
    import fcntl  # POSIX only; serve() skips the front elsewhere

    wire_in = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    wire_out = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    server_in, to_server = os.pipe()
    from_server, server_out = os.pipe()
    os.dup2(server_in, 0)
    os.dup2(server_out, 1)
    os.close(server_in)
    os.close(server_out)
    return wire_in, wire_out, to_server, from_server


def serve(load: Callable[[], Any]) -> int:
    """Serve stdio with `load()` (which imports and returns the MCPServer) running behind the front."""
    if os.environ.get("MLTRIAGE_STDIO_CACHE", "1") == "0" or sys.platform == "win32":
        load().run()
        return 0
    front = Front(ResponseCache(cache_path()), *_claim_wire(), trace=os.environ.get("MLTRIAGE_STDIO_TRACE") == "1")
    threads = front.start()
    server = load()
    front.ready.set()
    try:
        server.run()
    finally:
        # the SDK has restored fd 1 to our pipe and flushed every message it wrote before this one
        try:
            _write_all(1, _END)
        except OSError:
            pass
        threads[1].join(timeout=10)
    return 0


def _opening(version: str, modern: bool) -> tuple[bytes, int]:
    """What a client of `version` sends first (the handshake or discover, then every cacheable list)
    and how many answers that asks for."""
    client = {"name": "mltriage-warm", "version": "1"}
    meta = {"_meta": {_VERSION_META: version, "io.modelcontextprotocol/clientInfo": client,
                      "io.modelcontextprotocol/clientCapabilities": {}}} if modern else {}
    msgs: list[dict] = [{"id": 0, "method": "server/discover", "params": meta} if modern else
                        {"id": 0, "method": "initialize", "params": {
                            "protocolVersion": version, "capabilities": {}, "clientInfo": client}}]
    if not modern:
        msgs.append({"method": "notifications/initialized"})
    lists = sorted(CACHEABLE - {"initialize", "server/discover"})
    msgs += [{"id": i, "method": m, "params": meta} for i, m in enumerate(lists, 1)]
    return b"".join(json.dumps({"jsonrpc": "2.0", **m}).encode() + b"\n" for m in msgs), len(lists) + 1


def _answered(proc: subprocess.Popen, want: int, deadline: float) -> bool:
    """Read the server's answers until `want` arrived; closing stdin earlier would cancel them."""
    got = 0
    while got < want:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([proc.stdout], [], [], left)[0]:
            return False
        line = proc.stdout.readline()
        if not line:
            return False
        msg = _loads(line)
        got += bool(msg and "id" in msg and "method" not in msg)
    return True


def warm(command: list[str], handshake_versions: Iterable[str], modern_versions: Iterable[str],
         timeout: float = 60) -> list[str]:
    """Start the real server once per protocol version, in parallel, so its opening answers are cached.

    Returns the versions whose opening was answered in full. Used by `mltriage install`, so that even
    the first start an agent makes after an install is a fast one.
    """
    jobs = [(v, False) for v in handshake_versions] + [(v, True) for v in modern_versions]
    deadline = time.monotonic() + timeout
    done = []
    with tempfile.TemporaryDirectory(prefix="mltriage-warm-") as ws:
        procs = [subprocess.Popen([*command, "--workspace", ws], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, cwd=ws) for _ in jobs]
        try:
            openings = [_opening(v, modern) for v, modern in jobs]
            for (data, _), proc in zip(openings, procs):
                proc.stdin.write(data)
                proc.stdin.flush()
            for (v, _), (_, want), proc in zip(jobs, openings, procs):
                if _answered(proc, want, deadline):
                    done.append(v)
        finally:
            for proc in procs:
                proc.stdin.close()
                try:
                    proc.wait(timeout=max(1.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    return done
