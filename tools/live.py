"""Live runs: launch the user's training command in the background with the live instrument injected,
keep a registry of runs under `<workspace>/.mltriage/runs/<id>/`, read their state, talk to their
control sockets with short timeouts, and apply allow-listed actions at step boundaries.

The instrument itself is `tools/probe/live/mltriage_live.py` (it runs in the user's interpreter);
this module never imports torch. A run is started in its own session behind a tiny `sh` that records
the exit code, so it outlives the MCP server and its status is known even after the server restarts.
"""

import fcntl
import json
import math
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Literal

import anyio
import psutil
from pydantic import BaseModel, Field

from tools.errors import TriageError
from tools.probe_runner import choose_python
from tools import flight_recorder
from tools.flight_recorder import FlightRecorder
from tools.report import Evidence, Finding, Num, Report, is_finite, mark_nonfinite
from tools.stragglers import RankTiming, rank_timings, straggler_finding
from tools.workspace import Workspace

LIVE_DIR = Path(__file__).resolve().parent / "probe" / "live"
RUNS = Path(".mltriage") / "runs"
ASK_TIMEOUT_S = 1.0
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,100}$")
LIBRARY_PATH = re.compile(r"(/site-packages/|/dist-packages/|/lib/python3\.\d+/|^<|/mltriage_live\.py$)")
Action = Literal["scale_lr", "set_grad_clip", "save_checkpoint", "stop"]
What = Literal["progress", "stack", "memory", "modules", "optimizer", "grads", "ranks"]
ProgressFn = Callable[[float, float | None, str | None], Awaitable[None]]

_children: dict[int, subprocess.Popen] = {}  # reaped on every status check while this server lives


def clean(obj: Any) -> Any:
    """JSON-safe: NaN/Inf anywhere in a nested value become the "nan"/"inf"/"-inf" markers."""
    if isinstance(obj, dict):
        return {str(k): clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean(v) for v in obj]
    return mark_nonfinite(obj)


# ---- reports ---------------------------------------------------------------------------------------

class RunInfo(BaseModel):
    id: str
    name: str
    status: Literal["starting", "running", "finished", "failed", "stopped", "lost"]
    command: list[str]
    log_path: str
    pid: int | None = Field(None, description="process-group leader (a small sh that records the exit code)")
    created: str
    age_s: float
    ranks: int = Field(0, description="instrumented processes that reported (torchrun: one per rank)")
    step: int | None = Field(None, description="optimizer steps done (the slowest rank)")
    last_loss: Num = None
    steps_per_s: float | None = None
    since_last_step_s: float | None = None
    exit_code: int | None = None
    actions: int = 0


class RunStarted(Report):
    run: RunInfo

    def headline(self) -> str:
        return (f"started run {self.run.id} (pid {self.run.pid}), output -> {self.run.log_path}. "
                f"Watch it with live_status(run='{self.run.id}').")


class RunList(Report):
    runs: list[RunInfo] = Field(default_factory=list)

    def headline(self) -> str:
        if not self.runs:
            return "no runs in this workspace (start one with run_training)"
        rows = [f"{r.id}: {r.status}, step {r.step if r.step is not None else '-'}, loss "
                f"{r.last_loss if r.last_loss is not None else '-'}, age {r.age_s:.0f} s" for r in self.runs]
        return "\n".join(rows)


class StepPoint(BaseModel):
    step: int
    seconds: float | None = None
    loss: Num = None
    grad_norm: Num = None


class RankProgress(BaseModel):
    rank: int
    pid: int | None = None
    step: int
    steps_per_s: float | None = None
    since_last_step_s: float | None = Field(None, description="a growing value with a frozen step is the hang signal")
    last_loss: Num = None
    last_grad_norm: Num = None
    in_backward_s: float | None = None
    grad_clip: float | None = None
    recent: list[StepPoint] = Field(default_factory=list)
    instrument_errors: dict[str, str] = Field(default_factory=dict)


class Frame(BaseModel):
    file: str
    line: int | None = None
    func: str
    code: str = ""
    locals: dict[str, str] | None = Field(None, description="py-spy --locals: each local's repr (hang analysis)")

    def __str__(self) -> str:
        return f"{self.file}:{self.line} in {self.func}" + (f" ({self.code})" if self.code else "")


class ThreadStack(BaseModel):
    rank: int | None = None
    pid: int | None = None
    thread: str
    main: bool = False
    frames: list[Frame] = Field(default_factory=list, description="innermost first")
    source: str = Field("control socket", description="control socket, or py-spy")


class MemoryTrend(BaseModel):
    rank: int
    kind: str = Field(description="'rss' on CPU, 'cuda allocated' on GPU")
    steps: int
    first_bytes: int | None = None
    last_bytes: int | None = None
    peak_bytes: int | None = None
    reserved_bytes: int | None = None
    slope_bytes_per_step: float | None = None
    growing: bool = False
    growth_since_step: int | None = None
    samples: list[tuple[int, int]] = Field(default_factory=list, description="(step, bytes), at most 40")


class ModuleTime(BaseModel):
    module: str
    type: str
    calls_per_step: float
    forward_ms: float = Field(description="self time per step, children excluded")
    backward_ms: float = Field(description="per step, attributed by when the module's output gradient arrives")
    share: float = Field(description="(forward + backward) / step time")


class OptimizerGroup(BaseModel):
    n_params: int
    lr: float | None = None
    weight_decay: float | None = None
    momentum: float | None = None
    betas: list[float] | None = None
    eps: float | None = None


class OptimizerInfo(BaseModel):
    rank: int
    type: str
    groups: list[OptimizerGroup]
    state_step: float | None = None
    schedulers: list[str] = Field(default_factory=list)
    grad_clip: float | None = None


class LayerGrad(BaseModel):
    module: str
    grad_norm: Num
    weight_norm: Num
    finite: bool
    n_tensors: int


class RankState(BaseModel):
    rank: int
    pid: int | None = None
    answering: bool
    step: int | None = None
    since_last_step_s: float | None = None
    where: str | None = Field(None, description="innermost frame of the main thread")
    user_frame: str | None = Field(None, description="innermost frame of the main thread in the user's code")
    inside_torch: bool | None = Field(None, description="main thread is inside torch (waiting on a collective, backward)")
    collectives: int | None = Field(None, description="torch.distributed collectives this rank called from Python")
    verdict: str = ""


