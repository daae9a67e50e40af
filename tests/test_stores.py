"""Metrics stores written by their own libraries (SummaryWriter, wandb offline, mlflow, trackio) and by the exact
shapes Lightning's CSVLogger and HF's Trainer leave, read back through tools/stores.py and the tools that use it."""

import json
import math
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import pytest

from conftest import ROOT, run, stdio_client, text_of
from tools import stores
from tools.compare import compare_runs
from tools.errors import TriageError
from tools.logs import log_metrics
from tools.sweeps import sweep_analysis

pytestmark = pytest.mark.xdist_group("stores")  # its tests share module-scoped fixtures: one worker runs them all


def f32(x: float) -> float:
    """What an event file keeps of a float: TensorBoard scalars are float32."""
    return struct.unpack("f", struct.pack("f", x))[0]


def series(store) -> dict[str, tuple[list, list]]:
    out: dict[str, tuple[list, list]] = {}
    for key, steps, vals in stores.read(store):
        s, v = out.setdefault(key, ([], []))
        s += steps
        v += vals
    return out


def same(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(x == y or (math.isnan(x) and math.isnan(y)) for x, y in zip(a, b))


TRAIN = [2.3 * 0.97 ** i for i in range(120)]
VAL = {i: 2.4 * 0.975 ** i for i in range(0, 120, 10)}


# --------------------------------------------------------------------------- TensorBoard

def write_tensorboard(logdir: Path, train=TRAIN, val=VAL, nan_at: int | None = None) -> None:
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(logdir))
    for i, x in enumerate(train):
        w.add_scalar("Loss/train", math.nan if i == nan_at else x, i)
        w.add_scalar("lr", 1e-3, i)
        if i in val:
            w.add_scalar("Loss/val", val[i], i)
            w.add_scalars("acc", {"train": i / 200, "val": i / 300}, i)  # one sub-directory per key
    w.close()


def test_tensorboard_event_files_read_back_exactly(tmp_path):
    logdir = tmp_path / "runs" / "exp1"
    write_tensorboard(logdir, nan_at=50)
    store = stores.detect(tmp_path / "runs")
    assert store.format == "tensorboard" and store.path == logdir and len(store.files) == 3
    got = series(store)
    assert set(got) == {"Loss/train", "lr", "Loss/val", "acc_train/acc", "acc_val/acc"}
    assert got["Loss/train"][0] == list(range(120))
    assert same(got["Loss/train"][1], [math.nan if i == 50 else f32(x) for i, x in enumerate(TRAIN)])
    assert got["Loss/val"] == (list(VAL), [f32(v) for v in VAL.values()])
    assert got["acc_val/acc"][1] == [f32(i / 300) for i in VAL]

    r = log_metrics(tmp_path / "runs")
    assert (r.format, r.run, r.loss_series, r.val_series, r.step_source) == ("tensorboard", "exp1", "Loss/train", "Loss/val", "step")
    loss = next(s for s in r.series if s.name == "Loss/train")
    assert (loss.count, loss.nonfinite, loss.first_nonfinite_step, loss.last_step) == (120, 1, 50, 119)
    assert "tensorboard run exp1" in r.text()
    # one event file alone is a store too
    main = next(f for f in store.files if f.parent == logdir)
    assert log_metrics(main).series[0].name == "Loss/train"


def test_a_logdir_of_several_runs_reads_the_newest_and_names_the_others(tmp_path):
    write_tensorboard(tmp_path / "runs" / "old", train=TRAIN[:20], val={})
    write_tensorboard(tmp_path / "runs" / "new")
    os.utime(next((tmp_path / "runs" / "old").iterdir()), (1, 1))
    r = log_metrics(tmp_path / "runs")
    assert r.run == "new" and any("old" in n and "run=" in n for n in r.notes)
    assert log_metrics(tmp_path / "runs", run="old").series[0].count == 20
    with pytest.raises(TriageError, match="no run 'nope'"):
        log_metrics(tmp_path / "runs", run="nope")


