"""The realistic gallery's contract: every run labelled, split dev/test with every family in both, a fixed twin
for every bug, a target factory importable without training. The accuracy itself is measured by
benchmarks/triage_accuracy.py (whole-gallery runs do not belong in the test suite)."""

import ast
import json
from collections import Counter
from pathlib import Path

import pytest

from tools.failure_modes import FAILURE_MODES

REALISTIC = Path(__file__).resolve().parents[1] / "examples" / "realistic"
RUNS = sorted(p.parent for p in REALISTIC.glob("*/*/example.json"))
META = {r: json.loads((r / "example.json").read_text()) for r in RUNS}


def test_the_gallery_has_seven_families_each_with_a_healthy_run_and_three_bugs():
    families = Counter(m["family"] for m in META.values())
    assert len(families) >= 7, families
    for fam in families:
        labels = [m["failure_mode"] for m in META.values() if m["family"] == fam]
        assert "healthy" in labels and sum(lab != "healthy" for lab in labels) >= 3, (fam, labels)
    assert sum(m["failure_mode"] == "healthy" for m in META.values()) >= 8


def test_a_third_of_each_family_is_held_out_for_test():
    for fam in {m["family"] for m in META.values()}:
        runs = [m for m in META.values() if m["family"] == fam]
        test = [m for m in runs if m["split"] == "test"]
        assert len(test) * 3 >= len(runs) and any(m["failure_mode"] != "healthy" for m in test), fam
    assert {m["split"] for m in META.values()} == {"dev", "test"}


@pytest.mark.parametrize("run", RUNS, ids=lambda r: f"{r.parent.name}/{r.name}")
def test_each_run_is_labelled_has_its_fixed_twin_and_a_factory(run):
    meta = META[run]
    assert meta["failure_mode"] in FAILURE_MODES and meta["family"] == run.parent.name
    assert meta["name"] == run.name and meta["split"] in ("dev", "test")
    tree = ast.parse((run / "train.py").read_text())
    defs = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert "make_target" in defs
    guarded = [n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test)]
    assert guarded, "importing train.py must not start training"
    if meta["failure_mode"] != "healthy":
        fixed = (run / "train_fixed.py").read_text()
        assert fixed != (run / "train.py").read_text() and meta["bug"] and meta["fix"]
