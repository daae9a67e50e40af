"""Reading a 1M-step TensorBoard event file and a 1M-step W&B offline run: `log_metrics` (tools/stores.py plus
the series statistics and curve shapes) against each library's own reader used directly, in the same run.

Each measurement is a fresh interpreter started by a small wrapper that reports the wall time of the whole
child (imports included) and the child's peak RSS (`getrusage(RUSAGE_CHILDREN).ru_maxrss`, so one
measurement's peak never leaks into another's). The stores are written once with the libraries themselves
(SummaryWriter, `wandb.init(mode="offline")`) and kept in $MLTRIAGE_BENCH_CACHE (default
/tmp/mltriage-bench-stores): writing the W&B run takes ~4 minutes.

References:
- TensorBoard `EventAccumulator` (size_guidance scalars=0: every point), the documented way to read a logdir's
  scalars, and its `LegacyEventFileLoader` looped over directly (the floor: parse events, keep the points);
- W&B: wandb (0.2x and later) has no Python reader of its `.wandb` log any more (the Go core reads it), so the
  reference is the plain loop over the same records decoded with wandb's protobuf `Record`, keeping every history
  item as a number: what any script reading the file does, without our series model.

    python benchmarks/metric_stores.py [--steps 1000000]
"""

import argparse
import json
import os
import resource  # noqa: F401  (used by the wrapper)
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("MLTRIAGE_BENCH_CACHE", "/tmp/mltriage-bench-stores"))
TARGET_RATIO, TARGET_RSS_MB = 1.2, 300

WRAP = """
import json, resource, subprocess, sys, time
t = time.perf_counter()
out = subprocess.run([sys.executable, "-c", sys.argv[1]], capture_output=True, text=True)
wall = time.perf_counter() - t
if out.returncode:
    sys.exit(out.stderr[-3000:])
print(json.dumps({"wall_s": wall, "rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
                  "child": json.loads(out.stdout.strip().splitlines()[-1])}))
"""

GEN_TB = """
import math, sys
from torch.utils.tensorboard import SummaryWriter
n = int(sys.argv[1])
w = SummaryWriter(sys.argv[2])
for i in range(n):
    w.add_scalar("train/loss", 2.3 * math.exp(-3 * i / n) + 0.01 * math.sin(i), i)
    if i % 100 == 0:
        w.add_scalar("val/loss", 2.4 * math.exp(-3 * i / n), i)
w.close()
"""

GEN_WANDB = """
import math, sys, wandb
n = int(sys.argv[1])
run = wandb.init(project="bench", config={"lr": 3e-4, "seed": 0})
for i in range(n):
    d = {"train/loss": 2.3 * math.exp(-3 * i / n) + 0.01 * math.sin(i)}
    if i % 100 == 0:
        d["val/loss"] = 2.4 * math.exp(-3 * i / n)
    run.log(d, step=i)
run.finish()
"""

OURS = """
import json, sys
from pathlib import Path
sys.path.insert(0, {root!r})
from tools.logs import log_metrics
r = log_metrics(Path({path!r}))
print(json.dumps({{"points": sum(s.count for s in r.series), "shape": r.shape, "format": r.format}}))
"""

TB_ACCUMULATOR = """
import json
from tensorboard.backend.event_processing import event_accumulator as ea
acc = ea.EventAccumulator({path!r}, size_guidance={{ea.SCALARS: 0}})
acc.Reload()
pts = {{t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}}
print(json.dumps({{"points": sum(map(len, pts.values()))}}))
"""

TB_LOADER = """
import json, os
from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader
pts = {{}}
for name in sorted(os.listdir({path!r})):
    for ev in LegacyEventFileLoader(os.path.join({path!r}, name)).Load():
        for v in ev.summary.value:
            pts.setdefault(v.tag, []).append((ev.step, v.simple_value))
print(json.dumps({{"points": sum(map(len, pts.values()))}}))
"""

