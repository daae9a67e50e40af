"""compare_runs: a fixed example against its broken twin, run for real, reads as improved; bad input is a clear error."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import EXAMPLES
from tools.compare import compare_runs, metric_points
from tools.errors import TriageError


def _run_pair(name: str, out: Path, steps: int) -> tuple[Path, Path]:
    """Run examples/<name>/train.py and train_fixed.py side by side; their stdout is the log."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs, logs = [], []
    for script, log in (("train.py", "before.log"), ("train_fixed.py", "after.log")):
        f = open(out / f"{name}_{log}", "wb")
        logs.append(out / f"{name}_{log}")
        procs.append((subprocess.Popen([sys.executable, str(EXAMPLES / name / script), "--steps", str(steps)],
                                       cwd=EXAMPLES / name, stdout=f, stderr=subprocess.DEVNULL, env=env), f))
    for p, f in procs:
        assert p.wait(timeout=120) == 0
        f.close()
    return logs[0], logs[1]


def test_fixing_the_log_of_zero_turns_a_nan_run_into_an_improved_one(tmp_path):
    before, after = _run_pair("nan_log_zero", tmp_path, 40)
    report, png = compare_runs(before, after, "loss", plot=True)
    assert report.verdict == "improved", report.text()
    assert report.before.nonfinite > 0 and report.after.nonfinite == 0
    assert report.before.shape in ("nan_death", "spike_then_nan") and report.after.shape == "decreasing"
    assert report.aligned_by == "step" and report.common_steps == 8
    assert png[:4] == b"\x89PNG"
    assert '"nan"' in report.model_dump_json()

    flipped, _ = compare_runs(after, before, "loss")
    assert flipped.verdict == "worse"
    assert any(f.failure_mode == "nan_inf" for f in flipped.findings)


def test_raising_a_far_too_low_learning_rate_is_improved_on_finite_curves(tmp_path):
    before, after = _run_pair("lr_too_low", tmp_path, 60)
    report, _ = compare_runs(before, after)
    assert report.verdict == "improved", report.text()
    assert report.before.nonfinite == report.after.nonfinite == 0
    assert report.after.tail_mean < report.before.tail_mean - report.tolerance


def test_the_same_run_twice_is_no_change_and_accuracy_is_higher_is_better(tmp_path):
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    lines = [f"step {s} loss {2.0 / s:.4f} acc {1 - 1.0 / s:.4f}" for s in range(1, 41)]
    a.write_text("\n".join(lines) + "\n")
    b.write_text("\n".join(lines) + "\n")
    assert compare_runs(a, b, "loss")[0].verdict == "no_change"
    worse = [f"step {s} loss {2.0 / s:.4f} acc {0.5 - 1.0 / s:.4f}" for s in range(1, 41)]
    b.write_text("\n".join(worse) + "\n")
    r, _ = compare_runs(a, b, "acc")
    assert r.higher_is_better and r.verdict == "worse"


def test_logs_without_common_steps_are_compared_by_position(tmp_path):
    a, b = tmp_path / "a.csv", tmp_path / "b.jsonl"
    a.write_text("step,loss\n" + "".join(f"{s},{1.0 / s}\n" for s in range(1, 21)))
    b.write_text("".join(f'{{"step": {s + 1000}, "loss": {0.1 / s}}}\n' for s in range(1, 21)))
    r, _ = compare_runs(a, b)
    assert r.aligned_by == "position" and r.verdict == "improved"
    assert len(metric_points(b, "LOSS")) == 20


@pytest.mark.parametrize("make, metric, says", [
    (lambda p: p.write_text("step 1 loss 1.0\nstep 2 loss 0.5\n"), "val_loss", "no series 'val_loss'"),
    (lambda p: p.write_bytes(b"\x00\x01\x02\x03" * 4000), "loss", "binary"),
    (lambda p: p.write_text(""), "loss", "no series"),
    (lambda p: p.write_text("step 1 loss 1.0\n"), " ", "empty metric"),
])
def test_bad_input_is_a_clear_error(tmp_path, make, metric, says):
    good, bad = tmp_path / "good.log", tmp_path / "bad.log"
    good.write_text("step 1 loss 1.0\nstep 2 loss 0.5\n")
    make(bad)
    content = bad.read_bytes()
    with pytest.raises(TriageError, match=says):
        compare_runs(good, bad, metric)
    assert bad.read_bytes() == content and good.read_text().startswith("step 1")


def test_the_same_file_twice_is_refused(tmp_path):
    p = tmp_path / "run.log"
    p.write_text("step 1 loss 1.0\n")
    with pytest.raises(TriageError, match="same file"):
        compare_runs(p, p)
