"""Regression tests from templates: one per failure mode, rendered into the workspace's tests/ and run.

A template (journal_templates/tests/<template>.py.tmpl, after the shared _header.py.tmpl) is a plain
pytest file that imports the user's code through a target factory and/or a named function and
asserts the invariant the bug broke. The rendered file is self-contained: it needs torch and pytest,
not mltriage, so it stays in the user's suite. Nothing is overwritten: the name is claimed with
O_EXCL, and before anything is written the target is imported once in the user's interpreter, so
a target that does not import is reported with its traceback and leaves no file behind.
"""

import ast
import math
import os
import pprint
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from tools.errors import TriageError
from tools.failure_modes import FAILURE_MODES
from tools.probe_runner import ProgressFn, choose_python, run_probe
from tools.report import Report

TEMPLATE_DIR = Path(__file__).resolve().parent.parent / "journal_templates" / "tests"


@dataclass(frozen=True)
class RegressionTemplate:
    name: str
    needs: Literal["target", "target+function", "target|function"]
    what: str
    defaults: dict[str, Any] = field(default_factory=dict)


_T = RegressionTemplate
TEMPLATES: dict[str, RegressionTemplate] = {t.name: t for t in [
    _T("nan_inf", "target|function",
       "The loss and gradients stay finite on every batch, on edge inputs (zeros, constant rows), with saturated "
       "outputs and over a short training run; FUNCTION stays finite on edge tensors (zeros, one-hot, huge, constant rows).",
       {"steps": 100, "max_batches": 32, "output_scales": [1000.0], "input_edges": ["zeros", "constant_rows"],
        "edge_inputs": ["zeros", "one_hot", "huge", "constant_rows"], "shape": [4, 8], "inputs": [], "check_grad": True}),
    _T("broken_graph", "target",
       "Every parameter requires grad and gets a non-zero gradient from one backward pass.", {"ignore": []}),
    _T("frozen_params", "target",
       "Every parameter changes after an optimizer step with the user's optimizer.", {"steps": 1, "ignore": []}),
    _T("exploding_gradients", "target",
       "The global gradient norm (before clipping) stays under a bound for N training steps.",
       {"steps": 50, "max_grad_norm": 10.0}),
    _T("vanishing_gradients", "target",
       "The gradient reaching each layer (dLoss/d output, RMS) stays within two orders of magnitude across depth.",
       {"min_ratio": 0.01}),
    _T("missing_zero_grad", "target+function",
       "Gradients do not accumulate: with lr 0 and the same batch, FUNCTION (a train step or loop) sees the same "
       "gradient norm at every optimizer.step().", {"steps": 3, "max_growth": 1.5}),
    _T("bad_init", "target",
       "The initial loss is within a tolerance of the chance value (ln(num_classes) for cross-entropy).",
       {"batches": 4, "rel_tolerance": 0.25, "expected": None, "num_classes": None}),
    _T("data_leakage", "target",
       "No input column determines the label exactly, and the initial loss is not far below chance.",
       {"batches": 32, "rel_tolerance": 0.5, "expected": None, "num_classes": None, "label_key": None}),
    _T("shape_mismatch", "target",
       "Model output and target shapes match and the loss does not broadcast them.",
       {"num_classes": None, "label_key": None}),
    _T("loss_function", "target",
       "Cross-entropy receives logits, not probabilities (no double softmax); the loss stays >= its floor (sign) and falls on one batch.",
       {"steps": 50, "max_final_ratio": 0.5, "min_loss": 0.0}),
    _T("train_eval_mode", "target",
       "Every module is in train mode during the training step (FUNCTION if given, else loss + backward).", {}),
    _T("data_pipeline", "target",
       "Labels are aligned with inputs: training on the real labels gives a lower held-out loss than on shuffled ones.",
       {"batches": 32, "steps": 150, "margin": 0.1, "label_key": None}),
    _T("update_ratio", "target",
       "The update/weight ratio of the weight matrices over a few steps with the user's optimizer stays in [1e-5, 1e-1].",
       {"steps": 5, "min_ratio": 1e-5, "max_ratio": 0.1, "ignore": []}),
    _T("dead_units", "target",
       "Most ReLU units fire on at least one example of a few batches.",
       {"steps": 0, "batches": 4, "max_dead_fraction": 0.25}),
    _T("hang", "target",
       "Iterating the data to its end and one training step each finish within a timeout (the stack is shown if not).",
       {"timeout_s": 10.0, "max_batches": 10000}),
    _T("overfit_one_batch", "target",
       "The model overfits one batch: the loss falls well below its start within N steps.",
       {"steps": 100, "max_final_ratio": 0.2}),
]}

