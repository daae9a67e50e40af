"""Evidence tools against their anchors; prints a markdown table.

    python benchmarks/bench_evidence.py            # full sizes: 100 MB and 2 GB tails, 1 GB log_metrics
    python benchmarks/bench_evidence.py --quick    # 10 MB / 200 MB / 50 MB

(a) stdio cold start over the SDK's own transport: spawn -> tools/list answered and spawn -> first
    tools/call answered (tail_log on a small log), median of N spawns interleaved with an empty
    one-tool MCPServer (spawn -> tools/list, spawn -> its one tool called) measured in the same run,
    and the server's CPU time for the session; the same against an empty server that also imports
    with the collector off, as `mltriage serve` does; what importing the server costs beyond the
    SDK; whether it pulls in torch, numpy or matplotlib;
(b) tail_log(lines=50) on generated logs next to `tail -n 50` on the same files;
(c) log_metrics on a generated training log: MB/s and peak RSS (the caller and its scan workers),
    measured in a fresh subprocess.
Generated files live in a temp dir and are deleted afterwards.
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PY = sys.executable
MB = 1 << 20

EMPTY_SERVER = textwrap.dedent("""
    from mcp.server.mcpserver import MCPServer
    mcp = MCPServer("empty")

    @mcp.tool()
    def ping() -> str:
        \"\"\"Answer pong.\"\"\"
        return "pong"

    mcp.run()
""")
# The same empty server importing the way `mltriage serve` does (collector off, then frozen): the
# ratio to it is what our own imports and registrations cost, with the collector's share taken out.
EMPTY_SERVER_FROZEN = "import gc\ngc.disable()\n" + EMPTY_SERVER.replace("\nmcp.run()", "\ngc.freeze()\ngc.enable()\nmcp.run()")


def _children_cpu() -> float:
    """CPU seconds of this process's live children (the server), read before the session closes."""
    import psutil

    total = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            t = child.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


async def _spawn_list_call(command: list[str], cwd: Path, tool: str, arguments: dict) -> tuple[float, float, float]:
    """Seconds from spawn to the tools/list answer, from spawn to the first tools/call answer, and the
    server's CPU seconds up to that answer, which machine load hardly moves."""
    from mcp.client import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(command=command[0], args=command[1:], cwd=str(cwd), env={"PYTHONPATH": str(ROOT)})
    t = time.perf_counter()
    async with Client(params) as client:
        await client.list_tools()
        listed = time.perf_counter() - t
        result = await client.call_tool(tool, arguments)
        called = time.perf_counter() - t
        cpu = _children_cpu()
    assert not result.is_error, result
    return listed, called, cpu


