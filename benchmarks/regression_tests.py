"""Does the regression test triage suggests fail on the bug and pass on the fix? Measured on the galleries.

    python benchmarks/regression_tests.py [--gallery toy|realistic|all] [--split dev|test|all]
                                          [--only NAME ...] [--jobs 1] [--json]

For every BROKEN run (toy: examples/<name>/, realistic: examples/realistic/<family>/<run>/): copy it into a
fresh workspace, run its broken train.py to make the log, triage it as an agent would (target factory, command,
log, source), take the write_regression_test call triage suggests in next_steps AS IT IS (a missing or poor
suggestion is what is measured), write the test on the broken code (the tool runs it: it must fail), swap in
train_fixed.py, re-run it with run_regression_test (it must pass).

Reported per family: tests that fail on the bug, pass on the fix, and both (target >= 90%); and the tests that
pass on the bug while the tool says they catch it (must be 0: judged from pytest's own exit code, not from our
reading of its report).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tools.errors import TriageError  # noqa: E402
from tools.regression import run_regression_test, write_regression_test  # noqa: E402
from tools.triage import run_triage  # noqa: E402

EXAMPLES = ROOT / "examples"


def gallery(which: str) -> list[tuple[Path, dict]]:
    """The broken runs (those with a train_fixed.py) of the toy and/or realistic gallery."""
    runs = []
    if which in ("toy", "all"):
        for p in sorted(EXAMPLES.iterdir()):
            if (p / "example.json").exists() and (p / "train_fixed.py").exists():
                runs.append((p, {**json.loads((p / "example.json").read_text()), "family": "toy", "split": "toy",
                                 "gallery": "toy"}))
    if which in ("realistic", "all") and (EXAMPLES / "realistic").is_dir():
        for p in sorted((EXAMPLES / "realistic").glob("*/*/example.json")):
            if (p.parent / "train_fixed.py").exists():
                runs.append((p.parent, {**json.loads(p.read_text()), "gallery": "realistic"}))
    return [(p, m) for p, m in runs if m.get("failure_mode") != "healthy"]


def make_log(ws: Path, meta: dict, steps: int) -> Path:
    """The broken run's own log, as triage_accuracy makes it (a hanging run is cut off by its run_timeout_s)."""
    log = ws / "logs" / "train.log"
    log.parent.mkdir()
    argv = [sys.executable, "train.py"] + (["--steps", str(steps)] if meta["gallery"] == "toy" else [])
    with open(log, "w") as out:
        try:
            subprocess.run(argv, cwd=ws, stdout=out, stderr=subprocess.STDOUT,
                           timeout=meta.get("run_timeout_s") or (30 if meta["gallery"] == "toy" else 120))
        except subprocess.TimeoutExpired:
            pass
    if meta.get("log_age_s"):
        old = time.time() - float(meta["log_age_s"])
        os.utime(log, (old, old))
    return log


def spec_file(ws: Path, spec: str | None) -> Path | None:
    """The workspace file of a 'file.py:name' spec, as the MCP server resolves it."""
    if not spec or ":" not in spec or not spec.rsplit(":", 1)[0].endswith(".py"):
        return None
    return (ws / spec.rsplit(":", 1)[0]).resolve()


def completed(args: dict, command: list[str], ws: Path) -> dict:
    """What-if (--complete): triage's suggestion plus the command it was given and, for an LR failure, the
    schedule function the sources define. Not the measured number: it shows what the templates do with them."""
    from tools.triage import schedule_functions
    out = {**args, "command": args.get("command") or command}
    if args.get("failure_mode") in ("lr_too_high", "lr_too_low") and not args.get("function"):
        found = schedule_functions([ws / "train.py"], ws, limit=1)
        if found:
            out["function"] = found[0]
    return out


def one(run_dir: Path, meta: dict, steps: int, budget: float, complete: bool = False) -> dict:
    ws = Path(tempfile.mkdtemp(prefix=f"mltriage-regr-{run_dir.name}-"))
    row = {"name": meta.get("name", run_dir.name), "family": meta["family"], "split": meta["split"],
           "label": meta["failure_mode"], "triage_top": None, "suggested": None, "template": None, "fails_on_bug": False,
           "catches": False, "passes_on_fix": False, "lie": False, "note": "", "seconds": 0.0}
    start = time.monotonic()
    try:
        for item in run_dir.iterdir():
            if item.name in ("train_fixed.py", "example.json", "__pycache__", "out"):
                continue
            (shutil.copytree if item.is_dir() else shutil.copy)(item, ws / item.name)
        log = make_log(ws, meta, steps)
        command = ["python", "train.py"] + (["--steps", str(steps)] if meta["gallery"] == "toy" else [])
        rep = anyio.run(lambda: run_triage(ws, "train.py:make_target", command, log, "logs/train.log",
                                           [ws / "train.py"], sys.executable, budget))
        row["triage_top"] = rep.findings[0].failure_mode if rep.findings else None
        suggestion = next((n for n in rep.next_steps if n.tool == "write_regression_test"), None)
        if suggestion is None:
            row["note"] = "triage suggested no write_regression_test"
            return row
        args = completed(suggestion.args, command, ws) if complete else dict(suggestion.args)
        row["suggested"] = args
        try:
            written = anyio.run(lambda: write_regression_test(
                workspace_root=ws, target_file=spec_file(ws, args.get("target")),
                function_file=spec_file(ws, args.get("function")), **args))
        except TriageError as e:
            row["note"] = f"write_regression_test refused: {e}"[:300]
            return row
        row.update(template=written.template, fails_on_bug=written.fails_now, catches=written.catches_bug,
                   lie=written.catches_bug and written.returncode == 0, verdict_on_bug=written.verdict[:200],
                   message_on_bug=written.failure_message[:300])
        shutil.copy(run_dir / "train_fixed.py", ws / "train.py")
        rerun = anyio.run(lambda: run_regression_test(workspace_root=ws, test_file=ws / written.path))
        row["passes_on_fix"] = rerun.passes_now
        if not rerun.passes_now:
            row["note"] = f"on the fix: {rerun.verdict}: {rerun.failure_message}"[:300]
        elif not written.fails_now:
            row["note"] = f"on the bug: {written.verdict}"[:300]
        return row
    except Exception as e:  # noqa: BLE001 - one broken run must not end the benchmark
        row["note"] = f"benchmark error: {type(e).__name__}: {e}"[:300]
        return row
    finally:
        row["seconds"] = round(time.monotonic() - start, 1)
        shutil.rmtree(ws, ignore_errors=True)