# failure mode -> template; every other mode gets the generic overfit-one-batch test
FOR_MODE = {"nan_inf": "nan_inf", "broken_graph": "broken_graph", "frozen_params": "frozen_params",
            "exploding_gradients": "exploding_gradients", "vanishing_gradients": "vanishing_gradients",
            "missing_zero_grad": "missing_zero_grad", "bad_init": "bad_init", "data_leakage": "data_leakage",
            "shape_mismatch": "shape_mismatch", "loss_function": "loss_function",
            "train_eval_mode": "train_eval_mode", "data_pipeline": "data_pipeline", "lr_too_low": "update_ratio",
            "lr_too_high": "update_ratio", "dead_units": "dead_units", "hang": "hang"}

IMPORT_TIMEOUT_S = 120.0  # importing torch and the user module; independent of the test's own time limit

Status = Literal["passed", "failed", "error", "timeout"]

NEXT_STEP = {
    "passed": "The test passes on the current code. Prove it catches the bug: revert the fix, run pytest on it "
              "(it must fail), restore the fix. Then record test_path in the journal entry.",
    "failed": "The test fails on the current code: the fix is incomplete, or FUNCTION/TARGET points at the wrong "
              "code. Read the assertion in the output tail before changing a bound in PARAMS.",
    "error": "pytest could not collect or run the file: read the output tail (import error, missing fixture).",
    "timeout": "pytest did not finish in time and was killed: the code under test hangs or is too slow for a "
               "regression test; lower PARAMS['steps'] or fix the hang.",
}


class RegressionTestReport(Report):
    path: str = Field(description="the test file, relative to the workspace")
    failure_mode: str
    template: str
    status: Status
    passed: bool
    returncode: int | None = None
    duration_s: float
    python: str = Field(description="the interpreter pytest ran in")
    target: str | None = None
    function: str | None = None
    params: dict[str, Any] = Field(description="the effective template parameters baked into the file")
    output_tail: str = Field(description="the end of pytest's output")
    next_step: str

    def headline(self) -> str:
        tail = "\n".join(self.output_tail.strip().splitlines()[-25:])
        return (f"{self.path}: {self.status.upper()} (template {self.template} for {self.failure_mode}, "
                f"{self.duration_s:.1f} s in {self.python})\n{self.next_step}\n--- pytest output (tail) ---\n{tail}")


# ---------------------------------------------------------------- validation and rendering

def template_for(failure_mode: str) -> RegressionTemplate:
    if failure_mode not in FAILURE_MODES:
        raise TriageError(f"unknown failure_mode {failure_mode!r}", "Use one of: " + ", ".join(FAILURE_MODES))
    return TEMPLATES[FOR_MODE.get(failure_mode, "overfit_one_batch")]


def slug_for_test(name: str) -> str:
    """'entropy stays finite' -> 'entropy_stays_finite'; a name is a name, never a path."""
    if not name or not name.strip():
        raise TriageError("empty test name", "Name the invariant, e.g. 'entropy_stays_finite'")
    if any(c in name for c in "/\\\x00") or name.strip() in (".", ".."):
        raise TriageError(f"test name {name!r} contains a path separator",
                          "Pass a plain name such as 'entropy_stays_finite'; the file always goes to tests/test_<name>.py")
    slug = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
    slug = re.sub(r"^test_", "", slug)[:60].strip("_")
    if not slug:
        raise TriageError(f"test name {name!r} has no letters or digits", "Use a name like 'entropy_stays_finite'")
    return slug


