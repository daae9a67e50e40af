"""data_check reads how the inputs were scaled and what the held-out comparison is scored with: a standardisation
taken along the wrong axis, table columns that never vary, and BatchNorm statistics that lag a short training."""


import pytest

from conftest import EXAMPLES, inline_target, run
from tools import probes as P


PUMP_WINDOWS = """
    import numpy as np
    import torch
    from torch import nn
    import torch.nn.functional as F

    def windows(n=512, length=64):
        rng = np.random.default_rng(0)
        t = np.arange(length) / length
        rpm = 1480 + 5 * rng.standard_normal((n, 1)) + 2 * np.sin(2 * np.pi * 3 * t)
        vib = 0.05 * (1 + rng.random((n, 1))) * np.sin(2 * np.pi * 17 * t + rng.random((n, 1)) * 6)
        temp = 61 + 0.5 * rng.standard_normal((n, 1)) + 0.1 * t
        pres = 210 + 3 * rng.standard_normal((n, length))
        return np.stack([rpm, vib, temp, pres], axis=1).astype("float32")   # (N, C, L): channel-first

    def make_target():
        torch.manual_seed(0)
        x = windows()
        mean, std = x.mean(axis=AXIS, keepdims=True), x.std(axis=AXIS, keepdims=True)
        x = torch.from_numpy((x - mean) / std)
        model = nn.Sequential(nn.Conv1d(4, 8, 5, padding=2), nn.ReLU(), nn.Conv1d(8, 4, 5, padding=2))
        return {"model": model, "data": [(b,) for b in x.split(64)], "loss_fn": lambda m, b: F.mse_loss(m(b[0]), b[0])}
"""


def std_line(ws):
    return next(i for i, line in enumerate((ws / "target.py").read_text().splitlines(), 1) if ".std(" in line)


@pytest.mark.parametrize("axis, wrong", [("(0, 1)", True), ("(0, 2)", False)])
def test_a_scaler_fitted_across_the_channels_is_named(workspace, axis, wrong):
    """Blind dev hydraulic_pump_conv1d_ae: mean/std over axis=(0, 1) of channel-first windows gives one mean/std per
    time step across the channels, so each channel becomes a near-constant offset; it read healthy."""
    rep = run(lambda: P.data_check(workspace, inline_target(workspace, PUMP_WINDOWS.replace("AXIS", axis))))
    found = [f for f in rep.findings if f.facts.get("standardised_across_channels")]
    assert [f.failure_mode for f in found] == (["data_pipeline"] if wrong else []), rep.text()
    if wrong:
        assert found[0].confidence >= 0.7 and "along axis 2, not per channel" in found[0].summary
        assert "reduce over every axis except axis 1" in found[0].fix
        assert found[0].location == f"target.py:{std_line(workspace)}", found[0].location  # where it was fitted
        assert f"line {std_line(workspace)}: `x.std(axis=(0, 1), keepdims=True)`" in found[0].summary


HAR_WINDOWS = """
    import numpy as np
    import torch
    from torch import nn
    import torch.nn.functional as F

    def make_target():
        rng = np.random.default_rng(0)
        n, length = 512, 128
        acc = 9.8 * rng.random((n, 3, 1)) + 0.5 * rng.standard_normal((n, 3, length))     # tilt + motion, m/s^2
        gyro = 0.3 * rng.standard_normal((n, 3, length))
        mag = 40 * rng.random((n, 3, 1)) + 30 * rng.standard_normal((n, 3, length))     # a noisy magnetometer
        baro = 1008 + 2 * rng.standard_normal((n, 1, length))                            # hPa
        x = np.concatenate([acc, gyro, mag, baro], axis=1).astype("float32")            # (N, C, T)
        mean, std = x.mean(axis=AXIS, keepdims=True), x.std(axis=AXIS, keepdims=True)
        x = torch.from_numpy((x - mean) / std)
        y = torch.from_numpy(rng.integers(0, 4, n))
        model = nn.Sequential(nn.Conv1d(10, 16, 5), nn.ReLU(), nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(16, 4))
        return {"model": model, "data": list(zip(x.split(64), y.split(64))),
                "loss_fn": lambda m, b: F.cross_entropy(m(b[0]), b[1]), "num_classes": 4}
"""


