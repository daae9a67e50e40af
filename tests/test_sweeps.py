"""sweep_analysis: a real effect reads as |t| > 2 across 4 seeds, a null effect does not, and the caveats are said."""

import csv
import json
import math
import random
from pathlib import Path

import pytest

from tools.errors import TriageError
from tools.sweeps import sweep_analysis

SEEDS = [2024, 4096, 8192, 9000]


def _write_csv(path: Path, rows: list[dict]) -> Path:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


def _sweep(effect: float, values, seed_spread=1.0, noise=0.05, rng_seed=0, param="lr", **extra):
    """Each seed has its own baseline (the thing z-scores remove); the metric moves with log10(value) * effect."""
    rng = random.Random(rng_seed)
    rows = []
    for s in SEEDS:
        base = rng.gauss(0, seed_spread)
        for v in values:
            rows.append({"seed": s, param: v, **extra,
                         "val_loss": 2.0 + base + effect * math.log10(v) + rng.gauss(0, noise)})
    return rows


def _by_value(report, group="all"):
    g = next(g for g in report.groups if g.group == group)
    return {v.value: v for v in g.values}


def test_a_real_lr_effect_across_four_seeds_has_t_beyond_2_and_a_null_one_stays_inside(tmp_path):
    lrs = [1e-4, 1e-3, 1e-2, 1e-1]
    real = sweep_analysis(_write_csv(tmp_path / "real.csv", _sweep(0.3, lrs)), "val_loss", "lr")
    t = {v: s.t_stat for v, s in _by_value(real).items()}
    assert t[1e-4] < -2 and t[1e-1] > 2, t
    assert _by_value(real)[1e-1].reliable and _by_value(real)[1e-1].n_seeds == 4
    trend = real.groups[0].trend
    assert trend.log_scale and trend.r_pooled > 0.9 and trend.r_t_stat > 2

    wds = [0.001, 0.01, 0.1]
    null = sweep_analysis(_write_csv(tmp_path / "null.csv", _sweep(0.0, wds, param="wd")), "val_loss", "wd")
    for v, s in _by_value(null).items():
        assert abs(s.t_stat) < 2, (v, s.t_stat)
        assert not s.reliable
    assert abs(null.groups[0].trend.r_pooled) < 0.5
    assert not null.warnings


def test_seed_baselines_larger_than_the_effect_do_not_hide_it(tmp_path):
    """Raw means overlap across seeds; the within-seed z-scores still see the effect."""
    rows = _sweep(0.1, [1e-3, 1e-2, 1e-1], seed_spread=5.0, noise=0.01)
    r = sweep_analysis(_write_csv(tmp_path / "s.csv", rows), "val_loss", "lr")
    assert _by_value(r)[1e-1].t_stat > 2 and _by_value(r)[1e-3].t_stat < -2


def test_single_seed_group_warns_that_t_is_undefined(tmp_path):
    rows = [{"seed": 1, "lr": lr, "loss": 1.0 + lr} for lr in (0.1, 0.2, 0.3)]
    r = sweep_analysis(_write_csv(tmp_path / "one.csv", rows), "loss", "lr")
    assert any("single seed" in w for w in r.warnings)
    assert all(v.t_stat == "nan" and not v.reliable for v in r.groups[0].values)


def test_missing_seed_and_confounder_are_warned(tmp_path):
    rows = _sweep(0.3, [1e-3, 1e-2, 1e-1], batch=32)
    for row in rows:  # batch size changes together with lr: a confounder
        row["batch"] = 64 if row["lr"] == 1e-1 else 32
    rows = [r for r in rows if not (r["seed"] == 9000 and r["lr"] == 1e-2)]
    r = sweep_analysis(_write_csv(tmp_path / "c.csv", rows), "val_loss", "lr")
    assert "batch" in r.confounders
    assert any("missing seed(s) 9000" in w for w in r.warnings)


def test_nan_metrics_are_reported_not_dropped(tmp_path):
    rows = _sweep(0.3, [1e-3, 1e-2, 1e-1, 1.0])
    for row in rows:
        if row["lr"] == 1.0 and row["seed"] in (2024, 4096):
            row["val_loss"] = "nan"
    r = sweep_analysis(_write_csv(tmp_path / "n.csv", rows), "val_loss", "lr")
    v = _by_value(r)[1.0]
    assert v.n_nonfinite == 2 and v.n_runs == 4 and v.n_seeds == 2
    nan = [f for f in r.findings if f.failure_mode == "nan_inf"]
    assert nan and nan[0].location == "lr=1"
    assert r.model_dump_json()  # non-finite numbers serialise as markers


def test_groups_json_lines_and_a_folder_of_run_files(tmp_path):
    rows = [dict(r, sweep="a") for r in _sweep(0.3, [1e-3, 1e-1])] + \
           [dict(r, sweep="b") for r in _sweep(-0.3, [1e-3, 1e-1], rng_seed=1)]
    (tmp_path / "runs.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    r = sweep_analysis(tmp_path / "runs.jsonl", "val_loss", "lr", group="sweep")
    assert [g.group for g in r.groups] == ["a", "b"]
    assert _by_value(r, "a")[0.1].t_stat == "inf" and _by_value(r, "b")[0.1].t_stat == "-inf"

    folder = tmp_path / "runs"
    folder.mkdir()
    for i, row in enumerate(_sweep(0.3, [1e-3, 1e-2, 1e-1])):
        run = {"config": {"lr": row["lr"], "seed": row["seed"]}, "summary": {"val_loss": row["val_loss"]}}
        (folder / f"run{i}.json").write_text(json.dumps(run))
    r = sweep_analysis(folder, "val_loss", "lr", seed="seed")
    assert r.metric == "summary.val_loss" and r.param == "config.lr"
    assert _by_value(r)[0.1].t_stat > 2


@pytest.mark.parametrize("content, args, says", [
    ("", ("loss", "lr"), "empty"),
    ("seed,lr,loss\n1,0.1,2\n", ("val_loss", "lr"), "no metric column 'val_loss'"),
    ("seed,lr,loss\n1,0.1,2\n", ("loss", "width"), "no param column 'width'"),
    ("seed,lr,loss\n1,0.1,2\n", ("loss", "lr", "sweep"), "no group column 'sweep'"),
    ('{"seed": 1}\nnot json\n', ("loss", "lr"), "line 2 is not JSON"),
    ("seed,lr,loss\n1,0.1,2\n", ("loss", "loss"), "different columns"),
])
def test_bad_input_is_a_clear_error(tmp_path, content, args, says):
    p = tmp_path / "bad.csv"
    p.write_text(content)
    with pytest.raises(TriageError, match=says):
        sweep_analysis(p, *args)
    assert p.read_text() == content  # nothing lost


def test_empty_folder_is_a_clear_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(TriageError, match="no \\*.json run files"):
        sweep_analysis(tmp_path / "empty", "loss", "lr")