def _modules_after(code: str) -> str:
    return subprocess.run([PY, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True).stdout.strip() or "none"


BEYOND_SDK = textwrap.dedent("""
    import gc, time
    gc.disable()  # as `mltriage serve` imports
    import mcp.server.mcpserver
    t = time.process_time()
    import server.app
    print(time.process_time() - t)
""")


def cold_start(tmp: Path, runs: int = 7) -> dict:
    empty = tmp / "empty_server.py"
    empty.write_text(EMPTY_SERVER)
    frozen = tmp / "empty_server_frozen.py"
    frozen.write_text(EMPTY_SERVER_FROZEN)
    ws = tmp / "startup-ws"
    ws.mkdir()
    (ws / "train.log").write_text("".join(f"step {i} | loss {2.3 - i / 100:.3f}\n" for i in range(100)))
    ours = [PY, "-m", "server", "--workspace", str(ws)]
    mine, base, base_frozen, beyond = [], [], [], []
    for _ in range(runs):  # interleaved so machine load hits all alike
        mine.append(anyio.run(_spawn_list_call, ours, ROOT, "tail_log", {"path": "train.log"}))
        base.append(anyio.run(_spawn_list_call, [PY, str(empty)], tmp, "ping", {}))
        base_frozen.append(anyio.run(_spawn_list_call, [PY, str(frozen)], tmp, "ping", {}))
        beyond.append(float(_modules_after(BEYOND_SDK)))
    heavy = _modules_after("import sys, server.app; print(','.join(m for m in ('torch', 'matplotlib', 'numpy') if m in sys.modules))")
    med = lambda xs, i: statistics.median(x[i] for x in xs)  # noqa: E731
    return {"runs": runs, "list": med(mine, 0), "call": med(mine, 1), "cpu": med(mine, 2), "empty_list": med(base, 0),
            "empty_call": med(base, 1), "empty_cpu": med(base, 2), "frozen_list": med(base_frozen, 0),
            "frozen_call": med(base_frozen, 1), "frozen_cpu": med(base_frozen, 2), "beyond": statistics.median(beyond), "heavy": heavy}


def _line(i: int, n: int, rnd: random.Random) -> str:
    loss = 0.3 + 2.2 * (1 - i / n) ** 3 + rnd.gauss(0, 0.05)
    return (f"2025-03-14 12:{i // 60 % 60:02d}:{i % 60:02d},{i % 1000:03d} INFO [train.py:212] step {i} | loss {loss:.4f} "
            f"| lr {3e-4 * (1 - i / n):.3e} | grad_norm {0.5 + rnd.random():.3f} | 94.1 ms/it\n")


def write_log(path: Path, size: int, sparse_head: int = 0) -> None:
    """A realistic training log of `size` bytes; with `sparse_head`, the first bytes are a hole (fast, no disk)."""
    rnd = random.Random(0)
    with open(path, "wb") as f:
        if sparse_head:
            f.truncate(sparse_head)
            f.seek(sparse_head)
        n_est = max(1, (size - sparse_head) // 120)
        i, written = 0, sparse_head
        while written < size:
            buf = []
            for _ in range(20000):
                buf.append(_line(i, n_est, rnd))
                if i % 500 == 0:
                    buf.append(f"2025-03-14 12:00:00,000 INFO [train.py:240] eval step {i} val_loss {0.4 + 2.2 * (1 - i / n_est) ** 3:.4f} val_acc {i / n_est:.3f}\n")
                if i % 5000 == 0:
                    buf.append("/w/train.py:88: UserWarning: Detected call of `lr_scheduler.step()` before `optimizer.step()`.\n")
                i += 1
            data = "".join(buf).encode()[: size - written]
            f.write(data)
            written += len(data)


def bench_tail(path: Path, runs: int = 21) -> tuple[float, float]:
    from tools.logs import tail_log

    ours, tail = [], []
    for _ in range(runs):
        t = time.perf_counter()
        tail_log(path, 50)
        ours.append(time.perf_counter() - t)
        t = time.perf_counter()
        subprocess.run(["tail", "-n", "50", str(path)], stdout=subprocess.DEVNULL, check=True)
        tail.append(time.perf_counter() - t)
    return statistics.median(ours), statistics.median(tail)


MEASURE = textwrap.dedent("""
    import json, resource, sys, threading, time
    from pathlib import Path
    import psutil
    import tools.logs
    from tools.logs import log_metrics

    if sys.argv[2] == "in-process":  # the anchor: the same parser without scan workers
        tools.logs._PARALLEL_MIN = 1 << 62

    def status_kb(field):  # VmHWM/VmRSS are per address space: unlike ru_maxrss, not inherited across exec
        for line in open("/proc/self/status"):
            if line.startswith(field + ":"):
                return int(line.split()[1])

    me, peak, done = psutil.Process(), [0], threading.Event()

    def sample():  # the caller and its scan workers together, every 10 ms
        while not done.is_set():
            total = me.memory_info().rss
            for c in me.children(recursive=True):
                try:
                    total += c.memory_info().rss
                except psutil.Error:
                    pass
            peak[0] = max(peak[0], total)
            time.sleep(0.01)

    base = status_kb("VmRSS")
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    cpu = lambda: sum(u.ru_utime + u.ru_stime for u in map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)))
    t, c = time.perf_counter(), cpu()
    r = log_metrics(Path(sys.argv[1]))
    dt = time.perf_counter() - t
    done.set()
    sampler.join()
    print(json.dumps({"seconds": dt, "cpu_s": cpu() - c, "bytes": r.bytes_read, "peak_kb": peak[0] // 1024, "main_hwm_kb": status_kb("VmHWM"),
                      "base_kb": base, "series": len(r.series), "points": max(s.count for s in r.series),
                      "shape": r.shape}))
""")


def bench_metrics(path: Path, mode: str = "default") -> dict:
    out = subprocess.run([PY, "-c", MEASURE, str(path), mode], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True).stdout
    return json.loads(out)


def metrics_runs(path: Path, runs: int) -> tuple[list[dict], list[dict]]:
    """`runs` measurements of log_metrics as shipped and of the in-process parser, interleaved."""
    ours, anchor = [], []
    for _ in range(runs):
        ours.append(bench_metrics(path))
        anchor.append(bench_metrics(path, "in-process"))
    return ours, anchor


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    ap.add_argument("--metrics-runs", type=int, default=5, help="log_metrics measurements (default 5)")
    ap.add_argument("--startup-runs", type=int, default=7, help="spawns of each server for the cold start (default 7)")
    ap.add_argument("--startup-only", action="store_true", help="measure the cold start and nothing else")
    args = ap.parse_args()
    small, big, metrics_size = (10 * MB, 200 * MB, 50 * MB) if args.quick else (100 * MB, 2048 * MB, 1024 * MB)
    rows = []
    with tempfile.TemporaryDirectory(prefix="mltriage-bench-") as d:
        tmp = Path(d)
        cs = cold_start(tmp, args.startup_runs)
        n = cs["runs"]
        rows.append((f"stdio cold start, spawn -> tools/list answered (median of {n})", f"{cs['list']:.2f} s",
                     f"empty one-tool MCPServer, interleaved: {cs['empty_list']:.2f} s",
                     f"{cs['list'] / cs['empty_list']:.2f}x", "<= 1.2x"))
        rows.append((f"stdio cold start, spawn -> first tools/call answered (tail_log; median of {n})",
                     f"{cs['call']:.2f} s", f"empty one-tool MCPServer calling its tool: {cs['empty_call']:.2f} s",
                     f"{cs['call'] / cs['empty_call']:.2f}x", "<= 1.2x"))
        rows.append((f"stdio cold start, server CPU time from spawn to the first tools/call answered (median of {n})", f"{cs['cpu']:.2f} s",
                     f"empty one-tool MCPServer: {cs['empty_cpu']:.2f} s", f"{cs['cpu'] / cs['empty_cpu']:.2f}x", ""))
        rows.append(("... the same three against an empty MCPServer that also imports with the collector off",
                     f"{cs['list']:.2f} / {cs['call']:.2f} / {cs['cpu']:.2f} s",
                     f"{cs['frozen_list']:.2f} / {cs['frozen_call']:.2f} / {cs['frozen_cpu']:.2f} s",
                     f"{cs['list'] / cs['frozen_list']:.2f}x / {cs['call'] / cs['frozen_call']:.2f}x / "
                     f"{cs['cpu'] / cs['frozen_cpu']:.2f}x", ""))
        rows.append(("importing the server beyond the SDK (server.app after mcp.server.mcpserver, CPU; median)",
                     f"{cs['beyond'] * 1000:.0f} ms", "", "", ""))
        rows.append(("heavy modules imported by the server", cs["heavy"], "", "", "none (no torch)"))

        if args.startup_only:
            return _print(rows)
        for size, sparse in ((small, 0), (big, big - 64 * MB)):
            p = tmp / f"tail_{size // MB}.log"
            write_log(p, size, sparse_head=sparse)
            ours, tail = bench_tail(p)
            kind = f"{size // MB} MB" + (" (sparse head, 64 MB text tail)" if sparse else "")
            rows.append((f"tail_log lines=50, {kind}", f"{ours * 1000:.2f} ms", f"tail -n 50: {tail * 1000:.2f} ms",
                         f"{ours / tail:.2f}x", "flat in size, <= 5 ms"))
            p.unlink()

        p = tmp / "metrics.log"
        write_log(p, metrics_size)
        ours, anchor = metrics_runs(p, args.metrics_runs)
        p.unlink()
        speed = lambda ms: sorted(x["bytes"] / MB / x["seconds"] for x in ms)  # noqa: E731
        mbps, base = speed(ours), speed(anchor)
        m = ours[0]
        rows.append((f"log_metrics, {metrics_size // MB} MB log ({m['points']:,} steps, {m['series']} series), "
                     f"median of {len(mbps)} (min-max)",
                     f"{statistics.median(mbps):.0f} MB/s ({mbps[0]:.0f}-{mbps[-1]:.0f})",
                     f"in-process parser, interleaved: {statistics.median(base):.0f} MB/s ({base[0]:.0f}-{base[-1]:.0f})",
                     f"{statistics.median(mbps) / statistics.median(base):.2f}x; {statistics.median(mbps) / 100:.2f}x of target",
                     ">= 100 MB/s"))
        busy = statistics.median(x["cpu_s"] / x["seconds"] for x in ours)
        rows.append(("log_metrics cores busy (CPU time / wall time, caller + workers, median)", f"{busy:.2f}",
                     f"of {len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()} cores",
                     "", ""))
        m = max(ours, key=lambda x: x["peak_kb"])
        rows.append(("log_metrics peak RSS, caller + scan workers (sampled every 10 ms)", f"{m['peak_kb'] / 1024:.0f} MB",
                     f"caller alone: {m['main_hwm_kb'] / 1024:.0f} MB peak, {m['base_kb'] / 1024:.0f} MB after imports",
                     f"{m['peak_kb'] / 1024 / 300:.2f}x of limit", "<= 300 MB"))
    _print(rows)


def _print(rows) -> None:
    load = os.getloadavg()
    print(f"\nmachine: {os.cpu_count()} cores, load average {load[0]:.1f} / {load[1]:.1f}, Python {sys.version.split()[0]}\n")
    print("| measurement | mltriage | anchor | ratio | target |")
    print("| --- | --- | --- | --- | --- |")
    for r in rows:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()
