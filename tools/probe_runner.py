"""Runs a probe file from tools/probe/ in the user's interpreter (docs/design.md: two processes, two Pythons).

The probe gets a job directory holding `args.json`; it appends progress lines to `progress.jsonl`
and writes `result.json` last. Every process it starts inherits an environment marker unique to
this run; when the probe ends (normally, on timeout or on cancel) its process group is killed and
then every process still carrying the marker, so a hung target, a DataLoader worker, a torchrun
child, a `setsid` child or a double-forked daemon never outlives the request.
"""

import atexit
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import psutil

from tools.errors import TriageError

PROBE_DIR = Path(__file__).resolve().parent / "probe"
TAIL_BYTES = 8000
MARKER = "MLTRIAGE_PROBE_ID"  # in the environment of every process a probe starts
# Threads each probe's torch may use, set by a caller that runs probes side by side (triage: two at a time).
# Two probes each spinning up one OpenMP thread per core oversubscribe the cores, and small kernels (an LSTM's
# time steps) then wait on each other: measured 3-30x slower on 2 cores.
PROBE_THREADS: ContextVar[int | None] = ContextVar("PROBE_THREADS", default=None)
REAP_ROUNDS = 20
# Probes start from a fork server that imported torch once (SHARED_FORKS, below, unless a caller sets its own).
PROBE_FORKS: ContextVar["ForkServers | None"] = ContextVar("PROBE_FORKS", default=None)
# An idle fork server ends by itself after this long (it holds a copy of torch in memory); the next probe starts
# a new one. The server process's end (its pipe closing) ends it too.
FORK_IDLE_S = 600.0
# A forked child gets the probe's whole environment, but variables read when the interpreter or torch started
# (PYTHONPATH, LD_LIBRARY_PATH, TORCH_*, ...) acted in the fork server already: a change in them calls for a fork
# server of its own. The thread counts are applied in the child; the rest (PYTEST_CURRENT_TEST, ...) is read late.
STARTUP_ENV = ("PYTHON", "LD_", "TORCH", "CUDA", "NVIDIA", "KMP_", "GOMP_", "MKL_", "HOME")
PER_PROBE_ENV = {MARKER, "MLTRIAGE_JOB", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONUNBUFFERED"}
# Linux only: on macOS a process that loaded system frameworks may crash in a forked child.
# MLTRIAGE_FORKSERVER=0 starts every probe as a fresh interpreter (A/B timing, or a library that dislikes fork).
FORK_OK = sys.platform.startswith("linux") and os.environ.get("MLTRIAGE_FORKSERVER", "1") != "0"

ProgressFn = Callable[[float, float | None, str | None], Awaitable[None]]


def choose_python(python: str | None, workspace_root: Path) -> str:
    """The user's interpreter: the argument, else $MLTRIAGE_PYTHON, else the workspace's .venv, else ours."""
    for candidate, why in ((python, "the python argument"), (os.environ.get("MLTRIAGE_PYTHON"), "MLTRIAGE_PYTHON")):
        if candidate:
            found = shutil.which(candidate) or (candidate if Path(candidate).is_file() else None)
            if not found:
                raise TriageError(f"interpreter {candidate!r} from {why} was not found",
                                  "Pass the path of the python that has your torch, e.g. '.venv/bin/python'")
            return found
    venv = workspace_root / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


@dataclass
class ProbeOutcome:
    result: dict | None          # the probe's result.json, None if it never wrote one
    returncode: int | None
    timed_out: bool
    duration_s: float
    stdout_tail: str
    stderr_tail: str
    python: str
    reports: dict = field(default_factory=dict)  # script mode: <job>/reports/*.json (one per rank), by file stem
    factory_s: float = 0.0  # time the user's make_target kept the probe busy; the deadline grew by it (up to 2x)

    @property
    def crashed_by(self) -> str | None:
        if self.returncode is not None and self.returncode < 0:
            try:
                return signal.Signals(-self.returncode).name
            except ValueError:
                return f"signal {-self.returncode}"
        return None

    def failure(self) -> str | None:
        """Why there is no usable result, in words, or None when the probe answered."""
        if self.result is not None:
            return None
        if self.timed_out:
            loading = f" ({self.factory_s:.0f} s of it in make_target)" if self.factory_s >= 1 else ""
            return (f"the probe did not finish within {self.duration_s:.0f} s{loading} and was killed with its "
                    "process group")
        if self.crashed_by:
            return f"the probe process died with {self.crashed_by} (a crash in native code, e.g. a segfault)"
        return f"the probe exited with code {self.returncode} without writing a result"


def _tail(path: Path, limit: int = TAIL_BYTES) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - limit))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def new_marker() -> tuple[str, float]:
    """A marker token unique to this run, and the epoch time a process carrying it cannot have been created before
    (create_time comes from whole-second boot time plus clock ticks: allow for the rounding)."""
    return f"{os.getpid()}-{secrets.token_hex(8)}", time.time() - 2.0


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().rstrip("\n")
    except OSError:
        return ""


