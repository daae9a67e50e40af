"""Training processes: alive, hung, zombie or stopped; CPU over a short window, children, open logs, stacks."""

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Literal

import psutil
from pydantic import BaseModel, Field

from tools.errors import TriageError
from tools.report import Evidence, Finding, Report

DEFAULT_PATTERN = r"(?:^|/)(?:python[\d.]*|torchrun|accelerate|deepspeed)\b.*(?:train|finetun|fine_tun|pretrain|torch\.distributed|torchrun)"
WINDOW_S = 0.5
IDLE_CPU_PCT = 1.0
STALE_LOG_S = 120.0
LOG_SUFFIXES = (".log", ".txt", ".out", ".err", ".jsonl", ".json", ".csv", ".tsv")
Verdict = Literal["running", "possibly_hung", "zombie", "stopped", "not_found"]


class ChildProcess(BaseModel):
    pid: int
    name: str
    status: str
    cpu_percent: float | None


class OpenLog(BaseModel):
    path: str
    stale_s: float | None = Field(description="seconds since it was last written")


class ProcessInfo(BaseModel):
    pid: int
    ppid: int | None
    cmdline: str
    status: str = Field(description="running, sleeping, disk-sleep, zombie, stopped, ...")
    cpu_percent: float | None = Field(description=f"this process over a ~{WINDOW_S}s window (100 = one core)")
    children_cpu_percent: float | None = None
    rss_mib: float | None
    threads: int | None
    age_s: float | None
    children: list[ChildProcess] = Field(default_factory=list)
    open_logs: list[OpenLog] = Field(default_factory=list)
    gpu_memory_mib: float | None = None
    verdict: Verdict
    why: str
    stack: str | None = None
    stack_note: str | None = None


class ProcessCheckReport(Report):
    pattern: str | None
    window_s: float
    processes: list[ProcessInfo]
    notes: list[str] = Field(default_factory=list)

    def headline(self) -> str:
        if not self.processes:
            return f"no process matches {self.pattern!r}"
        return "\n".join(f"pid {p.pid} {p.verdict}: {p.why} | {p.cmdline[:120]}" for p in self.processes)


MAX_PATTERN_CHARS = 1000


def _matcher(pattern: str):
    """A case-insensitive search function for the caller's pattern, linear in the command line.

    The pattern comes from the agent: a backtracking engine (`re`) on `(a+)+$` holds the GIL for
    minutes and freezes the whole server, so patterns go through RE2, which has no backtracking.
    What RE2 cannot parse (backreferences, lookaround, plain typos) is matched as a substring.
    """
    if len(pattern) > MAX_PATTERN_CHARS:
        raise TriageError(f"pattern is {len(pattern)} characters long (at most {MAX_PATTERN_CHARS})",
                          "Pass a short regex or substring of the training command line, e.g. 'train.py'")
    import re2  # only process_check needs it; keeps it off the server's start-up

    options = re2.Options()
    options.case_sensitive = False
    options.log_errors = False  # RE2 would print every unparsable pattern to stderr
    try:
        return re2.compile(pattern, options).search
    except re2.error:
        needle = pattern.lower()
        return lambda s: needle in s.lower()


def _matching(pattern: str) -> list[psutil.Process]:
    match = _matcher(pattern)
    me = os.getpid()
    skip = {me, *(p.pid for p in psutil.Process(me).parents())}
    out = []
    for p in psutil.process_iter(["pid", "cmdline", "name"]):
        if p.pid in skip:
            continue
        cmd = " ".join(p.info.get("cmdline") or []) or (p.info.get("name") or "")
        if cmd and match(cmd):
            out.append(p)
    return out


def _open_logs(p: psutil.Process, now: float) -> list[OpenLog]:
    try:
        files = p.open_files()
    except (psutil.Error, OSError):
        return []
    paths = {f.path for f in files if f.path.endswith(LOG_SUFFIXES) or getattr(f, "mode", "r") in ("w", "a", "r+", "a+", "w+")}
    # stdout/stderr redirected to a file are the most common training logs
    for fd in (1, 2):
        try:
            target = os.readlink(f"/proc/{p.pid}/fd/{fd}")
            if target.startswith("/") and os.path.isfile(target):
                paths.add(target)
        except OSError:
            pass
    out = []
    for path in sorted(paths)[:20]:
        try:
            out.append(OpenLog(path=path, stale_s=round(now - os.stat(path).st_mtime, 1)))
        except OSError:
            out.append(OpenLog(path=path, stale_s=None))
    return out