@pytest.mark.parametrize("axis, wrong", [("(0, 1)", True), ("(0, 2)", False)])
def test_one_noisy_channel_does_not_hide_a_scaler_fitted_across_the_channels(workspace, axis, wrong):
    """Blind dev waist_imu_har_cnn1d: axis=(0, 1) on (N, C, T) IMU windows with a 1,008 hPa barometer; every channel
    but the magnetometer ends under 0.1 std, that one at 0.103, so a rule on the largest channel std missed it (read
    healthy). The channels' root-mean-square std (0.05) is what says the variation within channels is gone."""
    rep = run(lambda: P.data_check(workspace, inline_target(workspace, HAR_WINDOWS.replace("AXIS", axis))))
    found = [f for f in rep.findings if f.facts.get("standardised_across_channels")]
    assert [f.failure_mode for f in found] == (["data_pipeline"] if wrong else []), rep.text()
    if wrong:
        top = next(e.value for e in found[0].evidence if e.what.startswith("largest std"))
        rms = next(e.value for e in found[0].evidence if e.what.startswith("root-mean-square"))
        assert top >= 0.1 > rms, (top, rms)


FLAGS = """
    import numpy as np
    import pandas as pd
    import torch
    from torch import nn
    import torch.nn.functional as F

    def table(n=2000):
        rng = np.random.default_rng(0)
        df = pd.DataFrame({"income": rng.lognormal(10, 0.5, n), "dti": rng.random(n) * 40,
                           "months_since_delinq": np.where(rng.random(n) < 0.5, np.nan, rng.integers(1, 80, n)),
                           "emp_length": np.where(rng.random(n) < 0.2, np.nan, rng.integers(0, 10, n))})
        y = (df["months_since_delinq"].isna() ^ (rng.random(n) < 0.2)).astype("float32")
        return df, y.to_numpy()

    def features(df):
        cols = ["months_since_delinq", "emp_length"]
        FILL
        flags = df[cols].isna().astype("float32").add_suffix("_missing")
        df = df.fillna(df.median())
        z = (df - df.mean()) / df.std()
        return np.concatenate([z.to_numpy("float32"), flags.to_numpy()], axis=1)

    def make_target():
        torch.manual_seed(0)
        df, y = table()
        x, y = torch.from_numpy(features(df)), torch.from_numpy(y)
        model = nn.Sequential(nn.Linear(x.shape[1], 16), nn.ReLU(), nn.Linear(16, 1))
        return {"model": model, "data": list(zip(x.split(128), y.split(128))),
                "loss_fn": lambda m, b: F.binary_cross_entropy_with_logits(m(b[0]).squeeze(1), b[1])}
"""


@pytest.mark.parametrize("fill, flat", [("df.fillna(df.median(), inplace=True)", True), ("pass", False)])
def test_columns_that_never_vary_are_a_hypothesis_never_a_verdict(workspace, fill, flat):
    """Blind dev loan_default_residual_mlp: missing-value flags built after an in-place fillna are 0 on every row,
    so the strongest signal never reaches the model; the run still learns and read healthy. A healthy table can
    hold a flat column too (dev campus_netflow_dense_ae's fixed twin), so the finding stays under 0.5."""
    rep = run(lambda: P.data_check(workspace, inline_target(workspace, FLAGS.replace("FILL", fill))))
    found = [f for f in rep.findings if f.facts.get("constant_columns")]
    assert [f.failure_mode for f in found] == (["data_pipeline"] if flat else []), rep.text()
    if flat:
        assert found[0].confidence == 0.4 and "2 of the 6 columns" in found[0].summary
        assert "(columns 4, 5)" in found[0].summary


def test_batchnorm_statistics_are_settled_before_the_held_out_comparison(workspace):
    """Blind dev cell_phenotype_resnet (healthy): SGD at 0.2 moves the weights so far in data_check's short training
    that BatchNorm's running averages still describe earlier weights; scored in eval mode, the copy trained on the
    real labels read 6.6 on the held-out batch against 1.8 for the permuted copy, an alarm (data_pipeline 0.65)
    on a healthy run. With the statistics recomputed over the training batches the real labels generalise."""
    import shutil
    shutil.copytree(EXAMPLES / "realistic" / "cnn_bn" / "cell_phenotype_resnet", workspace, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("train_fixed.py", "example.json"))
    rep = run(lambda: P.data_check(workspace, "train.py:make_target"))
    real, permuted = rep.held_out_loss_real_labels, rep.held_out_loss_permuted_labels
    assert real is not None and permuted is not None and real < permuted, rep.text()  # steps are cut by time on a busy machine
    assert not [f for f in rep.findings if f.failure_mode == "data_pipeline" and f.confidence >= 0.5], rep.text()


