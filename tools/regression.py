"""Regression tests that run the code where the bug lived, written BEFORE the fix and proven to fail on it.

A test file is composed of template bodies (journal_templates/tests/*.py.tmpl, after the shared header):
one for the user's FUNCTION (their LR schedule, their model class, their train step, a numeric helper),
one for their training SCRIPT run for a bounded number of optimizer steps under an instrument that the test
carries itself (COMMAND), and one for their TARGET factory (model, data, loss, optimizer). Each asserts the
measured symptom of the failure mode. The rendered file is standalone pytest: it needs torch and pytest,
not mltriage, so it stays in the user's suite.

The tool runs the new test at once on the current code: `fails_now` must be true before the fix (a test that
passes on the bug is reported as not catching it, with what to try instead); `run_regression_test` re-runs
it after the fix, where it must pass. Nothing is overwritten: the name is claimed with O_EXCL, and the code
under test is imported once first, so a target that does not import leaves no file behind.
"""

import ast
import math
import os
import re
import shutil
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from tools.errors import TriageError
from tools.failure_modes import FAILURE_MODES
from tools.probe_runner import PROBE_DIR, ProgressFn, choose_python, run_probe
from tools.probes import ROWS_MOVED, ROWS_UNCODED
from tools.workspace import Workspace
from tools.report import Report

TEMPLATE_DIR = Path(__file__).resolve().parent.parent / "journal_templates" / "tests"

Uses = Literal["target", "function", "target+function", "command"]


@dataclass(frozen=True)
class RegressionTemplate:
    name: str
    uses: Uses
    what: str
    defaults: dict[str, Any] = field(default_factory=dict)
    parts: tuple[str, ...] = ("_target",)


