"""Regression tests: each generated test FAILS on the bug and PASSES on the fix, on code where the bug lives.

The acceptance run renders every (toy example, template) pair into two workspaces (the broken `train.py`
and `train_fixed.py` copied over it) and runs pytest once per workspace, in parallel; each pair is judged
from the JUnit report. Further down: the tool path (written before the fix, run at once, never overwrite,
timeouts), the bugs of issue 14 that live in the user's own loop and model on a nanoGPT-style fixture
(schedule, causal mask, zero_grad order, padding, unshifted targets), each caught by a test of the user's
code and released by the fix, and the verdicts (a test that passes on the bug is never called a catch).
"""

import os
import shutil
import subprocess
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import anyio
import pytest

from _shared_threads import one_thread_per_process  # noqa: F401  (autouse: torch runs it starts use one thread)
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
    ("view_after_permute", "exception", None, {}),
    ("double_softmax", "loss_function", None, {}),
    ("wrong_sign_loss", "loss_function", None, {}),
    ("eval_mode", "train_eval_mode", None, {}),
    ("misaligned_labels", "data_pipeline", None, {}),
    # labels misaligned by a group-by merge: memorised shuffled labels score worse on held-out data than
    # memorised misaligned ones, so only the best held-out loss (not the last) tells them apart
    ("realistic/tabular/orders_refund_groupby_merge", "data_pipeline", None, {}),
    # class ids factorised per season file: the training batches are fine, validation is built apart from them
    ("realistic/tabular/crop_type_season_factorize", "data_pipeline", "train.py:val_batches", {}),
    ("dead_relus", "dead_units", None, {}),
    ("hang_loader", "hang", None, {"timeout_s": 3.0}),
    ("vanishing_gradients", "healthy", None, {"steps": 60}),  # the generic overfit-one-batch test
]
HEALTHY = ["healthy_mlp", "healthy_cnn"]
# a healthy run has no fixed twin (its copy is the same in both workspaces), so its templates run in one of the two
# pytest runs, not in both: one healthy run in each keeps the two runs, which go side by side, alike in length
HEALTHY_IN = {"healthy_mlp": "broken", "healthy_cnn": "fixed"}
# every template that needs only a target -> a failure mode that selects it (healthy runs must pass them all)
TARGET_TEMPLATES = {"nan_inf": "nan_inf", "broken_graph": "broken_graph", "frozen_params": "frozen_params",
                    "exploding_gradients": "exploding_gradients", "vanishing_gradients": "vanishing_gradients",
                    "bad_init": "bad_init", "data_leakage": "data_leakage", "shape_mismatch": "shape_mismatch",
                    "loss_function": "loss_function", "train_eval_mode": "train_eval_mode",
                    "data_pipeline": "data_pipeline", "update_ratio": "lr_too_high", "dead_units": "dead_units",
                    "hang": "hang", "overfit_one_batch": "healthy", "training_step_runs": "exception",
                    "padding": "data_pipeline", "rows": "data_pipeline"}

# Until examples/missing_zero_grad exposes its step as a function, the test appends one with the same bug
# (and its twin with the fix); an example that defines train_step itself is used as it is.
TRAIN_STEP = '''

def train_step(model, optimizer, batch):
{zero}    loss = loss_fn(model, batch)
    loss.backward()
    optimizer.step()
    return loss
'''

VAL_BATCHES = '''

def val_batches():
    cfg = dict(CONFIG)
    with tempfile.TemporaryDirectory() as tmp:
        _, (X_va, y_va), _ = build_tensors(cfg, tmp)
    return X_va, y_va


def not_data():
    return 3
'''


def _copy_example(name: str, dest: Path, fixed: bool) -> None:
    if dest.exists():
        return
    shutil.copytree(EXAMPLES / name, dest, ignore=shutil.ignore_patterns("__pycache__"))
    if fixed and (dest / "train_fixed.py").exists():
        shutil.copy(dest / "train_fixed.py", dest / "train.py")
    train = dest / "train.py"
    if name.endswith("crop_type_season_factorize") and "def val_batches" not in train.read_text():
        train.write_text(train.read_text() + VAL_BATCHES)  # what an agent adds to hand the test its validation data
    if name == "missing_zero_grad" and "def train_step" not in train.read_text():
        train.write_text(train.read_text() + TRAIN_STEP.format(zero="    optimizer.zero_grad()\n" if fixed else ""))