class LiveStatus(Report):
    run: RunInfo
    progress: list[RankProgress] = Field(default_factory=list)
    stacks: list[ThreadStack] = Field(default_factory=list)
    memory: list[MemoryTrend] = Field(default_factory=list)
    modules: list[ModuleTime] = Field(default_factory=list)
    modules_step_ms: float | None = None
    optimizer: list[OptimizerInfo] = Field(default_factory=list)
    grads: list[LayerGrad] = Field(default_factory=list)
    global_grad_norm: Num = None
    params_without_grad: list[str] = Field(default_factory=list)
    ranks: list[RankState] = Field(default_factory=list)
    rank_timing: list[RankTiming] = Field(default_factory=list, description="per rank: step, busy, data-wait and "
                                          "compute time (medians), memory; the straggler has the largest busy time")
    flight_recorder: FlightRecorder | None = Field(None, description="ranks: torch's analysis of every rank's "
                                                   "collective flight recorder, when TORCH_FR_BUFFER_SIZE is set")
    unavailable: dict[str, str] = Field(default_factory=dict, description="what could not be read, and why")

    def headline(self) -> str:
        r = self.run
        lines = [f"run {r.id}: {r.status}" + (f", step {r.step}" if r.step is not None else "")
                 + (f", exit code {r.exit_code}" if r.exit_code is not None else "")]
        for p in self.progress:
            since = f"{p.since_last_step_s:.1f} s ago" if p.since_last_step_s is not None else "never"
            rate = f"{p.steps_per_s:.2f} steps/s" if p.steps_per_s else "rate unknown"
            lines.append(f"rank {p.rank}: step {p.step} ({rate}), last step {since}, "
                         f"loss {p.last_loss}, grad norm {p.last_grad_norm}")
        for s in self.stacks:
            if s.main and s.frames:
                lines.append(f"rank {s.rank} main thread ({s.source}), innermost first:")
                lines += [f"  {f}" for f in s.frames[:8]]
        for m in self.memory:
            trend = (f"growing {m.slope_bytes_per_step / 2**20:.2f} MiB/step since step {m.growth_since_step}"
                     if m.growing else "flat")
            lines.append(f"rank {m.rank} memory ({m.kind}): {_mib(m.first_bytes)} -> {_mib(m.last_bytes)} "
                         f"over {m.steps} steps, {trend}")
        if self.modules:
            lines.append(f"slowest modules (step {self.modules_step_ms:.1f} ms):")
            lines += [f"  {m.module} ({m.type}): fwd {m.forward_ms:.2f} ms + bwd {m.backward_ms:.2f} ms "
                      f"= {m.share:.0%}" for m in self.modules[:8]]
        for o in self.optimizer:
            lines.append(f"rank {o.rank} {o.type}: lr " + ", ".join(f"{g.lr:.4g}" for g in o.groups if g.lr is not None)
                         + (f", grad clip {o.grad_clip}" if o.grad_clip else ""))
        if self.grads:
            lines.append(f"global grad norm {self.global_grad_norm}; per layer: " + ", ".join(
                f"{g.module}={g.grad_norm if isinstance(g.grad_norm, str) else f'{g.grad_norm:.3g}'}"
                for g in self.grads[:12]))
        lines += [f"rank {r.rank}: {r.verdict}" for r in self.ranks]
        lines += [f"rank {t.rank}: busy {t.busy_ms:.1f} ms/step ({t.ratio_to_median}x median), data {t.data_ms:.1f} ms, "
                  f"compute {t.compute_ms:.1f} ms, step {t.step_ms:.1f} ms, rss {t.rss_mib} MiB" for t in self.rank_timing]
        if self.flight_recorder is not None:
            fr = self.flight_recorder
            lines += [f"flight recorder: collective #{m.seq} {m.op} {m.input_sizes} on ranks {m.ranks}; "
                      + "; ".join(f"{k} on ranks {v}" for k, v in m.other.items()) for m in fr.mismatches[:1]]
            lines += [f"flight recorder: {fr.why_not}"] if fr.why_not else []
        lines += [f"{k}: unavailable - {v}" for k, v in self.unavailable.items()]
        return "\n".join(lines)


class RankActionResult(BaseModel):
    rank: int
    applied: bool
    applied_at_step: int | None = None
    before: Any = None
    after: Any = None
    error: str | None = None


class LiveActionReport(Report):
    run: str
    action: Action
    args: dict[str, Any] = Field(default_factory=dict)
    applied: bool
    results: list[RankActionResult] = Field(default_factory=list)
    note: str = ""

    def headline(self) -> str:
        head = f"{self.action}{self.args or ''} on run {self.run}: " + ("applied" if self.applied else "NOT applied")
        lines = [head]
        for r in self.results:
            lines.append(f"  rank {r.rank}: " + (f"at step {r.applied_at_step}: {r.before} -> {r.after}"
                                                  if r.applied else f"not applied ({r.error or 'pending'})"))
        if self.note:
            lines.append(self.note)
        return "\n".join(lines)


def _mib(b: int | None) -> str:
    return "?" if b is None else f"{b / 2**20:.1f} MiB"


# ---- the run registry ------------------------------------------------------------------------------

def runs_dir(root: Path, create: bool = False) -> Path:
    """The workspace's run registry, symlinks resolved; a `.mltriage` or `runs` link leading out is refused."""
    ws = Workspace(root)
    return ws.directory(RUNS, create=True, mode=0o700) if create else ws.write_path(RUNS)


def _run_dirs(base: Path) -> list[Path]:
    """The run directories we made: real directories, never links (which could lead out of the workspace)."""
    if not base.is_dir():
        return []
    return [d for d in base.iterdir() if not d.is_symlink() and d.is_dir() and (d / "state.json").is_file()]


def run_dir(root: Path, run: str) -> Path:
    """The run's directory inside this workspace; ids are plain names, never paths."""
    if not RUN_ID.match(run or ""):
        raise TriageError(f"{run!r} is not a run id", "Use an id from list_runs, e.g. 'train-0510-142301-ab12'")
    base = runs_dir(root)
    d = base / run
    if d.is_symlink() or not (d / "state.json").is_file():
        known = ", ".join(sorted(p.name for p in _run_dirs(base))[-5:])
        raise TriageError(f"no run {run!r} in this workspace ({root})",
                          "Call list_runs for the ids" + (f" (recent: {known})" if known else ""))
    return d


def read_state(d: Path) -> dict:
    try:
        return json.loads((d / "state.json").read_text())
    except (OSError, ValueError) as e:
        raise TriageError(f"run state {d / 'state.json'} is unreadable: {e}", "The run directory was damaged")


