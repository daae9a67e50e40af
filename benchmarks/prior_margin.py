"""Where does each run's validation end against the label prior? The rules that read a flat validation as labels
that do not follow their inputs (`weigh_by_prior`), or clear that reading for a noisy target (`weigh_signal_by_run`,
`beat_the_prior` in tools/triage.py), compare the run's logged validation loss with data_check's label prior: the
user's own loss for the best constant prediction. This prints, per run, the validation's first, best and smoothed
end values, the prior (fitted on training batches, scored on the validation loader when the factory built one),
the ratios the rules threshold, and data_check's real/permuted/init held-out losses, beside the run's label.
Thresholds are set on the dev split; healthy noisy-target runs and label bugs must fall on either side.

    python benchmarks/prior_margin.py --split dev --labels healthy data_pipeline overfitting [--only NAME ...] [--json]

Each run costs its train.py (up to 2 minutes: it makes the log) plus one data_check probe (5-20 s).
"""
import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import triage_accuracy as ta  # noqa: E402
from tools import probes  # noqa: E402
from tools.logs import log_metrics  # noqa: E402


def measure(run_dir: Path, meta: dict) -> dict:
    """The validation series and data_check's prior for one run, in a scratch copy (its own log, made by train.py)."""
    with tempfile.TemporaryDirectory(prefix="mltriage-prior-") as tmp:
        ws = Path(tmp)
        for item in run_dir.iterdir():
            if item.name not in ("train_fixed.py", "example.json", "__pycache__", "out"):
                (shutil.copytree if item.is_dir() else shutil.copy)(item, ws / item.name)
        log = ta.make_log(ws, meta, 0)
        if meta.get("metrics_store") and (ws / meta["metrics_store"]).is_dir():
            log = ws / meta["metrics_store"]
        lm = log_metrics(log)
        val = next((s for s in lm.series if s.name == lm.val_series), None)
        data = anyio.run(lambda: probes.data_check(ws, "train.py:make_target", sys.executable, 180))
    row = {"name": run_dir.name, "family": meta["family"], "label": meta["failure_mode"],
           "val": lm.val_series, "first": val and val.first, "best": val and val.min, "end": val and val.smoothed_last,
           "count": val and val.count, "prior": data.label_prior_loss, "scored_on": data.label_prior_scored_on,
           "real": data.held_out_loss_real_labels, "permuted": data.held_out_loss_permuted_labels,
           "init": data.held_out_loss_at_init, "error": (getattr(data, "error", None) or "")[:80]}
    ok = all(isinstance(row[k], (int, float)) and row[k] > 0 for k in ("prior", "best", "end"))
    row["best_over_prior"] = round(row["best"] / row["prior"], 4) if ok else None
    row["end_over_prior"] = round(row["end"] / row["prior"], 4) if ok else None
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", choices=("dev", "test", "all"), default="dev")
    ap.add_argument("--labels", nargs="*", help="failure modes to scan (default: all)")
    ap.add_argument("--only", nargs="*", help="run names")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    a = ap.parse_args()
    runs = [(p, m) for p, m in ta.gallery("realistic")
            if (a.split == "all" or m.get("split") == a.split) and (not a.labels or m["failure_mode"] in a.labels)
            and (not a.only or p.name in a.only)]
    rows = []
    if not a.json:
        print("| run | family | label | val first / best / end | prior (scored on) | best/prior | end/prior |\n"
              "|---|---|---|---|---|---|---|")
    for run_dir, meta in runs:
        r = measure(run_dir, meta)
        rows.append(r)
        if not a.json:
            print(f"| {r['name']} | {r['family']} | {r['label']} | {r['first']} / {r['best']} / {r['end']} | "
                  f"{r['prior']} ({r['scored_on'] or r['error']}) | {r['best_over_prior']} | {r['end_over_prior']} |",
                  flush=True)
        else:
            print(f"  {r['name']}: {r['label']} end/prior {r['end_over_prior']}", file=sys.stderr, flush=True)
    if a.json:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