_T = RegressionTemplate
TEMPLATES: dict[str, RegressionTemplate] = {t.name: t for t in [
    # ---- the target factory (model, batch/data, loss_fn, optimizer)
    _T("nan_inf", "target",
       "The loss and gradients stay finite on every batch, on edge inputs (zeros, constant rows), with saturated "
       "outputs and over a short training run.",
       {"steps": 100, "max_batches": 32, "output_scales": [1000.0], "input_edges": ["zeros", "constant_rows"]},
       ("_target", "_finite")),
    _T("broken_graph", "target",
       "Every parameter requires grad and gets a non-zero gradient from one backward pass.", {"ignore": []}),
    _T("frozen_params", "target",
       "Every parameter changes after an optimizer step with the user's optimizer, and every layer the model holds "
       "is registered (none kept in a plain list or dict).", {"steps": 1, "ignore": []}),
    _T("exploding_gradients", "target",
       "The global gradient norm (before clipping) stays under a bound for N training steps; attention scores reach "
       "the softmax divided by sqrt(head_dim) (a saturated softmax spikes the norm).",
       {"steps": 50, "max_grad_norm": 10.0}),
    _T("vanishing_gradients", "target",
       "The gradient reaching each layer (dLoss/d output, RMS) stays within two orders of magnitude across depth.",
       {"min_ratio": 0.01}),
    _T("bad_init", "target",
       "The initial loss is within a tolerance of the chance value (ln(num_classes) for cross-entropy), and every "
       "load_state_dict the factory makes fills most of its module (strict=False hides a renamed checkpoint).",
       {"batches": 4, "rel_tolerance": 0.25, "expected": None, "num_classes": None}),
    _T("data_leakage", "target",
       "No input column determines the label, the initial loss is not far below chance, for a language "
       "model future tokens do not change past logits and the targets are not the inputs, and for a next-step "
       "forecaster future inputs do not change past outputs, and a model handed its targets (teacher forcing) "
       "reads no target at or after the step it predicts; only (a list of test names) runs just those.",
       {"batches": 32, "rel_tolerance": 0.5, "expected": None, "num_classes": None, "label_key": None,
        "causal_atol": 1e-4, "max_same_fraction": 0.5, "only": None}, ("_target", "_sequence")),
    _T("shape_mismatch", "target",
       "Model output and target shapes match and the loss does not broadcast them, not even in hand-written "
       "arithmetic ((N, 1) against (N,)); with rows_apart, no row's output moves when another row changes.",
       {"num_classes": None, "label_key": None, "rows_apart": False}),
    _T("loss_function", "target",
       "Cross-entropy receives logits, not probabilities (no double softmax); per-class weights computed from the "
       "class frequencies follow each class's own frequency; the loss stays >= its floor (sign), "
       "falls on one batch, and pad positions get no gradient; with recon_summed (a VAE whose KL is summed per "
       "sample), no reconstruction loss averages over each sample's elements; with target_not_input (a denoiser), "
       "the reconstruction is not scored against the tensor the model reads; every class among a classifier's labels "
       "sends a gradient (no ignore_index that is a class); a binary loss pulls each row toward its label at every "
       "p in 0.12-0.88 (a focal weight on p, not p_t, does not); only (a list of test names) runs just those.",
       {"steps": 50, "max_final_ratio": 0.7, "min_loss": 0.0, "pad_id": None, "recon_summed": False,
        "target_not_input": False, "only": None},
       ("_target", "_sequence")),
    _T("train_eval_mode", "target",
       "Every module is in train mode during the training step (FUNCTION if given, else loss + backward); with "
       "phase='eval', dropout and batch norm are in eval mode during FUNCTION, the user's evaluation; with "
       "eval_deterministic, the model in eval mode gives the same loss twice on one batch (no functional dropout "
       "left on); with norm_stats_follow, batch-norm running statistics catch up within norm_steps passes.",
       {"phase": "train", "eval_deterministic": False, "norm_stats_follow": False, "norm_steps": 50}),
    _T("data_pipeline", "target",
       "Labels are aligned with inputs: training on the real labels gives a lower held-out loss than on shuffled ones; "
       "a language model's token targets are its inputs one position on; class ids start at 0; per-row lengths "
       "match each row's padding; an embedding's padding id only pads; images are not channels-last read as channels-first; with check_scale, every "
       "input feature is standardised (|mean| <= max_abs_mean, std <= max_std); with splits_alike, every "
       "DataLoader the factory builds feeds inputs on the training batches' scale; with batches_mixed, the "
       "batches mix the labels as a shuffle would; with loader_shuffled, an unshuffled training loader's batches mix "
       "its rows as a shuffle would (or it shuffles); reading samples never changes the stored data; a weighted "
       "sampler has a weight per sample; to_numeric(errors='coerce') loses no formatted numbers; no sample comes out "
       "z-scored by its own statistics; only (a list "
       "of test names) runs just those.",
       {"batches": 32, "steps": 150, "margin": 0.1, "label_key": None, "check_scale": False, "max_abs_mean": 10.0,
        "max_std": 20.0, "splits_alike": False, "batches_mixed": False, "loader_shuffled": False, "only": None}),
    _T("padding", "target",
       "The model does not read its padding: the shortest rows of a padded batch, fed as they come and with their "
       "padding cut to their longest content, give the same outputs (change under max_padding_change of the "
       "spread between rows). No training: it runs in seconds.",
       {"batches": 32, "max_padding_change": 0.05}),
    _T("rows", "target",
       "Rows keep their own labels through the CSV pipeline: the factory run on its tables with each row's values "
       "coded by the row's id (pandas.read_csv, csv.DictReader) gives batches whose coded features still predict "
       "every row's label. Catches features and labels paired by position after one side's rows were dropped, "
       "joined, sorted or reindexed, however partly. No training: seconds.",
       {"batches": 16, "min_kept": ROWS_MOVED, "uncoded_floor": ROWS_UNCODED}, ("_target", "_rows")),
    _T("validation_data", "target+function",
       "What a model learns from the target's training batches holds on FUNCTION's validation batches (FUNCTION() "
       "returns them: a list or DataLoader of batches, or one (inputs, labels) pair): its best validation loss "
       "beats by the margin that of the same model trained and scored with its inputs zeroed (the label "
       "distribution alone). Catches training and validation built through two code paths (a label map, scaler "
       "or encoder fitted per split).",
       {"batches": 32, "steps": 150, "margin": 0.2, "label_key": None}),
    _T("update_ratio", "target",
       "The update/weight ratio of the weight matrices with the user's optimizer, after a warm-up of a few steps, "
       "stays in [1e-5, 0.3] (healthy is about 1e-3) and finite throughout.",
       {"warmup": 10, "steps": 5, "min_ratio": 1e-5, "max_ratio": 0.3, "ignore": []}),
    _T("dead_units", "target",
       "Most ReLU units fire on at least one example of a few batches.",
       {"steps": 0, "batches": 4, "max_dead_fraction": 0.25}),
    _T("hang", "target",
       "Iterating the data to its end and one training step each finish within a timeout (the stack is shown if not).",
       {"timeout_s": 10.0, "max_batches": 10000}),
    _T("overfit_one_batch", "target",
       "The model overfits one batch: the loss falls to half its start or below within N steps.",
       {"steps": 100, "max_final_ratio": 0.5}),
    _T("training_step_runs", "target",
       "Training steps on the factory's model, data, loss and optimizer run without an exception (every batch "
       "of the data, so a short last batch is seen too).",
       {"steps": 8, "all_batches": True}),
    # ---- the user's own function
    _T("nan_inf_function", "function",
       "FUNCTION stays finite (output and gradient) on edge tensors: zeros, one-hot, huge, constant rows.",
       {"edge_inputs": ["zeros", "one_hot", "huge", "constant_rows"], "shape": [4, 8], "inputs": [], "check_grad": True},
       ("_target", "_finite")),
    _T("lr_schedule", "function",
       "FUNCTION, the LR schedule (step -> lr, a LambdaLR factor, or optimizer -> scheduler), evaluated over the "
       "whole horizon, stays finite, never exceeds its peak and reaches it.",
       {"horizon": None, "peak": None, "tolerance": 0.01, "min_peak_fraction": 0.5, "multiplier": None, "kwargs": {}},
       ()),
    _T("causality", "function",
       "The model FUNCTION builds is causal: changing the tokens after position t leaves the logits at positions <= t unchanged.",
       {"seq_len": None, "vocab_size": None, "kwargs": {}, "causal_atol": 1e-4}, ("_target", "_sequence")),
    _T("missing_zero_grad", "target+function",
       "Gradients do not accumulate and are not wiped before the step: with lr 0 and the same batch, FUNCTION (a "
       "train step or loop) sees the same non-zero gradient norm at every optimizer.step().",
       {"steps": 3, "max_growth": 1.5}),
    # ---- the user's training script
    _T("script", "command",
       "The training script COMMAND, run from the workspace root and stopped after SCRIPT['steps'] optimizer steps, "
       "runs without an error and shows none of the failure's symptoms (SCRIPT['checks']).",
       {"steps": 50, "timeout_s": 240.0, "checks": [], "max_lr": None, "lr_tolerance": 0.01, "max_grad_norm": 100.0,
        "min_drop": 0.05, "lr_floor": 0.1, "max_warmup_fraction": 0.5, "ignore": [], "causal_atol": 1e-4, "max_same_fraction": 0.5}, ()),
]}

# failure mode -> the template for each kind of code under test
TARGET_FOR = {"nan_inf": "nan_inf", "broken_graph": "broken_graph", "frozen_params": "frozen_params",
              "exploding_gradients": "exploding_gradients", "vanishing_gradients": "vanishing_gradients",
              "bad_init": "bad_init", "data_leakage": "data_leakage", "shape_mismatch": "shape_mismatch",
              "loss_function": "loss_function", "train_eval_mode": "train_eval_mode", "data_pipeline": "data_pipeline",
              "lr_too_low": "update_ratio", "lr_too_high": "update_ratio", "dead_units": "dead_units", "hang": "hang",
              "exception": "training_step_runs", "oom": "training_step_runs"}
FUNCTION_FOR = {"nan_inf": "nan_inf_function", "lr_too_high": "lr_schedule", "lr_too_low": "lr_schedule",
                "data_leakage": "causality", "missing_zero_grad": "missing_zero_grad",
                "train_eval_mode": "train_eval_mode", "data_pipeline": "validation_data"}