def test_compare_runs_takes_two_run_directories(tmp_path):
    write_tensorboard(tmp_path / "before", train=[2.3] * 120)  # stuck
    write_tensorboard(tmp_path / "after")
    report, _ = compare_runs(tmp_path / "before", tmp_path / "after", metric="Loss/train")
    assert report.verdict == "improved" and report.after.format == "tensorboard"
    assert report.common_steps == 120


def test_a_missing_extra_names_the_pip_install(tmp_path, monkeypatch):
    write_tensorboard(tmp_path / "run", train=TRAIN[:10], val={})
    for name in ("tensorboard", "tensorboard.backend.event_processing.event_file_loader"):
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed
    with pytest.raises(TriageError) as e:
        log_metrics(tmp_path / "run")
    assert 'pip install "mltriage[tensorboard]"' in str(e.value)


# --------------------------------------------------------------------------- W&B

WANDB_RUNS = """
import math, os, sys, time, wandb
for name, lr, seed, slope in (("before", 0.5, 1, 1.0), ("after", 0.05, 1, 0.9)):
    run = wandb.init(project="p", name=name, config={"lr": lr, "seed": seed, "optim": {"betas": [0.9, 0.99]}})
    for i in range(100):
        d = {"train/loss": 2.3 * slope ** i if i != 40 or name == "after" else math.nan, "trainer/global_step": 10 * i}
        if i % 10 == 0:
            d["val/loss"] = 2.4 * slope ** (i / 2)
        d["samples"] = wandb.Histogram([1, 2, 3]) if i == 0 else i
        run.log(d)
    print(f"{name} finished its 100 steps")
    run.finish()
    time.sleep(1.1)  # distinct run directory timestamps
"""


@pytest.fixture(scope="module")
def wandb_dir(tmp_path_factory) -> Path:
    pytest.importorskip("wandb")
    root = tmp_path_factory.mktemp("wb")
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": str(root), "WANDB_SILENT": "true",
           "WANDB_DISABLE_GIT": "true", "WANDB_CONSOLE": "wrap"}
    subprocess.run([sys.executable, "-c", WANDB_RUNS], cwd=root, env=env, check=True, timeout=120)
    return root / "wandb"


def test_wandb_offline_run_read_back_exactly(wandb_dir):
    _, found = stores.runs(wandb_dir)
    assert len(found) == 2 and all(s.format == "wandb" and s.file.suffix == ".wandb" for s in found)
    store = stores.detect(wandb_dir)  # the newest: "after"
    got = series(store)
    assert set(got) == {"train/loss", "val/loss", "samples"}  # the histogram is no scalar; `_`-keys are W&B's own
    assert got["train/loss"] == ([10 * i for i in range(100)], [2.3 * 0.9 ** i for i in range(100)])
    assert got["val/loss"] == ([10 * i for i in range(0, 100, 10)], [2.4 * 0.9 ** (i / 2) for i in range(0, 100, 10)])
    assert stores.params(store) == {"lr": "0.05", "seed": "1", "optim.betas": "[0.9, 0.99]"}

    r = log_metrics(wandb_dir)
    assert (r.format, r.loss_series, r.val_series, r.step_source) == ("wandb", "train/loss", "val/loss", "step")
    assert r.params["lr"] == "0.05" and any("pass run=" in n for n in r.notes)
    before = log_metrics(wandb_dir, run=found[0].run if found[0].mtime < found[1].mtime else found[1].run)
    loss = next(s for s in before.series if s.name == "train/loss")
    assert (loss.nonfinite, loss.first_nonfinite_step) == (1, 400)


def test_compare_and_triage_read_wandb_run_directories(wandb_dir):
    runs = sorted(stores.runs(wandb_dir)[1], key=lambda s: s.mtime)
    report, _ = compare_runs(runs[0].path, runs[1].path, metric="train/loss")
    assert report.verdict == "improved" and report.before.format == report.after.format == "wandb"

    from tools.triage import run_triage
    rep = anyio.run(lambda: run_triage(wandb_dir.parent, log_file=runs[1].path, log_name="wandb/latest", budget_s=60))
    ran = {s.name: s.status for s in rep.steps}
    assert ran["log_metrics"] == "ok" and ran["tail_log"] == "ok"  # the console W&B captured in files/output.log