WANDB_RECORDS = """
import json, sys
from pathlib import Path
sys.path.insert(0, {root!r})
from tools.stores import wandb_records
from wandb.proto import wandb_internal_pb2 as pb
pts = {{}}
for data in wandb_records(Path({path!r})):
    rec = pb.Record.FromString(data)  # a reused message would keep every record in upb's arena
    if rec.WhichOneof("record_type") != "history":
        continue
    for it in rec.history.item:
        key = "/".join(it.nested_key) if it.nested_key else it.key
        try:
            pts.setdefault(key, []).append((rec.history.step.num, float(it.value_json)))
        except ValueError:
            pass
print(json.dumps({{"points": sum(len(v) for k, v in pts.items() if not k.startswith("_"))}}))
"""


def generate(steps: int) -> tuple[Path, Path]:
    tb, wb = CACHE / f"tb-{steps}", CACHE / f"wandb-{steps}"
    if not tb.exists():
        print(f"writing a {steps:,}-step TensorBoard run with SummaryWriter ...", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-c", GEN_TB, str(steps), str(tb) + ".tmp"], check=True)
        os.rename(str(tb) + ".tmp", tb)
    if not wb.exists():
        print(f"writing a {steps:,}-step W&B offline run with wandb.log ...", file=sys.stderr, flush=True)
        tmp = Path(str(wb) + ".tmp")
        tmp.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": str(tmp), "WANDB_SILENT": "true"}
        subprocess.run([sys.executable, "-c", GEN_WANDB, str(steps)], check=True, env=env, cwd=tmp)
        os.rename(tmp, wb)
    run = next((wb / "wandb").glob("offline-run-*"))
    return tb, run


def measure(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", WRAP, code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=1, help="runs of each measurement; the fastest is kept")
    args = ap.parse_args()
    tb, wb = generate(args.steps)
    wb_file = next(wb.glob("*.wandb"))
    size = {"tensorboard": sum(f.stat().st_size for f in tb.iterdir()), "wandb": wb_file.stat().st_size}
    cases = [
        ("tensorboard", "log_metrics (ours)", OURS.format(root=str(ROOT), path=str(tb))),
        ("tensorboard", "EventAccumulator", TB_ACCUMULATOR.format(path=str(tb))),
        ("tensorboard", "LegacyEventFileLoader loop", TB_LOADER.format(path=str(tb))),
        ("wandb", "log_metrics (ours)", OURS.format(root=str(ROOT), path=str(wb))),
        ("wandb", "records + wandb protobuf loop", WANDB_RECORDS.format(root=str(ROOT), path=str(wb_file))),
    ]
    results = {}
    for store, name, code in cases:
        runs = [measure(code) for _ in range(args.repeat)]
        results[(store, name)] = min(runs, key=lambda r: r["wall_s"])
    print(f"\n{args.steps:,} steps per store; TensorBoard files {size['tensorboard'] / 2**20:.0f} MB, "
          f".wandb {size['wandb'] / 2**20:.0f} MB; wall time of a fresh interpreter (imports included), peak RSS")
    print(f"| store | reader | seconds | peak RSS MB | points | time ours / this |")
    print("| --- | --- | --- | --- | --- | --- |")
    for (store, name), r in results.items():
        ours = results[(store, "log_metrics (ours)")]
        ratio = ours["wall_s"] / r["wall_s"]
        print(f"| {store} | {name} | {r['wall_s']:.1f} | {r['rss_mb']:.0f} | {r['child']['points']:,} | "
              f"{'' if name.endswith('(ours)') else f'{ratio:.2f}x'} |")
    for store in ("tensorboard", "wandb"):
        refs = [(n, r) for (s, n), r in results.items() if s == store and not n.endswith("(ours)")]
        ours = results[(store, "log_metrics (ours)")]
        worst = max(ours["wall_s"] / r["wall_s"] for _, r in refs)
        print(f"{store}: ours / the fastest reference {worst:.2f}x (target <= {TARGET_RATIO}x), "
              f"peak RSS {ours['rss_mb']:.0f} MB (target <= {TARGET_RSS_MB} MB), shape {ours['child']['shape']}")


if __name__ == "__main__":
    main()