# what a script run asserts for each failure mode (it always asserts that the script runs its steps cleanly)
SCRIPT_CHECKS = {
    "nan_inf": ["finite_loss"], "exploding_gradients": ["finite_loss", "grad_norm_bounded"],
    "lr_too_high": ["lr_at_most_peak", "finite_loss", "loss_falls"], "lr_too_low": ["lr_holds", "loss_falls"],
    "missing_zero_grad": ["grads_cleared", "grads_reach_step"], "broken_graph": ["every_param_gets_grad"],
    "frozen_params": ["every_param_changes"], "train_eval_mode": ["train_mode"],
    "data_leakage": ["causal", "targets_shifted"], "data_pipeline": ["batches_differ", "finite_loss", "loss_falls"],
    "exception": [], "shape_mismatch": [], "oom": [], "hang": [],
}
DEFAULT_SCRIPT_CHECKS = ["finite_loss", "loss_falls"]
ALL_CHECKS = ["finite_loss", "lr_at_most_peak", "lr_holds", "warmup_ends", "plateau_follows_metric", "eval_norm_stats_trained", "grad_norm_bounded", "applied_grad_norm_bounded",
              "loss_falls", "batches_differ",
              "grads_cleared", "grads_reach_step", "every_param_gets_grad", "every_param_changes", "train_mode", "causal",
              "targets_shifted"]
# a diverging run must at least not end above where it started (a slow one must make progress); a hang shows
# within a few steps, and a shorter limit keeps a hung test from holding the suite for minutes
SCRIPT_OVERRIDES = {"lr_too_high": {"min_drop": 0.0}, "hang": {"steps": 30, "timeout_s": 90.0}}

DEFAULT_NAMES = {
    "nan_inf": "loss_stays_finite", "lr_too_high": "lr_stays_at_or_below_peak", "lr_too_low": "training_makes_progress",
    "missing_zero_grad": "gradients_cleared_every_step", "broken_graph": "every_parameter_gets_a_gradient",
    "frozen_params": "every_parameter_changes", "data_leakage": "no_leakage_into_inputs",
    "loss_function": "loss_is_the_right_one", "exploding_gradients": "grad_norm_stays_bounded",
    "vanishing_gradients": "gradients_reach_every_layer", "bad_init": "initial_loss_near_chance",
    "data_pipeline": "labels_aligned_with_inputs", "shape_mismatch": "loss_shapes_match",
    "train_eval_mode": "trains_in_train_mode", "dead_units": "relu_units_stay_alive", "hang": "training_does_not_hang",
    "exception": "training_runs_without_error", "oom": "training_fits_in_memory",
}

# a params switch that narrows the test to one check names the file after that check: (failure mode or None for
# any, param, value, default name)
NAMED_BY_PARAM = (
    ("train_eval_mode", "phase", "eval", "evaluates_in_eval_mode"),  # the user's evaluation, not the training step
    ("shape_mismatch", "rows_apart", True, "rows_stay_apart"),
    ("train_eval_mode", "norm_stats_follow", True, "batch_norm_statistics_follow"),
    ("data_pipeline", "splits_alike", True, "splits_fed_alike"),
    ("data_pipeline", "batches_mixed", True, "batches_mix_the_classes"),
    ("data_pipeline", "loader_shuffled", True, "training_loader_mixes_its_rows"),
    (None, "script.checks", ["eval_norm_stats_trained"], "evaluates_with_trained_norm_statistics"),
    (None, "script.checks", ["plateau_follows_metric"], "plateau_scheduler_follows_its_metric"),
)
ONLY_NAMES = {"test_the_padding_id_only_pads": "padding_id_only_pads",
              "test_reading_the_data_leaves_it_unchanged": "reading_leaves_data_unchanged"}

IMPORT_TIMEOUT_S = 120.0  # importing torch and the user module; independent of the test's own time limit

Status = Literal["passed", "failed", "error", "timeout"]
Kind = Literal["assertion", "exception", "setup"]


class CaseResult(BaseModel):
    test: str
    outcome: Literal["passed", "failed", "error", "skipped"]
    kind: Kind | None = Field(None, description="for a failure: its assertion (the symptom), an exception raised by "
                                                "the code under test, or setup (the test could not run)")
    message: str = Field("", description="the failure (measured, then expected) or the skip reason")


class RegressionTestReport(Report):
    path: str = Field(description="the test file, relative to the workspace")
    failure_mode: str
    template: str = Field(description="the template bodies in the file, '+'-joined")
    status: Status
    passed: bool
    fails_now: bool = Field(description="the test fails on the current code (before the fix it must)")
    catches_bug: bool = Field(description="it fails on its assertion or on an exception from the code under test, "
                                          "not on its own setup and not by timing out without a reason")
    verdict: str
    failure_message: str = Field("", description="the first failure, as pytest reported it")
    cases: list[CaseResult] = Field(default_factory=list)
    try_next: list[str] = Field(default_factory=list, description="sharper templates or parameters when it does not catch")
    returncode: int | None = None
    duration_s: float
    python: str = Field(description="the interpreter pytest ran in")
    target: str | None = None
    function: str | None = None
    command: list[str] | None = None
    params: dict[str, Any] = Field(description="the effective parameters baked into the file (PARAMS, SCRIPT)")
    output_tail: str = Field(description="the end of pytest's output")
    next_step: str

    def headline(self) -> str:
        lines = [f"{self.path}: {self.verdict}"]
        if self.failure_message:
            lines.append("failure: " + self.failure_message[:1500])
        lines += [f"try: {t}" for t in self.try_next]
        lines.append(f"next: {self.next_step}")
        lines.append(f"(template {self.template} for {self.failure_mode}, {self.duration_s:.1f} s in {self.python})")
        if self.status in ("error", "timeout") or not self.cases:
            lines.append("--- pytest output (tail) ---\n" + "\n".join(self.output_tail.strip().splitlines()[-25:]))
        return "\n".join(lines)