def update_state(d: Path, change: Callable[[dict], None]) -> dict:
    """Read-modify-write of state.json under a file lock (several server processes may share a run)."""
    with open(d / "state.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = read_state(d)
        change(state)
        tmp = d / f"state.json.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(clean(state), indent=1))
        os.replace(tmp, d / "state.json")
        return state


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-")[:32] or "run"


def launch(root: Path, command: list[str] | str, log_path: Path, name: str | None = None,
           python: str | None = None) -> RunStarted:
    """Start `command` in the background (own session, cwd = workspace) with the live instrument."""
    try:
        argv = shlex.split(command) if isinstance(command, str) else [str(a) for a in command]
    except ValueError as e:  # an unclosed quote or a trailing backslash
        raise TriageError(f"cannot parse the command {command!r}: {e}",
                          "Close the quote, or pass the command as a list, e.g. ['python', 'train.py', '--lr', '0.1']") from None
    if not argv:
        raise TriageError("empty command", "Pass the training command, e.g. ['python', 'train.py']")
    if argv[0] in ("python", "python3"):  # the user's interpreter, as every probe uses
        argv[0] = choose_python(python, root)
    exe = shutil.which(argv[0], path=os.environ.get("PATH")) if os.sep not in argv[0] else argv[0]
    if exe is None or not os.path.isfile(root / exe if not os.path.isabs(exe) else exe):
        raise TriageError(f"{argv[0]!r} was not found", "Give the interpreter or launcher by path, e.g. '.venv/bin/python'")
    ws = Workspace(root)
    # the log first: a bad log path must fail before a run directory exists to be left behind
    log_path = ws.write_path(log_path)
    if log_path.is_dir():
        raise TriageError(f"log_path {str(log_path.relative_to(ws.root))!r} is a directory",
                          "Pass a file path for the run's output, e.g. 'logs/train.log'")
    ws.directory(log_path.parent, create=True)
    base = runs_dir(root, create=True)
    os.chmod(base, 0o700)  # the control sockets inside are only for this user
    script = next((a for a in argv[1:] if a.endswith(".py")), argv[0])
    run_id = f"{_slug(name or Path(script).stem)}-{time.strftime('%m%d-%H%M%S')}-{secrets.token_hex(2)}"
    d = base / run_id
    d.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLTRIAGE_LIVE")}
    env.update(MLTRIAGE_LIVE_DIR=str(d), MLTRIAGE_WORKSPACE=str(root), PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join(p for p in (str(LIVE_DIR), os.environ.get("PYTHONPATH")) if p))
    # the sh waits for the command and records its exit code; `trap :` (not ignore) so the command
    # still gets default signal handling, and sh survives a SIGTERM to the group to write the code
    wrapper = ["/bin/sh", "-c", 'trap : TERM HUP INT; "$@"; c=$?; echo $c > "$0.tmp"; mv "$0.tmp" "$0"',
               str(d / "exit_code"), *argv]
    state = {"id": run_id, "run_dir": str(d), "name": name or Path(script).stem, "command": argv, "log_path": str(log_path),
             "cwd": str(root), "created": time.time(), "status": "starting", "actions": []}
    try:
        (d / "state.json").write_text(json.dumps(state, indent=1))
        with open(log_path, "ab") as log:
            log.write(f"[mltriage] run {run_id} started {time.strftime('%Y-%m-%d %H:%M:%S')}: {shlex.join(argv)}\n".encode())
            log.flush()
            try:
                proc = subprocess.Popen(wrapper, cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                        stderr=subprocess.STDOUT, start_new_session=True)
            except OSError as e:
                raise TriageError(f"could not start {argv[0]!r}: {e}", "Check the command")
    except BaseException as e:  # no run started: leave no run behind
        shutil.rmtree(d, ignore_errors=True)
        if isinstance(e, OSError):
            raise TriageError(f"could not write the run's files ({e.strerror}: {e.filename})",
                              "Check log_path and the workspace's permissions") from e
        raise
    _children[proc.pid] = proc
    try:
        created = psutil.Process(proc.pid).create_time()
    except psutil.Error:
        created = None
    update_state(d, lambda s: s.update(pid=proc.pid, pid_created=created, status="running"))
    return RunStarted(run=run_info(root, d))


def _leader_alive(state: dict) -> bool:
    pid = state.get("pid")
    if not pid:
        return False
    if pid in _children and _children[pid].poll() is not None:
        _children.pop(pid, None)
        return False
    try:
        p = psutil.Process(pid)
        if state.get("pid_created") and abs(p.create_time() - state["pid_created"]) > 0.05:
            return False  # the pid was reused by an unrelated process
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def session_processes(state: dict) -> list[psutil.Process]:
    """Every live process of the run: those in its session (the leader's sid), and those that left it
    (torchrun starts each worker in a session of its own) but still carry the run's MLTRIAGE_LIVE_DIR."""
    sid, run_dir, found = state.get("pid"), state.get("run_dir"), []
    if not sid:
        return found
    me = os.getpid()
    for p in psutil.process_iter(["pid", "status", "uids"]):
        try:
            if p.info["status"] == psutil.STATUS_ZOMBIE or p.pid == me:
                continue
            if os.getsid(p.pid) == sid:
                found.append(p)
            elif run_dir and p.info["uids"] and p.info["uids"].real == os.getuid() \
                    and p.environ().get("MLTRIAGE_LIVE_DIR") == run_dir:
                found.append(p)
        except (OSError, psutil.Error):
            continue
    return found


def rank_statuses(d: Path) -> dict[int, dict]:
    out = {}
    for f in d.glob("status-*.json"):
        try:
            out[int(f.stem.split("-", 1)[1])] = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
    return dict(sorted(out.items()))


def _exit_code(d: Path) -> int | None:
    try:
        return int((d / "exit_code").read_text().strip())
    except (OSError, ValueError):
        return None


def run_info(root: Path, d: Path) -> RunInfo:
    state = read_state(d)
    statuses = rank_statuses(d)
    code = _exit_code(d)
    alive = _leader_alive(state)
    if alive:
        status = "running" if statuses else "starting"
    elif state.get("stopped"):
        status = "stopped"
    elif code is not None:
        status = "finished" if code == 0 else "failed"
    else:
        status = "lost"
    steps = [s.get("step") for s in statuses.values() if s.get("step") is not None]
    first = statuses.get(0) or next(iter(statuses.values()), {})
    last_wall = [s.get("last_step_wall") for s in statuses.values() if s.get("last_step_wall")]
    try:
        log = str(Path(state["log_path"]).relative_to(root))
    except ValueError:
        log = state["log_path"]
    return RunInfo(
        id=state["id"], name=state.get("name", ""), status=status, command=state.get("command", []), log_path=log,
        pid=state.get("pid"), created=time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(state["created"])),
        age_s=round(time.time() - state["created"], 1), ranks=len(statuses), step=min(steps) if steps else None,
        last_loss=first.get("last_loss"), steps_per_s=first.get("steps_per_s"),
        since_last_step_s=round(time.time() - max(last_wall), 2) if last_wall and alive else None,
        exit_code=code, actions=len(state.get("actions", [])))


def list_runs(root: Path) -> RunList:
    """Every run of this workspace, newest first; reads files only (no socket), so it is always quick."""
    runs = []
    for d in _run_dirs(runs_dir(root)):
        try:
            runs.append(run_info(root, d))
        except TriageError:
            continue
    runs.sort(key=lambda r: r.age_s)  # `created` is whole seconds: two runs started in one second would tie
    return RunList(runs=runs)


# ---- the control channel ---------------------------------------------------------------------------

class ChannelError(Exception):
    """The run could not be asked: why, in words the agent can act on."""


def rank_sockets(d: Path) -> dict[int, Path]:
    out = {}
    for f in d.glob("ctl-*.sock"):
        try:
            out[int(f.stem.split("-", 1)[1])] = f
        except ValueError:
            continue
    return dict(sorted(out.items()))


def ask(sock: Path, request: dict, timeout: float = ASK_TIMEOUT_S) -> dict:
    """One request to a run's control socket; answers or raises ChannelError within `timeout`."""
    try:
        st = os.lstat(sock)
    except FileNotFoundError:
        raise ChannelError("no control socket (the process has not started its instrument, or has exited)")
    if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.getuid():
        raise ChannelError(f"{sock} is not a socket owned by this user; refusing to talk to it")
    path, fd = str(sock), None
    if len(os.fsencode(path)) >= 100 and os.path.isdir("/proc/self/fd"):  # sun_path is ~107 bytes
        fd = os.open(sock.parent, os.O_RDONLY)
        path = f"/proc/self/fd/{fd}/{sock.name}"
    deadline = time.monotonic() + timeout
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(timeout)
        try:
            s.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):
            raise ChannelError("stale control socket: the process that opened it is gone")
        s.sendall((json.dumps(request) + "\n").encode())
        data = b""
        while not data.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout
            s.settimeout(left)
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            data += chunk
            if len(data) > 32 << 20:
                raise ChannelError("reply larger than 32 MiB")
    except (socket.timeout, TimeoutError):
        raise ChannelError(f"no answer within {timeout:.1f} s (the process may hold the GIL in native code, "
                           "be stopped, or be swapping); stack falls back to py-spy")
    except OSError as e:
        raise ChannelError(f"control socket error: {e}")
    finally:
        s.close()
        if fd is not None:
            os.close(fd)
    try:
        reply = json.loads(data)
    except ValueError:
        raise ChannelError("the run closed the connection without an answer (exiting?)")
    if not reply.get("ok"):
        raise ChannelError(reply.get("error", "request refused"))
    return reply


