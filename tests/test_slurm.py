"""Slurm jobs: process_check(job=...) and live_status(run='job:...') collect every rank's stack through
`srun --jobid --overlap` and name the odd rank. On a real single-node cluster (slurmctld + slurmd + munge from
the distribution's packages, started here as root; skipped with the reason where that is impossible) and, for
the unit path, on recorded squeue/srun/scontrol output."""

import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import anyio
import psutil
import pytest

from conftest import PYTHON, inprocess_client, run
from tools.errors import TriageError
from tools.slurm import slurm_check

pytestmark = pytest.mark.xdist_group("slurm")  # its tests share a module-scoped fixture: one worker runs them all

FIX = Path(__file__).resolve().parent / "fixtures" / "slurm"
DAEMONS = ("munged", "slurmctld", "slurmd", "srun", "sbatch", "squeue", "scancel")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _replay(recorded: dict, seen: list):
    def run_(argv, timeout):
        seen.append(argv)
        r = recorded.get(argv[0], {"returncode": 1, "stdout": "", "stderr": f"{argv[0]}: not recorded"})
        return SimpleNamespace(returncode=r["returncode"], stdout=r["stdout"], stderr=r["stderr"])
    return run_


def test_recorded_srun_output_names_the_rank_in_another_collective():
    recorded = json.loads((FIX / "recorded_running.json").read_text())
    seen: list = []
    rep = slurm_check("6", stack=True, run=_replay(recorded, seen))
    srun = next(a for a in seen if a[0] == "srun")
    assert srun[1:7] == ["--jobid=6", "--overlap", "-N", "1", "--ntasks=1", "--ntasks-per-node=1"]
    assert sorted(p.rank for p in rep.processes) == [0, 1, 2, 3] and {p.host for p in rep.processes} == {"vm"}
    [h] = rep.jobs
    assert (h.odd.rank, h.odd.kind, h.odd.collective, h.odd.majority_collective) == \
        (3, "different_collective", "barrier", "all_reduce")
    f = rep.findings[0]
    assert f.failure_mode == "hang" and f.summary.startswith("rank 3 on vm") and \
        f.location.endswith("skip_all_reduce_srun.py:13")


def test_recorded_ended_job_says_where_to_read_instead():
    recorded = {"squeue": {"returncode": 0, "stdout": "", "stderr": ""},
                "sacct": {"returncode": 1, "stdout": "", "stderr": "Slurm accounting storage is disabled\n"},
                "scontrol": {"returncode": 0, "stderr": "", "stdout": (FIX / "scontrol_show_job_cancelled.txt").read_text()}}
    rep = slurm_check("6", run=_replay(recorded, []))
    assert not rep.processes and "CANCELLED" in rep.notes[0] and "tail_log" in rep.notes[0]
    with pytest.raises(TriageError, match="not a Slurm job id"):
        slurm_check("6; rm -rf /", run=_replay(recorded, []))


# ---- a real single-node cluster --------------------------------------------------------------------