class RegressionRunReport(Report):
    path: str
    failure_mode: str | None = None
    template: str | None = None
    status: Status
    passes_now: bool = Field(description="every test ran and passed (not all skipped)")
    verdict: str
    failure_message: str = ""
    cases: list[CaseResult] = Field(default_factory=list)
    returncode: int | None = None
    duration_s: float
    python: str
    output_tail: str
    next_step: str

    def headline(self) -> str:
        lines = [f"{self.path}: {self.verdict}"]
        if self.failure_message:
            lines.append("failure: " + self.failure_message[:1500])
        lines.append(f"next: {self.next_step}")
        if self.status in ("error", "timeout") or not self.cases:
            lines.append("--- pytest output (tail) ---\n" + "\n".join(self.output_tail.strip().splitlines()[-25:]))
        return "\n".join(lines)


# ---------------------------------------------------------------- choosing the bodies

@dataclass
class Plan:
    bodies: list[RegressionTemplate]
    params: dict[str, Any]               # PARAMS: every non-script body's parameters
    script: dict[str, Any] | None        # SCRIPT: the script body's parameters

    @property
    def name(self) -> str:
        return "+".join(b.name for b in self.bodies)


def plan_bodies(failure_mode: str, target: str | None, function: str | None, command: list[str] | None,
                template: str | None = None) -> list[RegressionTemplate]:
    """Which template bodies exercise the code the caller pointed at, for this failure mode."""
    if failure_mode not in FAILURE_MODES:
        raise TriageError(f"unknown failure_mode {failure_mode!r}", "Use one of: " + ", ".join(FAILURE_MODES))
    if template is not None:
        if template not in TEMPLATES:
            raise TriageError(f"unknown template {template!r}", "Use one of: " + ", ".join(TEMPLATES))
        chosen = TEMPLATES[template]
        need = {"target": ("target", target), "function": ("function", function), "command": ("command", command)}
        for what in chosen.uses.split("+"):
            if not need[what][1]:
                raise TriageError(f"the {template} template needs {what}=", _NEEDS[what])
        return [chosen]
    bodies: list[RegressionTemplate] = []
    if function:
        name = FUNCTION_FOR.get(failure_mode)
        if name is None:
            modes = ", ".join(sorted(FUNCTION_FOR))
            raise TriageError(f"function= has no template for {failure_mode}",
                              f"A function is tested for: {modes}. For {failure_mode}, pass target= (the factory) "
                              "or command= (the training script)")
        body = TEMPLATES[name]
        if body.uses in ("target+function", "target") and not target:
            if failure_mode == "missing_zero_grad":
                raise TriageError(
                    "the missing_zero_grad function test needs target= too (it calls FUNCTION with the target's model, "
                    "optimizer and batch)", "Pass target='train.py:make_target' with function='train.py:train_step', "
                    "or command=['python', 'train.py'] to test the loop as it runs")
            raise TriageError(f"the {name} template calls FUNCTION with the target's model: it needs target= too",
                              _NEEDS["target"])
        bodies.append(body)
    if command:
        bodies.append(TEMPLATES["script"])
    # a data pipeline keeps the training batches' own checks beside the validation data's
    if target and failure_mode != "missing_zero_grad" and (
            failure_mode == "data_pipeline" or not any(b.uses in ("target+function", "target") for b in bodies)):
        bodies.append(TEMPLATES[TARGET_FOR.get(failure_mode, "overfit_one_batch")])
    if not bodies:
        if failure_mode == "missing_zero_grad":
            raise TriageError(
                "a missing zero_grad lives in the training loop, not in the target factory: missing_zero_grad needs "
                "command= (the training script) or function= (the train step) with target=",
                "Pass command=['python', 'train.py'], or expose the step, e.g. def train_step(model, optimizer, batch), "
                "and pass function='train.py:train_step' with target=")
        raise TriageError(f"nothing to test for {failure_mode}: pass target=, function= or command=",
                          "target='train.py:make_target' (the factory), function='train.py:get_lr' (your own code), "
                          "command=['python', 'train.py'] (the training script, run for a few steps)")
    return bodies


_NEEDS = {"target": "Pass the target factory, e.g. target='train.py:make_target'",
          "function": "Pass the function under test, e.g. function='train.py:get_lr'",
          "command": "Pass the training command, e.g. command=['python', 'train.py']"}


def plan_params(bodies: list[RegressionTemplate], failure_mode: str, params: dict | None) -> tuple[dict, dict | None]:
    """PARAMS and SCRIPT: a plain key goes to every body that takes it, 'script.key' only to the script."""
    fixed = [b for b in bodies if b.uses != "command"]
    script = next((b for b in bodies if b.uses == "command"), None)
    eff: dict[str, Any] = {"seed": 0}
    for b in fixed:
        for k, v in b.defaults.items():
            eff.setdefault(k, v)
    sc: dict[str, Any] | None = None
    if script is not None:
        sc = {**script.defaults, "checks": list(SCRIPT_CHECKS.get(failure_mode, DEFAULT_SCRIPT_CHECKS)),
              **SCRIPT_OVERRIDES.get(failure_mode, {})}
    for key, value in (params or {}).items():
        scoped = key.startswith("script.")
        bare = key[len("script."):] if scoped else key
        homes = []
        if sc is not None and bare in sc:
            homes.append((sc, script.defaults.get(bare)))
        if not scoped and (bare in eff):
            homes.append((eff, next((b.defaults[bare] for b in fixed if bare in b.defaults), None)))
        if not homes:
            allowed = sorted({k for b in fixed for k in b.defaults} | {"seed"}) + (
                [f"script.{k}" for k in script.defaults] if script else [])
            raise TriageError(f"unknown params [{key!r}] for the {'+'.join(b.name for b in bodies)} template",
                              "It takes: " + ", ".join(
                                  f"{k} (default {_default_of(k, bodies)!r})" for k in allowed))
        _check_literal(value, f"[{key!r}]")
        for home, default in homes:
            _check_shape(key, value, default)
            home[bare] = value
    if "inputs" in eff:
        for expr in eff["inputs"]:  # python expressions evaluated by the test: they must at least parse
            try:
                ast.parse(str(expr), mode="eval")
            except SyntaxError as e:
                raise TriageError(f"params['inputs'] entry {expr!r} does not parse: {e.msg}",
                                  "Give each input as a Python expression over torch, e.g. 'torch.zeros(4, 10)'")
    if sc is not None:
        unknown = [c for c in sc["checks"] if c not in ALL_CHECKS]
        if unknown:
            raise TriageError(f"unknown script checks {unknown}", "Use some of: " + ", ".join(ALL_CHECKS))
        if not isinstance(sc["steps"], int) or sc["steps"] < 1:
            raise TriageError(f"params['steps'] must be a positive integer, not {sc['steps']!r}", "e.g. 50")
    return eff, sc