def pct(a: int, b: int) -> str:
    return f"{a}/{b} ({a / b:.0%})" if b else "-"


def table(rows: list[dict]) -> str:
    out = ["| run | family | label | triage top | suggested test | fails on bug | passes on fix | note |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        args = r["suggested"] or {}
        what = r["template"] or ("-" if not args else "refused")
        shown = ", ".join(f"{k}={v!r}" for k, v in args.items() if k != "failure_mode")
        out.append(f"| {r['name']} | {r['family']} | {r['label']} | {r['triage_top']} | {what} ({shown}) "
                   f"| {'yes' if r['fails_on_bug'] else 'NO'} | {'yes' if r['passes_on_fix'] else 'NO'} "
                   f"| {r['note'][:140].replace('|', '/')} |")
    out += ["", "| family | broken runs | test suggested | fails on bug | passes on fix | both | "
                "passes on bug but said to catch it |", "|---|---|---|---|---|---|---|"]
    for fam in sorted({r["family"] for r in rows}) + ["ALL"]:
        rs = rows if fam == "ALL" else [r for r in rows if r["family"] == fam]
        n = len(rs)
        out.append(f"| {fam} | {n} | {pct(sum(bool(r['suggested']) for r in rs), n)} "
                   f"| {pct(sum(r['fails_on_bug'] for r in rs), n)} | {pct(sum(r['passes_on_fix'] for r in rs), n)} "
                   f"| {pct(sum(r['fails_on_bug'] and r['passes_on_fix'] for r in rs), n)} "
                   f"| {sum(r['lie'] for r in rs)} |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gallery", choices=["toy", "realistic", "all"], default="all")
    ap.add_argument("--split", choices=["dev", "test", "all"], default="all",
                    help="realistic runs to include (toy runs are always included with --gallery toy/all)")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--steps", type=int, default=60, help="toy runs: --steps for train.py")
    ap.add_argument("--budget", type=float, default=120.0, help="triage budget per run, seconds")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--rows", type=Path, help="append each finished run's row to this JSONL file as it completes; "
                                            "runs already in it are skipped (resume a long benchmark)")
    ap.add_argument("--table-from", type=Path, help="print the table of a --rows file and exit")
    ap.add_argument("--complete", action="store_true",
                    help="what-if, not the measured number: add the command (and an LR schedule function) to triage's "
                         "suggestion when it lacks them")
    a = ap.parse_args()
    if a.table_from:
        rows = [json.loads(line) for line in a.table_from.read_text().splitlines() if line.strip()]
        print(table(rows))
        return 0
    runs = [(p, m) for p, m in gallery(a.gallery) if m["gallery"] == "toy" or a.split == "all" or m["split"] == a.split]
    if a.only:
        runs = [(p, m) for p, m in runs if p.name in a.only]
    done = []
    if a.rows and a.rows.exists():
        done = [json.loads(line) for line in a.rows.read_text().splitlines() if line.strip()]
        runs = [(p, m) for p, m in runs if m.get("name", p.name) not in {r["name"] for r in done}]
    lock = threading.Lock()

    def measure(pm):
        row = one(pm[0], pm[1], a.steps, a.budget, a.complete)
        if a.rows:
            with lock, open(a.rows, "a") as f:
                f.write(json.dumps(row) + "\n")
        return row

    with ThreadPoolExecutor(a.jobs) as pool:
        rows = done + list(pool.map(measure, runs))
    if a.json:
        print(json.dumps(rows, indent=1))
    if a.complete:
        print("WHAT-IF (--complete): triage's suggestions were completed with command= / function=; "
              "run without --complete for the measured number\n")
    print(table(rows))
    both = sum(r["fails_on_bug"] and r["passes_on_fix"] for r in rows)
    print(f"\nfails on the bug and passes on the fix: {pct(both, len(rows))} (target >= 90%); "
          f"tests that pass on the bug while the tool says they catch it: {sum(r['lie'] for r in rows)} (must be 0)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
