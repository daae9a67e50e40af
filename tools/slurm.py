"""A Slurm job's processes on every node, through Slurm itself (no agent of our own on the nodes).

`squeue` says where the job runs; `srun --jobid=<id> --overlap -N <nodes> --ntasks-per-node=1` starts one
collector per node inside the job's allocation (the collector is sent as `python3 -c <source>`), which
lists the job's task processes there with their rank (RANK, else SLURM_PROCID), CPU, memory and, when
asked, their py-spy stacks. A finished job is described from `sacct`. Every command goes through `run`,
so tests can replay recorded output.
"""

import json
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from tools.errors import TriageError
from tools.hang_stacks import RankStack, analyse, hang_finding
from tools.live import parse_py_spy, py_spy_exe
from tools.processes import IDLE_CPU_PCT, WAITING_CPU_PCT, ProcessCheckReport, ProcessInfo
from tools.report import Evidence, Finding

JOB_ID = re.compile(r"^\d{1,12}(_\d{1,9})?$")
COLLECTOR = Path(__file__).resolve().parent / "probe" / "mltriage_slurm_collect.py"
SRUN_TIMEOUT_S = 60.0
Run = Callable[[list[str], float], subprocess.CompletedProcess]


def _run(argv: list[str], timeout: float) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise TriageError(f"{argv[0]} is not installed here", "Run the server on a login node of the cluster "
                          "(where squeue/srun work), or pass pid=/pattern= for processes on this machine") from None
    except subprocess.TimeoutExpired:
        raise TriageError(f"`{' '.join(argv[:4])} ...` did not answer within {timeout:.0f} s",
                          "The controller may be overloaded or the nodes unreachable: try squeue yourself") from None


def job_state(job: str, run: Run = _run) -> dict:
    """{'state', 'nodes', 'nnodes', 'elapsed'} from squeue; from sacct when the job has left the queue."""
    r = run(["squeue", "-h", "-j", job, "-o", "%i|%T|%N|%D|%M"], 15)
    line = next((l for l in r.stdout.splitlines() if l.strip()), "") if r.returncode == 0 else ""
    if line:
        jid, state, nodes, nnodes, elapsed = (line.split("|") + [""] * 5)[:5]
        return {"job": jid, "state": state, "nodes": nodes, "nnodes": int(nnodes or 0), "elapsed": elapsed}
    r2 = run(["sacct", "-n", "-P", "-X", "-j", job, "-o", "JobID,State,ExitCode,NodeList,Elapsed"], 15)
    row = next((l for l in r2.stdout.splitlines() if l.strip()), "") if r2.returncode == 0 else ""
    if row:
        jid, state, code, nodes, elapsed = (row.split("|") + [""] * 5)[:5]
        return {"job": jid, "state": state.split()[0], "exit_code": code, "nodes": nodes, "nnodes": 0,
                "elapsed": elapsed}
    r3 = run(["scontrol", "-o", "show", "job", job], 15)  # clusters without accounting keep ended jobs a few minutes
    fields = dict(re.findall(r"(\w+)=(\S*)", r3.stdout)) if r3.returncode == 0 else {}
    if fields.get("JobState"):
        return {"job": fields.get("JobId", job), "state": fields["JobState"], "exit_code": fields.get("ExitCode"),
                "nodes": fields.get("NodeList", ""), "nnodes": int(fields.get("NumNodes", "0").split("-")[0] or 0),
                "elapsed": fields.get("RunTime", "")}
    why = (r.stderr or r2.stderr or r3.stderr or "").strip()[-300:]
    raise TriageError(f"Slurm knows no job {job}" + (f" ({why})" if why else ""),
                      "Check the id with `squeue --me` (running) or `sacct -X` (finished)")


def collect(job: str, nnodes: int, stack: bool, python: str | None = None, run: Run = _run) -> list[dict]:
    """One collector per node of the job; each prints one JSON line {host, nodeid, tasks: [...]}."""
    argv = ["srun", f"--jobid={job}", "--overlap", "-N", str(nnodes), f"--ntasks={nnodes}", "--ntasks-per-node=1",
            "--quiet", "--kill-on-bad-exit=0", python or "python3", "-c", COLLECTOR.read_text(), job,
            "1" if stack else "0", py_spy_exe() or ""]
    r = run(argv, SRUN_TIMEOUT_S)
    nodes = []
    for line in r.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                nodes.append(json.loads(line))
            except ValueError:
                continue
    if not nodes:
        raise TriageError(f"srun --overlap into job {job} returned nothing (exit {r.returncode}): "
                          f"{(r.stderr or r.stdout).strip()[-600:]}",
                          "srun --overlap needs Slurm >= 20.11 and permission to start steps in the job "
                          "(your own job); python3 must be on the nodes' PATH (or pass python=)")
    return nodes