def _default_of(key: str, bodies: list[RegressionTemplate]):
    bare = key[len("script."):] if key.startswith("script.") else key
    return next((b.defaults[bare] for b in bodies if bare in b.defaults and
                 (b.uses == "command") == key.startswith("script.")), None)


def _check_shape(key: str, value: Any, default: Any) -> None:
    if default is None or value is None:
        return
    for kind, word in ((list, "a list"), (dict, "a dict")):
        if isinstance(default, kind) != isinstance(value, kind):
            raise TriageError(f"params[{key!r}] must be {word if isinstance(default, kind) else 'a single value'}",
                              f"The default is {default!r}")


# ---------------------------------------------------------------- validation

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




# ---------------------------------------------------------------- rendering

# parts that are a probe module itself (stdlib + torch): the generated test runs the probe's own code, so the
# two cannot drift apart
PROBE_PARTS = {"_rows": "mltriage_rows.py"}


def _read(name: str) -> str:
    if name in PROBE_PARTS:
        source = (PROBE_DIR / PROBE_PARTS[name]).read_text()
        body = ast.parse(source).body
        start = body[1].lineno if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) else 1
        return f"# mltriage's probe {PROBE_PARTS[name]}, as it is\n" + "\n".join(source.splitlines()[start - 1:])
    return (TEMPLATE_DIR / f"{name}.py.tmpl").read_text()


def keep_checks(body: str, checks: list[str]) -> str:
    """The script body with only the '# @check NAME' ... '# @end' blocks whose NAME is in `checks`."""
    out = re.sub(r"# @check (\w+)\n(.*?)# @end\n", lambda m: m.group(2) if m.group(1) in checks else "", body, flags=re.S)
    return re.sub(r"\n{3,}(?=\S)", "\n\n\n", out)


def literal(d: dict[str, Any]) -> str:
    """A dict literal: on one line if short, else one key per line."""
    flat = repr(d)
    if len(flat) <= 90:
        return flat
    return "{\n" + "".join(f"    {k!r}: {v!r},\n" for k, v in d.items()) + "}"


THIRD_PARTY = ("pytest", "torch")


def hoist_imports(source: str) -> str:
    """Every top-level import of the header and the bodies, once, in two sorted groups where the header has them."""
    lines = source.split("\n")
    imports = {line for line in lines if re.match(r"(import|from) \S+", line)}
    kept = [line for line in lines if line not in imports]
    at = kept.index("{{IMPORTS}}")

    def order(line):
        return line.startswith("from"), line.split()[1]

    third = [line for line in imports if line.split()[1].split(".")[0] in THIRD_PARTY]
    groups = [sorted(imports - set(third), key=order), sorted(third, key=order)]
    block = "\n\n".join("\n".join(g) for g in groups if g)
    return re.sub(r"\n{4,}", "\n\n\n", "\n".join(kept[:at] + [block] + kept[at + 1:]))


def render_test(plan: Plan, *, failure_mode: str, title: str, target: str | None, function: str | None,
                command: list[str] | None) -> str:
    """The test file's source; raises TriageError if it does not parse (a bad expression in params)."""
    config = [f"TARGET = {target!r}  # the factory: model, batch/data, loss_fn, optimizer",
              f"FUNCTION = {function!r}  # your own code under test",
              f"COMMAND = {command!r}  # your training script, run from the workspace root",
              "PARAMS = " + literal(plan.params)]
    if plan.script is not None:
        config.append("# the script run: optimizer steps, time limit, the checks and their bounds\nSCRIPT = "
                      + literal(plan.script))
    values = {"TITLE": title, "WHAT": "\n\n".join(b.what for b in plan.bodies), "FAILURE_MODE": failure_mode,
              "TEMPLATE": plan.name, "CONFIG": "\n".join(config)}
    chunks = [re.sub(r"\{\{(\w+)\}\}", lambda m: values.get(m.group(1), m.group(0)), _read("_header"))]
    for b in plan.bodies:  # the tests first, right under their settings; the helpers they call after them
        body = _read(b.name)
        chunks.append(keep_checks(body, plan.script["checks"]) if b.uses == "command" else body)
    parts = list(dict.fromkeys(["_load"] * any(b.uses != "command" for b in plan.bodies)
                               + [p for b in plan.bodies for p in b.parts]))
    if parts:
        chunks.append("# ---------------------------------------------------------------- helpers of the tests above")
    chunks += [_read(p) for p in parts]
    source = hoist_imports("\n\n".join(c.strip("\n") for c in chunks) + "\n")
    if plan.script is not None:  # a string, not code of this file: its imports stay where they are
        source += ("\n\n# ---------------------------------------------------------------- the instrument, written as "
                   "sitecustomize.py for the script run\n\nINSTRUMENT = r'''\n" + _read("_instrument") + "'''\n")
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
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except FileExistsError:
            continue
        os.close(fd)
        return path
    raise TriageError(f"999 files named tests/test_{slug}*.py already exist", "Pick another name")