PADDED_CYCLES = """
    import numpy as np
    import torch
    from torch import nn
    import torch.nn.functional as F

    def cycles(n=400, t_max=120):
        rng = np.random.default_rng(0)
        lengths = rng.integers(20, t_max, n)
        base = np.array([21.0, 101.3, 55.0, 0.8])                # supply temp, pressure, fan %, valve
        X = np.zeros((n, t_max, 4), dtype="float32")
        y = rng.integers(0, 3, n)
        for i, L in enumerate(lengths):
            X[i, :L] = base * (1 + 0.02 * rng.standard_normal((L, 4))) + 0.05 * base * (y[i] - 1)
        return X, lengths, y

    def make_target():
        torch.manual_seed(0)
        X, lengths, y = cycles()
        mask = (np.arange(X.shape[1])[None, :] < lengths[:, None])[..., None]
        fit = STATS
        X = (X - fit.mean(0)) / fit.std(0) * mask
        x, yy = torch.from_numpy(X.astype("float32")), torch.from_numpy(y)
        model = nn.GRU(4, 16, batch_first=True)
        head = nn.Linear(16, 3)
        net = nn.ModuleDict({"gru": model, "head": head})
        def loss_fn(m, b):
            out, _ = m["gru"](b[0])
            return F.cross_entropy(m["head"](out.mean(1)), b[1])
        return {"model": net, "data": list(zip(x.split(64), yy.split(64))), "loss_fn": loss_fn, "num_classes": 3}
"""


@pytest.mark.parametrize("stats, padded", [("X.reshape(-1, 4)", True),
                                           ("np.concatenate([s[:L] for s, L in zip(X, lengths)])", False)])
def test_a_scaler_fitted_over_the_padding_is_named(workspace, stats, padded):
    """Blind dev ahu_cycle_gru_fault_classifier: mean/std taken over the zero-padded array put every feature's real
    values near sqrt(p/(1-p)) of the pad share p with a tenth of a unit of spread; the GRU still learnt a little and
    the run read healthy. Fitted over the real steps, the same data is quiet."""
    rep = run(lambda: P.data_check(workspace, inline_target(workspace, PADDED_CYCLES.replace("STATS", stats))))
    found = [f for f in rep.findings if f.facts.get("padding_in_scaler")]
    assert [f.failure_mode for f in found] == (["data_pipeline"] if padded else []), rep.text()
    if padded:
        assert found[0].confidence >= 0.7 and "with its padding counted in" in found[0].summary
        assert "real (unpadded) steps only" in found[0].fix
        assert found[0].location == f"target.py:{std_line(workspace)}", found[0].location


@pytest.mark.parametrize("body, bug, fix, check", [
    (PUMP_WINDOWS, "(0, 1)", "(0, 2)", "test_inputs_are_standardised_per_channel"),
    # blind dev waist_imu_har_cnn1d, driven over MCP: the check copied the probe's first rule (every channel's std
    # under 0.1) and passed on the bug once one noisy channel sat at 0.103
    (HAR_WINDOWS, "(0, 1)", "(0, 2)", "test_inputs_are_standardised_per_channel"),
    (PADDED_CYCLES, "X.reshape(-1, 4)", "np.concatenate([s[:L] for s, L in zip(X, lengths)])",
     "test_padding_is_left_out_of_the_scaler")])
def test_the_scale_checks_fail_on_the_bug_and_pass_after_the_fix(workspace, body, bug, fix, check):
    """What triage's next step writes for these findings (params={'only': [check]}, from the factory): the user's
    pytest run fails on the bug and passes once the scaler is fitted right."""
    from tools.regression import run_regression_test, write_regression_test
    key = "STATS" if body is PADDED_CYCLES else "AXIS"
    target = inline_target(workspace, body.replace(key, bug))
    rep = run(lambda: write_regression_test(workspace_root=workspace, failure_mode="data_pipeline", target=target,
                                            params={"only": [check]}))
    assert rep.fails_now and rep.catches_bug, rep.failure_message
    inline_target(workspace, body.replace(key, fix))
    after = run(lambda: run_regression_test(workspace_root=workspace, test_file=workspace / rep.path))
    assert after.passes_now, after


def test_a_frozen_backbone_kept_in_eval_mode_keeps_its_loaded_statistics(workspace):
    """Blind dev shapes_probe_healthy: a linear probe whose model's train() keeps the pretrained backbone in eval
    mode. Its BatchNorm layers never update, so resetting their statistics to settle them left them at (0, 1) for
    good: the real-label copy read 1.82 held-out against 1.58 permuted, an alarm on a healthy run."""
    import shutil
    shutil.copytree(EXAMPLES / "realistic" / "finetune" / "shapes_probe_healthy", workspace, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("train_fixed.py", "example.json"))
    rep = run(lambda: P.data_check(workspace, "train.py:make_target"))
    real, permuted = rep.held_out_loss_real_labels, rep.held_out_loss_permuted_labels
    assert real is not None and permuted is not None and real < permuted, rep.text()
    assert not [f for f in rep.findings if f.failure_mode == "data_pipeline" and f.confidence >= 0.5], rep.text()