def slurm_check(job: str, stack: bool = False, python: str | None = None, run: Run = _run) -> ProcessCheckReport:
    """process_check for a Slurm job: every node's task processes, ranks mapped, the odd rank of a hang named."""
    job = str(job).strip()
    if not JOB_ID.match(job):
        raise TriageError(f"{job[:40]!r} is not a Slurm job id", "Pass the numeric id from squeue, e.g. job='123456'")
    if run is _run and not shutil.which("squeue"):
        raise TriageError("Slurm's commands (squeue, srun) are not on this machine's PATH",
                          "Start the server on a login node of the cluster, or use pid=/pattern= for local processes")
    st = job_state(job, run)
    report = ProcessCheckReport(pattern=f"slurm job {job}", window_s=0.5, processes=[])
    if st["state"] != "RUNNING":
        report.notes.append(f"job {job} is {st['state']}" + (f" (exit code {st['exit_code']})" if st.get("exit_code")
                            else "") + f" on {st['nodes'] or 'no node'}: nothing to inspect live; read its output "
                            "files (slurm-<id>_<task>.out or the job's --output) with tail_log")
        if st["state"] in ("PENDING", "CONFIGURING"):
            report.notes[-1] = f"job {job} is {st['state']}: it has not started on any node yet"
        return report
    nodes = collect(job, max(1, st["nnodes"]), stack, python, run)
    steps: dict[str, list[RankStack]] = {}
    world = None
    for node in nodes:
        for t in node.get("tasks", []):
            env = t.get("env", {})
            world = world or (int(env["WORLD_SIZE"]) if env.get("WORLD_SIZE", "").isdigit() else None)
            cpu = t.get("cpu_percent")
            state = {"R": "running", "S": "sleeping", "D": "disk-sleep", "Z": "zombie", "T": "stopped"}.get(
                t.get("state"), t.get("state", "?"))
            verdict = ("zombie" if state == "zombie" else "stopped" if state == "stopped" else
                       "possibly_hung" if cpu is not None and cpu < IDLE_CPU_PCT else "running")
            pi = ProcessInfo(pid=t["pid"], ppid=t.get("ppid"), cmdline=t.get("cmdline", ""), status=state,
                             cpu_percent=cpu, rss_mib=t.get("rss_mib"), threads=None, age_s=None, verdict=verdict,
                             why=f"{cpu}% CPU over 0.5 s on {node.get('host')}", rank=t["rank"],
                             host=node.get("host"))
            if stack:
                threads = parse_py_spy(t["stack"], t["pid"], t["rank"]) if t.get("stack") else []
                main = next((s for s in threads if s.main), None)
                rs = RankStack(rank=t["rank"], pid=t["pid"], host=node.get("host"), frames=main.frames if main else [],
                               error=t.get("stack_error") or (None if main else "no stack"))
                steps.setdefault(env.get("SLURM_STEP_ID", "?"), []).append(rs)
                report._rank_stacks.append(rs)
                pi.stack = "\n".join(f"  {f}" for f in rs.frames[:40]) or None
                pi.stack_note = rs.error
            report.processes.append(pi)
    report.processes.sort(key=lambda p: (p.rank if p.rank is not None else 1 << 30))
    report.notes.append(f"job {job} {st['state']} on {st['nodes']} ({st['nnodes']} node(s), {st['elapsed']}); "
                        f"{len(report.processes)} task process(es) found by one srun --overlap step per node")
    if not report.processes:
        report.notes.append("no task process of the job was found on its nodes (its steps may have ended, or they "
                            "belong to another user)")
    for step, stacks in sorted(steps.items()):  # ranks are numbered per step (srun)
        h = analyse(f"slurm {job}.{step}", stacks, world)
        report.jobs.append(h)
        majority = {(s.rank, s.pid) for s in stacks if h.odd and s.rank in h.odd.majority_ranks}
        idle = all((p.cpu_percent or 0.0) < WAITING_CPU_PCT for p in report.processes if (p.rank, p.pid) in majority)
        f = hang_finding(h, idle)
        if f is not None:
            report.findings.append(f)
    idle_ranks = [p for p in report.processes if p.verdict == "possibly_hung"]
    if idle_ranks and len(idle_ranks) == len(report.processes) and not report.findings:
        report.findings.append(Finding(
            failure_mode="hang", confidence=0.5, summary=f"every task of job {job} is idle (< {IDLE_CPU_PCT}% CPU)",
            evidence=[Evidence(what=f"rank {p.rank} on {p.host} CPU %", value=p.cpu_percent, source="/proc over 0.5 s")
                      for p in idle_ranks[:8]],
            fix=f"Call process_check(job='{job}', stack=True) to compare the ranks' stacks"))
    report._fr_jobs = {}  # dumps live on the nodes' local disks; read them with process_check on that node
    return report