def py_spy_exe() -> str | None:
    here = Path(sys.executable).parent / "py-spy"
    return shutil.which("py-spy") or (str(here) if here.exists() else None)


def py_spy_stacks(pid: int, rank: int | None = None, with_locals: bool = False, timeout: float = 3.0) -> list[ThreadStack]:
    """`py-spy dump` of a process we cannot ask (not launched by us, or not answering)."""
    exe = py_spy_exe()
    if exe is None:
        raise ChannelError("py-spy is not installed (pip install py-spy) and the process cannot be asked directly")
    cmd = [exe, "dump", "--pid", str(pid), "--json", "--nonblocking"] + (["--locals"] if with_locals else [])
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ChannelError(f"py-spy dump did not finish within {timeout:.0f} s")
    if out.returncode != 0:
        raise ChannelError(f"py-spy dump failed: {(out.stderr or out.stdout).strip()[-400:]} "
                           "(attaching needs ptrace permission: same user, and kernel.yama.ptrace_scope 0, or root)")
    return parse_py_spy(json.loads(out.stdout or "[]"), pid, rank)


def parse_py_spy(threads: list[dict], pid: int | None, rank: int | None = None) -> list[ThreadStack]:
    """py-spy's `dump --json` (optionally with --locals) as our thread stacks, main thread marked."""
    stacks = []
    for t in threads:
        frames = [Frame(file=f.get("filename", "?"), line=f.get("line"), func=f.get("name", "?"),
                        locals={v["name"]: str(v.get("repr"))[:80] for v in f.get("locals") or [] if "name" in v} or None)
                  for f in t.get("frames", [])]
        name = t.get("thread_name") or f"thread {t.get('thread_id')}"
        stacks.append(ThreadStack(rank=rank, pid=pid, thread=name, main=name == "MainThread",
                                  frames=frames, source="py-spy"))
    if stacks and not any(s.main for s in stacks):
        stacks[0].main = True  # py-spy lists the main thread first
    return stacks


# ---- analysis (pure functions over what the instrument reported) -----------------------------------

def _user_frame(frames: list[Frame]) -> Frame | None:
    return next((f for f in frames if not LIBRARY_PATH.search(f.file)), None)


def _inside_torch(frames: list[Frame]) -> bool:
    return bool(frames) and "/torch/" in frames[0].file


def blocking_frames(stack: ThreadStack) -> tuple[Frame | None, Frame | None]:
    """(innermost frame, innermost frame in the user's own code) of one thread."""
    return (stack.frames[0] if stack.frames else None), _user_frame(stack.frames)