def validate(failure_mode: str, name: str | None, target: str | None, function: str | None,
             target_file: Path | None, function_file: Path | None, params: dict | None,
             command: list[str] | None = None, template: str | None = None) -> tuple[Plan, str]:
    """Everything that can be checked without running code; raises before anything is written."""
    if command is not None and (not command or not all(isinstance(c, str) and c for c in command)):
        raise TriageError("command is empty", "Pass the training command as a list, e.g. ['python', 'train.py']")
    bodies = plan_bodies(failure_mode, target, function, command, template)
    default = DEFAULT_NAMES.get(failure_mode, f"{failure_mode}_regression")
    if template == "overfit_one_batch" and failure_mode != "healthy":
        default = "learns_one_batch_at_its_lr" if failure_mode in ("lr_too_low", "lr_too_high") else "overfits_one_batch"
    if template == "rows":
        default = "rows_keep_their_labels"  # the coded-tables check, whatever mode it was written for
    chosen = params or {}
    for mode, key, value, named in NAMED_BY_PARAM:
        if mode in (None, failure_mode) and chosen.get(key) == value:
            default = named
    only = chosen.get("only")
    if isinstance(only, list) and len(only) == 1 and isinstance(only[0], str):
        # a test narrowed to one check is named after it (the padding test's file kept its older, shorter name)
        default = ONLY_NAMES.get(only[0], only[0].removeprefix("test_"))
    slug = slug_for_test(name if name is not None else default)
    for spec, file, what in ((target, target_file, "target"), (function, function_file, "function")):
        if spec:
            _, attr = split_spec(spec, what)
            if file is not None:
                check_defines(file, attr, what)
    eff, script = plan_params(bodies, failure_mode, params)
    return Plan(bodies, eff, script), slug


def check_command(command: list[str], workspace_root: Path) -> None:
    """The script the command runs exists in the workspace (the test runs it from the workspace root)."""
    scripts = [c for c in command[1:] if c.endswith(".py")]
    for s in scripts[:1]:
        p = Path(s)
        if not (p if p.is_absolute() else workspace_root / p).is_file():
            raise TriageError(f"command runs {s!r}, which is not a file under the workspace {workspace_root}",
                              "Paths in command= are relative to the workspace root, where the test runs the script")


#### IC
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



# ---------------------------------------------------------------- running and judging

def _first_lines(text: str, limit: int = 1500) -> str:
    """A failure message without pytest's re-statement of the assert expression."""
    text = (text or "").strip()
    cut = re.split(r"\n(?:assert |where |\+  where )", text, maxsplit=1)[0]
    return cut[:limit]


def classify(message: str) -> Kind:
    head = (message or "").lstrip()
    if head.startswith("AssertionError"):
        return "assertion"
    if head.startswith(("Failed:", "failed on setup", "fixture ")) or "ModuleNotFoundError" in head[:80]:
        return "setup"
    return "exception"


def parse_junit(path: Path) -> list[CaseResult]:
    try:
        root = ET.parse(path)
    except (OSError, ET.ParseError):
        return []
    cases = []
    for case in root.iter("testcase"):
        name = case.get("name", "?")
        failure, error, skipped = case.find("failure"), case.find("error"), case.find("skipped")
        if failure is not None:
            msg = failure.get("message") or failure.text or ""
            cases.append(CaseResult(test=name, outcome="failed", kind=classify(msg), message=_first_lines(msg)))
        elif error is not None:
            msg = error.get("message") or error.text or ""
            cases.append(CaseResult(test=name, outcome="error", kind="setup", message=_first_lines(msg)))
        elif skipped is not None:
            cases.append(CaseResult(test=name, outcome="skipped", message=_first_lines(skipped.get("message") or "")))
        else:
            cases.append(CaseResult(test=name, outcome="passed"))
    return cases


@dataclass
class PytestRun:
    status: Status
    cases: list[CaseResult]
    returncode: int | None
    duration_s: float
    python: str
    output: str


async def run_pytest(rel: str, workspace_root: Path, python: str | None, timeout_s: float) -> PytestRun:
    interpreter = choose_python(python, workspace_root)
    junit_dir = Path(tempfile.mkdtemp(prefix="mltriage-junit-"))
    try:
        junit = junit_dir / "junit.xml"
        outcome = await run_probe("pytest", {}, workspace_root=workspace_root, python=python, timeout_s=timeout_s,
                                  env={"PYTHONDONTWRITEBYTECODE": "1"},
                                  command=[interpreter, "-m", "pytest", "-q", "--tb=short", "-rs", "-p", "no:cacheprovider",
                                           f"--junitxml={junit}", rel])
        cases = parse_junit(junit)
    finally:
        shutil.rmtree(junit_dir, ignore_errors=True)
    status: Status = ("timeout" if outcome.timed_out else "passed" if outcome.returncode == 0
                      else "failed" if outcome.returncode == 1 else "error")
    output = outcome.stdout_tail + (("\n--- stderr ---\n" + outcome.stderr_tail) if outcome.stderr_tail.strip() else "")
    return PytestRun(status, cases, outcome.returncode, round(outcome.duration_s, 2), outcome.python, output[-4000:])


EXPECTED_EXCEPTION = {"exception", "shape_mismatch", "oom"}
LOAD_ERROR = re.compile(r"(NameError: name '\w+' is not defined|ModuleNotFoundError|ImportError)")


# the test a param opts into: when it fails, it is the one the finding asked for, so it leads the verdict
PARAM_TESTS = {"batches_mixed": "test_batches_mix_the_classes",
               "loader_shuffled": "test_the_training_loader_mixes_its_rows",
               "splits_alike": "test_every_loader_is_fed_like_the_training_batches",
               "check_scale": "test_input_features_are_standardised"}


