"""The gallery of broken runs is real: every script runs, logs parseable metrics, exposes the target
factory contract, and each bug measurably hurts training while its fixed twin trains well.

All scripts run once each as real processes, two at a time (the hang runs beside them);
the measurements below read those logs.
"""

import ast
import importlib.util
import json
import math
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from torch import nn

# the shared runs fixture does ~40 real training runs; on a machine busy with other work it may need more than the
# default per-test timeout
pytestmark = [pytest.mark.timeout(600), pytest.mark.xdist_group("examples")]  # one worker: the runs fixture

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
META = {d.name: json.loads((d / "example.json").read_text()) for d in sorted(EXAMPLES.iterdir())
        if (d / "example.json").exists()}
BROKEN = [n for n, m in META.items() if m["failure_mode"] != "healthy"]
HEALTHY = [n for n, m in META.items() if m["failure_mode"] == "healthy"]
SCRIPTS = [(n, "train.py") for n in META] + [(n, "train_fixed.py") for n in BROKEN]

# enough steps for each bug to show in the log; the default elsewhere
STEPS = {"nan_div_zero": 30, "nan_log_zero": 60, "lr_too_high": 60, "exp_overflow": 80, "missing_zero_grad": 160,
         "view_after_permute": 60, "hang_loader": 40, "eval_mode": 200}
DEFAULT_STEPS = 120
HANG_TIMEOUT_S = 8  # hang_loader blocks for good after 24 batches (6 logged losses), within a second; its fix ends in 0.1 s
NUM = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf|NaN|Infinity)"
PAIR = re.compile(r"""(?P<key>[A-Za-z_][\w()]*)['"]?\s*(?:[:=]\s*|\s+)(?P<val>""" + NUM + r")(?![\w.])")


def parse_metrics(line: str) -> dict[str, float]:
    """One log line -> {key: value}; handles `k v |`, `k=v`, JSON lines and printed Python dicts."""
    return {m["key"]: float(m["val"].replace("Infinity", "inf")) for m in PAIR.finditer(line)}


@dataclass
class Run:
    returncode: int | None
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False
    metrics: list[dict] = field(default_factory=list)

    def series(self, key: str) -> list[float]:
        return [m[key] for m in self.metrics if key in m]

    @property
    def losses(self) -> list[float]:
        return [m.get("loss", m.get("train_loss")) for m in self.metrics if "loss" in m or "train_loss" in m]


# One interpreter imports torch once (~3 s of CPU per fresh process, mostly torch's lazy imports), then forks a
# child per script; each child is a real process running the script as __main__ with its own argv, stdout and
# exit code, two at a time (the hang gets its own lane), killed when it passes its timeout.
ZYGOTE = r"""
import json, os, runpy, signal, sys, time, traceback
import torch
torch.optim.SGD(torch.nn.Linear(1, 1).parameters(), lr=0.1)

def child(job):
    for fd, path in ((1, job["stdout"]), (2, job["stderr"])):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
    os.chdir(job["cwd"])
    sys.path[0], sys.argv, code = job["cwd"], job["argv"], 0
    try:
        runpy.run_path(job["argv"][0], run_name="__main__")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else int(e.code is not None)
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush(); sys.stderr.flush()
    os._exit(code)

todo, running = json.load(sys.stdin), {}
while todo or running:
    for job in [j for j in todo if j["lane"] or sum(not r[0]["lane"] for r in running.values()) < 2][:1]:
        todo.remove(job)
        pid = os.fork()
        if pid == 0:
            child(job)
        running[pid] = (job, time.monotonic())
    pid, status = os.waitpid(-1, os.WNOHANG) if running else (0, 0)
    if pid == 0:
        for p, (job, t0) in running.items():
            if time.monotonic() - t0 > job["timeout"]:
                os.kill(p, signal.SIGKILL)
        time.sleep(0.02)
        continue
    job, t0 = running.pop(pid)
    print(json.dumps({"id": job["id"], "returncode": os.waitstatus_to_exitcode(status),
                      "seconds": time.monotonic() - t0}), flush=True)
"""


