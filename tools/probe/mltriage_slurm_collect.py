"""Runs on one node of a Slurm job (one `srun --overlap` task per node); prints one JSON line. Stdlib only.

argv: <job id> <stack: 0|1> [<py-spy path hint>]. Finds the job's task processes on this node (SLURM_JOB_ID in
their environment, not this collector's own step), maps each to its rank (RANK, else SLURM_PROCID), samples
CPU over half a second from /proc, and dumps each rank's Python stack with py-spy when asked. Sent to the
node as `python3 -c <this file's text>`, so nothing has to be installed there but python3 (and py-spy for
stacks).
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

KEYS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_STEP_ID",
        "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT", "TORCH_FR_BUFFER_SIZE",
        "TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
TICK = os.sysconf("SC_CLK_TCK")


def _read(path: str, mode: str = "rb"):
    try:
        with open(path, mode) as f:
            return f.read()
    except OSError:
        return None


def _env(pid: int) -> dict:
    raw = _read(f"/proc/{pid}/environ") or b""
    out = {}
    for item in raw.split(b"\0"):
        k, _, v = item.decode(errors="replace").partition("=")
        if k in KEYS:
            out[k] = v
    return out


def _stat(pid: int):
    raw = _read(f"/proc/{pid}/stat", "r")
    if not raw:
        return None
    fields = raw[raw.rindex(")") + 2:].split()
    return {"state": fields[0], "ppid": int(fields[1]), "cpu_ticks": int(fields[11]) + int(fields[12]),
            "rss_pages": int(fields[21])}


def main() -> None:
    job, want_stack = sys.argv[1], sys.argv[2] == "1"
    hint = sys.argv[3] if len(sys.argv) > 3 else ""
    me, my_step = os.getpid(), os.environ.get("SLURM_STEP_ID")
    procs = {}
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        env = _env(int(name))
        if env.get("SLURM_JOB_ID") != job or env.get("SLURM_STEP_ID") == my_step or "SLURM_PROCID" not in env:
            continue
        st = _stat(int(name))
        cmd = (_read(f"/proc/{name}/cmdline") or b"").replace(b"\0", b" ").decode(errors="replace").strip()
        if st and cmd:
            procs[int(name)] = {"pid": int(name), "env": env, "cmdline": cmd[:1000], **st}
    time.sleep(0.5)
    for pid, p in procs.items():
        st = _stat(pid)
        p["cpu_percent"] = round(100.0 * (st["cpu_ticks"] - p["cpu_ticks"]) / TICK / 0.5, 1) if st else None
        p["rss_mib"] = round(p["rss_pages"] * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)
    # the task of each rank: RANK where a launcher (torchrun) set it, else the Slurm task id; the topmost
    # python process of that rank (its DataLoader workers and a shell wrapper around it share the id)
    use_rank = any("RANK" in p["env"] for p in procs.values())
    tasks = {}
    for pid, p in procs.items():
        if use_rank and "RANK" not in p["env"]:
            continue
        rank = int(p["env"]["RANK"] if use_rank else p["env"]["SLURM_PROCID"])
        key = (p["env"].get("SLURM_STEP_ID"), rank)
        parent = procs.get(p["ppid"])
        same = parent is not None and (parent["env"].get("RANK") if use_rank else parent["env"].get("SLURM_PROCID")) \
            == p["env"].get("RANK" if use_rank else "SLURM_PROCID")
        is_py = "python" in os.path.basename(p["cmdline"].split(" ")[0])
        parent_py = same and "python" in os.path.basename(parent["cmdline"].split(" ")[0])
        if same and parent_py:
            continue  # a worker of a python rank
        best = tasks.get(key)
        if best is None or (is_py and not best["is_py"]):
            tasks[key] = {**p, "rank": rank, "is_py": is_py}
    if any((k[0] or "").isdigit() for k in tasks):  # the batch script (step "batch") only launched the srun
        tasks = {k: t for k, t in tasks.items() if (k[0] or "").isdigit()}
    exe = shutil.which("py-spy") or (hint if hint and os.path.exists(hint) else None) \
        or next((c for c in [os.path.join(os.path.dirname(sys.executable), "py-spy")] if os.path.exists(c)), None)

    def dump(t):
        if not want_stack:
            return t
        if exe is None:
            t["stack_error"] = "py-spy is not installed on this node (pip install py-spy)"
            return t
        try:
            r = subprocess.run([exe, "dump", "--pid", str(t["pid"]), "--json", "--nonblocking", "--locals"],
                               capture_output=True, text=True, timeout=10)
            if r.returncode == 0:
                t["stack"] = json.loads(r.stdout or "[]")
            else:
                t["stack_error"] = (r.stderr or r.stdout).strip()[-400:]
        except (subprocess.TimeoutExpired, ValueError) as e:
            t["stack_error"] = f"py-spy: {e}"
        return t

    with ThreadPoolExecutor(max_workers=8) as pool:
        found = list(pool.map(dump, tasks.values()))
    for t in found:
        for k in ("cpu_ticks", "rss_pages", "is_py"):
            t.pop(k, None)
    print(json.dumps({"host": socket.gethostname(), "nodeid": os.environ.get("SLURM_NODEID"),
                      "tasks": sorted(found, key=lambda t: t["rank"])}), flush=True)


main()
