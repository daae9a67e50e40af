"""What a probe call costs from a fresh interpreter and from the shared fork server, measured in one run.

Every probe runs in the user's interpreter as its own process. Started fresh, that process pays `import torch`
and, at its first optimizer, `import torch._dynamo` (seconds each on a 2-core machine) before it measures
anything; forked from the fork server (tools/probe/mltriage_forkserver.py), it starts with both imported. Rounds
alternate fresh and forked calls of the same probe on the same toy example (this box is shared) and the table
gives the median wall time of each and their ratio.

    .venv/bin/python benchmarks/probe_start.py [--rounds 5]
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tools import probes as P  # noqa: E402
from tools.probe_runner import SHARED_FORKS, ForkServers  # noqa: E402

CALLS = [  # (probe tool, example): one-step probes, where the process start is most of the cost
    ("grad_norm_snapshot", "dead_relus"),
    ("init_loss_check", "bad_init"),
    ("nan_hook_run", "nan_log_zero"),
    ("overfit_test", "healthy_mlp"),
]


class Fresh(ForkServers):
    """No fork server: every probe starts as a fresh interpreter (what MLTRIAGE_FORKSERVER=0 does)."""

    def ready(self, interpreter, env):
        return None


async def call(ws: Path, tool: str, example: str) -> float:
    t = time.monotonic()
    await getattr(P, tool)(ws, target=f"{example}/train.py:make_target")
    return time.monotonic() - t


async def main(rounds: int) -> None:
    ws = Path(tempfile.mkdtemp(prefix="mltriage-bench-start-"))
    for _, example in CALLS:
        shutil.copytree(ROOT / "examples" / example, ws / example, dirs_exist_ok=True)
    with anyio.fail_after(300):  # the shared fork server imports torch once before the first forked call
        while SHARED_FORKS.ready(sys.executable, dict(os.environ)) is None:
            await anyio.sleep(0.2)
    times = {(tool, how): [] for tool, _ in CALLS for how in ("fresh", "forked")}
    for _ in range(rounds):
        for tool, example in CALLS:
            with Fresh():
                times[tool, "fresh"].append(await call(ws, tool, example))
            times[tool, "forked"].append(await call(ws, tool, example))
    shutil.rmtree(ws, ignore_errors=True)
    print(f"{rounds} rounds, load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores\n")
    print("| probe (example) | fresh interpreter, median s | forked, median s | fresh / forked |")
    print("|---|---|---|---|")
    for tool, example in CALLS:
        fresh, forked = statistics.median(times[tool, "fresh"]), statistics.median(times[tool, "forked"])
        print(f"| {tool} ({example}) | {fresh:.2f} | {forked:.2f} | {fresh / forked:.1f}x |")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    anyio.run(main, ap.parse_args().rounds)