def split_spec(spec: str, what: str) -> tuple[str, str]:
    if ":" not in spec:
        raise TriageError(f"{what} {spec!r} must look like 'path/file.py:name' or 'package.module:name'",
                          "Give the file (relative to the workspace) and the name, separated by a colon")
    where, name = spec.rsplit(":", 1)
    if not where or not name.isidentifier():
        raise TriageError(f"{what} {spec!r}: {name!r} is not a Python name", "Use 'path/file.py:make_target'")
    return where, name


def check_defines(path: Path, name: str, what: str) -> None:
    """A fast static check before anything runs: the file parses and defines `name` at top level."""
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except SyntaxError as e:
        raise TriageError(f"{what} file {path.name} does not parse: line {e.lineno}: {e.msg}", "Fix the syntax error first")
    except (OSError, UnicodeDecodeError) as e:
        raise TriageError(f"cannot read {what} file {path}: {e}", "Check the path")
    names: set[str] = set()
    statements = list(tree.body)
    while statements:
        node = statements.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if any(a.name == "*" for a in node.names):
                return  # a star import may define it; the import check will tell
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        else:  # if/try/with/for at module level: their bodies define module names too
            for attr in ("body", "orelse", "finalbody", "handlers"):
                statements += [n for n in getattr(node, attr, []) if isinstance(n, ast.stmt)]
            for handler in getattr(node, "handlers", []):
                statements += handler.body
    if name not in names:
        defs = sorted(n for n in names if not n.startswith("_"))[:15]
        raise TriageError(f"{what} file {path.name} defines no top-level {name!r}",
                          f"It defines: {', '.join(defs) or 'nothing'}. Pass an existing name")