def test_a_wandb_run_that_kept_only_its_json_lines_history(tmp_path):
    # older wandb versions, and runs synced and cleaned, leave files/wandb-history.jsonl beside the summary
    files = tmp_path / "wandb" / "run-20240101_000000-abc" / "files"
    files.mkdir(parents=True)
    rows = [{"_step": i, "_runtime": i * 0.1, "loss": 2.0 - i / 10, **({"val_loss": 2.1 - i / 10} if i % 5 == 0 else {})}
            for i in range(12)]
    (files / "wandb-history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    store = stores.detect(tmp_path / "wandb")
    assert store.format == "wandb"
    got = series(store)
    assert got["loss"] == (list(range(12)), [2.0 - i / 10 for i in range(12)])
    assert got["val_loss"] == ([0, 5, 10], [2.1, 2.1 - 0.5, 2.1 - 1.0])


def test_sweep_rows_of_a_wandb_folder_take_config_and_summary(wandb_dir):
    from tools.sweeps import store_runs

    runs = sorted(stores.runs(wandb_dir)[1], key=lambda s: s.mtime)
    # what an online run leaves beside its log: run.summary, a best value here
    (runs[1].path / "files" / "wandb-summary.json").write_text(json.dumps({"best/val_loss": 0.25, "_runtime": 3}))
    fmt, rows = store_runs(wandb_dir)
    by_lr = {r["lr"]: r for r in rows}
    assert fmt == "wandb" and set(by_lr) == {"0.5", "0.05"}
    assert by_lr["0.05"]["best/val_loss"] == 0.25 and "best/val_loss" not in by_lr["0.5"]
    assert by_lr["0.5"]["val/loss"] == 2.4 and by_lr["0.05"]["samples"] == 99.0
    r = sweep_analysis(wandb_dir, metric="train/loss", param="lr")
    assert r.format == "wandb" and r.n_runs == 2


# --------------------------------------------------------------------------- MLflow

def write_mlflow(root: Path, runs: list[tuple[float, int, list[float]]]) -> None:
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"  # MLflow 3 keeps the file store in maintenance mode
    import mlflow

    mlflow.set_tracking_uri(root.as_uri())
    mlflow.set_experiment("sweep")
    for lr, seed, losses in runs:
        with mlflow.start_run(run_name=f"lr{lr}-s{seed}"):
            mlflow.log_params({"lr": lr, "seed": seed})
            for i, x in enumerate(losses):
                mlflow.log_metric("train/loss", x, step=i)
            mlflow.log_metric("val_loss", losses[-1] + 0.1, step=len(losses) - 1)


def ml_loss(lr: float, seed: int, i: int) -> float:
    return 2.0 / (1 + lr * 10 * i) + 0.01 * seed


@pytest.fixture(scope="module")
def mlruns(tmp_path_factory) -> Path:
    pytest.importorskip("mlflow")
    root = tmp_path_factory.mktemp("ml") / "mlruns"
    saved = os.environ.get("MLFLOW_ALLOW_FILE_STORE")
    try:
        write_mlflow(root, [(lr, seed, [ml_loss(lr, seed, i) for i in range(30)])
                            for lr in (0.1, 0.01) for seed in (1, 2, 3, 4)])
    finally:
        os.environ.pop("MLFLOW_ALLOW_FILE_STORE") if saved is None else os.environ.update(MLFLOW_ALLOW_FILE_STORE=saved)
    return root


@pytest.mark.parametrize("through", ["mlflow", "plain files"])
def test_mlflow_file_store_read_back_exactly(mlruns, monkeypatch, through):
    if through == "mlflow":
        monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    else:
        monkeypatch.setattr(stores, "_mlflow_lib", lambda store: None)
    fmt, found = stores.runs(mlruns)
    assert fmt == "mlflow" and len(found) == 8
    store = next(s for s in found if stores.params(s)["lr"] == "0.01" and stores.params(s)["seed"] == "3")
    got = series(store)
    assert got["train/loss"] == (list(range(30)), [ml_loss(0.01, 3, i) for i in range(30)])
    assert got["val_loss"] == ([29], [ml_loss(0.01, 3, 29) + 0.1])
    assert stores.params(store)["tags.mlflow.runName"] == "lr0.01-s3"
    r = log_metrics(store.path)
    assert (r.format, r.loss_series, r.val_series) == ("mlflow", "train/loss", "val_loss")
    assert log_metrics(mlruns, run="lr0.1-s2").run.startswith("lr0.1-s2 (")


def test_sweep_analysis_over_an_mlflow_experiment(mlruns):
    r = sweep_analysis(mlruns, metric="train/loss", param="lr")
    assert r.format == "mlflow" and r.n_runs == 8
    assert {v.value: v.n_seeds for v in r.groups[0].values} == {0.01: 4, 0.1: 4}
    best = min(r.groups[0].values, key=lambda v: v.metric_mean)
    assert best.value == 0.1 and best.reliable


MLFLOW_DB = """
import math, sys, mlflow
mlflow.set_tracking_uri("sqlite:///" + sys.argv[1])  # MLflow 3's default backend: mlflow.db
mlflow.set_registry_uri("file:" + sys.argv[2])  # mlflow-skinny has no SQL model registry
mlflow.set_experiment("db")
for name, lr in (("older", 0.1), ("newer", 0.01)):
    with mlflow.start_run(run_name=name):
        mlflow.log_params({"lr": lr, "seed": 0})
        for i in range(20):
            mlflow.log_metric("loss", math.nan if (name, i) == ("newer", 7) else 2.0 / (1 + lr * 10 * i), step=i)
        mlflow.log_metric("grad_norm", math.inf, step=19)
"""


def test_mlflow_sqlite_store_read_back_exactly(tmp_path):
    pytest.importorskip("sqlalchemy")
    db = tmp_path / "mlflow.db"
    subprocess.run([sys.executable, "-c", MLFLOW_DB, str(db), str(tmp_path / "registry")], check=True, timeout=180,
                   capture_output=True)
    fmt, found = stores.runs(tmp_path)
    assert fmt == "mlflow" and sorted(s.run.split()[0] for s in found) == ["newer", "older"]
    store = stores.detect(db, run="newer")
    got = series(store)
    assert got["loss"][0] == list(range(20))
    assert same(got["loss"][1], [math.nan if i == 7 else 2.0 / (1 + 0.1 * i) for i in range(20)])
    assert got["grad_norm"] == ([19], [math.inf])
    assert stores.params(store)["lr"] == "0.01"
    r = log_metrics(tmp_path, run="older")
    assert (r.format, r.loss_series, r.params["lr"]) == ("mlflow", "loss", "0.1")


# --------------------------------------------------------------------------- Lightning, HF Trainer, Trackio

LIGHTNING_CSV = """epoch,step,train_loss_step,val_loss,val_acc,train_loss_epoch
0,49,2.10,,,
0,99,1.90,,,
0,99,,1.95,0.41,
0,99,,,,2.00
1,149,1.50,,,
1,199,1.20,,,
1,199,,1.40,0.62,
1,199,,,,1.35
"""


def test_lightning_csv_logger_rows_interleaved_with_empty_cells(tmp_path):
    run = tmp_path / "lightning_logs" / "version_0"
    run.mkdir(parents=True)
    (run / "metrics.csv").write_text(LIGHTNING_CSV)
    (run / "hparams.yaml").write_text("lr: 0.001\nbatch_size: 64\n")
    store = stores.detect(tmp_path / "lightning_logs")
    assert store.format == "lightning_csv"
    got = series(store)
    assert got["train_loss_step"] == ([49, 99, 149, 199], [2.10, 1.90, 1.50, 1.20])
    assert got["val_loss"] == ([99, 199], [1.95, 1.40])
    assert got["epoch"] == ([49, 99, 99, 99, 149, 199, 199, 199], [0.0] * 4 + [1.0] * 4)
    r = log_metrics(tmp_path / "lightning_logs")
    assert (r.format, r.val_series, r.params) == ("lightning_csv", "val_loss", {"lr": "0.001", "batch_size": "64"})


def test_hf_trainer_state_of_the_last_checkpoint(tmp_path):
    out = tmp_path / "out"
    for ckpt, n in (("checkpoint-20", 20), ("checkpoint-100", 100)):
        (out / ckpt).mkdir(parents=True)
        history = [{"epoch": i / 50, "grad_norm": 1.0, "learning_rate": 5e-5, "loss": 2.0 - i / 100, "step": i}
                   for i in range(10, n + 1, 10)]
        history += [{"epoch": i / 50, "eval_loss": 2.1 - i / 200, "eval_runtime": 1.5, "step": i} for i in range(50, n + 1, 50)]
        (out / ckpt / "trainer_state.json").write_text(json.dumps({"global_step": n, "log_history": history}))
    store = stores.detect(out)
    assert store.format == "hf_trainer" and store.file.parent.name == "checkpoint-100"
    got = series(store)
    assert got["loss"] == (list(range(10, 101, 10)), [2.0 - i / 100 for i in range(10, 101, 10)])
    assert got["eval_loss"] == ([50, 100], [1.85, 1.6])
    r = log_metrics(out)
    assert (r.format, r.loss_series, r.val_series) == ("hf_trainer", "loss", "eval_loss")


TRACKIO_RUNS = """
import trackio
for name, k in (("warm", 1.0), ("hot", 3.0)):
    trackio.init(project="proj", name=name, config={"lr": 0.01 * k, "seed": 7})
    for i in range(30):
        d = {"train/loss": 2.0 / (1 + k * i)}
        if i % 10 == 0:
            d["val/loss"] = 2.2 / (1 + k * i)
        trackio.log(d, step=i)
    trackio.finish()
"""


def test_trackio_store_read_back_exactly(tmp_path):
    pytest.importorskip("trackio")
    env = {**os.environ, "TRACKIO_DIR": str(tmp_path / "trackio")}
    subprocess.run([sys.executable, "-c", TRACKIO_RUNS], cwd=tmp_path, env=env, check=True, timeout=120,
                   capture_output=True)
    fmt, found = stores.runs(tmp_path / "trackio" / "proj.db")
    assert fmt == "trackio" and sorted(s.run for s in found) == ["hot", "warm"]
    store = stores.detect(tmp_path / "trackio", run="hot")
    got = series(store)
    assert got["train/loss"] == (list(range(30)), [2.0 / (1 + 3.0 * i) for i in range(30)])
    assert got["val/loss"] == ([0, 10, 20], [2.2 / (1 + 3.0 * i) for i in (0, 10, 20)])
    assert stores.params(store) == {"lr": "0.03", "seed": "7"}
    r = log_metrics(tmp_path / "trackio", run="warm")
    assert (r.format, r.run, r.val_series) == ("trackio", "warm", "val/loss")


# --------------------------------------------------------------------------- over MCP

def test_log_metrics_reads_a_run_directory_over_stdio(workspace):
    write_tensorboard(workspace / "runs" / "exp1", nan_at=80)
    (workspace / "empty").mkdir()

    async def body():
        async with stdio_client(workspace) as c:
            r = await c.call_tool("log_metrics", {"path": "runs", "plot": True})
            assert not r.is_error, text_of(r)
            sc = r.structured_content
            assert (sc["format"], sc["run"], sc["loss_series"], sc["val_series"]) == ("tensorboard", "exp1", "Loss/train", "Loss/val")
            loss = sc["series"][0]
            assert (loss["count"], loss["nonfinite"], loss["first_nonfinite_step"]) == (120, 1, 80)
            assert [b.type for b in r.content] == ["text", "image"]
            r = await c.call_tool("log_metrics", {"path": "empty"})
            assert r.is_error and "no metrics store" in text_of(r)

    run(body)


def test_the_server_starts_without_importing_any_store_library():
    code = ("import sys, server.app; print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('tensorboard', 'wandb', 'mlflow', 'trackio', 'sqlite3', 'numpy')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