def judge_before_fix(run: PytestRun, failure_mode: str, timeout_s: float,
                     lead: tuple[str, ...] = ()) -> tuple[bool, bool, str, str]:
    """(fails_now, catches_bug, verdict, first failure message) for a test written on the buggy code; a failing
    test named in `lead` (the check the params asked for) is reported before the others."""
    failed = sorted((c for c in run.cases if c.outcome in ("failed", "error")), key=lambda c: c.test not in lead)
    ran = [c for c in run.cases if c.outcome != "skipped"]
    first = failed[0].message if failed else ""
    if run.status == "timeout":
        catches = failure_mode == "hang"
        return True, catches, (f"fails now: pytest did not finish within {timeout_s:g} s and was killed"
                               + ("" if catches else "; a timeout is not a symptom of this bug: lower the steps "
                                  "(params) or raise timeout_s")), first
    if run.status == "passed":
        if not ran:
            reasons = "; ".join(sorted({c.message for c in run.cases if c.message}))[:600]
            return False, False, f"DOES NOT CATCH THE BUG: every test skipped on the current code ({reasons})", ""
        skipped = [c for c in run.cases if c.outcome == "skipped"]
        why = (f"; {len(skipped)} skipped: " + "; ".join(sorted({c.message for c in skipped}))[:600]) if skipped else ""
        return False, False, (f"DOES NOT CATCH THE BUG: all {len(ran)} test(s) that ran pass on the current code, "
                              f"which has the bug{why}"), ""
    # a name or module the test could not find is the test failing to load the user's code, not the bug
    unloadable = [c for c in failed if c.kind == "exception" and failure_mode not in EXPECTED_EXCEPTION
                  and LOAD_ERROR.match(c.message or "")]
    catching = [c for c in failed if c.kind in ("assertion", "exception") and c not in unloadable]
    if catching:
        c = catching[0]
        note = ""
        if c.kind == "exception" and failure_mode not in EXPECTED_EXCEPTION:
            note = (" (on an exception raised by the code under test, not on the test's assertion: make sure it "
                    "is the bug)")
        count = f" ({len(failed)} of {len(run.cases)} tests fail)" if len(run.cases) > 1 else ""
        return True, True, f"catches the bug: {c.test} fails on the current code{count}{note}", c.message
    if unloadable:
        c = unloadable[0]
        return True, False, (f"fails for a reason of its own, not the bug: {c.test} could not load the code under test "
                             f"({c.message[:160]}); point target/function at code that imports on its own"), c.message
    if failed:
        return True, False, (f"fails for a reason of its own, not the bug: {failed[0].test} could not run its check "
                             "(setup)"), first
    return True, False, f"pytest could not run the file (exit code {run.returncode}); see the output tail", first


FUNCTION_HINT = {
    "lr_too_high": "your LR schedule, e.g. function='train.py:get_lr' (evaluated over the whole horizon)",
    "lr_too_low": "your LR schedule, e.g. function='train.py:get_lr' (evaluated over the whole horizon)",
    "data_leakage": "your model class, e.g. function='model.py:GPT' (the causality probe)",
    "nan_inf": "the function that produced the first NaN, e.g. function='model.py:entropy' (edge inputs)",
    "missing_zero_grad": "your train step, e.g. function='train.py:train_step' (with target=)",
    "train_eval_mode": "your train step, e.g. function='train.py:train_step' (with target=), or your evaluation "
                       "with params={'phase': 'eval'}, e.g. function='train.py:evaluate'",
    "data_pipeline": "the validation data, when it is built apart from the training data (a label map, scaler or "
                     "file of its own): function='train.py:val_batches', a no-argument function returning its batches "
                     "or one (inputs, labels) pair (with target=)",
}
KNOBS = {
    "nan_inf": "more steps or edge inputs: params={'steps': 500, 'input_edges': ['zeros', 'constant_rows']}",
    "exploding_gradients": "a tighter bound: params={'max_grad_norm': 5.0}",
    "update_ratio": "a narrower band around 1e-3: params={'min_ratio': 1e-4, 'max_ratio': 0.05}",
    "bad_init": "a tighter tolerance or the right chance value: params={'rel_tolerance': 0.1, 'num_classes': C}",
    "data_leakage": "the chance value, so the initial-loss check runs: params={'num_classes': C}",
    "loss_function": "the pad id, so the padding check runs: params={'pad_id': N}",
    "overfit_one_batch": "a stricter bar: params={'max_final_ratio': 0.05}",
    "dead_units": "a lower dead fraction: params={'max_dead_fraction': 0.1}",
    "vanishing_gradients": "a higher minimum ratio: params={'min_ratio': 0.05}",
    "data_pipeline": "a larger margin: params={'margin': 0.3}; for badly scaled inputs: params={'check_scale': True}; "
                     "for a model that reads its padding: template='padding'",
    "lr_schedule": "the true horizon and peak: params={'horizon': <max_iters of the real run>, 'peak': <the LR you intended>}",
    "causality": "the real sequence length: params={'seq_len': <block_size>}",
}


def suggestions(plan: Plan, failure_mode: str, target: str | None, function: str | None,
                command: list[str] | None) -> list[str]:
    """What to try when the test passes on the bug: sharper parameters, or the code where the bug lives."""
    out = []
    names = [b.name for b in plan.bodies]
    if plan.script is not None:
        s = plan.script
        out.append(f"run the script further: params={{'script.steps': {max(200, 4 * s['steps'])}}} (now {s['steps']}), "
                   "past the step where the log shows the symptom (the first NaN, the end of warmup)")
        if failure_mode == "lr_too_high":
            out.append("state the peak LR you intended: params={'script.max_lr': <peak>}")
        others = [c for c in ALL_CHECKS if c not in s["checks"]]
        out.append(f"assert more of the run: params={{'script.checks': {s['checks'] + others[:2]}}} (any of {others})")
    for name in names:
        if name in KNOBS:
            out.append(f"{name}: {KNOBS[name]}")
    if command is None:
        out.append("the bug may live in the training loop, not in the code you passed: add "
                   "command=['python', 'train.py', ...] to run your script itself for a bounded number of steps")
    if function is None and failure_mode in FUNCTION_HINT:
        out.append("point the test at the code that holds the bug: " + FUNCTION_HINT[failure_mode])
    if target is None and failure_mode not in ("missing_zero_grad", "exception", "hang", "oom"):
        out.append("test the model, data and loss directly: add target='train.py:make_target'")
    if failure_mode != "healthy" and "overfit_one_batch" not in names and target:
        out.append("or the generic check: template='overfit_one_batch'")
    return out


NEXT_AFTER = {
    "catches": "Now fix the bug, then call run_regression_test(path='{path}'): it must pass. Then compare_runs, "
               "then journal_append(..., test_path='{path}').",
    "misses": "Do not fix yet and do not cite this test: it would pass with or without the fix. Delete {path} and "
              "write a sharper one (see try_next) until a test fails on the current code.",
    "setup": "Make the test run (read failure_message: a missing setting goes in params) before relying on it; "
             "delete {path} and write it again.",
}


