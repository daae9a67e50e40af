"""Regression-test templates: each generated test FAILS on a broken example and PASSES on its fixed twin.

The acceptance run renders every (example, template) pair into two workspaces — one with the broken
`train.py`, one with `train_fixed.py` copied over it (what the demo does) — and runs pytest once per
workspace, in parallel; each pair is then judged from the JUnit report. The tool path itself
(import check, never overwrite, pytest in a subprocess, timeout) is tested further down.
"""

import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import anyio
import pytest

from conftest import EXAMPLES, PYTHON
from tools.errors import TriageError
from tools.regression import TEMPLATES, render_test, validate, write_regression_test

# (example, failure_mode, function or None, params): the test must fail on train.py, pass on train_fixed.py
CASES = [
    ("nan_log_zero", "nan_inf", None, {"steps": 40}),
    ("nan_div_zero", "nan_inf", None, {"steps": 20}),
    ("nan_div_zero", "nan_inf", "train.py:Standardize", {"steps": 20}),
    ("exp_overflow", "nan_inf", None, {"steps": 60}),
    ("exp_overflow", "nan_inf", "train.py:log_softmax", {"steps": 60}),
    ("detached_graph", "broken_graph", None, {}),
    ("frozen_params", "frozen_params", None, {}),
    ("lr_too_high", "exploding_gradients", None, {"steps": 10}),
    ("lr_too_high", "lr_too_high", None, {}),
    ("lr_too_low", "lr_too_low", None, {}),
    ("vanishing_gradients", "vanishing_gradients", None, {}),
    ("missing_zero_grad", "missing_zero_grad", "train.py:train_step", {}),
    ("bad_init", "bad_init", None, {}),
    ("label_leakage", "data_leakage", None, {}),
    ("shape_mismatch", "shape_mismatch", None, {}),
    ("view_after_permute", "shape_mismatch", None, {}),
    ("double_softmax", "loss_function", None, {}),
    ("wrong_sign_loss", "loss_function", None, {}),
    ("eval_mode", "train_eval_mode", None, {}),
    ("misaligned_labels", "data_pipeline", None, {}),
    ("dead_relus", "dead_units", None, {}),
    ("hang_loader", "hang", None, {"timeout_s": 3.0}),
    ("vanishing_gradients", "healthy", None, {"steps": 60}),  # the generic overfit-one-batch test
]
HEALTHY = ["healthy_mlp", "healthy_cnn"]
# every template that needs only a target -> a failure mode that selects it (healthy runs must pass them all)
TARGET_TEMPLATES = {"nan_inf": "nan_inf", "broken_graph": "broken_graph", "frozen_params": "frozen_params",
                    "exploding_gradients": "exploding_gradients", "vanishing_gradients": "vanishing_gradients",
                    "bad_init": "bad_init", "data_leakage": "data_leakage", "shape_mismatch": "shape_mismatch",
                    "loss_function": "loss_function", "train_eval_mode": "train_eval_mode",
                    "data_pipeline": "data_pipeline", "update_ratio": "lr_too_high", "dead_units": "dead_units",
                    "hang": "hang", "overfit_one_batch": "healthy"}

# Until examples/missing_zero_grad exposes its step as a function, the test appends one with the same bug
# (and its twin with the fix); an example that defines train_step itself is used as it is.
TRAIN_STEP = '''

def train_step(model, optimizer, batch):
{zero}    loss = loss_fn(model, batch)
    loss.backward()
    optimizer.step()
    return loss
'''


def _copy_example(name: str, dest: Path, fixed: bool) -> None:
    if dest.exists():
        return
    shutil.copytree(EXAMPLES / name, dest, ignore=shutil.ignore_patterns("__pycache__"))
    if fixed and (dest / "train_fixed.py").exists():
        shutil.copy(dest / "train_fixed.py", dest / "train.py")
    train = dest / "train.py"
    if name == "missing_zero_grad" and "def train_step" not in train.read_text():
        train.write_text(train.read_text() + TRAIN_STEP.format(zero="    optimizer.zero_grad()\n" if fixed else ""))


def _render(ws: Path, test_name: str, example: str, mode: str, function: str | None, params: dict) -> None:
    target = f"examples/{example}/train.py:make_target"
    function = function and f"examples/{example}/{function}"
    template, _, eff = validate(mode, test_name, target, function, None, None, params)
    source = render_test(template, failure_mode=mode, title=test_name, target=target, function=function, params=eff)
    (ws / "tests" / f"test_{test_name}.py").write_text(source)