def _py_spy() -> str | None:
    return shutil.which("py-spy") or next((str(c) for c in [Path(sys.executable).parent / "py-spy"] if c.exists()), None)


def _stack(pid: int) -> tuple[str | None, str | None]:
    how = (f"Alternatives: `py-spy dump --pid {pid}` as root (`sudo`), or in Docker run with --cap-add SYS_PTRACE; "
           f"or add `import faulthandler, signal; faulthandler.register(signal.SIGUSR1)` to the script and `kill -USR1 {pid}` "
           "(the stacks go to its stderr); or `gdb -p PID -batch -ex 'py-bt'`.")
    exe = _py_spy()
    if not exe:
        return None, f"py-spy is not installed: `pip install py-spy`, then `py-spy dump --pid {pid}`. " + how
    try:
        r = subprocess.run([exe, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return None, "py-spy dump timed out after 20s. " + how
    if r.returncode != 0:
        err = (r.stderr or r.stdout).strip()[-500:]
        if re.search(r"permission|ptrace|Operation not permitted|EPERM", err, re.I):
            return None, (f"py-spy cannot attach ({err}): ptrace is not permitted. Allow it with "
                          "`sudo sysctl kernel.yama.ptrace_scope=0` or run as the process owner/root. " + how)
        return None, f"py-spy failed: {err}. " + how
    return r.stdout[-20000:], None


def process_check(pid: int | None = None, pattern: str | None = None, stack: bool = False) -> ProcessCheckReport:
    """The training processes (or one pid) with a verdict each; CPU of all of them sampled over one shared window."""
    if pid is not None:
        try:
            procs = [psutil.Process(pid)]
        except psutil.NoSuchProcess:
            raise TriageError(f"no process with pid {pid} (it has exited or never existed)",
                              "Call process_check without pid (or with pattern='train') to list the training processes; "
                              "if the run ended, tail_log on its log shows how") from None
        except psutil.AccessDenied:
            raise TriageError(f"pid {pid} exists but cannot be inspected (access denied)",
                              "Run the server as the same user as the training run") from None
        pattern = None
    else:
        pattern = pattern or DEFAULT_PATTERN
        procs = _matching(pattern)

    # one sampling window for every process and child, not one window after another
    children = {}
    for p in procs:
        try:
            children[p.pid] = p.children(recursive=True)
        except psutil.Error:
            children[p.pid] = []
    everyone = {q.pid: q for p in procs for q in [p, *children[p.pid]]}
    for q in everyone.values():
        try:
            q.cpu_percent(None)
        except psutil.Error:
            pass
    time.sleep(WINDOW_S)
    cpu: dict[int, float | None] = {}
    for q in everyone.values():
        try:
            cpu[q.pid] = q.cpu_percent(None)
        except psutil.Error:
            cpu[q.pid] = None

    from tools.gpu import gpu_memory_by_pid
    gpu_mem = gpu_memory_by_pid()
    now = time.time()
    out = [_inspect(p, children[p.pid], cpu, gpu_mem, now, stack) for p in procs]
    report = ProcessCheckReport(pattern=pattern, window_s=WINDOW_S, processes=out)
    if not out:
        report.notes.append("nothing matched: pass pattern= (a regex over the command line, e.g. 'train.py') or pid=")
    report.findings = _findings(out)
    return report


def _inspect(p: psutil.Process, kids: list[psutil.Process], cpu: dict, gpu_mem: dict, now: float, stack: bool) -> ProcessInfo:
    try:
        with p.oneshot():
            status = p.status()
            cmd = " ".join(p.cmdline()) if status != psutil.STATUS_ZOMBIE else p.name()
            info = dict(ppid=p.ppid(), status=status, cmdline=(cmd or p.name())[:1000],
                        rss_mib=_safe(lambda: p.memory_info().rss / 2**20), threads=_safe(p.num_threads),
                        age_s=round(now - p.create_time(), 1))
    except psutil.NoSuchProcess:
        return ProcessInfo(pid=p.pid, ppid=None, cmdline="", status="gone", cpu_percent=None, rss_mib=None, threads=None,
                           age_s=None, verdict="not_found", why="exited while being inspected")
    except psutil.AccessDenied:
        return ProcessInfo(pid=p.pid, ppid=None, cmdline="", status="unknown", cpu_percent=None, rss_mib=None, threads=None,
                           age_s=None, verdict="running", why="access denied: cannot inspect it (another user)")
    child_info = []
    for c in kids:
        try:
            child_info.append(ChildProcess(pid=c.pid, name=c.name(), status=c.status(), cpu_percent=cpu.get(c.pid)))
        except psutil.Error:
            continue
    logs = _open_logs(p, now) if status != psutil.STATUS_ZOMBIE else []
    own = cpu.get(p.pid)
    kids_cpu = sum(c.cpu_percent or 0.0 for c in child_info) if child_info else None
    total = (own or 0.0) + (kids_cpu or 0.0)
    fresh = [l for l in logs if l.stale_s is not None and l.stale_s < STALE_LOG_S]
    if status == psutil.STATUS_ZOMBIE:
        verdict, why = "zombie", "exited; its parent has not reaped it"
    elif status in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP):
        verdict, why = "stopped", "stopped by a signal (SIGSTOP/SIGTSTP, Ctrl-Z) or a debugger"
    elif total < IDLE_CPU_PCT and not fresh:
        where = f"its logs last written {min(l.stale_s for l in logs if l.stale_s is not None):.0f}s ago" \
            if any(l.stale_s is not None for l in logs) else "no open log file seen"
        verdict, why = "possibly_hung", f"{total:.1f}% CPU (with children) over {WINDOW_S}s, {where}"
    else:
        verdict, why = "running", f"{total:.1f}% CPU (with children)" + (f", log written {fresh[0].stale_s:.0f}s ago" if fresh else "")
    pi = ProcessInfo(pid=p.pid, cpu_percent=own, children_cpu_percent=kids_cpu, children=child_info, open_logs=logs,
                     gpu_memory_mib=gpu_mem.get(p.pid), verdict=verdict, why=why, **info)
    if stack:
        if verdict == "zombie":
            pi.stack_note = "a zombie has no stack: it already exited"
        else:
            pi.stack, pi.stack_note = _stack(p.pid)
    return pi


def _safe(fn):
    try:
        return fn()
    except psutil.Error:
        return None


def _findings(procs: list[ProcessInfo]) -> list[Finding]:
    out = []
    for p in procs:
        src = f"process_check pid {p.pid}"
        if p.verdict == "possibly_hung":
            ev = [Evidence(what="CPU % (process + children)", value=(p.cpu_percent or 0) + (p.children_cpu_percent or 0), source=src)]
            ev += [Evidence(what=f"log {Path(l.path).name} stale_s", value=l.stale_s, source=src) for l in p.open_logs[:3]]
            out.append(Finding(failure_mode="hang", confidence=0.6, summary=f"pid {p.pid} is alive but idle: {p.why}", evidence=ev,
                               fix=f"Take a stack first: process_check(pid={p.pid}, stack=True); a wait in a DataLoader queue, a lock or an NCCL collective names the cause",
                               location=f"pid {p.pid}"))
        elif p.verdict == "stopped":
            out.append(Finding(failure_mode="hang", confidence=0.7, summary=f"pid {p.pid} is stopped, so it makes no progress",
                               evidence=[Evidence(what="status", value=p.status, source=src)],
                               fix=f"Resume it with `kill -CONT {p.pid}` (or `fg` in its shell) unless a debugger holds it",
                               location=f"pid {p.pid}"))
        elif p.verdict == "zombie":
            out.append(Finding(failure_mode="exception", confidence=0.3, summary=f"pid {p.pid} already exited (zombie); the run is over",
                               evidence=[Evidence(what="status", value=p.status, source=src)],
                               fix="Read how it ended with tail_log on its log; the zombie goes away when its parent exits or waits for it",
                               location=f"pid {p.pid}"))
        bad_kids = [c for c in p.children if c.status in (psutil.STATUS_ZOMBIE, psutil.STATUS_DISK_SLEEP, psutil.STATUS_STOPPED)]
        if bad_kids and p.verdict != "zombie":
            out.append(Finding(failure_mode="hang", confidence=0.4,
                               summary=f"pid {p.pid} has {len(bad_kids)} child process(es) dead or stuck (data-loader workers?)",
                               evidence=[Evidence(what=f"child {c.pid} ({c.name})", value=c.status, source=src) for c in bad_kids[:5]],
                               fix="A dead worker (often killed by the host OOM killer) stalls the DataLoader: set DataLoader(timeout=...), try num_workers=0 to confirm",
                               location=f"pid {p.pid}"))
    return out