def marked_processes(token: str, since: float, tag: str | None = None) -> list[psutil.Process]:
    """Live processes whose environment carries MARKER=token (or, with `tag`, whose name is tag), created after
    `since` (epoch seconds).

    Daemons and `setsid` children leave the probe's process group and tree, but not the
    environment they inherited. Reading it needs the same user (or root), which the probe's are.
    A probe forked by a fork server shows the fork server's environment in /proc: it and the processes it
    forks carry its tag as their name instead (what they exec carries the token again).
    """
    found = []
    for p in psutil.process_iter(["create_time"]):
        try:
            if p.pid == os.getpid() or (p.info["create_time"] or 0.0) < since:
                continue
            if (tag and _comm(p.pid) == tag) or p.environ().get(MARKER) == token:
                found.append(p)
        except (psutil.Error, OSError):  # gone, a zombie, or another user's process
            continue
    return found


def kill_tree(proc: "subprocess.Popen | Forked", token: str | None = None, since: float = 0.0,
              tag: str | None = None) -> None:
    """SIGKILL the probe's process group, its descendants, and every process carrying its marker."""
    try:
        descendants = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        descendants = []
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if isinstance(proc, Forked) and proc.poll() is None:  # forked just now: it may not lead its group yet
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    for child in descendants:
        try:
            child.kill()
        except psutil.Error:
            pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    if token is None:
        return
    # Rounds, because a marked process may fork while we kill: stop them all, then kill them all.
    for _ in range(REAP_ROUNDS):
        left = marked_processes(token, since, tag)
        if not left:
            return
        for p in left:
            try:
                p.suspend()
            except psutil.Error:
                pass
        for p in left:
            try:
                p.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(left, timeout=1)