def _outcomes(junit: Path) -> dict[str, str]:
    """file stem -> 'failed' (any test failed or errored), else 'passed' (some passed), else 'skipped'."""
    kinds: dict[str, set[str]] = {}
    for case in ET.parse(junit).iter("testcase"):
        kind = ("failed" if case.find("failure") is not None or case.find("error") is not None
                else "skipped" if case.find("skipped") is not None else "passed")
        kinds.setdefault(case.get("classname", "").split(".")[-1], set()).add(kind)
    return {stem: next(k for k in ("failed", "passed", "skipped") if k in ks) for stem, ks in kinds.items()}


@pytest.fixture(scope="module")
def acceptance(tmp_path_factory) -> dict[str, dict[str, str]]:
    root = tmp_path_factory.mktemp("acceptance")
    procs = {}
    for state in ("broken", "fixed"):
        ws = root / state
        (ws / "tests").mkdir(parents=True)
        for i, (example, mode, function, params) in enumerate(CASES):
            if (EXAMPLES / example).is_dir():
                _copy_example(example, ws / "examples" / example, fixed=state == "fixed")
                _render(ws, f"case{i:02d}", example, mode, function, params)
        for example in HEALTHY:
            if (EXAMPLES / example).is_dir():
                _copy_example(example, ws / "examples" / example, fixed=False)
                for template, mode in TARGET_TEMPLATES.items():
                    _render(ws, f"{example}_{template}", example, mode, None,
                            {"timeout_s": 5.0} if template == "hang" else {})
        procs[state] = subprocess.Popen(
            [PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml", str(ws / "junit.xml"), "tests"],
            cwd=ws, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"})
    outcomes, logs = {}, {}
    for state, proc in procs.items():
        logs[state] = proc.communicate(timeout=600)[0].decode(errors="replace")
        outcomes[state] = _outcomes(root / state / "junit.xml")
    outcomes["logs"] = logs
    return outcomes


@pytest.mark.parametrize("i", range(len(CASES)), ids=[f"{c[0]}-{c[1]}" + ("-fn" if c[2] else "") for c in CASES])
def test_generated_test_fails_on_the_bug_and_passes_on_the_fix(acceptance, i):
    example = CASES[i][0]
    if not (EXAMPLES / example / "train_fixed.py").exists():
        pytest.skip(f"examples/{example} (with train_fixed.py) is not in the gallery yet")
    stem = f"test_case{i:02d}"
    assert acceptance["broken"].get(stem) == "failed", f"passes on the bug:\n{acceptance['logs']['broken'][-3000:]}"
    assert acceptance["fixed"].get(stem) == "passed", f"fails on the fix:\n{acceptance['logs']['fixed'][-3000:]}"


@pytest.mark.parametrize("example", HEALTHY)
def test_no_template_fails_on_a_healthy_run(acceptance, example):
    if not (EXAMPLES / example).is_dir():
        pytest.skip(f"examples/{example} is not in the gallery yet")
    mine = {k: v for k, v in acceptance["fixed"].items() if k.startswith(f"test_{example}_")}
    assert len(mine) == len(TARGET_TEMPLATES)
    assert all(v == "passed" for v in mine.values()), mine


# ---------------------------------------------------------------- the tool path

def _workspace_with(workspace: Path, example: str) -> Path:
    shutil.copytree(EXAMPLES / example, workspace / example, ignore=shutil.ignore_patterns("__pycache__"))
    return workspace / example / "train.py"


def _write(workspace: Path, **kwargs):
    async def body():
        return await write_regression_test(workspace_root=workspace, **kwargs)
    return anyio.run(body)


def test_tool_never_overwrites_and_reports_the_failure(workspace, no_stray_processes):
    # the fail-then-pass round trip through the tool runs over MCP stdio in test_journal_mcp.py
    train = _workspace_with(workspace, "nan_div_zero")
    (workspace / "tests").mkdir()
    mine = workspace / "tests" / "test_standardize_stays_finite.py"
    mine.write_bytes(b"# a hand-written test with the same name\n")
    report = _write(workspace, failure_mode="nan_inf", name="Standardize stays finite",
                    function="nan_div_zero/train.py:Standardize", function_file=train,
                    params={"edge_inputs": ["constant_rows"]})
    assert (report.path, report.status, report.passed) == ("tests/test_standardize_stays_finite_2.py", "failed", False)
    assert "constant_rows input" in report.output_tail and "NaN/Inf" in report.output_tail
    assert mine.read_bytes() == b"# a hand-written test with the same name\n"
    source = (workspace / report.path).read_text()
    assert "'edge_inputs': ['constant_rows']" in source and "FUNCTION = 'nan_div_zero/train.py:Standardize'" in source


def test_target_that_does_not_import_writes_nothing(workspace):
    (workspace / "train.py").write_text("import torch\nimport a_package_that_is_not_installed\n\ndef make_target():\n    pass\n")
    with pytest.raises(TriageError, match="does not import.*ModuleNotFoundError.*a_package_that_is_not_installed"):
        _write(workspace, failure_mode="broken_graph", name="grads", target="train.py:make_target",
               target_file=workspace / "train.py")
    assert not (workspace / "tests").exists()


def test_a_hung_test_times_out_and_leaves_no_process(workspace, no_stray_processes):
    train = _workspace_with(workspace, "hang_loader")
    report = _write(workspace, failure_mode="hang", name="loader ends", target="hang_loader/train.py:make_target",
                    target_file=train, params={"timeout_s": 300.0}, timeout_s=8.0)
    assert report.status == "timeout" and not report.passed
    assert (workspace / report.path).exists()


@pytest.mark.parametrize("kwargs, message", [
    ({"failure_mode": "nan_loss"}, "unknown failure_mode 'nan_loss'. Use one of: exception, shape_mismatch, nan_inf"),
    ({"name": "../evil"}, "path separator"),
    ({"name": "sub/test"}, "path separator"),
    ({"name": "///"}, "path separator"),
    ({"params": {"max_norm": 5}}, r"unknown params \['max_norm'\].*max_grad_norm \(default 10.0\)"),
    ({"params": {"steps": [1, 2]}}, "must be a single value"),
    ({"params": {"max_grad_norm": float("nan")}}, "finite"),
    ({"target": "train.py"}, "must look like 'path/file.py:name'"),
    ({"target": "train.py:make_tagret"}, "defines no top-level 'make_tagret'.*make_target"),
    ({"target": None}, "needs target="),
    ({"failure_mode": "missing_zero_grad"}, "lives in the training loop.*train_step"),
])
def test_bad_input_is_refused_and_nothing_is_written(workspace, kwargs, message):
    (workspace / "train.py").write_text("def make_target():\n    return {}\n\nif True:\n    def helper():\n        pass\n")
    args = {"failure_mode": "exploding_gradients", "name": "grad norm bounded", "target": "train.py:make_target",
            "target_file": workspace / "train.py", **kwargs}
    with pytest.raises(TriageError, match=message):
        _write(workspace, **args)
    assert not (workspace / "tests").exists()


def test_tests_folder_that_is_a_file_is_refused(workspace):
    (workspace / "train.py").write_text("def make_target():\n    return {}\n")
    (workspace / "tests").write_text("not a folder")
    with pytest.raises(TriageError, match="is not a directory"):
        _write(workspace, failure_mode="bad_init", name="init", target="train.py:make_target",
               target_file=workspace / "train.py")
    assert (workspace / "tests").read_text() == "not a folder"


def test_names_defined_under_a_main_guard_count_as_defined(workspace):
    from tools.regression import check_defines
    f = workspace / "m.py"
    f.write_text("try:\n    import x\nexcept ImportError:\n    def entropy(p):\n        return p\n")
    check_defines(f, "entropy", "function")
    with pytest.raises(TriageError, match="defines no top-level 'main'"):
        check_defines(f, "main", "function")


def test_generated_file_is_standalone_python():
    def render(params):
        template, _, eff = validate("nan_inf", "x", None, "m.py:f", None, None, params)
        return render_test(template, failure_mode="nan_inf", title="x", target=None, function="m.py:f", params=eff)

    source = render({"inputs": ["torch.zeros(2, 3)"]})
    imports = [line for line in source.splitlines() if line.startswith(("import ", "from "))]
    assert not any("mltriage" in line or "tools" in line for line in imports), imports
    compile(source, "test_x.py", "exec")
    with pytest.raises(TriageError, match="'torch.zeros\\(2, ' does not parse"):
        render({"inputs": ["torch.zeros(2, "]})


def test_every_template_file_exists_and_every_mode_has_one():
    from tools.failure_modes import FAILURE_MODES
    from tools.regression import TEMPLATE_DIR, template_for
    for mode in FAILURE_MODES:
        assert (TEMPLATE_DIR / f"{template_for(mode).name}.py.tmpl").exists()
    assert set(TARGET_TEMPLATES) == {t.name for t in TEMPLATES.values() if t.needs != "target+function"}