def hang_finding(p: RankProgress, main: ThreadStack | None) -> Finding | None:
    typical = sorted(x.seconds for x in p.recent if x.seconds)
    typical_s = typical[len(typical) // 2] if typical else None
    since = p.since_last_step_s
    if since is None or typical_s is None:
        return None
    threshold = max(2.0, 20 * typical_s)
    if since < threshold:
        return None
    evidence = [Evidence(what="seconds since the last optimizer step", value=round(since, 2), source=f"rank {p.rank}"),
                Evidence(what="typical step time (s)", value=round(typical_s, 4), source="last steps"),
                Evidence(what="last step", value=p.step, source=f"rank {p.rank}")]
    summary = f"rank {p.rank} made no optimizer step for {since:.1f} s (typical step {typical_s * 1000:.0f} ms)"
    fix = ("Take the stack (live_status what=['stack']) and fix what the main thread waits for.")
    location, confidence = None, 0.6 if since < 50 * typical_s else 0.75
    if main is not None and main.frames:
        inner, user = blocking_frames(main)
        in_loader = any("torch/utils/data" in f.file for f in main.frames)
        evidence.append(Evidence(what="main thread innermost frame", value=str(inner), source=main.source))
        if user is not None:
            location = f"{user.file}:{user.line}"
            evidence.append(Evidence(what="innermost frame in your code", value=str(user), source=main.source))
        summary += f"; the main thread is blocked at {user or inner}" + (" inside the DataLoader" if in_loader else "")
        confidence = 0.9
        fix = (f"Fix what {user or inner} waits for" + (
            ": the data pipeline never yields the next batch (a dead producer, a lock, a stuck worker or a "
            "network filesystem); give DataLoader a timeout= so a stall raises instead of hanging" if in_loader else
            "; if it is a collective (all_reduce/barrier) look for the rank that is not in it (what=['ranks'])"))
    elif p.in_backward_s and p.in_backward_s > threshold:
        summary += f", stuck inside backward for {p.in_backward_s:.1f} s"
    return Finding(failure_mode="hang", confidence=confidence, summary=summary, evidence=evidence, fix=fix,
                   location=location)


def memory_trend(rank: int, reply: dict) -> MemoryTrend:
    cuda = reply.get("device", "cpu") != "cpu"
    values = reply["allocated"] if cuda else reply["rss"]
    pts = [(s, v) for s, v in zip(reply["steps"], values) if v is not None]
    trend = MemoryTrend(rank=rank, kind="cuda allocated" if cuda else "rss", steps=len(pts))
    if not pts:
        return trend
    trend.first_bytes, trend.last_bytes, trend.peak_bytes = pts[0][1], pts[-1][1], max(v for _, v in pts)
    if cuda and reply.get("reserved"):
        trend.reserved_bytes = reply["reserved"][-1]
    every = max(1, len(pts) // 40)
    trend.samples = pts[::every][-40:]
    window = pts[2:] if len(pts) > 10 else pts  # the first steps allocate optimizer state and caches
    if len(window) < 6:
        return trend
    xs, ys = [float(s) for s, _ in window], [float(v) for _, v in window]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    if sxx == 0:
        return trend
    slope = sxy / sxx
    r = sxy / math.sqrt(sxx * syy) if syy > 0 else 0.0
    trend.slope_bytes_per_step = slope
    growth = ys[-1] - ys[0]
    trend.growing = r > 0.9 and slope > 0 and growth > max(32 * 2**20, 0.1 * ys[0])
    if trend.growing:
        i = len(window) - 1
        while i > 0 and window[i - 1][1] <= window[i][1] + max(2 * 2**20, 0.02 * window[i][1]):
            i -= 1
        trend.growth_since_step = window[i][0]
    return trend


def memory_finding(m: MemoryTrend) -> Finding | None:
    if not m.growing:
        return None
    per_step = m.slope_bytes_per_step or 0.0
    evidence = [Evidence(what=f"{m.kind} growth per step (MiB)", value=round(per_step / 2**20, 3), source=f"rank {m.rank}"),
                Evidence(what=f"{m.kind} first -> last (MiB)", value=f"{_mib(m.first_bytes)} -> {_mib(m.last_bytes)}",
                         source=f"{m.steps} steps"),
                Evidence(what="growth since step", value=m.growth_since_step, source="per-step memory")]
    eta = ""
    if m.kind == "rss" and per_step > 0:
        left = psutil.virtual_memory().available
        eta = f"; at this rate the machine's free memory ({_mib(left)}) is gone in ~{left / per_step:.0f} steps"
        evidence.append(Evidence(what="steps until host memory is exhausted", value=round(left / per_step),
                                 source="psutil available memory"))
    return Finding(
        failure_mode="oom", confidence=0.85,
        summary=f"memory grows {per_step / 2**20:.2f} MiB per step since step {m.growth_since_step}{eta}",
        evidence=evidence,
        fix=("Something keeps tensors alive across steps: a loss or output kept without .item()/.detach() "
             "(losses.append(loss), total += loss), backward(retain_graph=True), a growing cache or list of "
             "batches. Find who holds them and store Python floats or detached copies."))


def module_times(reply: dict) -> tuple[list[ModuleTime], float]:
    step_ms = float(reply.get("step_ms") or 0.0)
    rows = [ModuleTime(module=r["module"], type=r["type"], calls_per_step=r["calls_per_step"],
                       forward_ms=round(r["forward_ms"], 3), backward_ms=round(r["backward_ms"], 3),
                       share=round((r["forward_ms"] + r["backward_ms"]) / step_ms, 4) if step_ms else 0.0)
            for r in reply.get("modules", [])]
    return rows, step_ms


def module_finding(rows: list[ModuleTime], step_ms: float) -> Finding | None:
    if not rows or rows[0].share < 0.3:
        return None
    top = rows[0]
    nxt = rows[1] if len(rows) > 1 else None
    return Finding(
        failure_mode="slow_throughput", confidence=min(0.9, 0.4 + top.share / 2),
        summary=f"module {top.module} ({top.type}) takes {top.share:.0%} of each {step_ms:.1f} ms step",
        location=top.module,
        evidence=[Evidence(what=f"{top.module} forward self time (ms/step)", value=top.forward_ms, source="live modules"),
                  Evidence(what=f"{top.module} backward time (ms/step)", value=top.backward_ms, source="live modules"),
                  Evidence(what="step time (ms)", value=round(step_ms, 2), source="live modules")]
        + ([Evidence(what=f"next slowest: {nxt.module} (ms/step)", value=round(nxt.forward_ms + nxt.backward_ms, 3),
                     source="live modules")] if nxt else []),
        fix=(f"Profile {top.module}'s forward: look for host syncs (.item(), .cpu(), print of a tensor), Python "
             "loops over tensor elements, sleeps or I/O, and ops falling back to the CPU."))


def layer_grads(reply: dict) -> tuple[list[LayerGrad], Any]:
    layers: dict[str, list] = {}
    total = 0.0
    for p in reply.get("params", []):
        mod = p["name"].rsplit(".", 1)[0] if "." in p["name"] else p["name"]
        g, w = p["norm"], p["weight_norm"]
        acc = layers.setdefault(mod, [0.0, 0.0, True, 0])
        acc[0] += g * g if is_finite(g) else math.inf
        acc[1] += w * w if is_finite(w) else math.inf
        acc[2] = acc[2] and is_finite(g)
        acc[3] += 1
        total += g * g if is_finite(g) else math.inf
    rows = [LayerGrad(module=m, grad_norm=math.sqrt(a[0]) if a[2] else math.nan, weight_norm=math.sqrt(a[1]),
                      finite=a[2], n_tensors=a[3]) for m, a in layers.items()]
    return rows, (math.sqrt(total) if math.isfinite(total) else math.nan) if reply.get("params") else None


def grad_findings(rows: list[LayerGrad], total: Any, no_grad: list[str]) -> list[Finding]:
    out = []
    bad = [r.module for r in rows if not r.finite]
    if bad:
        out.append(Finding(failure_mode="nan_inf", confidence=0.9, location=bad[0],
                           summary=f"non-finite gradients in {len(bad)} layer(s): {', '.join(bad[:5])}",
                           evidence=[Evidence(what="layers with NaN/Inf gradient", value=len(bad), source="live grads")],
                           fix="Run nan_hook_run on the same model to find the op that first produces a NaN/Inf."))
    elif is_finite(total) and total > 10:
        out.append(Finding(failure_mode="exploding_gradients", confidence=0.5,
                           summary=f"global gradient norm {total:.3g} (healthy range 0.1-10)",
                           evidence=[Evidence(what="global grad norm (before any clipping of ours)", value=total,
                                              source="live grads")],
                           fix="Look at which layer dominates the norm; check the LR and the loss scale before clipping."))
    if no_grad:
        out.append(Finding(failure_mode="broken_graph", confidence=0.4, location=no_grad[0],
                           summary=f"{len(no_grad)} optimizer parameter(s) had no gradient at the last step",
                           evidence=[Evidence(what="parameters without .grad", value=", ".join(no_grad[:5]),
                                              source="live grads")],
                           fix="Check that the loss depends on them (no detach/no_grad on their path), or remove them "
                               "from the optimizer if they are frozen on purpose."))
    return out


def rank_states(progress: dict[int, dict | str], stacks: dict[int, ThreadStack | None]) -> tuple[list[RankState], Finding | None]:
    """Who is behind: a lower step, or stalled in its own code while the others wait inside torch."""
    states = []
    for rank, p in progress.items():
        if isinstance(p, str):
            states.append(RankState(rank=rank, answering=False, verdict=f"not answering: {p}"))
            continue
        main = stacks.get(rank)
        inner, user = blocking_frames(main) if main else (None, None)
        states.append(RankState(rank=rank, pid=p.get("pid"), answering=True, step=p.get("step"),
                                since_last_step_s=p.get("since_last_step_s"), where=str(inner) if inner else None,
                                user_frame=str(user) if user else None, collectives=p.get("collectives"),
                                inside_torch=_inside_torch(main.frames) if main else None))
    answering = [s for s in states if s.answering and s.step is not None]
    culprits: list[RankState] = []
    why = ""
    if answering:
        top = max(s.step for s in answering)
        behind = [s for s in answering if s.step < top - 1]
        stalled = [s for s in answering if (s.since_last_step_s or 0) > 2.0]
        if stalled:  # a silent rank is only suspect once the others are seen waiting
            culprits += [s for s in states if not s.answering]
            why = "it does not answer while the others are stalled"
        if behind:
            culprits += behind
            why = f"behind: step {min(s.step for s in behind)} while others are at {top}"
        elif len(stalled) == len(answering) and len(answering) > 1:
            in_user = [s for s in stalled if s.inside_torch is False]
            counts = Counter(s.collectives for s in stalled if s.collectives is not None)
            if in_user and len(in_user) < len(stalled):
                culprits += in_user
                why = "stalled in its own code while the other ranks wait inside torch (a collective)"
            elif len(counts) == 2 and min(counts.values()) < max(counts.values()):
                odd, usual = sorted(counts, key=counts.get)
                culprits += [s for s in stalled if s.collectives == odd]
                why = f"it called {odd} collectives while the others called {usual}: a collective skipped or added"
    for s in states:
        if not s.answering:
            continue
        if s in culprits:
            s.verdict = f"STRAGGLER at step {s.step}, {why}; at {s.user_frame or s.where}"
        else:
            stall = f", no step for {s.since_last_step_s:.1f} s" if (s.since_last_step_s or 0) > 2 else ""
            s.verdict = f"step {s.step}{stall}" + (f", waiting in {s.where}" if stall and s.inside_torch else "")
    if not culprits or len(states) < 2:
        return states, None
    names = ", ".join(f"rank {c.rank}" for c in culprits)
    first = culprits[0]
    return states, Finding(
        failure_mode="hang", confidence=0.85 if first.answering else 0.6,
        summary=f"{names} holds the others back: {why}",
        location=first.user_frame or first.where,
        evidence=[Evidence(what=f"rank {s.rank}", value=s.verdict, source="live ranks") for s in states],
        fix=(f"Look at {first.user_frame or first.where or 'that rank'}: every rank must reach the same "
             "collectives in the same order (rank-dependent branches, uneven data shards, a rank-only I/O or "
             "evaluation). Set a timeout in init_process_group so a stall raises."))


# ---- status and actions ----------------------------------------------------------------------------

def _target_pid(root: Path, run: str) -> int | None:
    if not run.startswith("pid:"):
        return None
    hint = "Pass 'pid:<number>' of a live process of yours working in the workspace, or a run id from list_runs"
    try:
        pid = int(run[4:])
    except ValueError:
        pid = 0
    if pid <= 0:
        raise TriageError(f"{run[4:][:40]!r} is not a process id", hint)
    # psutil's own messages are bare ("(pid=1)"): say which of the three it is
    try:
        proc = psutil.Process(pid)
        cwd = Path(proc.cwd()).resolve()
    except psutil.ZombieProcess:
        raise TriageError(f"process {pid} has exited (a zombie waiting for its parent)", hint) from None
    except psutil.NoSuchProcess:
        raise TriageError(f"no process {pid}: it has exited or never existed", hint) from None
    except psutil.AccessDenied:
        raise TriageError(f"not allowed to look at process {pid}: it belongs to another user or the system "
                          "hides it from this server", hint) from None
    except psutil.Error as e:
        raise TriageError(f"cannot look at process {pid}: {type(e).__name__} {e}", hint) from None
    if not (cwd == root or cwd.is_relative_to(root)):
        raise TriageError(f"process {pid} runs in {cwd}, outside the workspace {root}",
                          "mltriage only looks at processes working inside its workspace")
    return pid


def _pid_status(root: Path, pid: int, what: list[str]) -> LiveStatus:
    proc = psutil.Process(pid)
    info = RunInfo(id=f"pid:{pid}", name=" ".join(proc.cmdline())[:80], status="running", command=proc.cmdline(),
                   log_path="", pid=pid, created=time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(proc.create_time())),
                   age_s=round(time.time() - proc.create_time(), 1))
    report = LiveStatus(run=info)
    for w in what:
        if w == "stack":
            try:
                report.stacks = py_spy_stacks(pid)
            except ChannelError as e:
                report.unavailable["stack"] = str(e)
        else:
            report.unavailable[w] = "needs the live instrument: only runs started with run_training have it"
    return report


def _job_status(job: str, what: list[str]) -> LiveStatus:
    """A Slurm job we did not launch: every rank's stack from every node (srun --overlap), the odd rank named."""
    from tools.slurm import slurm_check  # it builds on this module
    rep = slurm_check(job, stack="stack" in what or "ranks" in what)
    info = RunInfo(id=f"job:{job}", name=f"slurm job {job}", status="running" if rep.processes else "lost",
                   command=[], log_path="", created="", age_s=0.0, ranks=len(rep.processes))
    report = LiveStatus(run=info, findings=rep.findings)
    for rs in rep._rank_stacks:
        if rs.frames:
            report.stacks.append(ThreadStack(rank=rs.rank, pid=rs.pid, thread=f"MainThread on {rs.host}", main=True,
                                             frames=rs.frames, source="py-spy via srun --overlap"))
        else:
            report.unavailable[f"stack rank {rs.rank}"] = rs.error or "no stack"
    for j in rep.jobs:
        for g in j.groups:
            report.ranks += [RankState(rank=r, answering=True, where=g.frames[0] if g.frames else None,
                                       user_frame=g.where, verdict=(
                                           f"ODD ONE: {j.odd.kind}" if j.odd and r == j.odd.rank else
                                           f"in {g.collective or 'no collective'}")) for r in g.ranks]
    report.unavailable |= {w: "a Slurm job not launched with run_training: stack and ranks only (srun --overlap)"
                           for w in what if w not in ("stack", "ranks")}
    report.unavailable |= {f"note {i}": n for i, n in enumerate(rep.notes)}
    return report


async def status(root: Path, run: str, what: list[str], steps: int = 5, wait_s: float = 20.0,
                 on_progress: ProgressFn | None = None) -> LiveStatus:
    """Ask a live run what the agent wants to know; every part answers or says why not, quickly."""
    what = list(dict.fromkeys(what or ["progress"]))
    if run.startswith("job:"):
        return await anyio.to_thread.run_sync(_job_status, run[4:], what)
    pid = _target_pid(root, run)
    if pid is not None:
        return await anyio.to_thread.run_sync(_pid_status, root, pid, what)
    d = run_dir(root, run)
    info = await anyio.to_thread.run_sync(run_info, root, d)
    report = LiveStatus(run=info)
    statuses = rank_statuses(d)
    if info.status not in ("running", "starting"):
        why = f"the run is {info.status}" + (f" (exit code {info.exit_code})" if info.exit_code is not None else "") + \
              "; see its log " + info.log_path
        report.progress = [_progress_model(r, s) for r, s in statuses.items()]
        report.unavailable = {w: why for w in what if w != "progress"}
        if not report.progress and "progress" in what:
            report.unavailable["progress"] = why
        return report
    socks = rank_sockets(d)
    if not socks:
        report.unavailable = {w: "no instrumented process has started yet (still importing?); retry in a few seconds"
                              for w in what}
        return report

    async def ask_rank(rank: int, req: dict, timeout: float = ASK_TIMEOUT_S) -> dict | str:
        try:
            return await anyio.to_thread.run_sync(ask, socks[rank], req, timeout)
        except ChannelError as e:
            return str(e)

    prog: dict[int, dict | str] = {}
    if {"progress", "ranks", "stack"} & set(what):
        for rank in socks:
            prog[rank] = await ask_rank(rank, {"cmd": "progress", "recent": 20})
    mains: dict[int, ThreadStack | None] = {}
    if {"stack", "ranks", "progress"} & set(what):
        for rank in socks:
            if isinstance(prog.get(rank), str) and not {"stack", "ranks"} & set(what):
                continue  # not answering: progress says so at once; py-spy only when a stack is asked for
            stacks = await _stacks(rank, socks[rank], statuses.get(rank, {}).get("pid"), ask_rank)
            if isinstance(stacks, str):
                if "stack" in what:
                    report.unavailable[f"stack rank {rank}"] = stacks
                mains[rank] = None
                continue
            mains[rank] = next((s for s in stacks if s.main), None)
            if "stack" in what:
                report.stacks += stacks
    if "progress" in what:
        for rank, p in prog.items():
            if isinstance(p, str):
                report.unavailable[f"progress rank {rank}"] = p
                if rank in statuses:
                    report.progress.append(_progress_model(rank, statuses[rank]))
                continue
            model = _progress_model(rank, p)
            report.progress.append(model)
            f = hang_finding(model, mains.get(rank))
            if f:
                report.findings.append(f)
    live_steps = [p["step"] for p in prog.values() if isinstance(p, dict)]
    if live_steps:  # fresher than the status files list_runs reads
        report.run.step = min(live_steps)
    if "ranks" in what:
        report.ranks, f = rank_states(prog, mains)
        if len(socks) < 2:
            report.unavailable["ranks"] = "a single process: ranks matter under torchrun"
        else:
            if f:
                report.findings.append(f)
            report.rank_timing = rank_timings({r: p for r, p in prog.items() if isinstance(p, dict)})
            slow = straggler_finding(report.rank_timing)
            if slow and not f:
                report.findings.append(slow)
            answering = [p for p in prog.values() if isinstance(p, dict)]
            if answering and all((p.get("since_last_step_s") or 1e9) > 2.0 for p in answering):
                await _flight_recorder(report, root, socks, ask_rank)  # only when no rank steps: it costs seconds
    if "memory" in what:
        for rank in socks:
            r = await ask_rank(rank, {"cmd": "memory"}, 2.0)
            if isinstance(r, str):
                report.unavailable[f"memory rank {rank}"] = r
                continue
            trend = memory_trend(rank, r)
            report.memory.append(trend)
            f = memory_finding(trend)
            if f:
                report.findings.append(f)
    first = next(iter(socks))
    if "optimizer" in what:
        for rank in socks:
            r = await ask_rank(rank, {"cmd": "optimizer"})
            if isinstance(r, str):
                report.unavailable[f"optimizer rank {rank}"] = r
                continue
            report.optimizer += _optimizer_models(rank, r)
    if "grads" in what:
        r = await ask_rank(first, {"cmd": "grads"}, 3.0)
        if isinstance(r, str):
            report.unavailable["grads"] = r
        elif not r.get("params"):
            report.unavailable["grads"] = "no optimizer step yet"
        else:
            report.grads, report.global_grad_norm = layer_grads(r)
            report.params_without_grad = r.get("no_grad", [])
            report.findings += grad_findings(report.grads, report.global_grad_norm, report.params_without_grad)
    if "modules" in what:
        await _modules(report, first, steps, wait_s, ask_rank, on_progress)
    return report


async def _flight_recorder(report: LiveStatus, root: Path, socks: dict, ask_rank) -> None:
    """Every rank dumps its flight recorder through the control socket; torch's analyser reads the dumps."""
    dumps: dict[int, dict | str] = {}

    async def one(rank: int) -> None:
        # without stack traces: symbolising them takes ~5 s per rank the first time, and the ranks' own
        # stacks (already taken) say where each waits
        dumps[rank] = await ask_rank(rank, {"cmd": "fr_dump", "stacks": False}, 20.0)

    async with anyio.create_task_group() as tg:
        for r in socks:
            tg.start_soon(one, r)
    files = {r: Path(d["path"]) for r, d in dumps.items() if isinstance(d, dict) and d.get("enabled")}
    if not files:
        return  # not enabled (the usual case): nothing to say
    python = next(d["python"] for d in dumps.values() if isinstance(d, dict) and d.get("python"))
    try:
        fr = await flight_recorder.analyse_dumps(files, workspace_root=root, python=python)
    except TriageError as e:  # the rest of the ranks report stands
        report.unavailable["flight recorder"] = str(e)
        return
    fr.missing_files = {r: d for r, d in dumps.items() if isinstance(d, str)}
    report.flight_recorder = fr
    f = flight_recorder.fr_finding(fr, {r.rank: r.user_frame for r in report.ranks if r.user_frame})
    if f is not None:
        report.findings.insert(0, f)


def _progress_model(rank: int, p: dict) -> RankProgress:
    return RankProgress(
        rank=rank, pid=p.get("pid"), step=p.get("step", 0), steps_per_s=p.get("steps_per_s"),
        since_last_step_s=(time.time() - p["last_step_wall"]) if p.get("last_step_wall") else None,
        last_loss=p.get("last_loss"), last_grad_norm=p.get("last_grad_norm"), in_backward_s=p.get("in_backward_s"),
        grad_clip=p.get("grad_clip"), recent=[StepPoint(**x) for x in p.get("recent", [])],
        instrument_errors=p.get("instrument_errors") or {})


async def _stacks(rank, sock, pid, ask_rank) -> list[ThreadStack] | str:
    r = await ask_rank(rank, {"cmd": "stack"})
    if isinstance(r, dict):
        return [ThreadStack(rank=rank, pid=pid, thread=t["name"], main=t["main"],
                            frames=[Frame(**f) for f in t["frames"]]) for t in r["threads"]]
    if pid is None or "stale" in r or "no control socket" in r:
        return r
    try:  # alive but not answering: look from outside
        return await anyio.to_thread.run_sync(py_spy_stacks, pid, rank)
    except ChannelError as e:
        return f"{r}; {e}"


def _optimizer_models(rank: int, r: dict) -> list[OptimizerInfo]:
    scheds = [f"{s['type']}(last_epoch={s['last_epoch']})" for s in r.get("schedulers", [])]
    return [OptimizerInfo(rank=rank, type=o["type"], state_step=o.get("state_step"), schedulers=scheds,
                          grad_clip=r.get("grad_clip"),
                          groups=[OptimizerGroup(**{k: g.get(k) for k in OptimizerGroup.model_fields}) for g in o["groups"]])
            for o in r.get("optimizers", [])]


async def _modules(report: LiveStatus, rank: int, steps: int, wait_s: float, ask_rank, on_progress) -> None:
    started = await ask_rank(rank, {"cmd": "modules_start", "steps": steps})
    if isinstance(started, str):
        report.unavailable["modules"] = started
        return
    token, deadline = started["token"], time.monotonic() + wait_s
    while True:
        r = await ask_rank(rank, {"cmd": "modules_result", "token": token})
        if isinstance(r, str):
            report.unavailable["modules"] = r
            return
        if r.get("state") == "done":
            report.modules, report.modules_step_ms = module_times(r)
            f = module_finding(report.modules, report.modules_step_ms)
            if f:
                report.findings.append(f)
            return
        if time.monotonic() > deadline:
            await ask_rank(rank, {"cmd": "modules_cancel", "token": token})
            report.unavailable["modules"] = (f"timing did not finish {steps} steps within {wait_s:.0f} s "
                                             f"({r.get('steps_done', 0)} done): the run is slow or stalled")
            return
        if on_progress is not None:
            await on_progress(float(r.get("steps_done", 0)), float(steps), f"timing modules ({r.get('state')})")
        await anyio.sleep(0.1)


def _read_results(d: Path, action_id: str) -> dict[int, dict]:
    out = {}
    for f in d.glob("actions-*.jsonl"):
        try:
            for line in f.read_text().splitlines():
                rec = json.loads(line)
                if rec.get("id") == action_id:
                    out[int(rec.get("rank", 0))] = rec
        except (OSError, ValueError):
            continue
    return out


def _log_line(state: dict, text: str) -> None:
    try:
        with open(state["log_path"], "a") as f:
            f.write(f"[mltriage] {time.strftime('%H:%M:%S')} {text}\n")
    except OSError:
        pass


async def action(root: Path, run: str, name: str, *, factor: float | None = None, max_norm: float | None = None,
                 path: Path | None = None, wait_s: float = 10.0, on_progress: ProgressFn | None = None) -> LiveActionReport:
    """Queue one allow-listed action on every rank, wait for it to apply at a step boundary, report before/after."""
    d = run_dir(root, run)
    info = await anyio.to_thread.run_sync(run_info, root, d)
    if info.status not in ("running", "starting"):
        raise TriageError(f"run {run} is {info.status}" + (f" (exit code {info.exit_code})" if info.exit_code is not None else ""),
                          "Nothing to act on; list_runs shows live runs")
    args: dict[str, Any] = {}
    if name == "scale_lr":
        if factor is None or not (math.isfinite(factor) and 0 < factor <= 100):
            raise TriageError("scale_lr needs factor in (0, 100]", "e.g. factor=0.5 halves every param group's lr")
        args["factor"] = factor
    elif name == "set_grad_clip":
        if max_norm is not None and not (math.isfinite(max_norm) and max_norm > 0):
            raise TriageError("set_grad_clip needs max_norm > 0", "e.g. max_norm=1.0; omit it to switch clipping off")
        args["max_norm"] = max_norm
    elif name == "save_checkpoint":
        if path is None:
            raise TriageError("save_checkpoint needs path", "e.g. path='checkpoints/emergency.pt'")
        if path.exists():
            raise TriageError(f"{path} already exists", "Choose a new file name; nothing is overwritten")
        args["path"] = str(path)
    elif name != "stop":
        raise TriageError(f"unknown action {name!r}", "Allowed: scale_lr, set_grad_clip, save_checkpoint, stop")
    socks = rank_sockets(d)
    state = read_state(d)
    if not socks:
        if name == "stop":
            return await _terminate(d, state, run, args, [], "no instrumented process answered yet")
        raise TriageError(f"run {run} has no control socket yet", "Wait until it imports torch, then retry")
    targets = {r: s for r, s in socks.items() if name != "save_checkpoint" or r == min(socks)}
    at_step = None
    if len(targets) > 1:  # every rank applies at the same step, or DDP replicas drift apart
        steps, rates = [], []
        for s in targets.values():
            try:
                p = await anyio.to_thread.run_sync(ask, s, {"cmd": "progress", "recent": 0})
                steps.append(p["step"])
                rates.append(p.get("steps_per_s") or 0)
            except ChannelError:
                continue
        if steps:
            at_step = max(steps) + max(2, math.ceil(max(rates) * 0.5))
    action_id = f"{name}-{secrets.token_hex(4)}"
    sent, errors = [], {}
    for rank, s in targets.items():
        try:
            await anyio.to_thread.run_sync(ask, s, {"cmd": "action", "action": name, "id": action_id,
                                                    "at_step": at_step, **args})
            sent.append(rank)
        except ChannelError as e:
            errors[rank] = str(e)
    _log_line(state, f"{name}({args or ''}) requested on ranks {sent}" + (f" for step {at_step}" if at_step else ""))
    deadline = time.monotonic() + wait_s
    results: dict[int, dict] = {}
    while sent and time.monotonic() < deadline:
        results = _read_results(d, action_id)
        if all(r in results for r in sent):
            break
        if on_progress is not None:
            await on_progress(float(len(results)), float(len(sent)), f"waiting for a step boundary ({name})")
        await anyio.sleep(0.1)
    per_rank = [RankActionResult(rank=r, applied=bool(results.get(r, {}).get("ok")),
                                 applied_at_step=results.get(r, {}).get("applied_at_step"),
                                 before=clean(results.get(r, {}).get("before")), after=clean(results.get(r, {}).get("after")),
                                 error=errors.get(r) or results.get(r, {}).get("error")
                                 or (None if r in results else f"no step boundary within {wait_s:.0f} s"))
                for r in sorted(targets)]
    applied = bool(per_rank) and all(r.applied for r in per_rank)
    note = "" if applied else (
        "Queued actions stay queued and apply at the next step boundary; a run with no step boundary may be hung "
        "(live_status what=['progress','stack']).")
    if name == "stop":
        return await _terminate(d, state, run, args, per_rank, "" if applied else "no graceful stop in time")
    record = {"id": action_id, "action": name, "args": args, "requested_at": time.time(), "at_step": at_step,
              "applied": applied, "results": [r.model_dump() for r in per_rank]}
    update_state(d, lambda s: s.setdefault("actions", []).append(record))
    return LiveActionReport(run=run, action=name, args=args, applied=applied, results=per_rank, note=note)


async def _terminate(d: Path, state: dict, run: str, args: dict, per_rank: list[RankActionResult],
                     why: str, grace_s: float = 10.0) -> LiveActionReport:
    """After a graceful stop (or none): wait for the session to exit, then SIGTERM, then SIGKILL, then verify."""
    how = "graceful stop at a step boundary"
    deadline = time.monotonic() + (grace_s if not why else 0.5)
    while time.monotonic() < deadline and await anyio.to_thread.run_sync(session_processes, state):
        await anyio.sleep(0.1)
    for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 2.0)):
        procs = await anyio.to_thread.run_sync(session_processes, state)
        if not procs:
            break
        how = f"{'graceful stop did not finish; ' if not why else why + '; '}sent {sig.name} to the process group"
        try:
            os.killpg(state["pid"], sig)
        except (ProcessLookupError, PermissionError):
            pass
        for p in procs:  # descendants that left the group
            try:
                p.send_signal(sig)
            except psutil.Error:
                pass
        end = time.monotonic() + wait
        while time.monotonic() < end and await anyio.to_thread.run_sync(session_processes, state):
            await anyio.sleep(0.1)
    child = _children.pop(state.get("pid"), None)
    if child is not None:
        try:
            child.wait(timeout=2)
        except subprocess.TimeoutExpired:
            pass
    left = await anyio.to_thread.run_sync(session_processes, state)
    step = next((r.applied_at_step for r in per_rank if r.applied_at_step is not None), None)
    after = {"processes_left": len(left), "exit_code": _exit_code(d), "how": how}
    record = {"id": f"stop-{secrets.token_hex(4)}", "action": "stop", "args": args, "requested_at": time.time(),
              "applied": not left, "stopped_at_step": step, "how": how, "results": [r.model_dump() for r in per_rank]}
    update_state(d, lambda s: (s.setdefault("actions", []).append(record), s.update(stopped=True, stopped_how=how)))
    _log_line(state, f"stop: {how}; processes left: {len(left)}")
    results = per_rank or [RankActionResult(rank=0, applied=False, error=why)]
    for r in results:
        r.after = {**(r.after or {}), **after} if isinstance(r.after, dict) or r.after is None else r.after
    return LiveActionReport(run=run, action="stop", args=args, applied=not left, results=results,
                            note=f"{how}; {len(left)} process(es) left" + (
                                f": {[p.pid for p in left]}" if left else ""))