def _why_no_slurm() -> str | None:
    missing = [d for d in DAEMONS if not shutil.which(d)]
    if missing:
        return f"Slurm/munge not installed ({', '.join(missing)} missing): apt-get install slurmctld slurmd slurm-client munge"
    if os.geteuid() != 0:
        return "starting slurmctld/slurmd/munged needs root"
    if not Path("/etc/munge/munge.key").exists():
        return "no /etc/munge/munge.key (the munge package creates it)"
    return None


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    """munged, slurmctld and slurmd for this host on free ports, 8 CPUs, one partition; torn down at the end."""
    why = _why_no_slurm()
    if why:
        pytest.skip(why)
    d = tmp_path_factory.mktemp("slurm")
    for sub in ("state", "spool", "munge"):
        (d / sub).mkdir()
    host = socket.gethostname().split(".")[0]
    conf = d / "slurm.conf"
    conf.write_text("\n".join([
        "ClusterName=mltriage", f"SlurmctldHost={host}", f"SlurmctldPort={_free_port()}", f"SlurmdPort={_free_port()}",
        "AuthType=auth/munge", f"AuthInfo=socket={d}/munge/munge.sock", "CredType=cred/munge", "MpiDefault=none",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "ReturnToService=2", "SlurmUser=root",
        "SlurmdUser=root", f"StateSaveLocation={d}/state", f"SlurmdSpoolDir={d}/spool",
        f"SlurmctldPidFile={d}/slurmctld.pid", f"SlurmdPidFile={d}/slurmd.pid", f"SlurmctldLogFile={d}/slurmctld.log",
        f"SlurmdLogFile={d}/slurmd.log", "SchedulerType=sched/builtin", "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core", "SlurmdParameters=config_overrides", "JobCompType=jobcomp/none",
        "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
        f"NodeName={host} CPUs=8 RealMemory=2000 State=UNKNOWN",
        f"PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES", ""]))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    started = []
    try:
        for argv in ([shutil.which("munged"), "--force", f"--socket={d}/munge/munge.sock",
                      f"--pid-file={d}/munge/munged.pid", f"--log-file={d}/munge/munged.log",
                      f"--seed-file={d}/munge/seed", "--key-file=/etc/munge/munge.key"],
                     [shutil.which("slurmctld"), "-f", str(conf), "-i"], [shutil.which("slurmd"), "-f", str(conf)]):
            r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
            if r.returncode != 0:
                pytest.skip(f"{Path(argv[0]).name} did not start: {(r.stderr or r.stdout).strip()[-300:]}")
            started.append(argv[0])
        deadline = time.monotonic() + 30
        while subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True).stdout.strip() != "idle":
            if time.monotonic() > deadline:
                pytest.skip(f"the Slurm node never became idle: {(d / 'slurmd.log').read_text()[-500:]}")
            time.sleep(0.3)
        old = os.environ.get("SLURM_CONF")
        os.environ["SLURM_CONF"] = str(conf)  # the server (in-process) and its srun/squeue find this cluster
        yield SimpleNamespace(env=env, dir=d)
        if old is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = old
    finally:
        subprocess.run(["scancel", "--user=root"], env=env, capture_output=True)
        deadline = time.monotonic() + 10  # jobs first: their steps report to slurmd through munge
        while time.monotonic() < deadline and subprocess.run(
                ["squeue", "-h"], env=env, capture_output=True, text=True).stdout.strip():
            time.sleep(0.2)
        daemons = []
        for pidfile in (d / "slurmd.pid", d / "slurmctld.pid", d / "munge" / "munged.pid"):
            try:
                daemons.append(psutil.Process(int(pidfile.read_text().strip())))
            except (OSError, ValueError, psutil.Error):
                pass
        for p in daemons:
            try:
                p.terminate()
            except psutil.Error:
                pass
        for p in psutil.wait_procs(daemons, timeout=5)[1]:
            p.kill()


def test_real_slurm_job_odd_rank_named_through_srun_overlap(slurm, workspace):
    out = workspace / "job.out"
    job = subprocess.run(["sbatch", "--parsable", "-n", "3", "-o", str(out), "--wrap",
                          f"srun {PYTHON} {FIX / 'skip_all_reduce_srun.py'}"], cwd=workspace, capture_output=True,
                         text=True, env={**slurm.env, "PORT": str(_free_port()), "OMP_NUM_THREADS": "1"})
    assert job.returncode == 0, job.stderr
    jid = job.stdout.strip().split(";")[0]
    try:
        async def body():
            async with inprocess_client(workspace) as c:
                deadline = time.monotonic() + 90
                while True:
                    r = await c.call_tool("process_check", {"job": jid, "stack": True})
                    assert not r.is_error, r
                    rep = r.structured_content
                    if rep["jobs"] and rep["jobs"][0]["odd"]:
                        break
                    assert time.monotonic() < deadline, (rep, out.read_text() if out.exists() else "")
                    await anyio.sleep(0.5)
                s = await c.call_tool("live_status", {"run": f"job:{jid}", "what": ["stack", "ranks"]})
                return rep, s.structured_content

        rep, live = run(body)
    finally:
        subprocess.run(["scancel", jid], env=slurm.env, capture_output=True)
    host = socket.gethostname().split(".")[0]
    odd = rep["jobs"][0]["odd"]
    assert (odd["rank"], odd["host"], odd["kind"]) == (2, host, "different_collective")
    assert sorted(p["rank"] for p in rep["processes"]) == [0, 1, 2]
    assert rep["findings"][0]["location"].endswith("skip_all_reduce_srun.py:13")
    assert {s["rank"] for s in live["stacks"]} == {0, 1, 2}
    assert next(r for r in live["ranks"] if r["rank"] == 2)["verdict"].startswith("ODD ONE")