def run_all(scripts: list[tuple[str, str]], tmp: Path) -> dict[tuple[str, str], Run]:
    jobs = []
    for i, (name, script) in enumerate(scripts):
        hang = (name, script) == ("hang_loader", "train.py")
        jobs.append({"id": i, "cwd": str(EXAMPLES / name), "lane": hang,
                     "argv": [script, "--steps", str(STEPS.get(name, DEFAULT_STEPS))],
                     "stdout": str(tmp / f"{i}.out"), "stderr": str(tmp / f"{i}.err"),
                     "timeout": HANG_TIMEOUT_S if hang else 120})
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    p = subprocess.run([sys.executable, "-c", ZYGOTE], input=json.dumps(jobs), capture_output=True, text=True,
                       env=env, timeout=580)
    assert p.returncode == 0, p.stderr[-3000:]
    runs = {}
    for result in map(json.loads, p.stdout.splitlines()):
        job = jobs[result["id"]]
        out, err = Path(job["stdout"]).read_text(), Path(job["stderr"]).read_text()
        timed_out = result["returncode"] == -9 and result["seconds"] >= job["timeout"]
        run = Run(None if timed_out else result["returncode"], out, err, result["seconds"], timed_out)
        run.metrics = [m for m in map(parse_metrics, out.splitlines()) if m]
        runs[scripts[result["id"]]] = run
    assert len(runs) == len(scripts)
    return runs


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[tuple[str, str], Run]:
    return run_all(SCRIPTS, tmp_path_factory.mktemp("runs"))


