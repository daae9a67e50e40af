"""Where does a static rule fire across the galleries? Every .py under examples/ (buggy and fixed scripts, healthy
runs) is scanned; a rule meant for one bug should fire on that bug's file and nowhere else.

    python benchmarks/static_rule_scan.py label_statistic_in_features
"""
import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tools.static_scan import scan_source  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rules", nargs="+", help="rule ids, e.g. label_statistic_in_features")
    a = ap.parse_args()
    files = sorted((ROOT / "examples").rglob("*.py"))
    hits = {r: [] for r in a.rules}
    for p in files:
        for issue in scan_source(p.read_text(errors="replace"), str(p), []):
            if issue.rule in hits:
                hits[issue.rule].append(f"{p.relative_to(ROOT)}:{issue.line}")
    print("| rule | files scanned | fires on |\n|---|---|---|")
    for rule, where in hits.items():
        print(f"| {rule} | {len(files)} | {len(where)}: {', '.join(where) or '-'} |")


if __name__ == "__main__":
    main()
