"""Run `triage` on every bundled example and print a confusion table against its labelled failure mode.

    python benchmarks/triage_accuracy.py [--only NAME ...] [--steps 60] [--jobs 2]

Each example is copied into a fresh workspace, its broken train.py runs for --steps to produce a real
log (the hang example is cut off by a timeout, as a user would), then triage gets the target factory,
the log and the source. Targets (issue 6): top-1 >= 90%, top-3 100%, no false alarm on healthy runs.
"""

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tools.triage import run_triage  # noqa: E402


def one(example: Path, steps: int) -> dict:
    meta = json.loads((example / "example.json").read_text())
    ws = Path(tempfile.mkdtemp(prefix=f"mltriage-acc-{example.name}-"))
    try:
        shutil.copy(example / "train.py", ws / "train.py")
        (ws / "logs").mkdir()
        with open(ws / "logs" / "train.log", "w") as log:
            try:
                subprocess.run([sys.executable, "train.py", "--steps", str(steps)], cwd=ws, stdout=log,
                               stderr=subprocess.STDOUT, timeout=30)
            except subprocess.TimeoutExpired:
                pass
        t = time.monotonic()
        rep = anyio.run(lambda: run_triage(ws, "train.py:make_target", None, ws / "logs" / "train.log",
                                           "logs/train.log", [ws / "train.py"], None, 120.0))
        modes = [f.failure_mode for f in rep.findings]
        return {"name": example.name, "label": meta["failure_mode"], "predicted": modes[:3],
                "confidence": [round(f.confidence, 2) for f in rep.findings[:3]], "seconds": time.monotonic() - t,
                "steps": {s.name: s.status for s in rep.steps}}
    finally:
        shutil.rmtree(ws, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    examples = sorted(p for p in (ROOT / "examples").iterdir() if (p / "example.json").exists())
    if a.only:
        examples = [p for p in examples if p.name in a.only]
    with ThreadPoolExecutor(a.jobs) as pool:
        rows = list(pool.map(lambda e: one(e, a.steps), examples))
    if a.json:
        print(json.dumps(rows, indent=1))
    print("| example | label | top-1 | top-3 | confidences | s |")
    print("|---|---|---|---|---|---|")
    broken = [r for r in rows if r["label"] != "healthy"]
    healthy = [r for r in rows if r["label"] == "healthy"]
    for r in rows:
        top1 = r["predicted"][0] if r["predicted"] else "-"
        mark1 = "ok" if top1 == r["label"] else "MISS"
        mark3 = "ok" if r["label"] in r["predicted"] else "MISS"
        print(f"| {r['name']} | {r['label']} | {top1} ({mark1}) | {', '.join(r['predicted'])} ({mark3}) "
              f"| {r['confidence']} | {r['seconds']:.1f} |")
    top1 = sum(r["predicted"][:1] == [r["label"]] for r in broken)
    top3 = sum(r["label"] in r["predicted"] for r in broken)
    alarms = sum(r["predicted"][:1] != ["healthy"] for r in healthy)
    print(f"\nbroken runs: {len(broken)}; top-1 {top1}/{len(broken)} = {top1 / max(1, len(broken)):.0%}; "
          f"top-3 {top3}/{len(broken)} = {top3 / max(1, len(broken)):.0%}; "
          f"false alarms on healthy runs: {alarms}/{len(healthy)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
