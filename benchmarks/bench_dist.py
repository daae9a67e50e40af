"""Distributed diagnosis on CPU (gloo under torchrun): is the odd rank of a hang named, and how close is the
straggler ratio live_status reports to the slowdown injected into one rank?

    python benchmarks/bench_dist.py [--factors 1.5 2 3 4] [--nproc 3]

Each straggler row is a fresh torchrun job of tests/fixtures/dist/straggler.py with rank 1 sleeping
`factor` times as long per sample as the others (the sleep is the reference, measured in the same run as
the ranks' own compute); the hang row is tests/fixtures/dist/skip_all_reduce.py (4 ranks, rank 3 skips an
all_reduce) read by process_check (stacks) and live_status (flight recorder).
"""

import argparse
import os
import socket
import sys
import time
from pathlib import Path
from tempfile import TemporaryDirectory

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
FIX = ROOT / "tests" / "fixtures" / "dist"

from tools import live  # noqa: E402
from tools.processes import process_check, read_flight_recorder  # noqa: E402


def _torchrun(script: Path, nproc: int) -> list[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--master-addr",
            "127.0.0.1", "--master-port", str(port), str(script)]


async def _until_steps(root: Path, rid: str, nproc: int, steps: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while True:
        s = await live.status(root, rid, ["progress"])
        if len(s.progress) == nproc and min(p.step for p in s.progress) >= steps:
            return
        if s.run.status not in ("starting", "running") or time.monotonic() > deadline:
            raise RuntimeError(f"run {rid} is {s.run.status}")
        await anyio.sleep(0.5)


async def straggler(factor: float, nproc: int, steps: int) -> dict:
    with TemporaryDirectory() as d:
        root = Path(d).resolve()
        os.environ.update(SLOW_RANK="1", SLOW_FACTOR=str(factor), OMP_NUM_THREADS="1")
        rid = live.launch(root, _torchrun(FIX / "straggler.py", nproc), root / "s.log").run.id
        try:
            await _until_steps(root, rid, nproc, steps)
            s = await live.status(root, rid, ["ranks"])
        finally:
            await live.action(root, rid, "stop", wait_s=1)
        t = {x.rank: x for x in s.rank_timing}
        f = next((f for f in s.findings if f.failure_mode == "slow_throughput"), None)
        return {"factor": factor, "named": f.location if f else "nobody", "ratio": t[1].ratio_to_median,
                "data_ms": t[1].data_ms, "others_data_ms": min(x.data_ms for r, x in t.items() if r != 1),
                "compute_ms": t[1].compute_ms, "where": ("data" if f and "waiting for data" in f.summary else
                                                         "compute" if f else "-")}


async def hang() -> dict:
    with TemporaryDirectory() as d:
        root = Path(d).resolve()
        os.environ.update(TORCH_FR_BUFFER_SIZE="200", OMP_NUM_THREADS="1")
        started = live.launch(root, _torchrun(FIX / "skip_all_reduce.py", 4), root / "h.log").run
        t0 = time.monotonic()
        try:
            while True:  # every rank is in its collective once the stacks group 3 + 1
                rep = process_check(pid=started.pid, stack=True)
                if rep.jobs and rep.jobs[0].odd:
                    break
                if time.monotonic() - t0 > 120:
                    raise RuntimeError("no odd rank within 120 s")
                await anyio.sleep(0.5)
            t1 = time.monotonic()
            rep = process_check(pid=started.pid, stack=True)
            stacks_s = time.monotonic() - t1
            t1 = time.monotonic()
            s = await live.status(root, started.id, ["ranks"])
            fr_s = time.monotonic() - t1
        finally:
            await live.action(root, started.id, "stop", wait_s=1)
            os.environ.pop("TORCH_FR_BUFFER_SIZE", None)
        m = s.flight_recorder.mismatches[0] if s.flight_recorder and s.flight_recorder.mismatches else None
        return {"odd_from_stacks": rep.jobs[0].odd.rank, "kind": rep.jobs[0].odd.kind, "stacks_s": stacks_s,
                "fr_odd": m.odd_ranks if m else None, "fr_seq": m.seq if m else None, "fr_s": fr_s}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--factors", type=float, nargs="+", default=[1.5, 2.0, 3.0, 4.0])
    ap.add_argument("--nproc", type=int, default=3)
    ap.add_argument("--steps", type=int, default=12)
    a = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores\n")
    print("| injected slowdown of rank 1 (data sleep) | rank named | measured ratio to median busy | measured / injected | "
          "where | rank 1 data ms | others' data ms | rank 1 compute ms |")
    print("|---|---|---|---|---|---|---|---|")
    for f in a.factors:
        r = anyio.run(straggler, f, a.nproc, a.steps)
        print(f"| {f:g}x | {r['named']} | {r['ratio']:.2f}x | {r['ratio'] / f:.2f} | {r['where']} | "
              f"{r['data_ms']:.1f} | {r['others_data_ms']:.1f} | {r['compute_ms']:.1f} |")
    h = anyio.run(hang)
    print("\n| hang: 4 ranks, rank 3 skips an all_reduce | result | time of the call |")
    print("|---|---|---|")
    print(f"| odd rank from every rank's stack (process_check) | rank {h['odd_from_stacks']} ({h['kind']}) | "
          f"{h['stacks_s']:.2f} s |")
    print(f"| flight recorder via live_status ranks (torch's analyser) | ranks {h['fr_odd']} at collective "
          f"#{h['fr_seq']} | {h['fr_s']:.2f} s |")


if __name__ == "__main__":
    main()