async def run_probe(
    probe: str,
    args: dict,
    *,
    workspace_root: Path,
    python: str | None = None,
    timeout_s: float = 120.0,
    on_progress: ProgressFn | None = None,
    env: dict[str, str] | None = None,
    command: list[str] | None = None,
) -> ProbeOutcome:
    """Run `tools/probe/<probe>` (or `command`, for script mode) and collect its result.

    `command` replaces the default `[python, probe_file, job_dir]`; the job dir is then passed in
    the environment as MLTRIAGE_JOB so injected instruments can find it.
    """
    interpreter = choose_python(python, workspace_root)
    probe_file = PROBE_DIR / probe
    if command is None and not probe_file.exists():
        raise TriageError(f"unknown probe {probe!r}", "This is a bug in mltriage; report it")
    job = Path(tempfile.mkdtemp(prefix="mltriage-"))
    try:
        (job / "args.json").write_text(json.dumps({**args, "workspace": str(workspace_root)}))
        (job / "reports").mkdir()
        token, since = new_marker()
        threads = PROBE_THREADS.get()
        share = {k: str(threads) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
                 if threads and k not in os.environ and k not in (env or {})}  # the user's own setting wins
        full_env = {**os.environ, **share, **(env or {}), "MLTRIAGE_JOB": str(job), "PYTHONUNBUFFERED": "1",
                    MARKER: token}
        argv = command or [interpreter, str(probe_file), str(job)]
        start = time.monotonic()
        forks = PROBE_FORKS.get() or SHARED_FORKS
        server = forks.ready(interpreter, full_env) if command is None and not env else None
        proc = await server.spawn(argv[1:], workspace_root, full_env, job) if server is not None else None
        tag = proc.tag if proc is not None else None
        if proc is None:
            with open(job / "stdout", "wb") as out, open(job / "stderr", "wb") as err:
                try:
                    proc = subprocess.Popen(argv, cwd=workspace_root, env=full_env, stdin=subprocess.DEVNULL,
                                            stdout=out, stderr=err, start_new_session=True)
                except OSError as e:
                    raise TriageError(f"could not start {argv[0]!r}: {e}", "Check the interpreter / command path")
        timed_out, seen = False, 0
        try:
            while proc.poll() is None:
                elapsed = time.monotonic() - start  # the factory's file is read only once past the plain timeout
                if elapsed > timeout_s and elapsed > timeout_s + min(_factory_seconds(job), timeout_s):
                    timed_out = True
                    kill_tree(proc, token, since, tag)
                    break
                seen = await _forward_progress(job / "progress.jsonl", seen, on_progress)
                await anyio.sleep(0.05)
            await _forward_progress(job / "progress.jsonl", seen, on_progress)
        except BaseException:  # cancelled request: nothing may outlive it
            kill_tree(proc, token, since, tag)
            raise
        kill_tree(proc, token, since, tag)  # stragglers: data-loader workers, setsid children, daemons
        result = None
        if (job / "result.json").exists():
            try:
                result = json.loads((job / "result.json").read_text())
            except (OSError, ValueError):
                result = None
        return ProbeOutcome(result, proc.returncode, timed_out, time.monotonic() - start,
                            _tail(job / "stdout"), _tail(job / "stderr"), interpreter, _read_reports(job / "reports"),
                            _factory_seconds(job))
    finally:
        shutil.rmtree(job, ignore_errors=True)


def _factory_seconds(job: Path) -> float:
    """Seconds the user's make_target kept this probe busy so far (the probe appends a running total each tick;
    a line still being written is skipped)."""
    try:
        lines = (job / "factory_seconds").read_text().split("\n")[:-1]
        return float(lines[-1]) if lines else 0.0
    except (OSError, ValueError):
        return 0.0


def _read_reports(folder: Path) -> dict:
    out = {}
    for f in sorted(folder.glob("*.json")):
        try:
            out[f.stem] = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
    return out


async def _forward_progress(path: Path, seen: int, on_progress: ProgressFn | None) -> int:
    if on_progress is None or not path.exists():
        return seen
    with open(path, "rb") as f:
        f.seek(seen)
        chunk = f.read()
    complete = chunk[: chunk.rfind(b"\n") + 1]
    for line in complete.splitlines():
        try:
            p = json.loads(line)
            await on_progress(float(p["progress"]), p.get("total"), p.get("message"))
        except (ValueError, KeyError, TypeError):
            continue
    return seen + len(complete)


class Forked:
    """A probe process forked by a ForkServer: the Popen calls run_probe and kill_tree use."""

    def __init__(self, pid: int, server: "ForkServer", tag: str):
        self.pid, self.server, self.tag, self.returncode = pid, server, tag, None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.server.pump()
            self.returncode = self.server.exits.pop(self.pid, None)
            if self.returncode is None and self.server.dead and not psutil.pid_exists(self.pid):
                self.returncode = 1  # the fork server died before it could report this child
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        end = time.monotonic() + (timeout if timeout is not None else 1e9)
        while self.poll() is None:
            if time.monotonic() > end:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0)
            time.sleep(0.02)
        return self.returncode