async def write_regression_test(*, workspace_root: Path, failure_mode: str, name: str | None = None,
                                target: str | None = None, function: str | None = None,
                                command: list[str] | None = None, template: str | None = None,
                                target_file: Path | None = None, function_file: Path | None = None,
                                params: dict | None = None, python: str | None = None, timeout_s: float | None = None,
                                on_progress: ProgressFn | None = None) -> RegressionTestReport:
    """Render, check, write (never overwrite) and run one regression test on the current code; `*_file` are the
    resolved .py files of target/function."""
    plan, slug = validate(failure_mode, name, target, function, target_file, function_file, params, command, template)
    # a tests/ that links out of the workspace is refused before anything runs; it is created (one component
    # at a time, each checked) only once the code imports
    ws = Workspace(workspace_root)
    ws.write_path(f"tests/test_{slug}.py")
    tests_dir = workspace_root / "tests"
    if tests_dir.exists() and not tests_dir.is_dir():
        raise TriageError(f"{tests_dir} exists and is not a directory", "Move that file away; tests go to tests/")
    if command:
        check_command(command, workspace_root)
    used = {what for b in plan.bodies for what in b.uses.split("+")}
    if function and any(b.name == FUNCTION_FOR.get(failure_mode) for b in plan.bodies):
        used.add("function")  # a target template that runs FUNCTION when given (train_eval_mode)
    # what no body exercises stays out of the file (a factory beside a loop-only test is not imported)
    target = _portable(target, target_file, workspace_root) if "target" in used else None
    function = _portable(function, function_file, workspace_root) if "function" in used else None
    command = command if "command" in used else None
    source = render_test(plan, failure_mode=failure_mode, title=slug.replace("_", " "), target=target,
                         function=function, command=command)
    if timeout_s is None:
        timeout_s = 300.0 + (plan.script["timeout_s"] if plan.script else 0.0)

    async def progress(i: float, message: str):
        if on_progress is not None:
            await on_progress(i, 3, message)

    if target or function:
        await progress(0, "importing the code under test")
        await _import_check(source, tests_dir / f"test_{slug}.py", workspace_root, python, IMPORT_TIMEOUT_S)
    path = claim_test_file(ws.directory("tests", create=True), slug)
    try:
        path.write_text(source)
    except OSError as e:
        path.unlink(missing_ok=True)
        raise TriageError(f"could not write {path}: {e.strerror}", "Check free disk space and permissions")
    rel = path.relative_to(workspace_root).as_posix()
    await progress(1, f"running pytest {rel} on the current code")
    run = await run_pytest(rel, workspace_root, python, timeout_s)
    await progress(3, "done")
    lead = tuple(test for param, test in PARAM_TESTS.items() if (params or {}).get(param))
    fails_now, catches, verdict, message = judge_before_fix(run, failure_mode, timeout_s, lead)
    state = "catches" if catches else "misses" if not fails_now else "setup"
    return RegressionTestReport(
        path=rel, failure_mode=failure_mode, template=plan.name, status=run.status, passed=run.status == "passed",
        fails_now=fails_now, catches_bug=catches, verdict=verdict, failure_message=message, cases=run.cases,
        try_next=[] if catches else suggestions(plan, failure_mode, target, function, command),
        returncode=run.returncode, duration_s=run.duration_s, python=run.python, target=target, function=function,
        command=command, params={**plan.params, **({"script": plan.script} if plan.script else {})},
        output_tail=run.output, next_step=NEXT_AFTER[state].format(path=rel))


HEADER_RE = re.compile(r"failure mode `(\w+)`, template `([\w+]+)`")


async def run_regression_test(*, workspace_root: Path, test_file: Path, python: str | None = None,
                              timeout_s: float = 600.0) -> RegressionRunReport:
    """Re-run an existing regression test (after the fix): it must pass, with at least one test that ran."""
    if test_file.suffix != ".py" or not test_file.is_relative_to(workspace_root):
        raise TriageError(f"{test_file} is not a .py file in the workspace", "Pass the path write_regression_test returned")
    rel = test_file.relative_to(workspace_root).as_posix()
    try:
        m = HEADER_RE.search(test_file.read_text(errors="replace")[:3000])
    except OSError as e:
        raise TriageError(f"cannot read {rel}: {e.strerror}", "Pass the path write_regression_test returned")
    run = await run_pytest(rel, workspace_root, python, timeout_s)
    ran = [c for c in run.cases if c.outcome != "skipped"]
    failed = [c for c in run.cases if c.outcome in ("failed", "error")]
    passes = run.status == "passed" and bool(ran)
    if passes:
        verdict = f"passes on the current code ({len(ran)} test(s) ran)"
        next_step = f"The fix holds. Compare the runs (compare_runs), then journal_append(..., test_path='{rel}')."
    elif run.status == "passed":
        verdict = "checks nothing here: every test skipped (" + "; ".join(sorted({c.message for c in run.cases}))[:600] + ")"
        next_step = "A skipped test proves nothing: give it what it skips for (params) or write a sharper one."
    elif run.status == "timeout":
        verdict = f"did not finish within {timeout_s:g} s and was killed"
        next_step = "The code under test hangs or is slower than the limit: raise timeout_s only if the run is just slow."
    else:
        first = failed[0] if failed else None
        verdict = (f"still fails: {first.test} ({first.kind})" if first else
                   f"pytest could not run the file (exit code {run.returncode})")
        next_step = ("The fix is incomplete, or it fixed something else. Read failure_message (measured, then "
                     "expected) before touching the test; never loosen a bound until it passes.")
    return RegressionRunReport(
        path=rel, failure_mode=m.group(1) if m else None, template=m.group(2) if m else None, status=run.status,
        passes_now=passes, verdict=verdict, failure_message=failed[0].message if failed else "", cases=run.cases,
        returncode=run.returncode, duration_s=run.duration_s, python=run.python, output_tail=run.output,
        next_step=next_step)


def _portable(spec: str | None, file: Path | None, workspace_root: Path) -> str | None:
    """A file spec as a workspace-relative posix path, so the test keeps working when the repo moves."""
    if not spec or file is None:
        return spec
    if not file.is_relative_to(workspace_root):
        raise TriageError(f"{spec!r} lies outside the workspace {workspace_root}",
                          "A regression test imports code from the workspace it lives in; copy the code there")
    return f"{file.relative_to(workspace_root).as_posix()}:{spec.rsplit(':', 1)[1]}"