def _render(ws: Path, test_name: str, example: str, mode: str, function: str | None, params: dict,
            template: str | None = None) -> None:
    target = f"examples/{example}/train.py:make_target"
    function = function and f"examples/{example}/{function}"
    plan, _ = validate(mode, test_name, target, function, None, None, params, template=template)
    source = render_test(plan, failure_mode=mode, title=test_name, target=target, function=function, command=None)
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
        if state == "broken":  # a function= that returns no validation data: said plainly, never a catch
            _render(ws, "not_validation_data", "realistic/tabular/crop_type_season_factorize", "data_pipeline",
                    "train.py:not_data", {})
        for example in HEALTHY:
            if HEALTHY_IN[example] == state and (EXAMPLES / example).is_dir():
                _copy_example(example, ws / "examples" / example, fixed=False)
                for template, mode in TARGET_TEMPLATES.items():
                    _render(ws, f"{example}_{template}", example, mode, None,
                            {"timeout_s": 5.0} if template == "hang" else {}, template=template)
        procs[state] = subprocess.Popen(
            [PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml", str(ws / "junit.xml"), "tests"],
            cwd=ws, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"})
    outcomes, logs = {}, {}
    for state, proc in procs.items():
        logs[state] = proc.communicate(timeout=600)[0].decode(errors="replace")
        outcomes[state] = _outcomes(root / state / "junit.xml")
    outcomes["logs"] = logs
    outcomes["messages"] = {c.get("classname", "").split(".")[-1]: f.get("message", "")
                            for c in ET.parse(root / "broken" / "junit.xml").iter("testcase")
                            for f in c.findall("failure")}
    return outcomes


ACCEPTANCE = pytest.mark.xdist_group("acceptance")  # under xdist, one worker renders and runs them once


@ACCEPTANCE
@pytest.mark.parametrize("i", range(len(CASES)), ids=[f"{c[0]}-{c[1]}" + ("-fn" if c[2] else "") for c in CASES])
def test_generated_test_fails_on_the_bug_and_passes_on_the_fix(acceptance, i):
    example = CASES[i][0]
    if not (EXAMPLES / example / "train_fixed.py").exists():
        pytest.skip(f"examples/{example} (with train_fixed.py) is not in the gallery yet")
    stem = f"test_case{i:02d}"
    assert acceptance["broken"].get(stem) == "failed", f"passes on the bug:\n{acceptance['logs']['broken'][-3000:]}"
    assert acceptance["fixed"].get(stem) == "passed", f"fails on the fix:\n{acceptance['logs']['fixed'][-3000:]}"


@ACCEPTANCE
def test_validation_data_that_is_not_batches_is_said_plainly_and_is_no_catch(acceptance):
    from tools.regression import classify
    message = acceptance["messages"].get("test_not_validation_data", "")
    assert "not_data() returned int; expected the validation batches" in message, acceptance["messages"]
    assert classify(message) == "setup"  # judge_before_fix: "fails for a reason of its own, not the bug"


@ACCEPTANCE
@pytest.mark.parametrize("example", HEALTHY)
def test_no_template_fails_on_a_healthy_run(acceptance, example):
    if not (EXAMPLES / example).is_dir():
        pytest.skip(f"examples/{example} is not in the gallery yet")
    mine = {k: v for k, v in acceptance[HEALTHY_IN[example]].items() if k.startswith(f"test_{example}_")}
    assert len(mine) == len(TARGET_TEMPLATES)
    # an MLP's and a CNN's batches hold no padded sequences: the padding test skips, saying so
    assert mine.pop(f"test_{example}_padding") == "skipped"
    # nor do they read a CSV table: the rows test skips, saying so
    assert mine.pop(f"test_{example}_rows") == "skipped"
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
    assert report.fails_now and report.catches_bug and report.verdict.startswith("catches the bug")
    assert "constant_rows input" in report.failure_message and not report.try_next
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
    ({"target": None}, "nothing to test for exploding_gradients: pass target=, function= or command="),
    ({"failure_mode": "missing_zero_grad"}, "lives in the training loop.*command=.*train_step"),
    ({"failure_mode": "exploding_gradients", "function": "train.py:make_target"}, "function= has no template"),
    ({"template": "lr_schedule"}, "the lr_schedule template needs function="),
    ({"template": "nope"}, "unknown template 'nope'"),
    ({"target": None, "command": []}, "command is empty"),
    ({"target": None, "command": ["python", "train.py"], "params": {"script.checks": ["nope"]}}, "unknown script checks"),
    ({"target": None, "command": ["python", "missing.py"]}, "not a file under the workspace"),
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
        plan, _ = validate("nan_inf", "x", None, "m.py:f", None, None, params)
        return render_test(plan, failure_mode="nan_inf", title="x", target=None, function="m.py:f", command=None)

    source = render({"inputs": ["torch.zeros(2, 3)"]})
    imports = [line for line in source.splitlines() if line.startswith(("import ", "from "))]
    assert not any("mltriage" in line or "tools" in line for line in imports), imports
    compile(source, "test_x.py", "exec")
    with pytest.raises(TriageError, match="'torch.zeros\\(2, ' does not parse"):
        render({"inputs": ["torch.zeros(2, "]})


def test_every_template_file_exists_and_every_mode_has_one():
    from tools.failure_modes import FAILURE_MODES
    from tools.regression import TEMPLATE_DIR, plan_bodies
    for name in TEMPLATES:
        assert (TEMPLATE_DIR / f"{name}.py.tmpl").exists()
    for mode in FAILURE_MODES:  # every mode has a test for a target (but a loop-only bug) and for a script
        if mode != "missing_zero_grad":
            assert plan_bodies(mode, "t.py:f", None, None)
        assert [b.name for b in plan_bodies(mode, None, None, ["python", "t.py"])] == ["script"]
    assert set(TARGET_TEMPLATES) == {t.name for t in TEMPLATES.values() if t.uses == "target"}


# ---------------------------------------------------------------- bugs in the user's own loop (nanoGPT-style)

NANOGPT = Path(__file__).resolve().parent / "fixtures" / "nanogpt"
# bug -> (file, the correct line(s), the buggy line(s)): the three bugs of issue 14, one at a time
NANOGPT_BUGS = {
    "mask_not_applied": ("model.py", 'att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))',
                         'att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))'),
    "warmup_never_ends": ("train.py", "    if it < warmup_iters:", "    if it < lr_decay_iters:"),
    "zero_grad_before_step": ("train.py", "    optimizer.zero_grad(set_to_none=True)\n    loss.backward()\n",
                              "    loss.backward()\n    optimizer.zero_grad(set_to_none=True)\n"),
}


def _nanogpt_with(workspace: Path, bug: str) -> None:
    shutil.copytree(NANOGPT, workspace, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    file, good, bad = NANOGPT_BUGS[bug]
    source = (workspace / file).read_text()
    assert source.count(good) == 1
    (workspace / file).write_text(source.replace(good, bad))


def _nanogpt_fixed(workspace: Path) -> None:
    for file in ("model.py", "train.py"):
        shutil.copy(NANOGPT / file, workspace / file)


def _rerun(workspace: Path, path: str):
    from tools.regression import run_regression_test

    async def body():
        return await run_regression_test(workspace_root=workspace, test_file=workspace / path)
    return anyio.run(body)


@pytest.mark.parametrize("bug, mode, function, catching", [
    ("warmup_never_ends", "lr_too_high", "train.py:get_lr",
     {"test_schedule_never_exceeds_its_peak", "test_script_lr_never_exceeds_its_peak"}),
    ("mask_not_applied", "data_leakage", "model.py:GPT",
     {"test_function_model_future_tokens_do_not_change_past_logits", "test_script_future_tokens_do_not_change_past_logits"}),
    ("zero_grad_before_step", "missing_zero_grad", None, {"test_script_optimizer_steps_see_a_gradient"}),
])
def test_loop_bug_is_caught_by_a_test_of_the_users_code_and_released_by_the_fix(workspace, no_stray_processes,
                                                                                  bug, mode, function, catching):
    _nanogpt_with(workspace, bug)
    report = _write(workspace, failure_mode=mode, function=function,
                    function_file=function and workspace / function.split(":")[0],
                    command=["python", "train.py"], params={"steps": 25})
    failing = {c.test for c in report.cases if c.outcome == "failed"}
    assert report.fails_now and report.catches_bug, report.text()
    assert failing == catching, report.text()  # the function test and the script run each catch it on their own
    assert all(c.kind == "assertion" for c in report.cases if c.outcome == "failed")
    measured, _, expected = report.failure_message.partition("; expected")
    assert measured and expected, f"message should state what was measured, then what was expected: {report.failure_message}"
    source = (workspace / report.path).read_text()
    assert "mltriage" not in "".join(line for line in source.splitlines() if line.startswith(("import", "from")))

    _nanogpt_fixed(workspace)
    after = _rerun(workspace, report.path)
    assert after.passes_now and after.status == "passed", after.text()
    assert (after.failure_mode, after.template) == (mode, report.template)


def test_a_test_that_passes_on_the_bug_is_reported_as_not_catching_it(workspace):
    _nanogpt_with(workspace, "mask_not_applied")  # a leak is not a NaN: a finite-loss test cannot see it
    report = _write(workspace, failure_mode="nan_inf", name="loss finite", command=["python", "train.py"],
                    params={"steps": 5})
    assert report.status == "passed" and not report.fails_now and not report.catches_bug
    assert report.verdict.startswith("DOES NOT CATCH THE BUG") and "catches the bug" not in report.text()
    assert any("script.steps" in t for t in report.try_next)
    assert "Do not fix yet" in report.next_step


def test_flat_script_is_loaded_without_running_it(workspace):
    # train.py trains at import (a top-level loop, and argv parsing that breaks under pytest): the schedule
    # test loads only its imports, settings and functions
    _nanogpt_fixed(workspace)
    report = _write(workspace, failure_mode="lr_too_low", function="train.py:get_lr",
                    function_file=workspace / "train.py", params={"min_peak_fraction": 2.0})
    [case] = [c for c in report.cases if c.outcome == "failed"]
    assert case.test == "test_schedule_reaches_its_peak" and "learning_rate = 0.003 in train.py" in case.message
    assert "steps 0..200" in case.message  # the horizon read from max_iters
    assert not (workspace / "out").exists() and "iter 0" not in report.output_tail


LM_BUGS = {  # bug -> (failure mode, file, correct text, buggy text, the test that must catch it)
    "pad_counted_in_loss": ("loss_function", "lm_target.py", "y.reshape(-1), ignore_index=PAD)", "y.reshape(-1))",
                            "test_pad_positions_do_not_count_in_the_loss"),
    "targets_not_shifted": ("data_leakage", "lm_target.py", "y = seq[:, 1:].contiguous()", "y = seq[:, :-1].contiguous()",
                            "test_targets_are_not_the_inputs"),
    # y cut from another row (another offset of the text) than x: char_gpt_y_offset_mismatch's two randints
    "targets_at_other_offsets": ("data_pipeline", "lm_target.py", "y = seq[:, 1:].contiguous()",
                                 "y = seq.roll(1, 0)[:, 1:].contiguous()", "test_token_targets_follow_their_inputs"),
    # char_gpt_unscaled_attn: q @ k^T straight into the softmax (head dim 16 here, 192 there)
    "attention_unscaled": ("exploding_gradients", "model.py", "att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))",
                           "att = q @ k.transpose(-2, -1)", "test_attention_scores_are_scaled_by_sqrt_head_dim"),
    "mask_not_applied": ("data_leakage", *NANOGPT_BUGS["mask_not_applied"],
                         "test_future_tokens_do_not_change_past_logits"),
}


@pytest.mark.parametrize("bug", sorted(LM_BUGS))
def test_sequence_bug_in_the_target_is_caught_then_released_by_the_fix(workspace, bug):
    mode, file, good, bad, catching = LM_BUGS[bug]
    shutil.copytree(NANOGPT, workspace, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    source = (workspace / file).read_text()
    assert source.count(good) == 1
    (workspace / file).write_text(source.replace(good, bad))
    report = _write(workspace, failure_mode=mode, target="lm_target.py:make_target",
                    target_file=workspace / "lm_target.py")
    assert report.catches_bug, report.text()
    assert {c.test for c in report.cases if c.outcome == "failed"} == {catching}, report.text()
    (workspace / file).write_text(source)
    after = _rerun(workspace, report.path)
    assert after.passes_now, after.text()


def test_verdicts_never_call_a_passing_or_setup_failing_test_a_catch():
    from tools.regression import CaseResult, PytestRun, judge_before_fix

    def judge(status, *cases, mode="nan_inf"):
        run = PytestRun(status, [CaseResult(**c) for c in cases], {"passed": 0, "failed": 1}.get(status, 2), 1.0, "py", "")
        return judge_before_fix(run, mode, 60.0)

    fails, catches, verdict, _ = judge("passed", {"test": "a", "outcome": "passed"})
    assert (fails, catches) == (False, False) and verdict.startswith("DOES NOT CATCH THE BUG")
    fails, catches, verdict, _ = judge("passed", {"test": "a", "outcome": "skipped", "message": "no pad id"})
    assert (fails, catches) == (False, False) and "every test skipped" in verdict and "no pad id" in verdict
    fails, catches, verdict, msg = judge("failed", {"test": "a", "outcome": "failed", "kind": "setup",
                                                    "message": "Failed: set PARAMS['horizon']"})
    assert (fails, catches) == (True, False) and "reason of its own" in verdict
    fails, catches, verdict, msg = judge("failed", {"test": "a", "outcome": "failed", "kind": "assertion",
                                                    "message": "AssertionError: the loss was nan at step 3; expected"})
    assert (fails, catches, msg) == (True, True, "AssertionError: the loss was nan at step 3; expected")
    _, catches, verdict, _ = judge("failed", {"test": "a", "outcome": "failed", "kind": "exception",
                                              "message": "RuntimeError: shape"}, mode="shape_mismatch")
    assert catches and "make sure it is the bug" not in verdict
    _, catches, verdict, _ = judge("failed", {"test": "a", "outcome": "failed", "kind": "exception",
                                              "message": "RuntimeError: shape"})
    assert catches and "make sure it is the bug" in verdict
    # claims_sigmoid_head before the loader kept its path setting: the test never reached the user's loss
    fails, catches, verdict, _ = judge("failed", {"test": "a", "outcome": "failed", "kind": "exception",
                                                  "message": "NameError: name 'CSV_PATH' is not defined"},
                                       mode="loss_function")
    assert (fails, catches) == (True, False) and "could not load the code under test" in verdict
    fails, catches, verdict, _ = judge("timeout")
    assert (fails, catches) == (True, False) and "not a symptom" in verdict
    # imu_activity_conv1d (stop 44 drive): the check the params asked for leads, not the first to fail in the file
    run = PytestRun("failed", [CaseResult(test="test_real_labels_generalise_better_than_shuffled_ones", outcome="failed",
                                          kind="assertion", message="AssertionError: misaligned"),
                               CaseResult(test="test_batches_mix_the_classes", outcome="failed", kind="assertion",
                                          message="AssertionError: unmixed")], 1, 1.0, "py", "")
    _, catches, verdict, msg = judge_before_fix(run, "data_pipeline", 60.0, ("test_batches_mix_the_classes",))
    assert catches and msg == "AssertionError: unmixed" and "test_batches_mix_the_classes fails" in verdict
    assert judge_before_fix(run, "data_pipeline", 60.0)[3] == "AssertionError: misaligned"


def test_lengths_sorted_without_their_rows_fail_the_data_test_and_the_fix_passes(workspace):
    from test_probes import PACKED_LSTM  # the same packed GRU target the data_check probe is tested on
    import textwrap

    (workspace / "target.py").write_text("REORDER = False\n" + textwrap.dedent(PACKED_LSTM))
    report = _write(workspace, failure_mode="data_pipeline", target="target.py:make_target",
                    target_file=workspace / "target.py", params={"steps": 20})
    failing = {c.test for c in report.cases if c.outcome == "failed"}
    assert report.fails_now and "test_per_row_lengths_match_each_rows_padding" in failing, report.text()

    (workspace / "target.py").write_text("REORDER = True\n" + textwrap.dedent(PACKED_LSTM))
    after = _rerun(workspace, report.path)
    assert not any(c.test == "test_per_row_lengths_match_each_rows_padding" and c.outcome == "failed"
                   for c in after.cases), after.text()


UNSCALED_TABLE = """
    import torch
    from torch import nn

    def make_target():
        g = torch.Generator().manual_seed(0)
        x = torch.randn(256, 5, generator=g)
        y = (x[:, 0] + x[:, 1] > 0).long()
        if not SCALED:
            x[:, 0] = x[:, 0] * 3e4 + 6e4  # an income column the scaler's shifted indices never reached
        model = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 2))
        data = [(x[i:i + 32], y[i:i + 32]) for i in range(0, 256, 32)]
        return {"model": model, "data": data, "num_classes": 2,
                "make_optimizer": lambda p: torch.optim.Adam(p, lr=1e-2),
                "loss_fn": lambda m, b: nn.functional.cross_entropy(m(b[0]), b[1])}
"""


def test_an_unscaled_column_fails_the_scale_check_and_the_scaled_table_passes(workspace):
    import textwrap

    (workspace / "target.py").write_text("SCALED = False\n" + textwrap.dedent(UNSCALED_TABLE))
    report = _write(workspace, failure_mode="data_pipeline", target="target.py:make_target",
                    target_file=workspace / "target.py", params={"check_scale": True})
    failed = {c.test: c.message for c in report.cases if c.outcome == "failed"}
    assert report.fails_now and "test_input_features_are_standardised" in failed, report.text()
    assert "feature 0" in failed["test_input_features_are_standardised"]

    (workspace / "target.py").write_text("SCALED = True\n" + textwrap.dedent(UNSCALED_TABLE))
    after = _rerun(workspace, report.path)
    assert after.passes_now, after.text()


def test_triage_asks_for_the_scale_check_only_when_the_finding_is_about_scale():
    from tools.report import Evidence, Finding
    from tools.triage import suggest_next

    def args(summary, **facts):
        f = Finding(failure_mode="data_pipeline", confidence=0.8, summary=summary,
                    evidence=[Evidence(what="x", value=1, source="s")], fix="f", facts=facts)
        return next(s.args for s in suggest_next([f], "t.py:make_target", None) if s.tool == "write_regression_test")

    assert args("features is not normalised: feature means 0..6e4",
                inputs_not_normalised=True)["params"] == {"check_scale": True}
    assert "params" not in args("the labels are misaligned with the inputs")
    # the fact, not the wording, decides: a summary that merely mentions scale asks for nothing
    assert "params" not in args("x is not normalised, says the prose only")
    pad = args("the model reads the padding", reads_padding=True)
    assert pad["template"] == "padding" and "command" not in pad and "params" not in pad
    rows = args("rows are paired with other rows' labels", rows_moved_apart=True)
    assert rows["template"] == "rows" and "command" not in rows


def _loop(clip: bool) -> str:
    from test_script_mode import CLIPPED_LOOP  # gradients far above any sane bound, clipped to 1.0 before the step
    import textwrap

    loop = textwrap.dedent(CLIPPED_LOOP)
    return loop if clip else loop.replace("    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n", "")


def test_the_suggested_test_for_an_unclipped_loop_fails_without_clipping_and_passes_with_it(workspace):
    from tools.report import Evidence, Finding
    from tools.triage import suggest_next

    top = Finding(failure_mode="exploding_gradients", confidence=0.9, evidence=[Evidence(what="x", value=1, source="s")],
                  summary="global gradient norm 215 is above 10 in a recurrent net (LSTM) whose loop never clips the "
                          "gradient norm", fix="clip", facts={"unclipped_recurrent": True})
    args = next(s.args for s in suggest_next([top], "train.py:make_target", None, command=["python", "train.py"])
                if s.tool == "write_regression_test")
    assert "target" not in args and args["params"]["script.checks"] == ["finite_loss", "applied_grad_norm_bounded"]
    assert "clip_grad_norm_" not in _loop(clip=False) and "clip_grad_norm_" in _loop(clip=True)

    (workspace / "train.py").write_text(_loop(clip=False))
    params = {**args["params"], "script.steps": 10}
    report = _write(workspace, failure_mode="exploding_gradients", command=args["command"], params=params)
    failed = {c.test for c in report.cases if c.outcome == "failed"}
    assert report.fails_now and failed == {"test_script_applied_grad_norm_stays_bounded"}, report.text()

    (workspace / "train.py").write_text(_loop(clip=True))
    after = _rerun(workspace, report.path)
    assert after.passes_now, after.text()


def test_a_clip_after_the_step_gets_the_same_script_test_which_the_moved_clip_passes(workspace):
    """Blind dev syslog_char_lstm_lm: the clip one line after step(). The static rule names it; the suggested test
    is the script's applied-norm check (the factory's own loop has no clip to move), which fails with the clip
    after the step and passes once it runs before it."""
    from tools.report import Finding
    from tools.static_scan import static_scan
    from tools.triage import merge_findings, suggest_next

    clip = "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
    late = _loop(clip=True).replace(clip, "").replace("    opt.step()\n", "    opt.step()\n" + clip)
    (workspace / "train.py").write_text(late)
    static = [f for f in static_scan([workspace / "train.py"]).findings if "clip_after_step" in f.summary]
    assert static, late
    norm = Finding(failure_mode="exploding_gradients", confidence=0.6, summary="global gradient norm 215 is above 10",
                   fix="Lower the LR 3-10x", facts={"symptom_only": True})
    top = merge_findings([("static_scan", static[0]), ("grad_norm_snapshot", norm)])[0]
    assert top.summary.startswith("clip_after_step") and "Lower the LR" not in top.fix  # the cause leads
    args = next(s.args for s in suggest_next([top], "train.py:make_target", None, command=["python", "train.py"])
                if s.tool == "write_regression_test")
    assert "target" not in args and args["params"]["script.checks"] == ["finite_loss", "applied_grad_norm_bounded"]
    report = _write(workspace, failure_mode="exploding_gradients", command=args["command"],
                    params={**args["params"], "script.steps": 10})
    assert report.fails_now and report.catches_bug, report.text()
    (workspace / "train.py").write_text(_loop(clip=True))
    assert _rerun(workspace, report.path).passes_now


PLAIN_LIST_NET = """
import torch
from torch import nn
import torch.nn.functional as F

class SpectraAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(16, 4)
        self.decoder_layers = HOLD([nn.Linear(4, 8), nn.Linear(8, 16)])

    def forward(self, x):
        h = torch.relu(self.enc(x))
        for layer in self.decoder_layers:
            h = layer(h)
        return h

def make_target():
    torch.manual_seed(0)
    x = torch.randn(32, 16)
    return {"model": SpectraAE(), "data": [(x, x)], "loss_fn": lambda m, b: F.mse_loss(m(b[0]), b[1])}
"""


def test_the_frozen_params_test_fails_on_layers_kept_in_a_plain_list_and_passes_on_a_module_list(workspace):
    """Blind dev dense_ae_raman_spectra: every parameter model.parameters() lists did change, so the generated
    test passed on the bug; the layers the list hides are what never train. It now asserts every layer is
    registered."""
    (workspace / "train.py").write_text(PLAIN_LIST_NET.replace("HOLD", "list"))
    report = _write(workspace, failure_mode="frozen_params", target="train.py:make_target")
    failed = {c.test for c in report.cases if c.outcome == "failed"}
    assert report.fails_now and failed == {"test_every_layer_is_registered_with_the_model"}, report.text()
    assert "decoder_layers (list, 184 parameters)" in report.text()
    (workspace / "train.py").write_text(PLAIN_LIST_NET.replace("HOLD", "nn.ModuleList"))
    assert _rerun(workspace, report.path).passes_now


SCHEDULED_LOOP = """
    import torch
    from torch import nn
    torch.manual_seed(0)
    EPOCHS, LR_STEP_EPOCHS = 30, 10
    model = nn.Linear(4, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)

    def make_scheduler(opt):
        return torch.optim.lr_scheduler.StepLR(opt, step_size=LR_STEP_EPOCHS, gamma=0.5)

    sched = make_scheduler(opt)
    x, y = torch.randn(640, 4), torch.randn(640, 1)
    for epoch in range(EPOCHS):
        for i in range(0, 640, 32):
            opt.zero_grad()
            loss = ((model(x[i:i + 32]) - y[i:i + 32]) ** 2).mean()
            loss.backward()
            opt.step()
            sched.step()
"""


def test_a_per_epoch_schedule_stepped_per_batch_gets_a_script_lr_test_the_moved_step_passes(workspace):
    """Blind dev house_price_embedding_mlp: StepLR sized in epochs, stepped per batch. The default lr_too_low test
    (50 script steps, the factory's update ratio) passed on the bug; the suggested one runs the script 200 steps
    and asserts the LR holds, which fails on the bug and passes once the scheduler steps per epoch."""
    from tools.static_scan import static_scan
    from tools.triage import suggest_next

    (workspace / "train.py").write_text(textwrap.dedent(SCHEDULED_LOOP))
    (top,) = [f for f in static_scan([workspace / "train.py"]).findings if "epoch_schedule_stepped_per_batch" in f.summary]
    steps = suggest_next([top], "train.py:make_target", None, command=["python", "train.py"])
    assert "lr_range_test" not in [s.tool for s in steps]  # the factory steps no scheduler: it would call the LR fine
    args = next(s.args for s in steps if s.tool == "write_regression_test")
    assert "target" not in args and args["params"] == {"script.steps": 200, "script.checks": ["lr_holds"]}
    report = _write(workspace, failure_mode="lr_too_low", command=args["command"], params=args["params"])
    failed = {c.test for c in report.cases if c.outcome == "failed"}
    assert report.fails_now and failed == {"test_script_lr_holds_after_its_peak"}, report.text()
    fixed = textwrap.dedent(SCHEDULED_LOOP).replace("        sched.step()\n", "    sched.step()\n")
    assert fixed != textwrap.dedent(SCHEDULED_LOOP)
    (workspace / "train.py").write_text(fixed)
    assert _rerun(workspace, report.path).passes_now


LATE_NAN_LOOP = """
    import torch
    from torch import nn
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(32, 4), torch.randn(32, 1)
    for step in range(120):
        opt.zero_grad()
        scale = 1.0 / (70 - step) if BUG else 1.0   # the bug: a weight that divides by zero at step 70
        loss = ((model(x) - y) ** 2).mean() * scale
        loss.backward()
        opt.step()
"""


def test_a_nan_regression_test_runs_the_script_as_far_as_the_nan_the_run_met(workspace):
    """A NaN at step 70 is out of reach of the script test's default 50 steps: triage's suggestion goes past it."""
    from tools.report import Finding
    from tools.triage import suggest_next

    top = Finding(failure_mode="nan_inf", confidence=0.97, summary="x/0: first non-finite value at step 70")
    args = next(s.args for s in suggest_next([top], None, None, command=["python", "train.py"], nan_step=71)
                if s.tool == "write_regression_test")
    assert args["params"]["script.steps"] > 71
    assert not any(s.args.get("params") for s in suggest_next([top], None, None, command=["python", "train.py"],
                                                              nan_step=12) if s.tool == "write_regression_test")

    (workspace / "train.py").write_text("BUG = True\n" + textwrap.dedent(LATE_NAN_LOOP))
    report = _write(workspace, failure_mode="nan_inf", command=args["command"], params=args["params"])
    assert report.fails_now, report.text()
    (workspace / "train.py").write_text("BUG = False\n" + textwrap.dedent(LATE_NAN_LOOP))
    assert _rerun(workspace, report.path).passes_now


def test_an_evaluation_left_in_train_mode_is_caught_by_a_test_of_the_users_evaluate(workspace, no_stray_processes):
    """The dev run sensor_eval_dropout_on: evaluate() runs under no_grad but never calls model.eval(). Triage
    suggests the train_eval_mode test on the user's own evaluate() (phase='eval'); it fails on the bug, passes on
    train_fixed.py."""
    from tools.report import Evidence, Finding
    from tools.triage import suggest_next

    run = Path(__file__).resolve().parents[1] / "examples" / "realistic" / "tabular" / "sensor_eval_dropout_on"
    for name in ("train.py", "machine_readings.csv"):
        shutil.copy(run / name, workspace / name)
    top = Finding(failure_mode="train_eval_mode", confidence=0.6, summary="evaluation_in_train_mode: ...",
                  location=str(workspace / "train.py") + ":151",
                  evidence=[Evidence(what="rule", value="evaluation_in_train_mode", source="static_scan")])
    args = next(s.args for s in suggest_next([top], "train.py:make_target", None, workspace=workspace)
                if s.tool == "write_regression_test")
    assert args["function"] == "train.py:evaluate" and args["params"] == {"phase": "eval"}
    report = _write(workspace, target_file=workspace / "train.py", function_file=workspace / "train.py", **args)
    assert report.catches_bug, report.text()
    failed = [c for c in report.cases if c.outcome == "failed"]
    assert [c.test for c in failed] == ["test_model_is_in_eval_mode_during_evaluation"], report.text()
    assert "ran in train mode during train.py:evaluate" in failed[0].message
    assert report.path == "tests/test_evaluates_in_eval_mode.py"
    shutil.copy(run / "train_fixed.py", workspace / "train.py")
    after = _rerun(workspace, report.path)
    assert after.passes_now, after.text()


ARGPARSE_SCRIPT = '''import argparse
import logging
import os

import torch
import torch.nn as nn

logging.basicConfig(level=logging.INFO)
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "readings.csv")
p = argparse.ArgumentParser()
p.add_argument("--lr", type=float, default=LR)
p.add_argument("--steps", type=int, default=50)


def data_path(path=DATA):
    return path


def make_target():
    args = p.parse_args([])  # the factory reads the script's own defaults
    assert data_path().endswith("readings.csv")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2))
    x, y = torch.randn(64, 8), torch.randint(0, 2, (64,))
    return {"model": model, "batch": (x, y), "loss_fn": lambda m, b: nn.functional.cross_entropy(m(b[0]), b[1]),
            "optimizer": torch.optim.SGD(model.parameters(), lr=args.lr), "num_classes": 2}


if __name__ == "__main__":
    print(p.parse_args())
'''


def test_a_factory_that_reads_a_top_level_argparse_parser_loads_in_the_test(workspace, no_stray_processes):
    """pump_vibration_probe_bert_lr's make_target() calls p.parse_args([]) on a parser built at top level; the
    test's loader used to drop `p = argparse.ArgumentParser()` and the add_argument calls as 'running code'. And
    pump_fault_sentinel / claims_sigmoid_head: a top-level logging.basicConfig() made the script look like one
    that trains on import, and the path setting built with os.path.join, a default argument of a function the
    factory calls, was dropped (NameError on the buggy and the fixed code alike)."""
    (workspace / "train.py").write_text(ARGPARSE_SCRIPT.replace("LR", "1e-7"))
    report = _write(workspace, failure_mode="lr_too_low", target="train.py:make_target",
                    target_file=workspace / "train.py", template="update_ratio")
    assert report.catches_bug, report.text()
    [case] = [c for c in report.cases if c.outcome == "failed"]
    assert "the learning rate is too low" in case.message and "NameError" not in case.message
    (workspace / "train.py").write_text(ARGPARSE_SCRIPT.replace("LR", "0.05"))
    assert _rerun(workspace, report.path).passes_now


TINY_LR_FACTORY = """
import torch
from torch import nn

LR = {lr}


def make_target():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    x, y = torch.randn(64, 16), torch.randint(0, 4, (64,))
    return {{"model": model, "batch": (x, y), "loss_fn": lambda m, b: nn.functional.cross_entropy(m(b[0]), b[1]),
            "make_optimizer": lambda params: torch.optim.SGD(params, lr=LR, momentum=0.9), "num_classes": 4}}
"""


def test_a_too_small_lr_is_caught_by_the_one_batch_test_triage_measured(workspace, no_stray_processes):
    """frozen_backbone_tiny_lr: SGD at 3e-5 on a fresh head passes the update-ratio band and a 50-step script run;
    triage's own measurement (one batch crawls at the run's LR) is what the suggested test asserts, with a margin;
    the same for a too-high LR measured that way (gpt_accum_adamw_lr3e2: AdamW 3e-2 passes the update-ratio band)."""
    from tools.report import Evidence, Finding
    from tools.triage import suggest_next

    top = Finding(failure_mode="lr_too_low", confidence=0.75, location="optimizer lr", summary="crawls",
                  evidence=[Evidence(what="one-batch loss at lr 3e-05 (the run's)", source="overfit_test",
                                     value="slow: 1.942 -> 1.406 in 200 steps"),
                            Evidence(what="one-batch loss at lr 0.0009 (30x)", source="overfit_test",
                                     value="slow: 1.942 -> 0.3558 in 200 steps")],
                  facts={"one_batch_steps": 200, "one_batch_ratio": 1.406 / 1.942})
    args = next(s.args for s in suggest_next([top], "train.py:make_target", None, command=["python", "train.py"],
                                             schedule_fns=["train.py:get_lr"]) if s.tool == "write_regression_test")
    assert args["template"] == "overfit_one_batch" and "command" not in args and "function" not in args
    assert args["params"] == {"steps": 200, "max_final_ratio": 0.5}

    too_high = top.model_copy(update={"failure_mode": "lr_too_high", "evidence": [
        Evidence(what="one-batch loss at lr 0.03 (the run's)", source="overfit_test", value="slow: 4.497 -> 1.024 in 200 steps"),
        Evidence(what="one-batch loss at lr 0.003 (1/10)", source="overfit_test", value="passed: 4.497 -> 0.1475 in 46 steps")],
        "facts": {"one_batch_steps": 200, "one_batch_ratio": 1.024 / 4.497}})
    high = next(s.args for s in suggest_next([too_high], "train.py:make_target", None, command=["python", "train.py"])
                if s.tool == "write_regression_test")
    assert high["template"] == "overfit_one_batch" and high["params"] == {"steps": 200, "max_final_ratio": 0.171}

    (workspace / "train.py").write_text(TINY_LR_FACTORY.format(lr="3e-5"))
    report = _write(workspace, failure_mode="lr_too_low", target=args["target"], target_file=workspace / "train.py",
                    template=args["template"], params=args["params"])
    assert report.catches_bug, report.text()
    assert report.path == "tests/test_learns_one_batch_at_its_lr.py"  # named for what it checks, not the peak
    (workspace / "train.py").write_text(TINY_LR_FACTORY.format(lr="0.05"))
    assert _rerun(workspace, report.path).passes_now


def test_torch_multihead_attention_is_not_judged_by_the_attention_scale_test(workspace):
    # nn.MultiheadAttention scales q before its own product: only products in the user's code are judged
    (workspace / "mha.py").write_text(textwrap.dedent('''
        import torch, torch.nn as nn, torch.nn.functional as F

        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.emb, self.out = nn.Embedding(50, 64), nn.Linear(64, 50)
                self.att = nn.MultiheadAttention(64, 2, batch_first=True)

            def forward(self, x):
                h, T = self.emb(x), x.shape[1]
                return self.out(self.att(h, h, h, attn_mask=torch.triu(torch.ones(T, T, dtype=torch.bool), 1))[0])

        def make_target():
            torch.manual_seed(0)
            x = torch.randint(0, 50, (4, 16))
            return {"model": M(), "batch": (x[:, :-1], x[:, 1:]),
                    "loss_fn": lambda m, b: F.cross_entropy(m(b[0]).transpose(1, 2), b[1])}
    '''))
    report = _write(workspace, failure_mode="exploding_gradients", target="mha.py:make_target",
                    target_file=workspace / "mha.py", params={"steps": 3})
    [case] = [c for c in report.cases if c.test == "test_attention_scores_are_scaled_by_sqrt_head_dim"]
    assert case.outcome == "skipped", report.text()


def test_the_leakage_test_of_a_next_step_forecaster_fails_while_it_reads_the_future(workspace):
    """Dev run bigru_load_next_hour: a bidirectional GRU asked for the next step of its own series. The
    data_leakage test perturbs the series after step t and asserts the outputs at <= t do not move."""
    from test_loop_checks import FORECASTER

    (workspace / "train.py").write_text(FORECASTER.replace("BIDI", "True"))
    report = _write(workspace, failure_mode="data_leakage", target="train.py:make_target",
                    target_file=workspace / "train.py")
    failed = {c.test for c in report.cases if c.outcome == "failed"}
    assert report.fails_now and failed == {"test_future_inputs_do_not_change_past_forecasts"}, report.text()
    assert "the model reads it" in report.text()
    (workspace / "train.py").write_text(FORECASTER.replace("BIDI", "False"))
    after = _rerun(workspace, report.path)
    assert after.passes_now, after.text()


def test_padding_runs_are_not_read_as_unshifted_targets(workspace):
    # rows mostly padding (sums_encoder_lm_no_causal_mask): PAD == PAD at most positions of a correctly shifted
    # batch, which the same-position check counted as targets equal to their inputs and failed on the fixed run
    shutil.copytree(NANOGPT, workspace, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    source = (workspace / "lm_target.py").read_text().replace("BLOCK = 24", "BLOCK = 96")
    (workspace / "lm_target.py").write_text(source)
    report = _write(workspace, failure_mode="data_leakage", target="lm_target.py:make_target",
                    target_file=workspace / "lm_target.py")
    [case] = [c for c in report.cases if c.test == "test_targets_are_not_the_inputs"]
    assert case.outcome == "passed", report.text()
    (workspace / "lm_target.py").write_text(source.replace("y = seq[:, 1:].contiguous()", "y = seq[:, :-1].contiguous()"))
    after = _rerun(workspace, report.path)
    [case] = [c for c in after.cases if c.test == "test_targets_are_not_the_inputs"]
    assert case.outcome == "failed" and "100% of target tokens" in case.message, after.text()


MEAN_RECON_VAE = """
    import torch
    import torch.nn.functional as F
    from torch import nn

    class VAE(nn.Module):
        def __init__(self, d=64, k=4):
            super().__init__()
            self.enc, self.dec = nn.Linear(d, 2 * k), nn.Linear(k, d)

        def forward(self, x):
            mu, logvar = self.enc(x).chunk(2, dim=-1)
            return self.dec(mu + torch.randn_like(mu) * (0.5 * logvar).exp()), mu, logvar

    def loss_fn(model, x):
        logits, mu, logvar = model(x)
        recon = F.binary_cross_entropy_with_logits(logits, x)
        kl = (-0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).sum(dim=1)).mean()
        return recon + kl

    def make_target():
        torch.manual_seed(0)
        prototypes = torch.rand(2, 64).round()  # two sprites: a batch a VAE can learn in a few steps
        return {"model": VAE(), "data": [prototypes[torch.randint(0, 2, (16,))] for _ in range(2)],
                "loss_fn": loss_fn, "make_optimizer": lambda p: torch.optim.Adam(p, lr=1e-2)}
"""


def test_a_vae_reconstruction_averaged_over_elements_beside_a_summed_kl_fails_its_test(workspace):
    """Blind dev vae_mlp_sprites16 over stdio: the suggested loss_function test passed on the bug (its checks are
    about logits, the sign and one batch). With recon_summed (suggested for kl_against_mean_reconstruction) it
    watches the reconstruction loss the user's loss_fn calls: it fails on the mean over 64 pixels and passes on
    reduction='none' summed per sample, the fix."""
    from tools.static_scan import static_scan
    from tools.triage import suggest_next

    (workspace / "train.py").write_text(textwrap.dedent(MEAN_RECON_VAE))
    (top,) = [f for f in static_scan([workspace / "train.py"]).findings if f.failure_mode == "loss_function"]
    args = next(s.args for s in suggest_next([top], "train.py:make_target", None) if s.tool == "write_regression_test")
    assert args["params"] == {"recon_summed": True}
    report = _write(workspace, failure_mode="loss_function", target="train.py:make_target", params=args["params"])
    failed = {c.test for c in report.cases if c.outcome == "failed"}
    assert report.fails_now and failed == {"test_reconstruction_is_summed_over_each_sample_like_the_kl"}, report.text()
    assert "64 elements of each sample" in report.text()
    (workspace / "train.py").write_text(textwrap.dedent(MEAN_RECON_VAE).replace(
        "F.binary_cross_entropy_with_logits(logits, x)",
        "F.binary_cross_entropy_with_logits(logits, x, reduction='none').sum(1).mean()"))
    rerun = _rerun(workspace, report.path)
    assert rerun.passes_now, rerun.text()


FUNCTIONAL_DROPOUT_NET = """
    import torch, torch.nn as nn, torch.nn.functional as F

    class Forecaster(nn.Module):
        def __init__(self):
            super().__init__()
            self.inp, self.head = nn.Linear(6, 32), nn.Linear(32, 1)

        def forward(self, x):
            h = F.dropout(torch.relu(self.inp(x)), p=0.3)
            return self.head(h).squeeze(-1)

    def make_target():
        torch.manual_seed(0)
        x = torch.randn(64, 6)
        y = x.sum(1)
        return {"model": Forecaster(), "data": [(x, y)], "task": "regression",
                "loss_fn": lambda m, b: F.mse_loss(m(b[0]), b[1])}
"""


def test_functional_dropout_left_on_in_eval_fails_its_test(workspace):
    """Blind dev sensor_forecast_gru_packed: F.dropout without training=self.training stays on after model.eval().
    The train_eval_mode test checks the modes modules see, and this net has no dropout module: it passed on the
    bug. With eval_deterministic (suggested for functional_dropout_always_on) the loss in eval mode must not change
    between two calls: it fails on the bug and passes on the fix."""
    from tools.static_scan import static_scan
    from tools.triage import suggest_next

    (workspace / "train.py").write_text(textwrap.dedent(FUNCTIONAL_DROPOUT_NET))
    (top,) = [f for f in static_scan([workspace / "train.py"]).findings if f.failure_mode == "train_eval_mode"]
    args = next(s.args for s in suggest_next([top], "train.py:make_target", None) if s.tool == "write_regression_test")
    assert args["params"] == {"eval_deterministic": True}
    report = _write(workspace, failure_mode="train_eval_mode", target="train.py:make_target", params=args["params"])
    failed = {c.test for c in report.cases if c.outcome == "failed"}
    assert report.fails_now and failed == {"test_model_in_eval_mode_gives_one_answer"}, report.text()
    (workspace / "train.py").write_text(textwrap.dedent(FUNCTIONAL_DROPOUT_NET).replace(
        "p=0.3)", "p=0.3, training=self.training)"))
    rerun = _rerun(workspace, report.path)
    assert rerun.passes_now, rerun.text()


LOGCOSH_REGRESSOR = """
    import torch
    from torch import nn

    def log_cosh(pred, target):
        d = pred - target
        return (d + nn.functional.softplus(-2 * d) - 0.6931).mean()

    def compute_loss(model, batch):
        x, y = batch
        return log_cosh(model(x), y)

    def make_target():
        torch.manual_seed(0)
        x = torch.randn(64, 5)
        y = x @ torch.randn(5)
        return {"model": nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 1)), "data": [(x, y)],
                "loss_fn": compute_loss}
"""


def test_a_hand_written_loss_broadcasting_rows_against_rows_fails_the_shape_test_and_the_squeeze_passes(workspace):
    """Blind dev claim_severity_logcosh_mlp: (B, 1) - (B,) in a hand-written log-cosh. The old shape test compared
    the model's raw output (B, 1) with the labels (B,): it failed on the bug AND after the fix (the fix squeezes in
    the loss, the model still returns (B, 1)). Now the loss arithmetic is watched, and the squeeze passes."""
    (workspace / "train.py").write_text(textwrap.dedent(LOGCOSH_REGRESSOR))
    report = _write(workspace, failure_mode="shape_mismatch", target="train.py:make_target")
    failed = {c.test for c in report.cases if c.outcome == "failed"}
    assert report.fails_now and failed == {"test_loss_arithmetic_does_not_pair_every_row_with_every_row"}, report.text()
    (workspace / "train.py").write_text(textwrap.dedent(LOGCOSH_REGRESSOR).replace(
        "log_cosh(model(x), y)", "log_cosh(model(x).squeeze(-1), y)"))
    rerun = _rerun(workspace, report.path)
    assert rerun.passes_now, rerun.text()


PREFIXED_CHECKPOINT = """
    import os
    import torch
    from torch import nn

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.bn = nn.Conv1d(1, 8, 5), nn.BatchNorm1d(8)

        def forward(self, x):
            return torch.relu(self.bn(self.conv(x))).mean(-1)

    class Pretext(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder, self.classifier = Encoder(), nn.Linear(8, 10)

    def load_encoder(path):
        encoder = Encoder()
        state = torch.load(path)
        encoder.load_state_dict(STATE, strict=False)
        return encoder

    def make_target():
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pretext.pt")
        if not os.path.exists(path):
            torch.manual_seed(1)
            torch.save(Pretext().state_dict(), path)
        torch.manual_seed(0)
        model = nn.Sequential(load_encoder(path), nn.Linear(8, 4))
        x, y = torch.randn(16, 1, 32), torch.randint(0, 4, (16,))
        return {"model": model, "data": [(x, y)], "num_classes": 4,
                "loss_fn": lambda m, b: nn.functional.cross_entropy(m(b[0]), b[1])}
"""


def test_a_checkpoint_that_loads_nothing_fails_the_bad_init_test_and_the_renamed_keys_pass(workspace):
    """Blind dev signal_cnn_linear_probe: strict=False under a wrapper's key prefix loaded nothing. The initial-loss
    test passed on the bug (a random encoder starts at chance too); the load check fails on it and passes once the
    keys are renamed."""
    (workspace / "train.py").write_text(textwrap.dedent(PREFIXED_CHECKPOINT).replace("STATE", "state"))
    report = _write(workspace, failure_mode="bad_init", target="train.py:make_target")
    failed = {c.test for c in report.cases if c.outcome == "failed"}
    assert report.fails_now and failed == {"test_checkpoint_loads_fill_the_model"}, report.text()
    (workspace / "train.py").write_text(textwrap.dedent(PREFIXED_CHECKPOINT).replace(
        "STATE", "{k[len('encoder.'):]: v for k, v in state.items() if k.startswith('encoder.')}"))
    rerun = _rerun(workspace, report.path)
    assert rerun.passes_now, rerun.text()


NOISY_TARGET_DENOISER = """
    import torch
    import torch.nn.functional as F
    from torch import nn

    def loss_fn(model, batch):
        (x,) = batch
        x_noisy = x + 0.3 * torch.randn_like(x)
        recon = model(x_noisy)
        return F.mse_loss(recon, x_noisy)

    def make_target():
        torch.manual_seed(0)
        return {"model": nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16)),
                "data": [(torch.randn(32, 16),)], "loss_fn": loss_fn,
                "make_optimizer": lambda params: torch.optim.Adam(params, lr=1e-2)}
"""


def test_a_denoiser_scored_against_its_noisy_input_fails_its_suggested_test_and_the_clean_target_passes(workspace):
    """Blind dev conv1d_denoising_ae_vibration: the one-batch and sign checks pass on a denoiser scored against its
    own input (the identity minimises it); triage asks for target_not_input, which fails on it."""
    from tools.static_scan import static_scan
    from tools.triage import suggest_next

    (workspace / "train.py").write_text(textwrap.dedent(NOISY_TARGET_DENOISER))
    (top,) = [f for f in static_scan([workspace / "train.py"]).findings if f.failure_mode == "loss_function"]
    args = next(s.args for s in suggest_next([top], "train.py:make_target", None) if s.tool == "write_regression_test")
    assert args["params"] == {"target_not_input": True}
    report = _write(workspace, failure_mode="loss_function", target="train.py:make_target", params=args["params"])
    failed = {c.test for c in report.cases if c.outcome == "failed"}
    assert report.fails_now and failed == {
        "test_the_reconstruction_target_is_not_the_corrupted_input_the_model_reads"}, report.text()
    (workspace / "train.py").write_text(textwrap.dedent(NOISY_TARGET_DENOISER).replace(
        "F.mse_loss(recon, x_noisy)", "F.mse_loss(recon, x)"))
    rerun = _rerun(workspace, report.path)
    assert rerun.passes_now, rerun.text()


def test_class_weights_in_another_class_order_fail_the_loss_function_test_and_the_counts_by_id_pass(workspace):
    """Inverse-frequency weights computed in value_counts() order (most frequent first) and indexed by class id:
    data_check names it (loss_function); the default loss_function test fails on it and passes once the counts
    are taken by class id."""
    from test_probes import CLASS_WEIGHTED

    code = textwrap.dedent(CLASS_WEIGHTED).replace("WEIGHTS", "weights = counts.sum() / (4 * COUNTS)")
    (workspace / "train.py").write_text(code.replace("COUNTS", "counts.sort(descending=True).values"))
    report = _write(workspace, failure_mode="loss_function", target="train.py:make_target")
    failed = {c.test for c in report.cases if c.outcome == "failed"}
    assert report.fails_now and failed == {"test_class_weights_fall_with_each_class_frequency"}, report.text()
    assert "class 3 (24% of the rows) weighs 4.92" in report.failure_message and "value_counts" in report.failure_message
    (workspace / "train.py").write_text(code.replace("COUNTS", "counts"))
    rerun = _rerun(workspace, report.path)
    assert rerun.passes_now, rerun.text()


GRADUAL_UNFREEZE_SCRIPT = """
    import torch
    import torch.nn.functional as F
    from torch import nn

    torch.manual_seed(0)
    x, y = torch.randn(64, 8), torch.randint(0, 2, (64,))
    pretrained = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
    opt = torch.optim.SGD(pretrained.parameters(), lr=0.1)   # a short pretext phase
    for _ in range(5):
        opt.zero_grad()
        pretrained(x).pow(2).mean().backward()
        opt.step()
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    model[0].load_state_dict(pretrained[0].state_dict())
    for p in model[0].parameters():
        p.requires_grad = False
    optimizer = torch.optim.AdamW(PARAMS, lr=1e-2)
    for epoch in range(3):
        if epoch == 1:
            for p in model[0].parameters():
                p.requires_grad = True
        for _ in range(10):
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
"""


def test_an_optimizer_built_before_the_unfreeze_fails_a_whole_run_script_test_and_all_params_pass(workspace):
    """Blind dev token_encoder_gradual_unfreeze: the factory hands over the model before any unfreeze, so a target
    test cannot see it; triage asks for the whole script with every_param_changes. The layer unfrozen at epoch 1 is
    built after the pretext phase's first step: the check snapshots it at its own first step."""
    from tools.static_scan import static_scan
    from tools.triage import suggest_next

    bug = textwrap.dedent(GRADUAL_UNFREEZE_SCRIPT).replace("PARAMS", "[p for p in model.parameters() if p.requires_grad]")
    (workspace / "train.py").write_text(bug)
    (top,) = [f for f in static_scan([workspace / "train.py"]).findings if f.failure_mode == "frozen_params"]
    args = next(s.args for s in suggest_next([top], "train.py:make_target", None, command=["python", "train.py"])
                if s.tool == "write_regression_test")
    assert "target" not in args and args["params"]["script.checks"] == ["every_param_changes"]
    report = _write(workspace, failure_mode="frozen_params", command=args["command"], params=args["params"])
    failed = {c.test for c in report.cases if c.outcome == "failed"}
    assert report.fails_now and failed == {"test_script_every_parameter_changes"}, report.text()
    (workspace / "train.py").write_text(bug.replace("[p for p in model.parameters() if p.requires_grad]",
                                                    "model.parameters()"))
    rerun = _rerun(workspace, report.path)
    assert rerun.passes_now, rerun.text()


ACCUMULATED_SCHEDULE = """
    import math
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    accum, micro_batches = 8, 320
    total = LENGTH
    warmup = int(0.1 * total)
    sched = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: s / warmup if s < warmup else
                                              0.5 * (1 + math.cos(math.pi * min(1.0, (s - warmup) / (total - warmup)))))
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    for i in range(micro_batches):
        ((model(x) - y) ** 2).mean().div(accum).backward()
        if (i + 1) % accum == 0:
            optimizer.step()
            sched.step()
            optimizer.zero_grad()
"""


def test_a_schedule_sized_in_micro_batches_fails_the_warmup_check_and_the_optimizer_step_count_passes(workspace):
    """Blind dev charlm_accum8_cosine_warmup: a 10% warmup of a schedule sized in micro-batches took 80% of the
    optimizer steps. The whole-run script test with warmup_ends fails on it and passes once the length counts
    optimizer steps."""
    from tools.report import Evidence, Finding
    from tools.triage import suggest_next

    top = Finding(failure_mode="lr_too_low", confidence=0.6, summary="lr warms up for 80% of the run",
                  evidence=[Evidence(what="run length", value=40)], facts={"warmup_spans_run": True})
    steps = suggest_next([top], "train.py:make_target", None, command=["python", "train.py"],
                         schedule_fns=["train.py:get_lr"])
    assert "lr_range_test" not in [s.tool for s in steps]  # it sweeps a factory with no scheduler: "the LR is fine"
    args = next(s.args for s in steps if s.tool == "write_regression_test")
    assert "target" not in args and "function" not in args and args["params"]["script.checks"] == ["warmup_ends"]
    (workspace / "train.py").write_text(textwrap.dedent(ACCUMULATED_SCHEDULE).replace("LENGTH", "micro_batches"))
    report = _write(workspace, failure_mode="lr_too_low", command=args["command"], params=args["params"])
    failed = {c.test for c in report.cases if c.outcome == "failed"}
    assert report.fails_now and failed == {"test_script_warmup_ends_early_in_the_run"}, report.text()
    (workspace / "train.py").write_text(textwrap.dedent(ACCUMULATED_SCHEDULE).replace("LENGTH", "micro_batches // accum"))
    rerun = _rerun(workspace, report.path)
    assert rerun.passes_now, rerun.text()


PLATEAU_SCRIPT = """
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Linear(8, 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-2)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode=MODE, factor=0.5, patience=1)
    w = torch.randn(8, 1)
    x_val = torch.randn(256, 8)
    for epoch in range(12):
        for _ in range(10):
            x = torch.randn(64, 8)
            loss = ((model(x) - x @ w) ** 2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            val_loss = ((model(x_val) - x_val @ w) ** 2).mean().item()
        scheduler.step(val_loss)
        print(f"epoch {epoch} val_loss {val_loss:.4f} lr {optimizer.param_groups[0]['lr']:.3g}")
"""


def test_a_plateau_scheduler_in_the_wrong_mode_fails_the_whole_run_script_check_and_its_fix_passes(workspace):
    """ReduceLROnPlateau(mode='max') stepped with the validation loss: the whole-run script test records what the
    scheduler is given and fails when hardly any value beats the first in the scheduler's own mode."""
    from tools.static_scan import static_scan
    from tools.triage import suggest_next

    script = textwrap.dedent(PLATEAU_SCRIPT)
    (workspace / "train.py").write_text(script.replace("MODE", "'max'"))
    (top,) = [f for f in static_scan([workspace / "train.py"]).findings if f.failure_mode == "lr_too_low"]
    args = next(s.args for s in suggest_next([top], "train.py:make_target", None, command=["python", "train.py"])
                if s.tool == "write_regression_test")
    steps = suggest_next([top], "train.py:make_target", None, command=["python", "train.py"])
    assert "lr_range_test" not in [s.tool for s in steps]  # the base LR is fine: the sweep would say so
    assert "target" not in args and args["params"]["script.checks"] == ["plateau_follows_metric"]
    report = _write(workspace, failure_mode="lr_too_low", command=args["command"], params=args["params"])
    failed = {c.test for c in report.cases if c.outcome == "failed"}
    assert report.fails_now and failed == {"test_script_plateau_scheduler_reads_its_metric_the_right_way"}, report.text()
    assert report.path == "tests/test_plateau_scheduler_follows_its_metric.py"
    assert "mode 'max'" in report.failure_message and "cut the LR" in report.failure_message
    (workspace / "train.py").write_text(script.replace("MODE", "'min'"))
    rerun = _rerun(workspace, report.path)
    assert rerun.passes_now, rerun.text()


REINIT_AFTER_LOAD = """
    import torch
    from torch import nn

    class Classifier(nn.Module):
        def __init__(self, enc):
            super().__init__()
            self.enc, self.head = enc, nn.Linear(16, 3)
            INIT

        def forward(self, x):
            return self.head(self.enc(x))

    def init_weights(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)

    def make_target():
        torch.manual_seed(1)
        enc = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
        enc.load_state_dict(nn.Sequential(nn.Linear(8, 16), nn.ReLU()).state_dict())
        x, y = torch.randn(16, 8), torch.randint(0, 3, (16,))
        return {"model": Classifier(enc), "data": [(x, y)], "num_classes": 3,
                "loss_fn": lambda m, b: nn.functional.cross_entropy(m(b[0]), b[1])}
"""


def test_loaded_weights_re_initialised_by_the_wrapper_fail_the_bad_init_test(workspace):
    """Blind dev it_ticket_minibert_routing: post_init() re-initialised the loaded encoder. The initial loss is at
    chance either way; the load check sees the loaded values gone and fails; initialising only the head passes."""
    (workspace / "train.py").write_text(textwrap.dedent(REINIT_AFTER_LOAD).replace("INIT", "self.apply(init_weights)"))
    report = _write(workspace, failure_mode="bad_init", target="train.py:make_target")
    failed = {c.test for c in report.cases if c.outcome == "failed"}
    assert report.fails_now and failed == {"test_checkpoint_loads_fill_the_model"}, report.text()
    (workspace / "train.py").write_text(textwrap.dedent(REINIT_AFTER_LOAD).replace("INIT", "self.head.apply(init_weights)"))
    rerun = _rerun(workspace, report.path)
    assert rerun.passes_now, rerun.text()


SLOW_BATCHNORM_NET = """
    import torch
    from torch import nn
    import torch.nn.functional as F

    CFG = {"bn_momentum": 1e-3}

    def make_target():
        torch.manual_seed(0)
        x = torch.randn(256, 8) * 3 + 5     # far from the running statistics' start (mean 0, var 1)
        y = (x[:, 0] > 5).long()
        model = nn.Sequential(nn.Linear(8, 32), nn.BatchNorm1d(32, momentum=CFG["bn_momentum"]), nn.ReLU(),
                              nn.Linear(32, 2))
        return {"model": model, "data": list(zip(x.split(64), y.split(64))),
                "loss_fn": lambda m, b: F.cross_entropy(m(b[0]), b[1]), "num_classes": 2}
"""


def test_slow_batchnorm_statistics_fail_their_test(workspace):
    """Blind dev ecg_rhythm_cnn1d_sgd: BatchNorm momentum=1e-3. Every layer is in the right mode, so the mode
    checks pass on the bug; triage suggests norm_stats_follow for it, which fails on the bug and passes on
    momentum 0.1."""
    from tools.report import Finding
    from tools.triage import suggest_next

    (workspace / "train.py").write_text(textwrap.dedent(SLOW_BATCHNORM_NET))
    top = Finding(failure_mode="train_eval_mode", confidence=0.7, facts={"slow_norm_momentum": 1e-3},
                  summary="training learnt but val_loss did not follow")
    args = next(s.args for s in suggest_next([top], "train.py:make_target", None) if s.tool == "write_regression_test")
    assert args["params"] == {"norm_stats_follow": True}
    report = _write(workspace, failure_mode="train_eval_mode", target="train.py:make_target", params=args["params"])
    failed = {c.test for c in report.cases if c.outcome == "failed"}
    assert report.fails_now and failed == {"test_batch_norm_statistics_follow_the_batches"}, report.text()
    assert report.path.endswith("test_batch_norm_statistics_follow.py")
    (workspace / "train.py").write_text(textwrap.dedent(SLOW_BATCHNORM_NET).replace("1e-3", "0.1"))
    rerun = _rerun(workspace, report.path)
    assert rerun.passes_now, rerun.text()


ROWS_VIEWED_ACROSS_THE_BATCH = """
    import torch
    from torch import nn
    import torch.nn.functional as F

    class Reader(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(50, 16)
            self.rnn = nn.LSTM(16, 24, bidirectional=True, batch_first=True)
            self.head = nn.Linear(48, 3)

        def forward(self, x):
            _, (h_n, _) = self.rnn(self.emb(x))
            return self.head(h_n.view(x.shape[0], -1))

    def make_target():
        torch.manual_seed(0)
        x, y = torch.randint(0, 50, (64, 10)), torch.randint(0, 3, (64,))
        return {"model": Reader(), "data": list(zip(x.split(32), y.split(32))),
                "loss_fn": lambda m, b: F.cross_entropy(m(b[0]), b[1]), "num_classes": 3}
"""


def test_rows_mixed_across_the_batch_fail_their_test(workspace):
    """Fresh blind dev bilstm_review_sentiment: h_n.view(B, -1) of a (2, B, H) state. The loss's shapes match, so
    the shape checks pass on the bug; triage suggests rows_apart for a rows_mixed finding, which fails on the bug
    and passes on h_n.permute(1, 0, 2).reshape(B, -1)."""
    from tools.report import Finding
    from tools.triage import suggest_next

    (workspace / "train.py").write_text(textwrap.dedent(ROWS_VIEWED_ACROSS_THE_BATCH))
    top = Finding(failure_mode="shape_mismatch", confidence=0.8, facts={"rows_mixed": True},
                  summary="the model mixes the rows of a batch")
    args = next(s.args for s in suggest_next([top], "train.py:make_target", None) if s.tool == "write_regression_test")
    assert args["params"] == {"rows_apart": True}
    report = _write(workspace, failure_mode="shape_mismatch", target="train.py:make_target", params=args["params"])
    failed = {c.test for c in report.cases if c.outcome == "failed"}
    assert report.fails_now and failed == {"test_rows_of_a_batch_stay_apart"}, report.text()
    assert report.path.endswith("test_rows_stay_apart.py")
    (workspace / "train.py").write_text(textwrap.dedent(ROWS_VIEWED_ACROSS_THE_BATCH).replace(
        "h_n.view(x.shape[0], -1)", "h_n.permute(1, 0, 2).reshape(x.shape[0], -1)"))
    rerun = _rerun(workspace, report.path)
    assert rerun.passes_now, rerun.text()


def test_channels_last_images_read_as_channels_first_fail_their_test(workspace):
    """Fresh blind dev rgb_glyphs_cnn_sgd_multistep: .reshape(N, 3, H, W) of (N, H, W, 3) images. The labels still
    generalise (the CNN reaches 0.90), so the real-vs-shuffled check passes on the bug; the image-layout check
    fails on it and passes on .permute(0, 3, 1, 2)."""
    from test_probes import CHANNELS_LAST_IMAGES

    (workspace / "train.py").write_text(textwrap.dedent(CHANNELS_LAST_IMAGES.replace(
        "TO_CHW", "x.reshape(len(x), 3, 16, 16)")))
    report = _write(workspace, failure_mode="data_pipeline", target="train.py:make_target",
                    params={"steps": 60})
    failed = {c.test for c in report.cases if c.outcome == "failed"}
    assert report.fails_now and "test_image_channels_are_not_interleaved" in failed, report.text()
    (workspace / "train.py").write_text(textwrap.dedent(CHANNELS_LAST_IMAGES.replace(
        "TO_CHW", "x.permute(0, 3, 1, 2).contiguous()")))
    rerun = _rerun(workspace, report.path)
    assert rerun.passes_now, rerun.text()


def test_a_validation_loader_prepared_apart_fails_its_test(workspace):
    """A scaler fitted on training and never applied to validation. Training's own rows and labels are fine, so the
    label checks pass on the bug; triage suggests splits_alike for a splits_apart finding, which fails on the bug
    and passes once validation is scaled with training's statistics."""
    from test_probes import SPLITS
    from tools.report import Finding
    from tools.triage import suggest_next

    (workspace / "train.py").write_text(textwrap.dedent(SPLITS.replace("VAL", "pass")))
    top = Finding(failure_mode="data_pipeline", confidence=0.7, facts={"splits_apart": True},
                  summary="the loader built at train.py:16 feeds batch[0] on another scale than training")
    args = next(s.args for s in suggest_next([top], "train.py:make_target", None) if s.tool == "write_regression_test")
    assert args["params"] == {"splits_alike": True}
    report = _write(workspace, failure_mode="data_pipeline", target="train.py:make_target",
                    params={**args["params"], "steps": 60})
    failed = {c.test for c in report.cases if c.outcome == "failed"}
    assert report.fails_now and failed == {"test_every_loader_is_fed_like_the_training_batches"}, report.text()
    assert report.path.endswith("test_splits_fed_alike.py")
    (workspace / "train.py").write_text(textwrap.dedent(SPLITS.replace("VAL", "xv = (xv - mu) / sd")))
    rerun = _rerun(workspace, report.path)
    assert rerun.passes_now, rerun.text()


def test_a_clamp_on_normalised_training_images_fails_the_splits_test(workspace):
    """Dev solar_cell_el_defect_cnn's kind: a jitter that clamps to [0, 1] after Normalize, in training only. The
    loaders' means and spreads stay within the shift limits, so the clip itself must fail the splits test; the
    jitter moved before Normalize passes it."""
    from test_probes import CLAMP_AFTER_NORM, CLAMP_BEFORE_NORM, CLAMPED_IMAGES

    body = CLAMPED_IMAGES.replace("BACKGROUND", "x.clamp(0, 1)")
    (workspace / "train.py").write_text(textwrap.dedent(body.replace("ORDER", CLAMP_AFTER_NORM)))
    report = _write(workspace, failure_mode="data_pipeline", target="train.py:make_target",
                    params={"only": ["test_every_loader_is_fed_like_the_training_batches"], "splits_alike": True})
    assert report.fails_now and "where the training samples are clipped" in report.failure_message, report.text()
    (workspace / "train.py").write_text(textwrap.dedent(body.replace("ORDER", CLAMP_BEFORE_NORM)))
    rerun = _rerun(workspace, report.path)
    assert rerun.passes_now, rerun.text()

def test_a_target_the_augmentation_left_behind_fails_the_splits_test(workspace):
    """Dev micrograph_texture_denoising_conv_ae's kind: the input augmented, the target not. Means and spreads
    match across the loaders, so the pairing itself must fail the splits test; returning the augmented sample
    passes it."""
    from test_probes import DENOISER_PATCHES

    (workspace / "train.py").write_text(textwrap.dedent(DENOISER_PATCHES.replace("RETURNED", "clean")))
    report = _write(workspace, failure_mode="data_pipeline", target="train.py:make_target",
                    params={"only": ["test_every_loader_is_fed_like_the_training_batches"], "splits_alike": True})
    assert report.fails_now and "training's only" in report.failure_message, report.text()
    (workspace / "train.py").write_text(textwrap.dedent(DENOISER_PATCHES.replace("RETURNED", "x")))
    rerun = _rerun(workspace, report.path)
    assert rerun.passes_now, rerun.text()

def test_a_regression_target_scaled_on_one_split_only_fails_the_splits_test(workspace):
    """The target standardised for training and raw for validation: splits_alike compares float targets too."""
    from test_probes import REGRESSION_SPLITS

    (workspace / "train.py").write_text(textwrap.dedent(REGRESSION_SPLITS.replace("VAL", "pass")))
    report = _write(workspace, failure_mode="data_pipeline", target="train.py:make_target",
                    params={"splits_alike": True, "steps": 60})
    failed = {c.test for c in report.cases if c.outcome == "failed"}
    assert "test_every_loader_is_fed_like_the_training_batches" in failed, report.text()
    assert "regression targets" in report.failure_message
    (workspace / "train.py").write_text(textwrap.dedent(REGRESSION_SPLITS.replace("VAL", "yv = (yv - mu) / sd")))
    rerun = _rerun(workspace, report.path)
    assert "test_every_loader_is_fed_like_the_training_batches" not in {
        c.test for c in rerun.cases if c.outcome == "failed"}, rerun.text()


def test_a_forecaster_on_day_aligned_validation_windows_passes_the_splits_test(workspace):
    """Validation windows that all start at midnight are narrow at each forecast step, alike over all steps: the
    splits test passes on them (chiller_load_lstm_encdec's fixed twin); the target left in raw units fails."""
    from test_probes import FORECAST_SPLITS

    (workspace / "train.py").write_text(textwrap.dedent(FORECAST_SPLITS.replace("VAL", "yv = yv * sd + mu")))
    report = _write(workspace, failure_mode="data_pipeline", target="train.py:make_target",
                    params={"splits_alike": True, "steps": 60})
    failed = {c.test for c in report.cases if c.outcome == "failed"}
    assert "test_every_loader_is_fed_like_the_training_batches" in failed, report.text()
    (workspace / "train.py").write_text(textwrap.dedent(FORECAST_SPLITS.replace("VAL", "pass")))
    rerun = _rerun(workspace, report.path)
    assert "test_every_loader_is_fed_like_the_training_batches" not in {
        c.test for c in rerun.cases if c.outcome == "failed"}, rerun.text()


def test_batches_sorted_by_class_fail_their_test(workspace):
    """Blind dev imu_activity_conv1d: rows sorted by class, only the batch order shuffled. Every row keeps its
    label, so the real-vs-shuffled check passes on the bug; triage suggests batches_mixed for a batches_unmixed
    finding, which fails on the bug and passes once the rows are shuffled."""
    from test_probes import BATCH_ORDER_ONLY, ROWS_SHUFFLED, UNMIXED
    from tools.report import Finding
    from tools.triage import suggest_next

    (workspace / "train.py").write_text(textwrap.dedent(UNMIXED.replace("ORDER", BATCH_ORDER_ONLY)))
    top = Finding(failure_mode="data_pipeline", confidence=0.7, facts={"batches_unmixed": True},
                  summary="the training batches do not mix the classes")
    args = next(s.args for s in suggest_next([top], "train.py:make_target", None) if s.tool == "write_regression_test")
    assert args["params"] == {"batches_mixed": True}
    report = _write(workspace, failure_mode="data_pipeline", target="train.py:make_target",
                    params={**args["params"], "steps": 60})
    failed = {c.test for c in report.cases if c.outcome == "failed"}
    assert report.fails_now and "test_batches_mix_the_classes" in failed, report.text()
    assert report.path.endswith("test_batches_mix_the_classes.py")
    (workspace / "train.py").write_text(textwrap.dedent(UNMIXED.replace("ORDER", ROWS_SHUFFLED)))
    rerun = _rerun(workspace, report.path)
    assert rerun.passes_now, rerun.text()


def test_time_major_windows_reshaped_for_a_conv1d_fail_their_test(workspace):
    """Blind dev pump_sensor_conv1d_ae: (T, C) windows reshaped to (N, C, L). An autoencoder has no labels to
    shuffle; the layout check fails on the reshape and passes on the transpose."""
    from test_probes import WINDOWS

    (workspace / "train.py").write_text(textwrap.dedent(WINDOWS.replace("CUT", "s[:n * length].reshape(n, 4, length)")))
    report = _write(workspace, failure_mode="data_pipeline", target="train.py:make_target", params={"steps": 30})
    failed = {c.test for c in report.cases if c.outcome == "failed"}
    assert report.fails_now and "test_image_channels_are_not_interleaved" in failed, report.text()
    (workspace / "train.py").write_text(textwrap.dedent(WINDOWS.replace(
        "CUT", "s[:n * length].reshape(n, length, 4).transpose(1, 2).contiguous()")))
    rerun = _rerun(workspace, report.path)
    assert rerun.passes_now, rerun.text()


def test_a_real_token_encoded_with_the_padding_id_fails_the_data_pipeline_test_first(workspace):
    """The padding-id test runs first in the data_pipeline file, so a vocabulary that gives a real token the pad id
    is what the verdict names; it passes once the vocabulary starts at 1."""
    from test_probes import PAD_VOCAB

    (workspace / "train.py").write_text(textwrap.dedent(PAD_VOCAB.replace("START", "")))
    report = _write(workspace, failure_mode="data_pipeline", target="train.py:make_target", params={"steps": 60})
    failed = [c.test for c in report.cases if c.outcome == "failed"]
    assert report.catches_bug and failed[0] == "test_the_padding_id_only_pads", report.text()
    assert "id 0, the embedding's padding_idx" in report.failure_message
    (workspace / "train.py").write_text(textwrap.dedent(PAD_VOCAB.replace("START", ", start=1")))
    rerun = _rerun(workspace, report.path)
    assert "test_the_padding_id_only_pads" not in {c.test for c in rerun.cases if c.outcome == "failed"}, rerun.text()
    # triage asks for that check alone: a slow learner can fail the real-vs-shuffled test after the fix too
    from tools.report import Finding
    from tools.triage import suggest_next

    top = Finding(failure_mode="data_pipeline", confidence=0.75, summary="id 0 between real tokens",
                  facts={"pad_inside": True})
    args = next(s.args for s in suggest_next([top], "train.py:make_target", None, command=["python", "train.py"])
                if s.tool == "write_regression_test")
    assert "command" not in args and args["params"] == {"only": ["test_the_padding_id_only_pads"]}
    (workspace / "train.py").write_text(textwrap.dedent(PAD_VOCAB.replace("START", "")))
    alone = _write(workspace, failure_mode="data_pipeline", target="train.py:make_target", params=args["params"])
    assert alone.catches_bug and alone.path.endswith("test_padding_id_only_pads.py"), alone.text()
    assert [c.test for c in alone.cases if c.outcome != "skipped"] == ["test_the_padding_id_only_pads"]


EMA_SCRIPT = """
    import copy
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 2))

    class Ema:
        def __init__(self, model, decay=0.9):
            self.module, self.decay = copy.deepcopy(model).eval(), decay

        @torch.no_grad()
        def update(self, model):
            for a, b in zip(PAIRS):
                if a.dtype.is_floating_point:
                    a.mul_(self.decay).add_(b.detach(), alpha=1 - self.decay)
                else:
                    a.copy_(b)

    ema = Ema(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(256, 6) + 3, torch.randint(0, 2, (256,))
    for epoch in range(3):
        for i in range(0, 256, 32):
            loss = nn.functional.cross_entropy(model(x[i:i + 32]), y[i:i + 32])
            opt.zero_grad()
            loss.backward()
            opt.step()
            ema.update(model)
        with torch.no_grad():
            print(epoch, nn.functional.cross_entropy(ema.module(x), y).item())
"""


def test_an_ema_that_averages_parameters_only_fails_the_eval_norm_check_and_the_state_dict_average_passes(workspace):
    """Blind dev har_accel_conv1d_mixup: an EMA copy used for evaluation averaged model.parameters() only, so its
    batch norm kept running mean 0 and variance 1. static_scan names it; the whole-run script test counts eval-mode
    batch-norm forwards whose statistics were never updated."""
    from tools.static_scan import static_scan
    from tools.triage import suggest_next

    script = textwrap.dedent(EMA_SCRIPT)
    (workspace / "train.py").write_text(script.replace("PAIRS", "self.module.parameters(), model.parameters()"))
    (top,) = [f for f in static_scan([workspace / "train.py"]).findings if f.failure_mode == "train_eval_mode"]
    args = next(s.args for s in suggest_next([top], "train.py:make_target", None, command=["python", "train.py"])
                if s.tool == "write_regression_test")
    assert "target" not in args and args["params"]["script.checks"] == ["eval_norm_stats_trained"]
    report = _write(workspace, failure_mode="train_eval_mode", command=args["command"], params=args["params"])
    failed = {c.test for c in report.cases if c.outcome == "failed"}
    assert report.fails_now and failed == {"test_script_evaluates_with_trained_norm_statistics"}, report.text()
    assert report.path == "tests/test_evaluates_with_trained_norm_statistics.py"
    (workspace / "train.py").write_text(script.replace(
        "PAIRS", "self.module.state_dict().values(), model.state_dict().values()"))
    assert [f for f in static_scan([workspace / "train.py"]).findings if f.failure_mode == "train_eval_mode"] == []
    rerun = _rerun(workspace, report.path)
    assert rerun.passes_now, rerun.text()


def test_an_in_place_augmentation_fails_the_reading_test_alone(workspace):
    """Blind dev wafer_map_defect_cnn: triage asks for the reading check alone on a reads_change_data finding
    (the label checks pass on the bug); it fails while __getitem__ augments the stored array in place and passes
    once the sample is copied first."""
    from test_probes import INPLACE_AUG
    from tools.report import Finding
    from tools.triage import suggest_next

    top = Finding(failure_mode="data_pipeline", confidence=0.8, summary="reading changes the data",
                  facts={"reads_change_data": True})
    args = next(s.args for s in suggest_next([top], "train.py:make_target", None, command=["python", "train.py"])
                if s.tool == "write_regression_test")
    assert "command" not in args and args["params"] == {"only": ["test_reading_the_data_leaves_it_unchanged"]}
    (workspace / "train.py").write_text(textwrap.dedent(INPLACE_AUG.replace("READ", "")))
    report = _write(workspace, failure_mode="data_pipeline", target="train.py:make_target", params=args["params"])
    assert report.catches_bug and report.path.endswith("test_reading_leaves_data_unchanged.py"), report.text()
    assert [c.test for c in report.cases if c.outcome != "skipped"] == ["test_reading_the_data_leaves_it_unchanged"]
    assert "loader 0 (Maps).x" in report.failure_message
    (workspace / "train.py").write_text(textwrap.dedent(INPLACE_AUG.replace("READ", ".copy()")))
    rerun = _rerun(workspace, report.path)
    assert rerun.passes_now, rerun.text()


def test_an_unshuffled_training_loader_fails_its_test(workspace):
    """Blind dev gearbox_vibration_conv_ae: triage asks for loader_shuffled on a loader_unshuffled finding; the
    check fails while the training loader reads rows sorted by regime in order, and passes with shuffle=True."""
    from test_probes import REGIME_AE
    from tools.report import Finding
    from tools.triage import suggest_next

    top = Finding(failure_mode="data_pipeline", confidence=0.7, summary="the training loader does not shuffle",
                  facts={"loader_unshuffled": True})
    args = next(s.args for s in suggest_next([top], "train.py:make_target", None) if s.tool == "write_regression_test")
    assert args["params"] == {"loader_shuffled": True}
    (workspace / "train.py").write_text(textwrap.dedent(REGIME_AE.replace("SHUFFLE", "")))
    report = _write(workspace, failure_mode="data_pipeline", target="train.py:make_target",
                    params={**args["params"], "steps": 30})
    failed = [c.test for c in report.cases if c.outcome == "failed"]
    assert report.catches_bug and failed[0] == "test_the_training_loader_mixes_its_rows", report.text()
    assert report.path.endswith("test_training_loader_mixes_its_rows.py") and "shuffle=True" in report.failure_message
    (workspace / "train.py").write_text(textwrap.dedent(REGIME_AE.replace("SHUFFLE", ", shuffle=True")))
    rerun = _rerun(workspace, report.path)
    assert rerun.passes_now, rerun.text()


LISTED_AUG = """
    import numpy as np
    import torch
    import torch.nn.functional as F
    from torch import nn
    from torch.utils.data import ConcatDataset, DataLoader, Dataset

    class Clips(Dataset):
        def __init__(self, seed):
            rng = np.random.default_rng(seed)
            self.y = rng.integers(0, 2, 64)
            self.clips = [(rng.standard_normal(16) + c).astype(np.float32) for c in self.y]  # per-sample arrays
            self.rng = np.random.default_rng(seed + 1)

        def __len__(self):
            return len(self.y)

        def __getitem__(self, i):
            x = self.clips[i]READ
            x += 0.1 * self.rng.standard_normal(16).astype(np.float32)
            return torch.from_numpy(x), int(self.y[i])

    def make_target():
        train = DataLoader(ConcatDataset([Clips(0), Clips(2)]), batch_size=16, shuffle=True)
        return {"model": nn.Linear(16, 2), "data": [b for _, b in zip(range(4), train)], "num_classes": 2,
                "loss_fn": lambda m, b: F.cross_entropy(m(b[0]), b[1]),
                "make_optimizer": lambda p: torch.optim.SGD(p, lr=0.1)}
"""


def test_the_reading_test_sees_per_sample_arrays_behind_a_concat_dataset(workspace):
    """The reading test walks what the probe walks: lists of per-sample arrays inside datasets a ConcatDataset
    holds (it skipped them before, so a finding the probe made there had a test that could not fail)."""
    params = {"only": ["test_reading_the_data_leaves_it_unchanged"]}
    (workspace / "train.py").write_text(textwrap.dedent(LISTED_AUG.replace("READ", "")))
    report = _write(workspace, failure_mode="data_pipeline", target="train.py:make_target", params=params)
    assert report.catches_bug and "datasets[0].clips[" in report.failure_message, report.text()
    (workspace / "train.py").write_text(textwrap.dedent(LISTED_AUG.replace("READ", ".copy()")))
    rerun = _rerun(workspace, report.path)
    assert rerun.passes_now, rerun.text()


def test_a_test_narrowed_to_one_check_is_named_after_it():
    """The default file name follows the one check a params switch or `only` narrows the test to: a table, not one
    `if` per check (before, a single `only` check without its own `if` was named labels_aligned_with_inputs)."""
    from tools.regression import validate

    def name(mode, params):
        return validate(mode, None, "train.py:make_target", None, None, None, params)[1]

    assert name("data_pipeline", None) == "labels_aligned_with_inputs"
    assert name("data_pipeline", {"only": ["test_class_ids_start_at_zero"]}) == "class_ids_start_at_zero"
    assert name("data_pipeline", {"only": ["test_the_padding_id_only_pads"]}) == "padding_id_only_pads"
    assert name("data_pipeline", {"only": ["test_reading_the_data_leaves_it_unchanged"]}) == \
        "reading_leaves_data_unchanged"
    assert name("data_pipeline", {"only": ["test_class_ids_start_at_zero", "test_batches_mix_the_classes"]}) == \
        "labels_aligned_with_inputs"  # two checks: the mode's name
    assert name("data_pipeline", {"loader_shuffled": True}) == "training_loader_mixes_its_rows"
    assert name("train_eval_mode", {"phase": "eval"}) == "evaluates_in_eval_mode"
    assert name("shape_mismatch", {"rows_apart": True}) == "rows_stay_apart"


def test_a_decoder_fed_its_own_targets_fails_the_read_ahead_test_alone(workspace):
    """Fresh blind dev chiller_load_lstm_encdec: triage asks for the read-ahead check alone on a reads_ahead
    finding, without the script (the input-leakage checks pass on this bug); it fails while the decoder is fed
    torch.roll(y, -1) and passes once the targets are shifted right."""
    from test_probes import TEACHER_FORCED
    from tools.report import Finding
    from tools.triage import suggest_next

    top = Finding(failure_mode="data_leakage", confidence=0.8, summary="the model reads its targets",
                  facts={"reads_ahead": True})
    args = next(s.args for s in suggest_next([top], "train.py:make_target", None, command=["python", "train.py"])
                if s.tool == "write_regression_test")
    assert "command" not in args and args["params"] == {"only": ["test_predictions_do_not_read_their_own_targets"]}
    (workspace / "train.py").write_text(textwrap.dedent(TEACHER_FORCED.replace("SHIFT", "-1")))
    report = _write(workspace, failure_mode="data_leakage", target="train.py:make_target", params=args["params"])
    assert report.catches_bug and report.path.endswith("test_predictions_do_not_read_their_own_targets.py"), \
        report.text()
    assert [c.test for c in report.cases if c.outcome != "skipped"] == ["test_predictions_do_not_read_their_own_targets"]
    assert "changing only the target at step" in report.failure_message
    (workspace / "train.py").write_text(textwrap.dedent(TEACHER_FORCED.replace("SHIFT", "1")))
    rerun = _rerun(workspace, report.path)
    assert rerun.passes_now, rerun.text()


def test_a_sampler_with_a_weight_per_class_fails_the_sampler_test_alone(workspace):
    """Fresh blind dev pcb_defect_resnet: triage asks for the sampler check alone on a sampler_short finding; it
    fails while WeightedRandomSampler gets one weight per class and passes with one weight per sample."""
    from test_probes import SAMPLED
    from tools.report import Finding
    from tools.triage import suggest_next

    top = Finding(failure_mode="data_pipeline", confidence=0.85, summary="the sampler draws few samples",
                  facts={"sampler_short": True})
    args = next(s.args for s in suggest_next([top], "train.py:make_target", None, command=["python", "train.py"])
                if s.tool == "write_regression_test")
    assert "command" not in args and args["params"] == {"only": ["test_the_sampler_reaches_every_sample"]}
    (workspace / "train.py").write_text(textwrap.dedent(SAMPLED.replace("WEIGHTS", "class_w")))
    report = _write(workspace, failure_mode="data_pipeline", target="train.py:make_target", params=args["params"])
    assert report.catches_bug and report.path.endswith("test_the_sampler_reaches_every_sample.py"), report.text()
    assert "2 weights for 600 samples" in report.failure_message
    (workspace / "train.py").write_text(textwrap.dedent(SAMPLED.replace("WEIGHTS", "class_w[y]")))
    rerun = _rerun(workspace, report.path)
    assert rerun.passes_now, rerun.text()


def test_numbers_coerced_to_nan_fail_the_coercion_test_alone(workspace):
    """Fresh blind dev apartment_rent_listings_mlp: triage asks for the coercion check alone on a numbers_coerced
    finding; it fails while "1,980" is read as text and coerced to NaN, and passes with read_csv(thousands=',')."""
    from test_probes import LISTINGS, write_listings
    from tools.report import Finding
    from tools.triage import suggest_next

    top = Finding(failure_mode="data_pipeline", confidence=0.8, summary="numbers coerced to NaN",
                  facts={"numbers_coerced": True})
    args = next(s.args for s in suggest_next([top], "train.py:make_target", None, command=["python", "train.py"])
                if s.tool == "write_regression_test")
    assert "command" not in args and args["params"] == {"only": ["test_numbers_are_not_coerced_to_nan"]}
    write_listings(workspace)
    (workspace / "train.py").write_text(textwrap.dedent(LISTINGS.replace("READ", "")))
    report = _write(workspace, failure_mode="data_pipeline", target="train.py:make_target", params=args["params"])
    assert report.catches_bug and report.path.endswith("test_numbers_are_not_coerced_to_nan.py"), report.text()
    assert "values of sqft into NaN" in report.failure_message
    (workspace / "train.py").write_text(textwrap.dedent(LISTINGS.replace("READ", ", thousands=','")))
    rerun = _rerun(workspace, report.path)
    assert rerun.passes_now, rerun.text()


def test_a_class_the_loss_ignores_fails_the_every_class_check_alone_and_the_default_loss_passes(workspace):
    """Blind dev helpdesk_intent_tiny_transformer: the intent head's cross-entropy reuses ignore_index=0, the
    pretraining's padding id and the largest intent. The default loss_function test (one-batch progress plus the
    script) failed on the fix too; triage now asks for the one check that measures it, which fails on the bug,
    passes once the head's loss drops ignore_index, and skips a tagger whose ignored id is its padding."""
    from test_probes import INTENTS
    from tools.probes import _class_ignored
    from tools.triage import suggest_next

    top = _class_ignored({"ignore_index": 0, "classes": 4, "share": 0.25, "rows": 64}, "init_loss_check")
    args = next(s.args for s in suggest_next([top], "train.py:make_target", ["python", "train.py"])
                if s.tool == "write_regression_test")
    assert args == {"failure_mode": "loss_function", "target": "train.py:make_target",
                    "params": {"only": ["test_every_class_gets_a_gradient"]}}
    code = textwrap.dedent(INTENTS)
    (workspace / "train.py").write_text(code.replace("IGNORE", "ignore_index=0").replace("TOKENS", "False"))
    report = _write(workspace, **args)
    assert report.path.endswith("test_every_class_gets_a_gradient.py"), report.path
    failed = {c.test for c in report.cases if c.outcome == "failed"}
    assert report.fails_now and failed == {"test_every_class_gets_a_gradient"}, report.text()
    assert "the rows labelled [0] send no gradient" in report.failure_message
    (workspace / "train.py").write_text(code.replace("IGNORE", "").replace("TOKENS", "False"))
    rerun = _rerun(workspace, report.path)
    assert rerun.passes_now, rerun.text()
    (workspace / "train.py").write_text(code.replace("IGNORE", "ignore_index=0").replace("TOKENS", "True"))
    tagger = _rerun(workspace, report.path)  # a token-level loss: its ignored id is padding, nothing to judge
    assert not any(c.outcome == "failed" for c in tagger.cases) and "one class label per example" in tagger.text(), \
        tagger.text()


def test_a_focal_weight_on_p_fails_the_direction_check_alone_and_the_p_t_weight_passes(workspace):
    """Blind dev card_fraud_entity_embedding_mlp: (1 - p) ** gamma on every row pushes a 0 scored above 0.39
    toward 1. Triage asks for the one check that measures it, which fails on it and passes on (1 - p_t) ** gamma."""
    from test_probes import FOCAL
    from tools.probes import _loss_pushes_wrong_way
    from tools.triage import suggest_next

    top = _loss_pushes_wrong_way({"output": "logit", "checks": [
        {"level": 0.0, "label": 0, "probability": 0.5, "wrong": 1.0, "rows": 50}]}, "init_loss_check")
    args = next(s.args for s in suggest_next([top], "train.py:make_target", ["python", "train.py"])
                if s.tool == "write_regression_test")
    assert args["params"] == {"only": ["test_the_loss_pulls_each_row_toward_its_label"]} and "command" not in args
    code = textwrap.dedent(FOCAL).replace("MIXUP", "False").replace("SIGMOID", "False")
    (workspace / "train.py").write_text(code.replace("PT", "pt = p"))
    report = _write(workspace, **args)
    failed = {c.test for c in report.cases if c.outcome == "failed"}
    assert report.fails_now and failed == {"test_the_loss_pulls_each_row_toward_its_label"}, report.text()
    assert "of the rows labelled 0 at p=0.50" in report.failure_message
    (workspace / "train.py").write_text(code.replace("PT", "pt = p * y + (1 - p) * (1 - y)"))
    rerun = _rerun(workspace, report.path)
    assert rerun.passes_now, rerun.text()


def test_windows_standardised_by_their_own_statistics_fail_their_check_alone_and_global_statistics_pass(workspace):
    """Blind dev gearbox_sensor_gru: every recording z-scored over its own steps erases the amplitude a fault
    doubles. Triage asks for the one check that measures it: it fails on the bug, passes on training statistics."""
    from test_probes import SELF_SCALED
    from tools.probes import self_standardised_finding
    from tools.triage import suggest_next

    top = self_standardised_finding({"dataset": "Windows", "where": "train.py:20", "stored": "recs", "axis": 0,
                                     "samples": 128, "channels": 2, "statistic": "log_sd", "channel": 0,
                                     "label_explained": 0.6, "classes": True}, "data_check")
    args = next(s.args for s in suggest_next([top], "train.py:make_target", ["python", "train.py"])
                if s.tool == "write_regression_test")
    assert args["params"] == {"only": ["test_samples_are_not_standardised_by_their_own_statistics"]}
    code = textwrap.dedent(SELF_SCALED).replace("SCALED", "True")
    (workspace / "train.py").write_text(code.replace("GLOBAL", "False"))
    report = _write(workspace, **args)
    failed = {c.test for c in report.cases if c.outcome == "failed"}
    assert report.fails_now and failed == {"test_samples_are_not_standardised_by_their_own_statistics"}, report.text()
    (workspace / "train.py").write_text(code.replace("GLOBAL", "True"))
    rerun = _rerun(workspace, report.path)
    assert rerun.passes_now, rerun.text()
