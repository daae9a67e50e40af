"""Where does sequence_check fire across the galleries? It runs on each run's buggy train.py and on its fixed twin
(healthy runs: train.py only) through make_target, and prints what it found beside the run's label. A check meant
for causality and alignment bugs should fire on those bugs and be quiet on every fixed and healthy script.

    python benchmarks/sequence_check_scan.py --families rnn_seq autoencoder tabular cnn_bn finetune
    python benchmarks/sequence_check_scan.py --split dev

Each script takes a few seconds (one probe subprocess); the whole realistic gallery takes about 15 minutes here.
"""
import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import triage_accuracy as ta  # noqa: E402
from tools.loop_checks import sequence_check  # noqa: E402


def scan(run_dir: Path, script: str) -> tuple[str, str]:
    """(findings as 'mode confidence', error) of sequence_check on one script of a run, in a scratch copy."""
    with tempfile.TemporaryDirectory(prefix="mltriage-seqscan-") as tmp:
        ws = Path(tmp)
        for item in run_dir.iterdir():
            if item.name in ("example.json", "__pycache__", "out", "train_fixed.py", "train.py"):
                continue
            (shutil.copytree if item.is_dir() else shutil.copy)(item, ws / item.name)
        shutil.copy(run_dir / script, ws / "train.py")
        rep = anyio.run(lambda: sequence_check(ws, "train.py:make_target", sys.executable))
        found = ", ".join(f"{f.failure_mode} {f.confidence:.2f}" for f in rep.findings)
        return found or "-", (rep.error or "")[:80]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", nargs="*", help="realistic families to scan (default: all)")
    ap.add_argument("--split", choices=("dev", "test", "all"), default="all")
    a = ap.parse_args()
    runs = [(p, m) for p, m in ta.gallery("realistic")
            if (not a.families or m["family"] in a.families) and (a.split == "all" or m.get("split") == a.split)]
    print("| run | family | label | script | sequence_check | error |\n|---|---|---|---|---|---|")
    fired_fixed = 0
    scripts = 0
    for run_dir, meta in runs:
        for script in ("train.py", "train_fixed.py"):
            if not (run_dir / script).exists():
                continue
            found, err = scan(run_dir, script)
            scripts += 1
            clean = script == "train_fixed.py" or meta["failure_mode"] == "healthy"
            fired_fixed += clean and found != "-"
            label = "healthy" if clean else meta["failure_mode"]
            print(f"| {run_dir.name} | {meta['family']} | {label} | {script} | {found} | {err} |", flush=True)
    print(f"\n{scripts} scripts; sequence_check fired on {fired_fixed} fixed or healthy scripts")


if __name__ == "__main__":
    main()
