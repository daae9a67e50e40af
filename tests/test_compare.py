"""compare_runs: a fixed example against its broken twin, run for real, reads as improved; bad input is a clear error."""

import os
import re
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


# ------------------------------------------------------------------ held-out fixes, validation series, parsed steps

LOGS = Path(__file__).parent / "fixtures" / "logs"


def heldout(tmp_path: Path, mode: str) -> Path:
    """tests/fixtures/logs/heldout_run.py: a real run logging train_loss and val_loss."""
    out = subprocess.run([sys.executable, str(LOGS / "heldout_run.py"), mode], capture_output=True, text=True,
                         check=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"}).stdout
    p = tmp_path / f"{mode}.log"
    p.write_text(out)
    return p


def test_a_leakage_fix_is_judged_on_held_out_data_and_its_rising_train_loss_is_explained(tmp_path):
    before, after = heldout(tmp_path, "leak"), heldout(tmp_path, "leak_fixed")
    r, _ = compare_runs(before, after, failure_mode="data_leakage")
    assert (r.judged, r.metric, r.verdict) == ("held_out", "val_loss", "improved"), r.text()
    b, a = r.train_loss_tail
    assert a > 10 * b  # the model can no longer read the label: its training loss goes up, by design
    assert any("expected effect of removing a leak" in n for n in r.notes)
    assert r.findings[0].failure_mode == "healthy" and "training loss rose" in r.findings[0].summary
    assert len(r.model_dump_json()) + len(r.text()) <= 4000

    plain, _ = compare_runs(before, after)  # judged on the training loss, the same fix reads as worse: say why
    assert (plain.judged, plain.verdict) == ("train", "worse")
    assert any("failure_mode='data_leakage'" in n for n in plain.notes)


def test_an_overfitting_fix_is_judged_on_validation(tmp_path):
    before, after = heldout(tmp_path, "overfit"), heldout(tmp_path, "overfit_fixed")
    r, _ = compare_runs(before, after, failure_mode="overfitting")
    assert (r.judged, r.verdict) == ("held_out", "improved") and r.train_loss_tail[1] > r.train_loss_tail[0]
    assert any("regularising" in n for n in r.notes)
    flipped, _ = compare_runs(after, before, metric="val")  # the `val` alias: each log's validation loss
    assert (flipped.metric, flipped.verdict) == ("val_loss", "worse")


def nanogpt_rerun(tmp_path: Path, every: int, scale: float) -> Path:
    """The nanoGPT fixture as a re-run that logs every `every`-th iteration line, losses scaled: same steps,
    different line positions."""
    out = []
    for ln in (LOGS / "nanogpt_shakespeare_char.log").read_text().splitlines():
        if m := re.fullmatch(r"iter (\d+): loss (\S+)(, .*)", ln):
            if int(m[1]) % (10 * every) == 0:
                out.append(f"iter {m[1]}: loss {float(m[2]) * scale:.4f}{m[3]}")
        elif m := re.fullmatch(r"step (\d+): train loss (\S+), val loss (\S+)", ln):
            out.append(f"step {m[1]}: train loss {float(m[2]) * scale:.4f}, val loss {float(m[3]) * scale:.4f}")
        else:
            out.append(ln)
    p = tmp_path / f"rerun_{every}.log"
    p.write_text("\n".join(out) + "\n")
    return p


def test_nanogpt_runs_align_by_their_iterations_and_compare_val_loss(tmp_path):
    """Issue #13: compare_runs(metric="val_loss") failed on nanoGPT logs (no val series; steps from line order)."""
    before = LOGS / "nanogpt_shakespeare_char.log"
    after = nanogpt_rerun(tmp_path, every=2, scale=0.9)
    r, _ = compare_runs(before, after, metric="val_loss")
    assert (r.aligned_by, r.common_steps, r.verdict, r.window) == ("step", 9, "improved", (2000.0, 2000.0)), r.text()
    r, _ = compare_runs(before, after)  # the training loss: only the iterations both logged, matched by number
    assert (r.aligned_by, r.common_steps, r.verdict) == ("step", 101, "improved") and r.window[-1] == 2000.0
    assert r.before.last_step == r.after.last_step == 2000.0


def test_a_nan_fix_is_judged_on_the_training_loss(tmp_path):
    r, _ = compare_runs(LOGS / "nanogpt_nan.log", LOGS / "nanogpt_shakespeare_char.log", failure_mode="nan_inf")
    assert (r.judged, r.metric, r.verdict) == ("train", "loss", "improved") and r.before.first_nonfinite_step == 170


def test_the_training_loss_is_found_whatever_the_log_calls_it():
    r, _ = compare_runs(LOGS / "megatron.log", LOGS / "torchtitan.log", failure_mode="plateau")
    assert r.metric == "lm_loss / loss" and r.judged == "train"


def test_an_unknown_failure_mode_is_a_clear_error(tmp_path):
    with pytest.raises(TriageError, match="unknown failure_mode 'leak'"):
        compare_runs(LOGS / "keras2.log", LOGS / "keras3.log", failure_mode="leak")


def test_compare_runs_over_mcp_takes_the_failure_mode_and_stays_compact(tmp_path, workspace):
    import json as _json

    from conftest import inprocess_client, run, text_of

    (workspace / "before.log").write_text((LOGS / "nanogpt_shakespeare_char.log").read_text())
    nanogpt_rerun(workspace, every=1, scale=0.9).rename(workspace / "after.log")

    async def body():
        async with inprocess_client(workspace) as c:
            r = await c.call_tool("compare_runs", {"before": "before.log", "after": "after.log", "failure_mode": "overfitting"})
            assert not r.is_error, text_of(r)
            got = r.structured_content
            assert (got["judged"], got["metric"], got["verdict"], got["aligned_by"]) == ("held_out", "val_loss", "improved", "step")
            assert len(text_of(r)) + len(_json.dumps(got)) <= 4000
            bad = await c.call_tool("compare_runs", {"before": "before.log", "after": "after.log", "failure_mode": "leak"})
            assert bad.is_error and "unknown failure_mode" in text_of(bad)

    run(body)