class ForkServer:
    """tools/probe/mltriage_forkserver.py in one interpreter: it imports torch once and forks each probe."""

    def __init__(self, interpreter: str, env: dict[str, str], idle_s: float | None = None):
        self.token, self.since = new_marker()
        idle = ["--idle", str(idle_s)] if idle_s else []
        self.proc = subprocess.Popen(
            [interpreter, str(PROBE_DIR / "mltriage_forkserver.py"), *idle], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, start_new_session=True,
            env={**{k: v for k, v in env.items() if k not in (MARKER, "MLTRIAGE_JOB")}, MARKER: self.token})
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.buf, self.up, self.dead, self.torch = b"", False, False, None
        self.pids: list[int] = []
        self.exits: dict[int, int] = {}
        self.lock = anyio.Lock()

    def pump(self) -> None:
        """Read what the fork server has said so far (never blocks)."""
        while not self.dead:
            try:
                chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
            except BlockingIOError:
                break
            except OSError:
                chunk = b""
            if not chunk:
                self.dead = True
                break
            self.buf += chunk
        while b"\n" in self.buf:
            line, self.buf = self.buf.split(b"\n", 1)
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if msg.get("ready"):
                self.up, self.torch = True, _stamp(msg.get("torch"))
            elif "pid" in msg:
                self.pids.append(int(msg["pid"]))
            elif "exit" in msg:
                self.exits[int(msg["exit"])] = int(msg["code"])

    async def spawn(self, argv: list[str], cwd: Path, env: dict[str, str], job: Path) -> Forked | None:
        """Fork one probe; None when the fork server is gone (the caller starts a fresh interpreter instead)."""
        async with self.lock:
            tag = "mlt-" + secrets.token_hex(5)
            request = {"argv": argv, "cwd": str(cwd), "env": env, "stdout": str(job / "stdout"),
                       "stderr": str(job / "stderr"), "tag": tag}
            try:
                self.proc.stdin.write((json.dumps(request) + "\n").encode())
                self.proc.stdin.flush()
            except OSError:
                self.dead = True
                return None
            for _ in range(200):  # the reply comes within milliseconds; 10 s means the server is stuck
                self.pump()
                if self.pids or self.dead:
                    break
                await anyio.sleep(0.05)
            return Forked(self.pids.pop(0), self, tag) if self.pids else None

    def close(self) -> None:
        """End the fork server, its children and every process they started."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        kill_tree(self.proc, self.token, self.since)
        self.proc.stdout.close()


def _stamp(path: str | None) -> tuple | None:
    """When the torch a fork server imported was last installed: a reinstall makes that fork server stale."""
    try:
        return (path, os.stat(path).st_mtime_ns) if path else None
    except OSError:
        return (path, None)


class ForkServers:
    """Fork servers started on first use, one per interpreter and startup environment.

    SHARED_FORKS (below) serves every probe for the life of the server process; a `with ForkServers():` block
    gives its probes fork servers of their own that end with the block.
    """

    MAX = 2  # a different interpreter or PYTHONPATH per call (tests) must not pile up copies of torch

    def __init__(self, idle_s: float | None = None):
        self.servers: dict[tuple, ForkServer] = {}
        self.idle_s = idle_s

    def ready(self, interpreter: str, env: dict[str, str]) -> ForkServer | None:
        """The fork server for this interpreter and environment once it has imported torch; until then None
        (the caller starts a fresh process)."""
        if not FORK_OK:
            return None
        key = (interpreter, tuple(sorted((k, v) for k, v in env.items()
                                         if k.startswith(STARTUP_ENV) and k not in PER_PROBE_ENV)))
        server = self.servers.get(key)
        if server is not None:
            server.pump()
            if server.dead or (server.up and server.torch is not None and _stamp(server.torch[0]) != server.torch):
                self.servers.pop(key).close()
            else:
                return server if server.up else None
        while len(self.servers) >= self.MAX:
            self.servers.pop(next(iter(self.servers))).close()
        try:  # a new fork server is still importing torch: this probe starts fresh
            self.servers[key] = ForkServer(interpreter, env, self.idle_s)
        except OSError:
            pass
        return None

    def close(self) -> None:
        while self.servers:
            self.servers.popitem()[1].close()

    def __enter__(self) -> "ForkServers":
        self.token = PROBE_FORKS.set(self)
        return self

    def __exit__(self, *exc) -> None:
        PROBE_FORKS.reset(self.token)
        self.close()


SHARED_FORKS = ForkServers(idle_s=FORK_IDLE_S)
atexit.register(SHARED_FORKS.close)
