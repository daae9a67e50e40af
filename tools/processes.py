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
from pydantic import BaseModel, Field, PrivateAttr

from tools import flight_recorder
from tools.errors import TriageError
from tools.flight_recorder import FlightRecorder
from tools.hang_stacks import HangStacks, RankStack, analyse, dump_ranks, hang_finding, stack_text
from tools.report import Evidence, Finding, Report

DEFAULT_PATTERN = r"(?:^|/)(?:python[\d.]*|torchrun|accelerate|deepspeed)\b.*(?:train|finetun|fine_tun|pretrain|torch\.distributed|torchrun)"
WINDOW_S = 0.5
IDLE_CPU_PCT = 1.0
WAITING_CPU_PCT = 10.0  # a rank blocked in a gloo/NCCL wait polls a little; a computing one uses a core
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
    rank: int | None = Field(None, description="RANK of a torchrun/Slurm worker")
    host: str | None = Field(None, description="the node (Slurm jobs)")
    stack: str | None = None
    stack_note: str | None = None


class ProcessCheckReport(Report):
    pattern: str | None
    window_s: float
    processes: list[ProcessInfo]
    jobs: list[HangStacks] = Field(default_factory=list, description="distributed jobs (stack=True): every rank's "
                                   "stack grouped, the odd rank named")
    flight_recorder: list[FlightRecorder] = Field(default_factory=list, description="per job with the collective "
                                                  "flight recorder on: torch's analysis of the dumps")
    notes: list[str] = Field(default_factory=list)
    _fr_jobs: dict = PrivateAttr(default_factory=dict)  # job -> {"envs": {rank: env}, "python": exe}
    _rank_stacks: list = PrivateAttr(default_factory=list)  # the RankStacks behind `jobs`

    def headline(self) -> str:
        if not self.processes:
            return "\n".join([f"no process matches {self.pattern!r}", *self.notes])
        lines = [f"pid {p.pid}{' on ' + p.host if p.host else ''} {p.verdict}: {p.why} | {p.cmdline[:120]}"
                 for p in self.processes]
        for j in self.jobs:
            lines.append(f"job {j.job}: ranks {j.ranks_seen}; " + "; ".join(
                f"ranks {g.ranks} in {g.collective or 'no collective'} at {g.where}" for g in j.groups))
            if j.odd:
                lines.append(f"  odd rank {j.odd.rank} (pid {j.odd.pid}): {j.odd.kind}")
            elif j.note:
                lines.append(f"  {j.note}")
        for fr in self.flight_recorder:
            for m in fr.mismatches[:1]:
                lines.append(f"flight recorder: collective #{m.seq} {m.op} {m.input_sizes} on ranks {m.ranks}; "
                             + "; ".join(f"{k} on ranks {v}" for k, v in m.other.items()))
            if fr.why_not:
                lines.append(f"flight recorder: {fr.why_not}")
        return "\n".join(lines)


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
    jobs = rank_jobs([q for p in procs for q in [p, *children[p.pid]]])
    rank_of = {pid: r for j in jobs.values() for r, pid in j["ranks"].items()}
    dumped: dict[int, RankStack] = {}
    analyses: list[HangStacks] = []
    if stack:
        for key, j in jobs.items():
            if len(j["ranks"]) < 2:
                continue
            stacks = dump_ranks(j["ranks"])
            dumped.update({s.pid: s for s in stacks})
            analyses.append(analyse(key, stacks, j["world"]))
    out = [_inspect(p, children[p.pid], cpu, gpu_mem, now, stack, dumped.get(p.pid)) for p in procs]
    for pi in out:
        pi.rank = rank_of.get(pi.pid)
    report = ProcessCheckReport(pattern=pattern, window_s=WINDOW_S, processes=out, jobs=analyses)
    report._fr_jobs = {k: j for k, j in jobs.items() if any(flight_recorder.enabled(e) for e in j["envs"].values())}
    if not out:
        report.notes.append("nothing matched: pass pattern= (a regex over the command line, e.g. 'train.py') or pid=")
    report.findings = _findings(out)
    for h in analyses:
        majority = set(h.odd.majority_ranks) if h.odd else set()
        idle = all((cpu.get(j) or 0.0) < WAITING_CPU_PCT for j in (jobs[h.job]["ranks"].get(r) for r in majority))
        f = hang_finding(h, idle)
        if f is not None:
            report.findings.insert(0, f)
    if jobs and not stack:
        report.notes.append("distributed ranks found: call again with stack=True to compare every rank's stack "
                            "and name the odd one of a hang")
    return report


def _env(p: psutil.Process) -> dict[str, str]:
    try:
        return p.environ()
    except (psutil.Error, OSError):
        return {}