@pytest.mark.parametrize("name,script", [("missing_zero_grad", "train.py"), ("healthy_cnn", "train.py")])
def test_scripts_run_from_a_fresh_interpreter_too(name, script):
    p = subprocess.run([sys.executable, script, "--steps", "12"], cwd=EXAMPLES / name, capture_output=True,
                       text=True, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert p.returncode == 0, p.stderr[-2000:]
    assert any("loss" in parse_metrics(line) for line in p.stdout.splitlines())


def final(values: list[float], k: int = 2) -> float:
    tail = values[-k:]
    return sum(tail) / len(tail)


def finite(values: list[float]) -> bool:
    return all(math.isfinite(v) for v in values)


# --- the gallery itself ---------------------------------------------------------------------


def test_gallery_has_fifteen_broken_runs_two_healthy_and_a_readme_row_for_each():
    assert len(BROKEN) >= 15 and len(HEALTHY) >= 2
    readme = (EXAMPLES / "README.md").read_text()
    for name, meta in META.items():
        assert set(meta) >= {"name", "failure_mode", "summary", "bug", "fix", "bug_line", "detected_by"}
        assert meta["name"] == name and f"`{name}`" in readme
        has_fixed = (EXAMPLES / name / "train_fixed.py").exists()
        assert has_fixed == (name in BROKEN)


@pytest.mark.parametrize("name", BROKEN)
def test_fixed_twin_differs_from_the_broken_run_only_by_the_fix(name):
    broken = (EXAMPLES / name / "train.py").read_text().splitlines()
    fixed = (EXAMPLES / name / "train_fixed.py").read_text().splitlines()
    changed = set(broken) ^ set(fixed)
    assert 1 <= len(changed) <= 4, changed
    bug_line = META[name]["bug_line"]
    assert 1 <= bug_line <= len(broken) and broken[bug_line - 1].strip()


# --- real runs -------------------------------------------------------------------------------


@pytest.mark.parametrize("name,script", SCRIPTS, ids=[f"{n}/{s}" for n, s in SCRIPTS])
def test_script_runs_and_logs_parseable_losses(runs, name, script):
    run = runs[(name, script)]
    if (name, script) == ("view_after_permute", "train.py"):
        assert run.returncode not in (0, None) and "RuntimeError" in run.stderr and "view" in run.stderr
        return
    if (name, script) == ("hang_loader", "train.py"):
        assert run.timed_out and len(run.losses) >= 3, run.stdout
        return
    assert run.returncode == 0, run.stderr[-2000:]
    assert len(run.losses) >= 3, run.stdout[:500]


@pytest.mark.parametrize("name", HEALTHY + BROKEN)
def test_healthy_and_fixed_runs_train_well(runs, name):
    script = "train.py" if name in HEALTHY else "train_fixed.py"
    losses = runs[(name, script)].losses
    assert finite(losses), losses
    assert final(losses) < 0.5 * losses[0], losses


@pytest.mark.parametrize("name", ["nan_log_zero", "nan_div_zero", "exp_overflow", "lr_too_high"])
def test_broken_run_goes_non_finite_and_its_fixed_twin_does_not(runs, name):
    assert not finite(runs[(name, "train.py")].losses)
    assert finite(runs[(name, "train_fixed.py")].losses)


@pytest.mark.parametrize("name", ["vanishing_gradients", "detached_graph", "frozen_params", "double_softmax",
                                  "misaligned_labels", "dead_relus", "shape_mismatch", "lr_too_low"])
def test_fixed_twin_reaches_less_than_half_the_broken_runs_loss(runs, name):
    broken, fixed = runs[(name, "train.py")].losses, runs[(name, "train_fixed.py")].losses
    assert final(fixed) < 0.5 * final(broken), (broken, fixed)


def test_missing_zero_grad_makes_gradients_and_loss_blow_up(runs):
    broken, fixed = runs[("missing_zero_grad", "train.py")], runs[("missing_zero_grad", "train_fixed.py")]
    grad = broken.series("grad_norm")
    assert not finite(broken.losses) or max(broken.losses) > 100 * broken.losses[0]
    assert max(g for g in grad if math.isfinite(g)) > 100 * grad[0]
    assert max(fixed.series("grad_norm")) < 10 * max(fixed.series("grad_norm")[0], 1.0)


def test_bad_init_starts_far_above_ln_c_and_the_fix_starts_at_ln_c(runs):
    ln_c = math.log(load("bad_init").NUM_CLASSES)
    assert runs[("bad_init", "train.py")].losses[0] > 3 * ln_c
    assert abs(runs[("bad_init", "train_fixed.py")].losses[0] - ln_c) < 0.1 * ln_c


def test_label_leakage_reaches_a_loss_the_real_features_cannot(runs):
    leaked, honest = runs[("label_leakage", "train.py")].losses, runs[("label_leakage", "train_fixed.py")].losses
    assert final(leaked) < 0.5 * final(honest)


def test_eval_mode_left_on_overfits_compared_to_training_mode(runs):
    broken = runs[("eval_mode", "train.py")].series("val_loss")
    fixed = runs[("eval_mode", "train_fixed.py")].series("val_loss")
    assert broken[-1] > 1.05 * fixed[-1], (broken, fixed)


def test_wrong_sign_loss_runs_to_minus_infinity(runs):
    broken, fixed = runs[("wrong_sign_loss", "train.py")].losses, runs[("wrong_sign_loss", "train_fixed.py")].losses
    assert broken[-1] < 0 and broken[-1] < 5 * broken[0]
    assert 0 < fixed[-1] < 0.5 * fixed[0]


def test_hang_loader_hangs_after_a_few_steps_and_the_fix_finishes(runs):
    broken, fixed = runs[("hang_loader", "train.py")], runs[("hang_loader", "train_fixed.py")]
    assert broken.timed_out and "done" not in broken.stdout and len(broken.losses) >= 3
    assert fixed.returncode == 0 and "done after" in fixed.stdout


def test_log_formats_vary_and_parse():
    assert parse_metrics("step 10 | loss 2.3012 | grad_norm 0.82 | lr 3.0e-04") == \
        {"step": 10, "loss": 2.3012, "grad_norm": 0.82, "lr": 3e-4}
    assert math.isnan(parse_metrics("step=3 loss=nan lr=0.02")["loss"])
    assert parse_metrics('{"step": 5, "loss": NaN}')["step"] == 5
    assert parse_metrics("{'loss': 1.2, 'learning_rate': 0.0003, 'epoch': 0.1}") == \
        {"loss": 1.2, "learning_rate": 3e-4, "epoch": 0.1}
    assert parse_metrics("[step 20/200] train_loss=0.5964 lr=3.0e-03")["train_loss"] == 0.5964


# --- the target factory, in process ----------------------------------------------------------


def load(name: str, script: str = "train.py"):
    path = EXAMPLES / name / script
    spec = importlib.util.spec_from_file_location(f"example_{name}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.filterwarnings("ignore:Using a target size")  # shape_mismatch's broadcast is the bug on show
@pytest.mark.parametrize("name,script", SCRIPTS, ids=[f"{n}/{s}" for n, s in SCRIPTS])
def test_make_target_returns_the_contract_quickly(name, script):
    torch.optim.SGD(nn.Linear(1, 1).parameters(), lr=0.1)  # torch's one-off lazy import, not the factory's cost
    module = load(name, script)
    t = time.monotonic()
    target = module.make_target()
    elapsed = time.monotonic() - t
    assert elapsed < 1.0, f"make_target took {elapsed:.2f}s"
    assert isinstance(target["model"], nn.Module)
    assert target.get("batch") is not None or target.get("data") is not None
    assert isinstance(target["optimizer"], torch.optim.Optimizer)
    assert target.get("task") in ("classification", "regression")
    if target["task"] == "classification":
        assert isinstance(target["num_classes"], int) and target["num_classes"] >= 2
    if (name, script) == ("view_after_permute", "train.py"):
        with pytest.raises(RuntimeError, match="view"):
            target["loss_fn"](target["model"], target["batch"])
        return
    loss = target["loss_fn"](target["model"], target["batch"])
    assert isinstance(loss, torch.Tensor) and loss.dim() == 0 and loss.requires_grad


def _step(target):
    target["optimizer"].zero_grad()
    loss = target["loss_fn"](target["model"], target["batch"])
    loss.backward()
    target["optimizer"].step()
    return loss


def test_frozen_params_factory_leaves_the_backbone_out_of_the_optimizer():
    for script, expect_all in (("train.py", False), ("train_fixed.py", True)):
        t = load("frozen_params", script).make_target()
        in_opt = {id(p) for g in t["optimizer"].param_groups for p in g["params"]}
        assert all(id(p) in in_opt for p in t["model"].parameters()) == expect_all


def test_detached_graph_factory_gives_the_encoder_no_gradient():
    for script, encoder_has_grad in (("train.py", False), ("train_fixed.py", True)):
        t = load("detached_graph", script).make_target()
        t["loss_fn"](t["model"], t["batch"]).backward()
        grads = [p.grad for p in t["model"].encoder.parameters()]
        assert all(g is not None for g in grads) == encoder_has_grad


def test_eval_mode_factory_returns_a_model_in_eval_mode_whose_batchnorm_never_updates():
    broken, fixed = load("eval_mode").make_target(), load("eval_mode", "train_fixed.py").make_target()
    assert not broken["model"].training and fixed["model"].training
    bn = broken["model"][1]
    _step(broken)
    assert torch.count_nonzero(bn.running_mean) == 0 and int(bn.num_batches_tracked) == 0


def test_dead_relus_factory_zeroes_most_relu_outputs():
    for script, dead in (("train.py", True), ("train_fixed.py", False)):
        t = load("dead_relus", script).make_target()
        x, _ = t["batch"]
        zeros = []
        with torch.no_grad():
            for layer in t["model"].layers:
                x = torch.relu(layer(x))
                zeros.append((x == 0).float().mean().item())
        assert (min(zeros) >= 0.7) == dead, zeros


def test_vanishing_gradients_shrink_by_orders_of_magnitude_toward_the_input():
    for script, vanishing in (("train.py", True), ("train_fixed.py", False)):
        t = load("vanishing_gradients", script).make_target()
        t["loss_fn"](t["model"], t["batch"]).backward()
        norms = [m.weight.grad.norm() for m in t["model"].body if isinstance(m, nn.Linear)]
        ratio = norms[0] / norms[-1]
        assert (ratio < 1e-6) == vanishing, float(ratio)
        if not vanishing:
            assert 0.1 < ratio < 10


def test_label_leakage_factory_has_a_feature_column_equal_to_the_label():
    for script, leaks in (("train.py", True), ("train_fixed.py", False)):
        x, y = load("label_leakage", script).make_target()["batch"]
        assert any(torch.equal(x[:, j], y.float()) for j in range(x.shape[1])) == leaks


def test_lr_too_low_factory_moves_weights_by_a_negligible_fraction():
    for script, tiny in (("train.py", True), ("train_fixed.py", False)):
        t = load("lr_too_low", script).make_target()
        w = t["model"][0].weight
        before = w.detach().clone()
        _step(t)
        ratio = ((w.detach() - before).norm() / before.norm()).item()
        assert (ratio < 1e-5) == tiny, ratio


def test_each_example_json_names_tools_from_the_contract():
    known = {"nan_hook_run", "init_loss_check", "overfit_test", "grad_norm_snapshot", "data_check",
             "static_scan", "process_check", "tail_log", "log_metrics"}
    for meta in META.values():
        assert set(meta["detected_by"]) <= known, meta["detected_by"]
        ast.parse((EXAMPLES / meta["name"] / "train.py").read_text())