def _check_literal(value: Any, where: str) -> None:
    if value is None or isinstance(value, (bool, int, str)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TriageError(f"params{where} is {value}", "Use a finite number")
        return
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_literal(v, f"{where}[{i}]")
        return
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise TriageError(f"params{where} has a non-string key {k!r}", "Use string keys")
            _check_literal(v, f"{where}[{k!r}]")
        return
    raise TriageError(f"params{where} has a {type(value).__name__}", "Use numbers, strings, booleans, lists and dicts")


def effective_params(template: RegressionTemplate, params: dict[str, Any] | None) -> dict[str, Any]:
    params = dict(params or {})
    unknown = sorted(set(params) - set(template.defaults) - {"seed"})
    if unknown:
        allowed = ", ".join(f"{k} (default {v!r})" for k, v in template.defaults.items()) or "none besides seed"
        raise TriageError(f"unknown params {unknown} for the {template.name} template", f"It takes: {allowed}, seed")
    for k, v in params.items():
        _check_literal(v, f"[{k!r}]")
        if k == "inputs":  # python expressions, evaluated by the test: they must at least parse
            for expr in v if isinstance(v, list) else []:
                try:
                    ast.parse(str(expr), mode="eval")
                except SyntaxError as e:
                    raise TriageError(f"params['inputs'] entry {expr!r} does not parse: {e.msg}",
                                      "Give each input as a Python expression over torch, e.g. 'torch.zeros(4, 10)'")
        default = template.defaults.get(k)
        if default is not None and v is not None and isinstance(default, list) != isinstance(v, list):
            raise TriageError(f"params[{k!r}] must be {'a list' if isinstance(default, list) else 'a single value'}",
                              f"The default is {default!r}")
    return {"seed": 0, **template.defaults, **params}


def render_test(template: RegressionTemplate, *, failure_mode: str, title: str, target: str | None,
                function: str | None, params: dict[str, Any]) -> str:
    """The test file's source; raises TriageError if it does not parse (a bad expression in params)."""
    header = (TEMPLATE_DIR / "_header.py.tmpl").read_text()
    body = (TEMPLATE_DIR / f"{template.name}.py.tmpl").read_text()
    values = {"TITLE": title, "WHAT": template.what, "FAILURE_MODE": failure_mode, "TEMPLATE": template.name,
              "TARGET": repr(target), "FUNCTION": repr(function),
              "PARAMS": pprint.pformat(params, sort_dicts=False, width=100)}
    source = re.sub(r"\{\{(\w+)\}\}", lambda m: values[m.group(1)], header) + "\n\n" + body
    try:
        ast.parse(source)
    except SyntaxError as e:
        raise TriageError(f"the rendered test does not parse (line {e.lineno}: {e.msg})",
                          "Check the expressions passed in params (e.g. params.inputs)")
    return source


def claim_test_file(tests_dir: Path, slug: str) -> Path:
    """Create tests/test_<slug>.py exclusively; if taken, test_<slug>_2.py, _3, ... (never overwrite)."""
    if tests_dir.exists() and not tests_dir.is_dir():
        raise TriageError(f"{tests_dir} exists and is not a directory", "Move that file away or pass another workspace")
    tests_dir.mkdir(parents=True, exist_ok=True)
    for i in range(1, 1000):
        path = tests_dir / (f"test_{slug}.py" if i == 1 else f"test_{slug}_{i}.py")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except FileExistsError:
            continue
        os.close(fd)
        return path
    raise TriageError(f"999 files named tests/test_{slug}*.py already exist", "Pick another name")


def validate(failure_mode: str, name: str, target: str | None, function: str | None,
             target_file: Path | None, function_file: Path | None, params: dict | None,
             ) -> tuple[RegressionTemplate, str, dict[str, Any]]:
    """Everything that can be checked without running code; raises before anything is written."""
    template = template_for(failure_mode)
    slug = slug_for_test(name)
    if template.needs.startswith("target") and "|" not in template.needs and not target:
        raise TriageError(f"the {template.name} template needs target='file.py:make_target'",
                          "Pass the target factory that returns model, batch/data, loss_fn and optimizer")
    if template.needs == "target|function" and not (target or function):
        raise TriageError(f"the {template.name} template needs target= or function= (or both)",
                          "function='pkg/mod.py:entropy' tests one function on edge inputs; target= tests the loss")
    if template.needs == "target+function" and not function:
        raise TriageError(
            f"the {template.name} template needs function= naming the code that runs the optimizer step",
            "A missing zero_grad lives in the training loop, not the factory: expose the step as a function, e.g. "
            "def train_step(model, optimizer, batch): ... (or a loop taking model, optimizer, data, steps), "
            "and pass function='train.py:train_step'")
    for spec, file, what in ((target, target_file, "target"), (function, function_file, "function")):
        if spec:
            _, attr = split_spec(spec, what)
            if file is not None:
                check_defines(file, attr, what)
    return template, slug, effective_params(template, params)


# ---------------------------------------------------------------- running

# Runs in the user's interpreter: execute the rendered test module (as if at its final path) and load
# TARGET/FUNCTION through its own loader, so the check and the test import the code the same way.
IMPORT_CHECK = r"""
import json, os, sys, traceback
job = os.environ["MLTRIAGE_JOB"]
args = json.load(open(os.path.join(job, "args.json")))
def answer(**payload):
    with open(os.path.join(job, "result.json"), "w") as f:
        json.dump(payload, f)
    sys.exit(0)
try:
    import pytest
except ImportError as e:
    answer(ok=False, stage="pytest", message=f"{type(e).__name__}: {e}", traceback="")
ns = {"__file__": args["file"], "__name__": "mltriage_regression_check"}
try:
    exec(compile(args["source"], args["file"], "exec"), ns)
except BaseException as e:
    answer(ok=False, stage="test module", message=f"{type(e).__name__}: {e}", traceback=traceback.format_exc()[-3000:])
for key in ("TARGET", "FUNCTION"):
    spec = ns[key]
    if spec is None:
        continue
    try:
        obj = ns["load"](spec)
        if not callable(obj):
            raise TypeError(f"{spec} is a {type(obj).__name__}, not a callable")
    except BaseException as e:
        answer(ok=False, stage=key.lower(), spec=spec, message=f"{type(e).__name__}: {e}",
               traceback=traceback.format_exc()[-3000:])
answer(ok=True)
"""


async def _import_check(source: str, final_path: Path, workspace_root: Path, python: str | None,
                        timeout_s: float) -> None:
    outcome = await run_probe("import-check", {"source": source, "file": str(final_path)},
                              workspace_root=workspace_root, python=python, timeout_s=timeout_s,
                              env={"PYTHONDONTWRITEBYTECODE": "1"},
                              command=[choose_python(python, workspace_root), "-c", IMPORT_CHECK])
    result = outcome.result
    if result is None:
        raise TriageError(f"checking that the code imports failed: {outcome.failure()}",
                          f"stderr: {outcome.stderr_tail[-1500:]}")
    if result["ok"]:
        return
    if result["stage"] == "pytest":
        raise TriageError(f"pytest is not installed in {outcome.python} ({result['message']})",
                          "Install it there (pip install pytest) or pass python= pointing at the interpreter that has it")
    what = result.get("spec") or "the test module"
    raise TriageError(f"{result['stage']} {what!r} does not import in {outcome.python}: {result['message']}. "
                      "Nothing was written", "Fix the import, then call write_regression_test again. Traceback tail:\n"
                      + result.get("traceback", "")[-1500:])


async def write_regression_test(*, workspace_root: Path, failure_mode: str, name: str, target: str | None = None,
                                function: str | None = None, target_file: Path | None = None,
                                function_file: Path | None = None, params: dict | None = None,
                                python: str | None = None, timeout_s: float = 120.0,
                                on_progress: ProgressFn | None = None) -> RegressionTestReport:
    """Render, check, write (never overwrite) and run one regression test; `*_file` are the resolved .py files."""
    template, slug, eff = validate(failure_mode, name, target, function, target_file, function_file, params)
    tests_dir = workspace_root / "tests"
    if tests_dir.exists() and not tests_dir.is_dir():
        raise TriageError(f"{tests_dir} exists and is not a directory", "Move that file away; tests go to tests/")
    target = _portable(target, target_file, workspace_root)
    function = _portable(function, function_file, workspace_root)
    source = render_test(template, failure_mode=failure_mode, title=slug.replace("_", " "), target=target,
                         function=function, params=eff)

    async def progress(i: float, message: str):
        if on_progress is not None:
            await on_progress(i, 3, message)

    await progress(0, "importing the code under test")
    await _import_check(source, tests_dir / f"test_{slug}.py", workspace_root, python, IMPORT_TIMEOUT_S)
    path = claim_test_file(tests_dir, slug)
    try:
        path.write_text(source)
    except OSError as e:
        path.unlink(missing_ok=True)
        raise TriageError(f"could not write {path}: {e.strerror}", "Check free disk space and permissions")
    rel = path.relative_to(workspace_root).as_posix()
    await progress(1, f"running pytest {rel}")
    interpreter = choose_python(python, workspace_root)
    outcome = await run_probe("pytest", {}, workspace_root=workspace_root, python=python, timeout_s=timeout_s,
                              env={"PYTHONDONTWRITEBYTECODE": "1"},
                              command=[interpreter, "-m", "pytest", "-q", "--tb=short", "-p", "no:cacheprovider", rel])
    await progress(3, "done")
    status: Status = ("timeout" if outcome.timed_out else "passed" if outcome.returncode == 0
                      else "failed" if outcome.returncode == 1 else "error")
    output = outcome.stdout_tail + (("\n--- stderr ---\n" + outcome.stderr_tail) if outcome.stderr_tail.strip() else "")
    return RegressionTestReport(
        path=rel, failure_mode=failure_mode, template=template.name, status=status, passed=status == "passed",
        returncode=outcome.returncode, duration_s=round(outcome.duration_s, 2), python=outcome.python, target=target,
        function=function, params=eff, output_tail=output[-4000:], next_step=NEXT_STEP[status])


def _portable(spec: str | None, file: Path | None, workspace_root: Path) -> str | None:
    """A file spec as a workspace-relative posix path, so the test keeps working when the repo moves."""
    if not spec or file is None:
        return spec
    if not file.is_relative_to(workspace_root):
        raise TriageError(f"{spec!r} lies outside the workspace {workspace_root}",
                          "A regression test imports code from the workspace it lives in; copy the code there")
    return f"{file.relative_to(workspace_root).as_posix()}:{spec.rsplit(':', 1)[1]}"