def _job_key(env: dict[str, str]) -> str | None:
    if "RANK" not in env:
        return None
    if env.get("TORCHELASTIC_RUN_ID"):
        return f"torchrun {env['TORCHELASTIC_RUN_ID']}"
    if env.get("MASTER_PORT"):
        return f"{env.get('MASTER_ADDR', '?')}:{env['MASTER_PORT']}"
    if env.get("SLURM_JOB_ID"):
        return f"slurm {env['SLURM_JOB_ID']}.{env.get('SLURM_STEP_ID', '')}"
    return "ranks"


def rank_jobs(candidates: list[psutil.Process]) -> dict[str, dict]:
    """Distributed jobs among these processes and their siblings: key -> {"world": n, "ranks": {rank: pid}}.

    A rank is a process with RANK in its environment (torchrun/elastic workers, Slurm tasks that set it).
    DataLoader workers inherit the environment of their rank, so only the topmost process of a rank counts.
    """
    seen: dict[int, psutil.Process] = {p.pid: p for p in candidates}
    for p in candidates:  # a rank passed alone (pid=) brings its siblings: the agent's other workers
        if "RANK" in _env(p):
            try:
                parent = p.parent()
                seen.update({q.pid: q for q in (parent.children() if parent else [])})
            except psutil.Error:
                pass
    info: dict[int, tuple[str, int, int | None]] = {}
    for pid, p in seen.items():
        env = _env(p)
        key = _job_key(env)
        if key is None:
            continue
        try:
            info[pid] = (key, int(env["RANK"]), int(env["WORLD_SIZE"]) if env.get("WORLD_SIZE", "").isdigit() else None)
        except ValueError:
            continue
    jobs: dict[str, dict] = {}
    for pid, (key, rank, world) in info.items():
        try:
            parent = seen[pid].ppid()
        except psutil.Error:
            continue
        if parent in info and info[parent][:2] == (key, rank):
            continue  # a worker of this rank
        job = jobs.setdefault(key, {"world": world, "ranks": {}, "envs": {}, "python": None})
        if rank not in job["ranks"]:
            job["ranks"][rank], job["envs"][rank] = pid, _env(seen[pid])
            job["python"] = job["python"] or _interpreter(seen[pid])
    return jobs


def _interpreter(p: psutil.Process) -> str | None:
    """The python a rank runs, as it was started: a venv's bin/python (exe() would resolve the venv's symlink
    to the base interpreter, which lacks the venv's torch)."""
    try:
        argv0 = p.cmdline()[0]
        return argv0 if os.path.isabs(argv0) and os.access(argv0, os.X_OK) else p.exe()
    except (psutil.Error, IndexError):
        return None


async def read_flight_recorder(report: ProcessCheckReport, confine, workspace_root: Path,
                               python: str | None = None) -> ProcessCheckReport:
    """For each job whose ranks run with the flight recorder on: find their dumps and let torch's analyser
    read them, in the ranks' own interpreter (it has the torch that wrote them). `confine` is the
    workspace's read check: a dump outside the workspace and --allow-read is listed, not read."""
    for key, job in report._fr_jobs.items():
        found, missing = flight_recorder.dump_files(job["envs"])
        files = {}
        for rank, path in found.items():
            try:
                files[rank] = confine(path)
            except TriageError as e:
                missing[rank] = f"{path}: {e.what}; start the server with --allow-read {path.parent}"
        if not files:
            fr = FlightRecorder(enabled=True, missing_files=missing,
                                why_not="the flight recorder is on but no rank has written a dump yet: NCCL writes "
                                        "one when its watchdog times out; gloo does not write one by itself (run "
                                        "the job under run_training and ask live_status for 'ranks')")
        else:
            try:
                fr = await flight_recorder.analyse_dumps(files, workspace_root=workspace_root,
                                                         python=python or job["python"])
            except TriageError as e:  # the stacks are still worth returning
                fr = FlightRecorder(enabled=True, files={r: str(p) for r, p in files.items()}, why_not=str(e))
            fr.missing_files = missing
        report.flight_recorder.append(fr)
        where = {r: g.where for h in report.jobs if h.job == key for g in h.groups for r in g.ranks if g.where}
        f = flight_recorder.fr_finding(fr, where)
        if f is not None:
            report.findings.insert(0, f)
    return report


def _inspect(p: psutil.Process, kids: list[psutil.Process], cpu: dict, gpu_mem: dict, now: float, stack: bool,
             dumped: RankStack | None = None) -> ProcessInfo:
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
        elif dumped is not None:  # a rank, already dumped for the comparison of all ranks
            pi.stack, pi.stack_note = (stack_text(dumped), None) if dumped.frames else (None, dumped.error)
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
