"""The in-training probes: run a file of tools/probe/ in the user's interpreter, turn its numbers into findings.

Each public function takes a resolved target spec (`resolve_target`) or a script command, runs one probe
through tools.probe_runner and returns a pydantic report. The probe measures; this module judges, using
the skills' thresholds (update/weight ~1e-3, global grad norm 0.1-10, per-layer within 2 orders of
magnitude, ln C at init, >= 70% dead units). A target that raises is data (an `exception` /
`shape_mismatch` finding); a bad spec, a timeout or a crash of the probe process is a TriageError.
"""

import math
import os
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from tools.errors import TriageError
from tools.probe_runner import PROBE_DIR, ProbeOutcome, ProgressFn, choose_python, run_probe
from tools.failure_modes import crash_fix, crash_mode
from tools.report import Evidence, Finding, Num, Report, is_finite
from tools.static_scan import layout_reshapes, scaler_fits
from tools.workspace import Workspace

INJECT_DIR = PROBE_DIR / "inject"


# ---------------------------------------------------------------- shared report parts

class ProbeError(BaseModel):
    """The user's code raised inside the probe: where and why."""

    phase: str | None = Field(None, description="make_target, import, forward, backward, optimizer_step, training")
    type: str
    message: str
    file: str | None = None
    line: int | None = None
    traceback_tail: str = ""


class ProbeReport(Report):
    mode: Literal["target", "script"] = "target"
    target: str | None = None
    command: list[str] | None = None
    python: str = ""
    duration_s: float = 0.0
    error: ProbeError | None = Field(None, description="set when the user's code raised; see the findings")

    def _error_line(self) -> str:
        return f"the target raised in {self.error.phase}: {self.error.type}: {self.error.message[:200]}"


def resolve_target(spec: str, workspace: Workspace) -> str:
    """'file.py:fn' -> '/abs/file.py:fn' confined to the workspace; 'pkg.module:fn' passes through."""
    if not spec or ":" not in spec:
        raise TriageError(f"target {spec!r} is not 'file.py:function' or 'package.module:function'",
                          "Pass e.g. target='train.py:make_target' (a function that returns model, batch/data, loss_fn)")
    where, fn = spec.rsplit(":", 1)
    if not fn.isidentifier():
        raise TriageError(f"{fn!r} in target {spec!r} is not a function name", "Pass 'file.py:make_target'")
    if where.endswith(".py") or "/" in where or os.sep in where:
        return f"{workspace.existing_file(where)}:{fn}"
    if not all(part.isidentifier() for part in where.split(".")):
        raise TriageError(f"{where!r} is neither a .py file nor a dotted module name", "Pass 'file.py:make_target'")
    return spec


def script_argv(command: list[str], python: str) -> list[str]:
    """The user's command with 'python' bound to their interpreter and 'torchrun' to its torch.distributed.run."""
    if not command or not all(isinstance(c, str) and c for c in command):
        raise TriageError("command is empty", "Pass the training command as a list, e.g. ['python', 'train.py', '--steps', '50']")
    head = os.path.basename(command[0])
    if head in ("python", "python3") or re.fullmatch(r"python3\.\d+", head):
        return [python, *command[1:]]
    if head == "torchrun":
        return [python, "-m", "torch.distributed.run", *command[1:]]
    return list(command)


def _stderr_hint(outcome: ProbeOutcome, limit: int = 2500) -> str:
    tail = (outcome.stderr_tail or outcome.stdout_tail or "").strip()
    return f"\n--- stderr tail ---\n{tail[-limit:]}" if tail else ""


def _infrastructure_error(outcome: ProbeOutcome, timeout_s: float, what: str) -> TriageError:
    why = outcome.failure()
    if outcome.timed_out:
        return TriageError(f"{what}: {why} (timeout_s={timeout_s:g}){_stderr_hint(outcome)}",
                           "If the target is slow, raise timeout_s or use fewer steps; if it hangs (a data loader "
                           "stall, a lock), that is the bug: call process_check / py-spy on the real run")
    if outcome.crashed_by:
        return TriageError(f"{what}: {why}{_stderr_hint(outcome)}",
                           "Native code crashed (a C extension, a custom CUDA kernel, a bad ctypes call); run the "
                           "target under `python -X faulthandler` to see the Python stack at the crash")
    return TriageError(f"{what}: {why}{_stderr_hint(outcome)}",
                       "Check the interpreter (python argument) has torch installed and the command runs by itself")


def stack_dump_after(timeout_s: float) -> float:
    return max(0.5, min(timeout_s * 0.85, timeout_s - 3.0))


async def _run(probe: str, args: dict, workspace_root: Path, python: str | None, timeout_s: float,
               on_progress: ProgressFn | None, what: str):
    args = {**args, "_stack_dump_after_s": stack_dump_after(timeout_s)}
    outcome = await run_probe(probe, args, workspace_root=workspace_root, python=python, timeout_s=timeout_s,
                              on_progress=on_progress)
    if outcome.result is None:
        raise _infrastructure_error(outcome, timeout_s, what)
    res = outcome.result
    if res.get("ok"):
        return res["report"], None, outcome
    err = res["error"]
    if err.get("kind") != "user_code":
        if err.get("type") == "TargetSpecError":
            raise TriageError(f"bad target: {err['message']}",
                              "The target is 'file.py:make_target' returning {'model', 'batch' or 'data', 'loss_fn', "
                              "'optimizer' or 'make_optimizer', 'num_classes'}")
        if err.get("type") == "ModuleNotFoundError" and "torch" in err.get("message", ""):
            raise TriageError(f"torch is not importable in {outcome.python}",
                              "Pass python= the interpreter that runs your training (e.g. '.venv/bin/python')")
        raise TriageError(f"{what}: the probe failed: {err['type']}: {err['message']}\n{err.get('traceback', '')[-2000:]}",
                          "This may be a bug in mltriage; the traceback above says where")
    return None, err, outcome


def _error_report(cls, err: dict, outcome: ProbeOutcome, **fields):
    pe = ProbeError(phase=err.get("phase"), type=err["type"], message=err["message"], file=err.get("file"),
                    line=err.get("line"), traceback_tail=(err.get("traceback") or "")[-3000:])
    mode = crash_mode(err["message"]) if err["type"] in ("RuntimeError", "ValueError", "IndexError",
                                                          "torch.OutOfMemoryError", "OutOfMemoryError") else "exception"
    loc = f"{err['file']}:{err['line']}" if err.get("file") else None
    finding = Finding(
        failure_mode=mode, confidence=0.95,
        summary=f"the target raised during {err.get('phase')}: {err['type']}: {err['message'][:300]}",
        evidence=[Evidence(what="exception", value=f"{err['type']}: {err['message'][:300]}", source=loc or "")],
        fix=("Assert the shapes you expect where the traceback points and fix the tensor that has the wrong one"
             if mode == "shape_mismatch" else
             crash_fix(err["message"]) or "Read the traceback tail in `error` and fix the line it names"),
        location=loc)
    return cls(error=pe, findings=[finding], python=outcome.python, duration_s=outcome.duration_s, **fields)


def _fmt(x) -> str:
    return f"{x:.4g}" if isinstance(x, float) else str(x)


# ---------------------------------------------------------------- grad_norm_snapshot

class ParamGrad(BaseModel):
    name: str
    module: str = ""
    module_type: str = ""
    shape: list[int]
    grad_norm: Num = None
    weight_norm: Num = None
    update_norm: Num = None
    update_ratio: Num = Field(None, description="||update|| / ||weight|| of the optimizer step; target ~1e-3")
    log10_update_ratio: Num = None
    lr: Num = None
    flags: list[str] = Field(default_factory=list, description=(
        "grad_none, grad_zero (from the first step on: a cut graph), grad_died (zero only later: a consequence), "
        "grad_nonfinite, requires_grad_false, not_in_optimizer, lr_zero, no_update"))


class ModuleGrad(BaseModel):
    name: str
    type: str
    depth: int | None = Field(None, description="order of first call in the forward pass (0 = nearest the input)")
    grad_norm: Num = None
    weight_norm: Num = None
    update_ratio: Num = None


class ActivationStat(BaseModel):
    module: str
    module_type: str | None = None
    op: str
    kind: Literal["relu", "saturating", "layer"]
    mean: Num = None
    std: Num = None
    input_std: Num = None
    zero_frac: Num = None
    dead_unit_frac: Num = Field(None, description="share of units zero for the whole batch (ReLU-like)")
    saturated_frac: Num = Field(None, description="share of outputs in the flat tails (sigmoid/tanh)")
    constant: bool = False
    is_output: bool = Field(False, exclude=True)  # the model's prediction itself (a sigmoid head), not a hidden layer


def _off_healthy_ratio(item: dict) -> float:
    """then update/weight ratio furthest from 1e-3"""
    r = item.get("update_ratio")
    return abs(math.log10(r) + 3) if is_finite(r) and r > 0 else 0.0


def _activation_trouble(item: dict) -> float:
    """then most dead or saturated units"""
    return max(x if is_finite(x) else 0.0 for x in (item.get("dead_unit_frac"), item.get("saturated_frac"), 0.0))


class GradNormReport(ProbeReport):
    rank_by = {"params": _off_healthy_ratio, "modules": _off_healthy_ratio, "activations": _activation_trouble}

    step: int | None = Field(None, description="optimizer step the snapshot was taken at")
    rank: int | None = None
    global_grad_norm: Num = Field(None, description="pre-clip global L2 norm of all gradients")
    params: list[ParamGrad] = Field(default_factory=list)
    modules: list[ModuleGrad] = Field(default_factory=list)
    activations: list[ActivationStat] = Field(default_factory=list)
    output_constant: bool | None = None
    loss_history: list[Num] = Field(default_factory=list)
    grad_norm_history: list[Num] = Field(default_factory=list)
    optimizer: str | None = Field(None, description="the optimizer's class name")
    clipped: bool | None = Field(None, description="script mode: clip_grad_norm_ ran; norms are from before it")
    host_syncs_per_snapshot: int = 1

    def headline(self) -> str:
        if self.error:
            return f"grad_norm_snapshot: {self._error_line()}"
        return (f"grad_norm_snapshot at step {self.step}: global grad norm {_fmt(self.global_grad_norm)}, "
                f"{len(self.params)} parameters, {sum(1 for p in self.params if p.flags)} flagged")


def _ratio_log(r):
    return math.log10(r) if is_finite(r) and r > 0 else None


def grad_findings(rep: GradNormReport) -> list[Finding]:
    out: list[Finding] = []
    src = "grad_norm_snapshot"
    trainable = [p for p in rep.params if "requires_grad_false" not in p.flags]
    dead_any = any(a.kind == "relu" and is_finite(a.dead_unit_frac) and a.dead_unit_frac >= 0.7 for a in rep.activations)
    # a scale that is exactly 0 and gets exactly 0 gradient from the first step is a fixed point gradient descent
    # never leaves (weight decay keeps it at 0 too): an init, not a cut graph. A lone zero-init gamma (Goyal et al.
    # 2017) gets a gradient; two in a row zero each other's (blind dev tile_pattern_resnet_sgd: bn1 and bn2 of every
    # residual block, whose branches then never trained)
    stuck = [p for p in trainable if "grad_zero" in p.flags and p.weight_norm == 0.0]
    if any(p.name.endswith("weight") for p in stuck):  # zero biases alone (before a BatchNorm) are not a scale
        out.append(Finding(
            failure_mode="bad_init", confidence=0.75,
            summary=f"{len(stuck)} parameters start at exactly 0 and get exactly 0 gradient: gradient descent never "
                    "moves them, and the layers behind them get no gradient either",
            evidence=[Evidence(what=f"{p.name}: weight norm / grad norm", value="0 / 0", source=src) for p in stuck[:6]],
            fix="Initialise at most one of the scales on a path to zero (e.g. only the last BatchNorm of a residual "
                "branch); the others to 1",
            location=", ".join(sorted({p.module or p.name for p in stuck}))[:300]))
    # exactly-zero gradients behind dead ReLUs are the dead units' doing, not a cut graph
    no_grad = [p for p in trainable if "grad_none" in p.flags or ("grad_zero" in p.flags and not dead_any)]
    if trainable and no_grad:
        allp = len(no_grad) == len(trainable)
        out.append(Finding(
            failure_mode="broken_graph", confidence=0.95 if allp else 0.85,
            summary=(f"{len(no_grad)} of {len(trainable)} trainable parameters get no gradient"
                     + (" (none at all: the loss is detached from the model)" if allp else "")),
            evidence=[Evidence(what=f"{p.name} grad", value="None" if "grad_none" in p.flags else 0.0, source=src)
                      for p in no_grad[:6]],
            fix=("Find where the path from these parameters to the loss is cut: .detach(), .item()/.numpy(), "
                 "torch.no_grad(), a tensor rebuilt from .data, or a module that is built but never called"),
            location=", ".join(sorted({p.module or p.name for p in no_grad}))[:300]))
    # "no_update" with a gradient a million times below the largest is a vanishing gradient that rounds
    # away in float32, not a parameter the optimizer skips
    max_g = max((p.grad_norm for p in trainable if is_finite(p.grad_norm)), default=0.0)
    adaptive = any((rep.optimizer or "").startswith(a) for a in ADAPTIVE)

    def resolvable(p) -> bool:
        # the step this parameter should take (lr x grad for SGD, ~lr per element for an adaptive optimizer) must
        # be above float32's resolution of its weights; below it the update rounds away: weights that have
        # diverged to 1e7 stand still under any finite step (blind dev syslog_char_lstm_lm, clipping after the
        # step at lr 20: its LSTM read as frozen at 0.9)
        if not (is_finite(p.weight_norm) and p.lr and is_finite(p.grad_norm)):
            return True
        step = p.lr * (math.prod(p.shape) ** 0.5 if adaptive else p.grad_norm)
        return step >= 1e-6 * p.weight_norm
    if trainable and all("lr_zero" in p.flags for p in trainable):
        # every group at lr 0 is the schedule's value at this step (a warmup from 0, a decay that ended), not a
        # parameter left out
        out.append(Finding(
            failure_mode="lr_too_low", confidence=0.4,
            summary=f"the LR is 0 for every parameter group at step {rep.step}: a warmup that starts at 0, or a "
                    "schedule that has already decayed to 0",
            evidence=[Evidence(what="lr of every param group", value=0.0, source=src),
                      Evidence(what="step", value=rep.step, source=src)],
            fix="Check the schedule over the whole run (schedule_check, or the lr series in log_metrics)"))
        trainable = [p for p in trainable if "lr_zero" not in p.flags]
    frozen = [p for p in trainable if p.grad_norm not in (None, 0.0)
              and ({"not_in_optimizer", "lr_zero"} & set(p.flags)
                   or ("no_update" in p.flags and is_finite(p.grad_norm) and p.grad_norm >= 1e-6 * max_g
                       and resolvable(p)))]
    if frozen:
        why = {f for p in frozen for f in p.flags if f in ("not_in_optimizer", "lr_zero", "no_update")}
        # when every weight that does move moves by < 1e-5 of itself, a few that do not move at all are the same
        # tiny LR rounding away in float32 (weights near 1, as LayerNorm's), not parameters the optimizer skips
        # (blind dev pantry_notes_char_gpt: LR 1e-6, its LayerNorm weights read as frozen at 0.9)
        moving = sorted(p.update_ratio for p in trainable if len(p.shape) >= 2 and is_finite(p.update_ratio)
                        and p.update_ratio > 0 and p not in frozen)
        rounding = why == {"no_update"} and bool(moving) and moving[len(moving) // 2] < 1e-5
        out.append(Finding(
            failure_mode="frozen_params", confidence=0.3 if rounding else 0.9,
            summary=(f"{len(frozen)} parameters have gradients but the optimizer step does not move them ({', '.join(sorted(why))})"
                     + (f"; every other weight moves by only {moving[len(moving) // 2]:.2g} of itself per step, so "
                        "these likely round away under a tiny LR (see lr_too_low)" if rounding else "")),
            evidence=[Evidence(what=f"{p.name}: grad norm / update", value=f"{_fmt(p.grad_norm)} / {_fmt(p.update_norm)}"
                               + (f" (lr {p.lr})" if p.lr is not None else " (not in any param group)"), source=src)
                      for p in frozen[:6]],
            fix="Build the optimizer from model.parameters() (or include these in a param group) with a non-zero lr",
            location=", ".join(sorted({p.module or p.name for p in frozen}))[:300],
            facts={"may_round_away": True} if rounding else {}))
    off = [p for p in rep.params if "requires_grad_false" in p.flags]
    if off and len(off) < len(rep.params):
        out.append(Finding(
            failure_mode="frozen_params", confidence=0.3,
            summary=f"{len(off)} parameters have requires_grad=False (fine if you froze them on purpose)",
            evidence=[Evidence(what=p.name, value="requires_grad=False", source=src) for p in off[:6]],
            fix="If these layers should train, set requires_grad=True and add them to the optimizer",
            location=", ".join(sorted({p.module or p.name for p in off}))[:300],
            # an observation, not a diagnosis: a rule that names why they stay frozen (an optimizer built before
            # the unfreeze) leads the merged finding with its line and fix
            facts={"symptom_only": True}))
    gn = rep.global_grad_norm
    recurrent = sorted({m.type for m in rep.modules if m.type in RECURRENT})
    # recurrent nets unrolled over many steps explode by construction; clipping the norm is the standard
    # remedy there, and a loop that never clips is the bug (Pascanu, Mikolov & Bengio 2013)
    unclipped_rnn = bool(recurrent) and rep.clipped is False
    # such a net explodes in bursts (305 at step 2, 3.6 by step 12 in gru_jsonl_char_lm_sgd): the peak over the
    # steps the snapshot ran is its reading, not whichever step the snapshot ended on
    peak = max((g for g in rep.grad_norm_history if is_finite(g)), default=None) if unclipped_rnn else None
    peaked = peak is not None and peak > 10 and (not is_finite(gn) or peak > gn)
    if peaked and is_finite(gn):
        gn = peak
    # a loss summed over N elements has an N times larger gradient and an N times larger value: the norm per
    # unit of loss is what does not depend on the reduction (a summed VAE loss of 150 with norm 300 is calm)
    finite_losses = [v for v in rep.loss_history if is_finite(v)]
    loss_now = finite_losses[-1] if finite_losses else None
    per_loss = gn / abs(loss_now) if is_finite(gn) and loss_now else None
    # a loss that itself blew up (10x its first value within the snapshot) makes any ratio to it look calm
    blew_up = len(finite_losses) > 1 and abs(loss_now) > LOSS_BLOWUP * abs(finite_losses[0])
    calm = per_loss is not None and per_loss <= 10 and not blew_up  # large in absolute terms only: a hypothesis
    if is_finite(gn) and gn > 10:
        top = sorted([p for p in rep.params if is_finite(p.grad_norm)], key=lambda p: -p.grad_norm)[:4]
        out.append(Finding(
            failure_mode="exploding_gradients",
            confidence=0.4 if calm else 0.9 if unclipped_rnn and gn > 100 else 0.8 if gn > 100 else 0.6,
            summary=f"global gradient norm {gn:.3g}" + (f" (its peak over {len(rep.grad_norm_history)} steps)"
                                                        if peaked else "") + " is above 10"
                    + (f" ({per_loss:.3g}x the loss)" if per_loss else "")
                    + (": no more than 10x the loss, as a loss summed over many elements gives" if calm else "")
                    + (f" in a recurrent net ({', '.join(recurrent)}) whose loop never clips the gradient norm"
                       if unclipped_rnn else ""),
            evidence=[Evidence(what="global grad norm (pre-clip)" + (", peak" if peaked else ""), value=gn, source=src)]
            + ([Evidence(what="grad norm history", value=", ".join(_fmt(g) for g in rep.grad_norm_history[:8]),
                         source=src)] if peaked else [])
            + ([Evidence(what="grad norm / loss", value=per_loss, source=src)] if per_loss else [])
            + ([Evidence(what="clip_grad_norm_ called in the loop", value=False, source=src)] if unclipped_rnn else [])
            + [Evidence(what=f"{p.name} grad norm", value=p.grad_norm, source=src) for p in top],
            fix=("Clip the gradient norm every step before optimizer.step(): torch.nn.utils.clip_grad_norm_("
                 "model.parameters(), 1.0), logging the pre-clip norm it returns (Pascanu et al. 2013)"
                 if unclipped_rnn else
                 "Lower the LR 3-10x, check the loss scale (sum vs mean reduction) and normalisation; log the pre-clip norm"),
            avoid=("Do not lower the LR until the loss barely moves: an unrolled recurrent net needs its norm clipped"
                   if unclipped_rnn else ""),
            # a norm measured as no more than 10x the loss argues against an explosion: it corroborates nothing.
            # A large norm alone is a symptom: a code reading that names its cause (a clip after the step,
            # unscaled attention scores) leads the merged finding with its own fix
            facts={"unclipped_recurrent": True} if unclipped_rnn else
            {"symptom_only": True, **({"norm_scales_with_loss": True} if calm else {})},
            # the recurrence is where an unclipped RNN explodes, whichever layer's gradient ends up the largest
            location=next((m.name for m in rep.modules if m.type in RECURRENT), None) if unclipped_rnn
            else top[0].module if top else None))
    if gn is not None and not is_finite(gn):
        out.append(Finding(failure_mode="nan_inf", confidence=0.9, summary="the gradients are non-finite",
                           evidence=[Evidence(what="global grad norm", value=gn, source=src)],
                           fix="Run nan_hook_run to find the op that produced the first non-finite value"))
    lr_f = _update_ratio_finding(rep, src)
    if lr_f:
        out.append(lr_f)
    vg = _vanishing(rep)
    if vg:
        out.append(vg)
    dead = [a for a in rep.activations if a.kind == "relu" and is_finite(a.dead_unit_frac) and a.dead_unit_frac >= 0.7]
    if dead:
        out.append(Finding(
            failure_mode="dead_units", confidence=0.8,
            summary=f"{len(dead)} ReLU-like activations have >= 70% of their units zero for the whole batch",
            evidence=[Evidence(what=f"dead units after {a.op} in {a.module}", value=a.dead_unit_frac, source=src)
                      for a in dead[:6]],
            fix="Check the biases/init feeding these units (negative bias, huge weights), lower the LR, or use LeakyReLU/GELU",
            location=dead[0].module))
    # a sigmoid head's output is the prediction: under 1% for a rare event is calibration (a last-layer bias set to
    # the base rate's log-odds, Karpathy's "init well"), not a saturated unit
    sat = [a for a in rep.activations if a.kind == "saturating" and is_finite(a.saturated_frac)
           and a.saturated_frac >= 0.7 and not a.is_output]
    if sat:
        out.append(Finding(
            failure_mode="dead_units", confidence=0.6,
            summary=f"{len(sat)} sigmoid/tanh activations are saturated (>= 70% of outputs in the flat tails)",
            evidence=[Evidence(what=f"saturated after {a.op} in {a.module}", value=a.saturated_frac, source=src)
                      for a in sat[:6]],
            fix="Scale the pre-activations down (init, normalisation before the nonlinearity) or use ReLU/GELU",
            location=sat[0].module))
    if rep.output_constant:
        # with vanishing gradients, a constant output is their consequence, not a second cause
        out.append(Finding(failure_mode="dead_units", confidence=0.5 if vg else 0.7,
                           summary="the model output is the same for every example in the batch"
                                   + (" (the vanishing gradients above explain it)" if vg else ""),
                           evidence=[Evidence(what="output constant across batch", value=True, source=src)],
                           fix="Look for dead units, an all-zero init or inputs that never reach the output"))
    return out


ADAPTIVE = ("Adam", "AdamW", "NAdam", "RAdam", "Adamax", "AdaGrad", "Adagrad", "RMSprop", "Adafactor", "Lion",
            "SparseAdam", "Adadelta", "LAMB", "Lamb", "FusedAdam")
# Adam's first updates are ~lr per element whatever the gradient (bias correction), so the ratio says
# nothing about the LR until the second-moment estimate has seen some steps.
STEADY_STEP = 10


def _update_ratio_finding(rep: GradNormReport, src: str) -> Finding | None:
    """The update/weight ratio is ONE signal about the LR: alone it stays below 0.5 (issue 13).

    Judged only in steady state (an adaptive optimizer past its first STEADY_STEP steps); a second,
    independent signal (a diverging or flat loss, the LR range test) raises it when triage merges them.
    """
    weights = [p for p in rep.params if len(p.shape) >= 2 and is_finite(p.update_ratio) and p.update_ratio > 0
               and not ({"no_update", "lr_zero", "not_in_optimizer"} & set(p.flags))]
    if not weights:
        return None
    adaptive = any((rep.optimizer or "").startswith(a) for a in ADAPTIVE)
    if adaptive and (rep.step or 0) < STEADY_STEP:
        return None
    ratios = sorted(p.update_ratio for p in weights)
    med = ratios[len(ratios) // 2]
    ev = [Evidence(what=f"median update/weight ratio (weight matrices) at step {rep.step}", value=med, source=src),
          Evidence(what="lr", value=weights[0].lr, source="optimizer param group")]
    if rep.optimizer:
        ev.append(Evidence(what="optimizer", value=rep.optimizer, source=src))
    if med < 1e-5:
        # symptom_only: tiny updates say the LR is too low, not why; a static rule naming the line (an LR squared by
        # LambdaLR, a per-epoch schedule stepped per batch) leads the merged finding, with its own fix
        return Finding(failure_mode="lr_too_low", confidence=0.45 if med < 1e-6 else 0.35,
                       summary=f"updates are tiny: median update/weight ratio {med:.2g} (healthy ~1e-3)", evidence=ev,
                       facts={"symptom_only": True},
                       fix=f"Confirm with lr_range_test before changing anything; if it agrees, raise the LR "
                           f"~{min(1000, 1e-3 / med):.0f}x")
    if med > 1e-1:
        return Finding(failure_mode="lr_too_high", confidence=0.35,
                       summary=f"each step rewrites the weights: median update/weight ratio {med:.2g} (healthy ~1e-3)",
                       evidence=ev, fix="Confirm with lr_range_test (and a diverging loss) before lowering the LR")
    return None


LOSS_BLOWUP = 10.0
RECURRENT = {"LSTM", "GRU", "RNN", "LSTMCell", "GRUCell", "RNNCell"}
# an embedding's gradient reaches only the rows of the tokens in the batch: small by construction, not vanishing
NOT_A_DEPTH_LAYER = {"Embedding", "EmbeddingBag"}


def _vanishing(rep: GradNormReport) -> Finding | None:
    layers = [m for m in rep.modules if m.depth is not None and is_finite(m.grad_norm) and m.grad_norm > 0
              and m.type not in NOT_A_DEPTH_LAYER]
    layers.sort(key=lambda m: m.depth)
    if len(layers) < 3:
        return None
    logs = [math.log10(m.grad_norm) for m in layers]
    spread = max(logs) - min(logs)
    n = len(logs)
    xs = list(range(n))
    mx, my = sum(xs) / n, sum(logs) / n
    cov = sum((x - mx) * (y - my) for x, y in zip(xs, logs))
    sx = math.sqrt(sum((x - mx) ** 2 for x in xs))
    sy = math.sqrt(sum((y - my) ** 2 for y in logs))
    corr = cov / (sx * sy) if sx and sy else 0.0
    # shrinking toward the input: grad norm grows with depth index (input side small)
    if spread > 2 and corr > 0.6 and logs[0] < logs[-1] - 2:
        small = sorted(layers, key=lambda m: m.grad_norm)[:3]
        return Finding(
            # each extra order of magnitude of spread beyond the 2-order rule is more evidence
            failure_mode="vanishing_gradients", confidence=min(0.95, 0.75 + 0.04 * (spread - 2)),
            summary=(f"per-layer gradient norms span {spread:.1f} orders of magnitude and shrink toward the input "
                     f"({layers[0].name}: {layers[0].grad_norm:.2g} vs {layers[-1].name}: {layers[-1].grad_norm:.2g})"),
            evidence=[Evidence(what=f"{m.name} ({m.type}) grad norm", value=m.grad_norm, source="grad_norm_snapshot")
                      for m in layers[:3] + layers[-2:]],
            fix="Use a non-saturating activation (ReLU/GELU), proper init (Kaiming/Xavier), normalisation or skip connections",
            location=", ".join(m.name for m in small))
    return None


def _modules(params: list[ParamGrad], depth_order: list[str]) -> list[ModuleGrad]:
    agg: dict[str, dict] = {}
    for p in params:
        key = p.module or "(root)"
        a = agg.setdefault(key, {"type": p.module_type, "g": 0.0, "w": 0.0, "u": 0.0, "has_g": False, "bad": False})
        for k, v in (("g", p.grad_norm), ("w", p.weight_norm), ("u", p.update_norm)):
            if is_finite(v):
                a[k] += v * v
            elif v is not None:
                a["bad"] = True
        a["has_g"] |= p.grad_norm is not None
    order = {n: i for i, n in enumerate(depth_order)}
    out = []
    for name, a in agg.items():
        w = math.sqrt(a["w"])
        out.append(ModuleGrad(name=name, type=a["type"], depth=order.get(name),
                              grad_norm=(float("nan") if a["bad"] else math.sqrt(a["g"])) if a["has_g"] else None,
                              weight_norm=w, update_ratio=math.sqrt(a["u"]) / w if w else None))
    return sorted(out, key=lambda m: (m.depth is None, m.depth or 0))


def grad_report_from(raw: dict, **fields) -> GradNormReport:
    params = [ParamGrad(**{k: v for k, v in p.items() if k in ParamGrad.model_fields},
                        log10_update_ratio=_ratio_log(p.get("update_ratio"))) for p in raw.get("params", [])]
    out = raw.get("output") or {}
    rep = GradNormReport(
        step=raw.get("step"), rank=raw.get("rank"), global_grad_norm=raw.get("global_grad_norm"), params=params,
        modules=_modules(params, raw.get("depth_order", [])),
        activations=[ActivationStat(**a) for a in raw.get("activations", [])],
        output_constant=out.get("constant"), loss_history=raw.get("loss_history", []),
        grad_norm_history=raw.get("grad_norm_history", []), optimizer=raw.get("optimizer"),
        clipped=raw.get("clipped"), **fields)
    rep.findings = unregistered_findings(raw.get("unregistered") or [], rep.params) + grad_findings(rep)
    return rep


def unregistered_findings(hidden: list[dict], params: list) -> list[Finding]:
    """Layers in a plain Python list/dict attribute: their weights are in no parameter list, so no snapshot row
    shows them; they keep their random init while the rest trains around them."""
    if not hidden:
        return []
    total = sum(h["params"] for h in hidden)
    where = ", ".join(f"{h['owner']}.{h['where'].rsplit('.', 1)[-1]}" for h in hidden[:4])
    registered = sum(math.prod(p.shape) for p in params)
    return [Finding(
        failure_mode="frozen_params", confidence=0.9,
        summary=(f"{total:,} parameters in {sum(h['modules'] for h in hidden)} layer(s) kept in a plain Python "
                 f"{hidden[0]['kind']} ({where}) are not registered with the model: model.parameters() "
                 f"({registered:,} parameters) leaves them out, so the optimizer never updates them and they stay "
                 "at their random init"),
        evidence=[Evidence(what=f"{h['where']} ({h['kind']} of {h['modules']} module(s))",
                           value=f"{h['params']:,} unregistered parameters", source="grad_norm_snapshot")
                  for h in hidden[:4]],
        fix="Hold the layers in nn.ModuleList (or nn.ModuleDict / nn.Sequential) instead of a list/dict, then "
            "rebuild the optimizer from model.parameters()",
        avoid="Do not raise the LR or train longer: those layers are never stepped",
        location=", ".join(f"{h['line']} ({h['where']})" if h.get("line") else h["where"] for h in hidden)[:300],
        facts={"unregistered": True})]


async def grad_norm_snapshot(workspace_root: Path, target: str | None = None, command: list[str] | None = None,
                             steps: int = 1, python: str | None = None, timeout_s: float = 120.0,
                             on_progress: ProgressFn | None = None) -> GradNormReport:
    """Per-parameter gradient/weight/update norms of one optimizer step, with findings."""
    _not_both(target, command)
    if command:
        return await _script_grad(workspace_root, command, steps, python, timeout_s, on_progress)
    _need_target(target)
    raw, err, oc = await _run("mltriage_grad_norm.py", {"target": target, "steps": steps}, workspace_root, python,
                              timeout_s, on_progress, "grad_norm_snapshot")
    if err:
        return _error_report(GradNormReport, err, oc, target=target)
    return grad_report_from(raw, target=target, python=oc.python, duration_s=oc.duration_s)


def _not_both(target, command):
    if target and command:  # one would silently win over the other
        raise TriageError("pass exactly one of target or command, not both",
                          "target='train.py:make_target' for a factory, or command=['python', 'train.py'] for your "
                          "script; triage takes both and runs each where it fits")


def _need_target(target):
    if not target:
        raise TriageError("neither target nor command given",
                          "Pass target='train.py:make_target' (a factory) or command=['python', 'train.py', ...]")


# ---------------------------------------------------------------- nan_hook_run

class TensorStat(BaseModel):
    name: str
    shape: list[int] = Field(default_factory=list)
    dtype: str = ""
    min: Num = None
    max: Num = None
    absmax: Num = None
    mean: Num = None
    std: Num = None
    zero_frac: Num = None
    neg_frac: Num = None
    nan: int = 0
    inf: int = 0


class RankResult(BaseModel):
    rank: int
    found: bool
    step: int | None = None
    phase: str | None = None
    module: str | None = None
    steps_run: int = 0


Phase = Literal["forward", "loss", "backward", "optimizer_step"]


class NanHookReport(ProbeReport):
    found: bool = Field(False, description="a non-finite value appeared")
    steps_run: int = 0
    step: int | None = Field(None, description="0-based training step of the first non-finite value")
    phase: Phase | None = None
    rank: int | None = Field(None, description="script mode under torchrun: the first rank that went non-finite")
    module: str | None = Field(None, description="qualified name of the first module whose output went non-finite")
    module_type: str | None = None
    output: str | None = Field(None, description="which output of that module, e.g. 'output' or 'output[0]'")
    op: str | None = Field(None, description="the torch op that produced the first non-finite value")
    op_location: str | None = Field(None, description="file:line (function) in the user's code where that op ran")
    op_inputs: list[TensorStat] = Field(default_factory=list, description="what log/sqrt/div/exp choked on")
    module_inputs: list[TensorStat] = Field(default_factory=list)
    module_params: list[TensorStat] = Field(default_factory=list)
    bad_params: list[str] = Field(default_factory=list, description="parameters with non-finite grads / values")
    cause: str | None = Field(None, description="log(0), 0/0, x/0, exp overflow, sqrt(<0), lr, non-finite input, ...")
    loss_history: list[Num] = Field(default_factory=list, description="the losses up to the first non-finite one")
    grad_norm_history: list[Num] = Field(default_factory=list)
    optimizer: dict | None = None
    ranks: list[RankResult] = Field(default_factory=list)

    def headline(self) -> str:
        if self.error:
            return f"nan_hook_run: {self._error_line()}"
        if not self.found:
            return f"nan_hook_run: no NaN/Inf in {self.steps_run} steps"
        where = self.module or self.op_location or ", ".join(self.bad_params[:3]) or "?"
        return (f"nan_hook_run: first non-finite value at step {self.step}"
                + (f" on rank {self.rank}" if self.rank is not None else "")
                + f", phase {self.phase}, in {where}" + (f" (op {self.op})" if self.op else ""))


def _stats(items) -> list[TensorStat]:
    return [TensorStat(**{k: v for k, v in s.items() if k in TensorStat.model_fields}) for s in items or []]


def unbounded_below(loss_hist: list) -> bool:
    """The finite losses before the NaN (the last 20 steps) are negative and kept falling, a fifth of their level or
    more: a likelihood with a learnt scale running to -inf, not a divergence (which raises the loss before the
    NaN)."""
    fin = [x for x in loss_hist if is_finite(x)]
    if len(fin) < 8:
        return False
    k = len(fin) // 4  # quarter means: one noisy minibatch loss decides nothing
    head, mid, end = sum(fin[:k]) / k, sum(fin[k:-k]) / (len(fin) - 2 * k), sum(fin[-k:]) / k
    return end < 0 and end < mid < head and head - end > 0.2 * abs(head)


def nan_cause(op: str | None, inputs: list[TensorStat], phase: str | None, gn_hist: list, loss_hist: list) -> tuple[str, str]:
    """(cause, fix) from the op name and its inputs' statistics."""
    o = (op or "").lower()
    a0 = inputs[0] if inputs else None
    a1 = inputs[1] if len(inputs) > 1 else None
    if o.startswith("log") and "softmax" not in o and a0 is not None:
        if is_finite(a0.min) and a0.min <= 0:
            c = "log(0)" if a0.min == 0 else "log of a negative number"
            return c, ("Clamp before the log: torch.log(x.clamp(min=1e-8)); for probabilities use log_softmax / "
                       "logsigmoid / F.binary_cross_entropy_with_logits on the logits instead of log(sigmoid(z))")
    if o in ("div", "true_divide", "truediv", "rtruediv", "reciprocal", "rsqrt", "floor_divide") or o.startswith("div"):
        den = a1 if a1 is not None and o not in ("reciprocal", "rsqrt", "rtruediv") else a0
        num = a0 if den is a1 else None
        if den is not None and is_finite(den.zero_frac) and den.zero_frac > 0:
            if num is not None and is_finite(num.zero_frac) and num.zero_frac > 0:
                return "0/0", "Add an epsilon to the denominator (x / (d + 1e-8)) or mask the empty case (count 0, std 0)"
            return "x/0", "Add an epsilon to the denominator (x / (d + 1e-8)) or guard the zero case"
    if o in ("exp", "exp2", "expm1", "pow", "cosh", "sinh", "float_power") and a0 is not None \
            and is_finite(a0.max) and a0.max > 80:
        return "exp overflow", ("Subtract the max before exponentiating (x - x.max()), use torch.logsumexp / "
                                "log_softmax, or clamp the exponent")
    if o in ("sqrt", "rsqrt") and a0 is not None and is_finite(a0.min):
        if a0.min < 0:
            return "sqrt of a negative number", "Clamp the argument: torch.sqrt(x.clamp(min=0) + 1e-12)"
        if a0.min == 0 and phase == "backward":
            return "sqrt(0) in backward (infinite gradient)", "Add an epsilon inside the sqrt: torch.sqrt(x + 1e-12)"
    if phase == "backward" and o in ("pow", "norm", "linalg_vector_norm") and a0 is not None and a0.zero_frac:
        return "norm/pow of zero in backward", "Add an epsilon: (x.pow(2).sum() + 1e-12).sqrt()"
    if a0 is not None and a0.nan + a0.inf > 0:
        return "non-finite input", "Look at where this input comes from (the data, or the previous step)"
    if unbounded_below(loss_hist):
        return "loss unbounded below", (
            "The loss fell without limit before the NaN: a learnt variance or scale (a log-variance head of a "
            "Gaussian NLL, a Laplace/Student-t scale, a temperature) collapses toward 0 where the model predicts the "
            "target exactly (a constant feature, a saturated sensor), so log(var) runs to -inf. Floor it: "
            "logvar.clamp(min=-7), or var = softplus(raw) + 1e-4; a lower LR only delays it")
    fin = [g for g in gn_hist if is_finite(g)]
    # a large norm alone is the LR's sign only when it is large against the loss: a loss summed over pixels
    # (a VAE's 490 nats) has a norm in the hundreds from its first step (the snapshot's own "calm" rule)
    large = any(is_finite(g) and g > 100 and not (is_finite(v) and g <= 10 * abs(v))
                for g, v in zip(gn_hist, loss_hist))
    if len(fin) >= 3 and fin[-1] > 10 * max(1e-12, min(fin)) or large:
        return "lr", ("The gradient norm grew before the NaN: lower the LR 3-10x (or add warmup) and check the loss "
                      "scale; clip gradients only after logging the pre-clip norm")
    if phase == "optimizer_step":
        return "optimizer step", "Check the optimizer config (eps=0 gives 0/0 in Adam, lr inf/NaN) and the LR"
    return "overflow", "Inspect the op's inputs below; lower the LR if activations grow step by step"


def nan_report_from(raw: dict, **fields) -> NanHookReport:
    rep = NanHookReport(found=bool(raw.get("found")), steps_run=raw.get("steps_run", 0), step=raw.get("step"),
                        phase=raw.get("phase"), rank=raw.get("rank"), loss_history=raw.get("loss_history", []),
                        grad_norm_history=raw.get("grad_norm_history", []), optimizer=raw.get("optimizer"), **fields)
    op = raw.get("op") or {}
    mod = raw.get("module") or {}
    bwd = raw.get("backward") or {}
    if op:
        rep.op, rep.op_location = op.get("op"), op.get("where")
        rep.op_inputs = _stats(op.get("inputs"))
    if bwd:
        rep.op, rep.op_location = bwd.get("op"), bwd.get("where")
        rep.op_inputs = _stats(bwd.get("inputs"))
        rep.module = bwd.get("module")
    if mod:
        rep.module, rep.module_type, rep.output = mod.get("module"), mod.get("type"), mod.get("output")
        rep.module_inputs, rep.module_params = _stats(mod.get("inputs")), _stats(mod.get("params"))
    elif op.get("module"):
        rep.module, rep.module_type = op.get("module"), op.get("module_type")
    rep.bad_params = raw.get("bad_param_names") or raw.get("bad_grad_params") or []
    if raw.get("batch"):
        rep.op_inputs = _stats(raw["batch"])
    if not rep.found:
        return rep
    if raw.get("cause_hint") == "non_finite_input":
        rep.cause, fix = "non-finite input data", "Drop or repair the bad samples in the data pipeline (check for NaN in the raw data / division in preprocessing)"
    else:
        rep.cause, fix = nan_cause(rep.op, rep.op_inputs, rep.phase, rep.grad_norm_history, rep.loss_history)
    ev = [Evidence(what="first non-finite step", value=rep.step, source="nan_hook_run"),
          Evidence(what="phase", value=rep.phase, source="nan_hook_run")]
    if rep.op:
        ev.append(Evidence(what="op", value=rep.op, source=rep.op_location or ""))
    for s in rep.op_inputs[:2]:
        ev.append(Evidence(what=f"{rep.op or 'op'} {s.name} min/max/zeros",
                           value=f"{_fmt(s.min)} / {_fmt(s.max)} / {_fmt(s.zero_frac)}", source="nan_hook_run"))
    fin_l = [x for x in rep.loss_history if is_finite(x)]
    if fin_l:
        ev.append(Evidence(what="last finite loss", value=fin_l[-1], source="nan_hook_run"))
    fin_g = [x for x in rep.grad_norm_history if is_finite(x)]
    if fin_g:
        ev.append(Evidence(what="max grad norm before", value=max(fin_g), source="nan_hook_run"))
    if rep.phase == "optimizer_step" and rep.optimizer:
        ev.append(Evidence(what="optimizer", value=str(rep.optimizer), source="nan_hook_run"))
    where = rep.op_location or rep.module
    # a NaN reached by a gradient norm growing step after step is the LR's symptom, not its own cause
    lr_caused = rep.cause == "lr"
    rep.findings.append(Finding(
        failure_mode="nan_inf", confidence=0.9 if rep.cause not in ("overflow", "optimizer step", "lr") else 0.7,
        summary=(f"{rep.cause}: first non-finite value at step {rep.step} in the {rep.phase} phase"
                 + (f", op {rep.op}" if rep.op else "") + (f" in {rep.module} ({rep.module_type})" if rep.module and rep.module_type else
                                                          f" in {rep.module}" if rep.module else "")),
        evidence=ev, fix=fix, location=where))
    if rep.cause == "lr":
        rep.findings.append(Finding(
            failure_mode="lr_too_high", confidence=0.9 if lr_caused else 0.6,
            summary="the gradient norm grew step by step before the first non-finite value: the LR diverges",
            evidence=[Evidence(what="grad norm history", value=", ".join(_fmt(g) for g in rep.grad_norm_history[-6:]),
                               source="nan_hook_run")],
            fix="Lower the LR 3-10x or add warmup; run lr_range_test to place the LR"))
    return rep


async def nan_hook_run(workspace_root: Path, target: str | None = None, command: list[str] | None = None,
                       max_steps: int = 200, python: str | None = None, timeout_s: float = 300.0,
                       on_progress: ProgressFn | None = None) -> NanHookReport:
    """Train until the first non-finite value and localise it (step, phase, module, op, inputs, cause)."""
    _not_both(target, command)
    if command:
        return await _script_nan(workspace_root, command, max_steps, python, timeout_s, on_progress)
    _need_target(target)
    raw, err, oc = await _run("mltriage_nan_hook.py", {"target": target, "max_steps": max_steps}, workspace_root,
                              python, timeout_s, on_progress, "nan_hook_run")
    if err:
        return _error_report(NanHookReport, err, oc, target=target)
    return nan_report_from(raw, target=target, python=oc.python, duration_s=oc.duration_s)


# ---------------------------------------------------------------- overfit_test

class OverfitReport(ProbeReport):
    passed: bool = False
    outcome: Literal["passed", "flat", "slow", "diverged", "nan", "negative", "error"] = "error"
    steps_run: int = 0
    max_steps: int = 0
    initial_loss: Num = None
    final_loss: Num = None
    best_loss: Num = None
    threshold: Num = Field(None, description="loss at or below which the batch counts as memorised")
    drop_fraction: Num = None
    trajectory: list[tuple[int, Num]] = Field(default_factory=list, description="(step, loss), downsampled")
    wall_time_s: float = 0.0
    lr: Num = None
    loss_kind: str | None = None
    params_grad_none: int = 0
    params_unchanged: int = 0
    trainable_params: int = 0

    def headline(self) -> str:
        if self.error:
            return f"overfit_test: {self._error_line()}"
        verdict = "PASSED" if self.passed else f"FAILED ({self.outcome})"
        return (f"overfit_test {verdict}: loss {_fmt(self.initial_loss)} -> {_fmt(self.final_loss)} in "
                f"{self.steps_run} steps on one batch (pass <= {_fmt(self.threshold)}), {self.wall_time_s:.1f} s")


ELEMENTWISE_LOSSES = ("mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy",
                      "binary_cross_entropy_with_logits")


def loss_shape_finding(raw: dict, src: str) -> Finding | None:
    """mse_loss(pred (N,1), y (N,)) broadcasts to (N,N) silently: the model learns the mean."""
    shapes = raw.get("loss_shapes")
    if raw.get("loss_kind") in ELEMENTWISE_LOSSES and shapes and shapes[0] != shapes[1]:
        return Finding(failure_mode="shape_mismatch", confidence=0.9,
                       summary=f"{raw['loss_kind']} compares an output of shape {shapes[0]} with a target of shape "
                               f"{shapes[1]}: they broadcast silently instead of matching element by element",
                       evidence=[Evidence(what="loss input shape", value=str(shapes[0]), source=src),
                                 Evidence(what="loss target shape", value=str(shapes[1]), source=src)],
                       fix="Make the shapes equal before the loss (pred.squeeze(-1) or y.unsqueeze(-1)) and assert them",
                       facts={"rows_against_rows": True})
    return None


def unloaded_weights_finding(loads: list[dict], src: str) -> Finding | None:
    """A load_state_dict(strict=False) in the factory that filled under half of its module's tensors: the
    'pretrained' part trains from its random init. A new head left out of a partial load is the usual case and
    stays quiet (most tensors load)."""
    redone = [l for l in loads if l.get("in_model") and l.get("compared", 0) >= 2 and l["overwritten"] >= 0.5 * l["compared"]]
    if redone:
        l = redone[0]
        where = (l.get("where") or "").partition(" ")[0]
        return Finding(
            failure_mode="bad_init", confidence=0.8,
            summary=(f"{l['overwritten']} of the {l['compared']} parameters load_state_dict filled in {l['module']}"
                     f"{' at ' + where if where else ''} no longer hold the checkpoint's values when the factory "
                     "returns: something re-initialised them after loading (an init, apply(_init_weights) or "
                     "post_init() run on the model that wraps the loaded part), so it trains from random weights"),
            evidence=[Evidence(what=f"{l['module']} parameters changed after loading",
                               value=f"{l['overwritten']} of {l['compared']}", source=src),
                      Evidence(what="changed (first)", value=", ".join(l.get("overwritten_keys") or []), source=src)],
            location=where or None,
            fix="Load the checkpoint after the model is built and initialised, or initialise only the new parts "
                "(the head, the pooler), not the whole model",
            avoid="Do not tune the LR or the head: the backbone it fine-tunes is random.",
            facts={"weights_not_loaded": True})
    bad = [l for l in loads if not l.get("strict") and l.get("keys", 0) >= 2 and l["keys"] - l["missing"] < 0.5 * l["keys"]]
    if not bad:
        return None
    l = bad[0]
    where = (l.get("where") or "").partition(" ")[0]
    loaded = l["keys"] - l["missing"]
    renamed = l.get("renamed")
    return Finding(
        failure_mode="bad_init", confidence=0.8,
        summary=(f"load_state_dict(strict=False){' at ' + where if where else ''} filled {loaded} of the {l['keys']} "
                 f"tensors of {l['module']}; {l['unexpected']} checkpoint keys matched nothing"
                 + (f" ('{renamed[0]}' is the checkpoint's name for '{renamed[1]}')" if renamed else "")
                 + ": strict=False hid it, and the model trains from its random initialisation"),
        evidence=[Evidence(what=f"{l['module']} tensors loaded", value=f"{loaded} of {l['keys']}", source=src),
                  Evidence(what="missing keys (first)", value=", ".join(l.get("missing_keys") or []), source=src),
                  Evidence(what="unexpected keys (first)", value=", ".join(l.get("unexpected_keys") or []), source=src)],
        location=where or None,
        fix=("Map the checkpoint's names to the model's before loading"
             + (f" (strip the prefix: '{renamed[0]}' -> '{renamed[1]}')" if renamed else "")
             + ", then load with strict=True, or check the missing_keys/unexpected_keys that load_state_dict returns"),
        avoid="Do not tune the LR or the head: the features it reads are random until the weights load.",
        facts={"weights_not_loaded": True})


def outer_broadcast_finding(raw: dict, src: str) -> Finding | None:
    """The same silent (N, 1) vs (N,) broadcast, or (B, 1, T) vs (B, T), in the user's own arithmetic (a hand-written
    loss), which no loss function sees: BroadcastWatch in the probe names the op and the line."""
    hit = next(iter(raw.get("outer_broadcasts") or []), None)
    if hit is None:
        return None
    where, _, fn = hit["where"].partition(" ")
    a, b = hit["shapes"]
    axis = hit.get("axis", len(a) - 1)
    squeeze = "-1" if axis == len(a) - 1 else str(axis)
    return Finding(
        failure_mode="shape_mismatch", confidence=0.85,
        summary=f"`{hit['op']}` at {where} {fn} combines a {tuple(a)} tensor with a {tuple(b)} one: they broadcast to "
                f"{tuple(hit['result'])}, every row against every row of the batch, so a loss averaged over it trains "
                "the model toward the batch mean and it ignores its inputs".replace("  ", " "),
        evidence=[Evidence(what="operand shapes", value=f"{tuple(a)} and {tuple(b)}", source=src),
                  Evidence(what="result shape", value=str(tuple(hit["result"])), source=src)],
        location=where,
        fix=f"Make the shapes equal before the arithmetic: squeeze the {tuple(a)} tensor's size-1 axis (.squeeze("
            f"{squeeze}), or unsqueeze the other), and assert pred.shape == target.shape in the loss",
        avoid="Do not tune the LR, the loss or the model: it learns the batch mean at any setting until the shapes match.",
        facts={"rows_against_rows": True})


def overfit_findings(rep: OverfitReport, raw: dict) -> list[Finding]:
    src = "overfit_test"
    shape = loss_shape_finding(raw, src)
    if rep.passed:
        return [shape] if shape else []
    if shape:
        return [shape]
    ev = [Evidence(what="loss first -> last", value=f"{_fmt(rep.initial_loss)} -> {_fmt(rep.final_loss)}", source=src),
          Evidence(what="steps", value=rep.steps_run, source=src), Evidence(what="lr", value=rep.lr, source=src)]
    if rep.outcome == "negative":
        return [Finding(failure_mode="loss_function", confidence=0.85,
                        summary=f"{rep.loss_kind} should be >= 0 but the loss is negative and keeps falling: its sign is flipped",
                        evidence=ev, fix="Remove the extra minus sign: the optimizer is maximising the error")]
    if rep.outcome == "nan":
        return [Finding(failure_mode="nan_inf", confidence=0.85, summary="the loss went non-finite while overfitting one batch",
                        evidence=ev, fix="Run nan_hook_run on the same target to name the op and module")]
    if rep.outcome == "diverged":
        return [Finding(failure_mode="lr_too_high", confidence=0.75, summary="the loss rose while overfitting one batch",
                        evidence=ev, fix="Lower the LR 3-10x (overfit_test lr=...), then run lr_range_test")]
    out = []
    if rep.params_grad_none:
        out.append(Finding(failure_mode="broken_graph", confidence=0.85,
                           summary=f"{rep.params_grad_none} of {rep.trainable_params} trainable parameters got no gradient",
                           evidence=ev + [Evidence(what="params with grad None", value=rep.params_grad_none, source=src)],
                           fix="Run grad_norm_snapshot to name them, then find the .detach()/no_grad that cuts them off"))
    elif raw.get("params_grad_zero"):
        out.append(Finding(failure_mode="dead_units", confidence=0.6,
                           summary=f"{raw['params_grad_zero']} of {rep.trainable_params} trainable parameters got exactly zero gradient on every one of {rep.steps_run} steps (dead ReLUs, or a cut graph)",
                           evidence=ev + [Evidence(what="params with an all-zero gradient", value=raw["params_grad_zero"], source=src)],
                           fix="Run grad_norm_snapshot: it counts dead units per activation and names the layers"))
    elif rep.params_unchanged:
        # not decisive: gradients too small to move a float32 weight (vanishing) look the same from here
        out.append(Finding(failure_mode="frozen_params", confidence=0.6,
                           summary=f"{rep.params_unchanged} of {rep.trainable_params} trainable parameters never changed "
                                   "(left out of the optimizer, lr 0, or gradients too small to move them)",
                           evidence=ev + [Evidence(what="params unchanged", value=rep.params_unchanged, source=src)],
                           fix="Run grad_norm_snapshot: these are left out of the optimizer or have lr 0",
                           facts={"may_round_away": True}))
    floor = None
    if rep.loss_kind == "cross_entropy" and raw.get("ce_classes"):
        c = raw["ce_classes"]
        floor = math.log(1 + (c - 1) / math.e)
    if raw.get("ce_input_is_probability"):
        out.append(Finding(failure_mode="loss_function", confidence=0.85,
                           summary="cross_entropy is given probabilities (rows in [0,1] summing to 1), not logits: a double softmax",
                           evidence=ev + ([Evidence(what="double-softmax loss floor ln(1+(C-1)/e)", value=floor, source=src)]
                                          if floor else []),
                           fix="Remove the softmax at the end of the model; F.cross_entropy / nn.CrossEntropyLoss apply log_softmax themselves",
                           facts={"probabilities_into_loss": True}))
    if not out:
        if rep.outcome == "flat":
            out.append(Finding(failure_mode="lr_too_low", confidence=0.4,
                               summary="the loss did not move on a single batch",
                               evidence=ev, fix=("Check in order: grad_norm_snapshot (broken graph, frozen params, "
                                                 "update ratio), the loss function's sign and inputs, then try lr 10x higher")))
        else:
            # Adam at too high an LR crawls on one batch too (a char LM at 3e-2 stalls where 1e-3 memorises it):
            # which way the LR is off takes a second run, not this one
            from tools.triage import ONE_BATCH_LEARNS
            lr = rep.lr if is_finite(rep.lr) and rep.lr > 0 else None
            fell = rep.drop_fraction if is_finite(rep.drop_fraction) else 0.0
            mostly = fell >= ONE_BATCH_LEARNS  # most of the batch learnt, short of the 95% mark: the LR moves the model
            out.append(Finding(failure_mode="lr_too_low", confidence=0.2 if mostly else 0.3,
                               summary=(f"the loss fell {fell:.0%} of the way on a single batch in {rep.steps_run} "
                                        "steps, short of the 95% that counts as memorised: most of it, so the LR "
                                        "moves the model; a remote hypothesis" if mostly else
                                        f"the loss fell only {fell:.0%} of the way on a single batch: the LR is off "
                                        "in one direction or the other, or something stops the model fitting"),
                               evidence=ev, fix=(f"Re-run overfit_test with lr={lr / 10:.3g}, then lr={lr * 10:.3g}: the "
                                                 "one that memorises the batch says which way the LR is off; if neither "
                                                 "does, run grad_norm_snapshot (dead units, vanishing gradients)"
                                                 if lr else "Run grad_norm_snapshot (dead units, vanishing gradients, "
                                                 "update ratio) and lr_range_test before tuning anything"),
                               avoid="Do not raise or lower the LR on this alone: one run at one LR cannot say which way"))
    return out


async def overfit_test(workspace_root: Path, target: str, steps: int = 300, lr: float | None = None,
                       python: str | None = None, timeout_s: float = 300.0,
                       on_progress: ProgressFn | None = None) -> OverfitReport:
    """Train on one fixed batch; pass when the loss falls by >= 95% (or below a task-aware floor)."""
    _need_target(target)
    raw, err, oc = await _run("mltriage_overfit.py", {"target": target, "steps": steps, "lr": lr}, workspace_root,
                              python, timeout_s, on_progress, "overfit_test")
    if err:
        return _error_report(OverfitReport, err, oc, target=target)
    ini, fin = raw.get("initial_loss"), raw.get("final_loss")
    drop = (ini - fin) / abs(ini) if is_finite(ini) and is_finite(fin) and ini else None
    rep = OverfitReport(target=target, python=oc.python, duration_s=oc.duration_s, drop_fraction=drop,
                        trajectory=[tuple(t) for t in raw.get("trajectory", [])],
                        **{k: v for k, v in raw.items() if k in OverfitReport.model_fields and k != "trajectory"})
    rep.findings = overfit_findings(rep, raw)
    return rep


# ---------------------------------------------------------------- init_loss_check

class LayerScale(BaseModel):
    module: str
    module_type: str | None = None
    output_std: Num = None
    input_std: Num = None
    gain: Num = Field(None, description="output std / input std")


class InitLossReport(ProbeReport):
    loss: Num = None
    expected: Num = None
    expected_from: str = ""
    best_constant_loss: Num = Field(None, description="the loss of the best constant prediction: the targets' variance "
                                                      "(MSE), the label frequencies' entropy (cross-entropy)")
    ratio: Num = Field(None, description="loss / expected")
    verdict: Literal["ok", "too_high", "too_low", "unknown", "error"] = "unknown"
    loss_kind: str | None = None
    logit_std: Num = None
    logit_mean: Num = None
    constant_outputs: bool | None = None
    zero_weight_layers: list[str] = Field(default_factory=list, description="layers whose weight is exactly zero "
                                          "(a head zero-initialised on purpose) when the output is constant")
    output_is_probability: bool | None = None
    layers: list[LayerScale] = Field(default_factory=list)
    random_input_loss: Num = Field(None, description="after a short training: loss on random inputs")
    real_input_loss: Num = Field(None, description="after the same training: loss on the real inputs")
    random_input_note: str | None = None
    model_training: bool | None = Field(None, description="model.training as the factory returned it")
    eval_mode_modules: list[str] = Field(default_factory=list, description="dropout/batch-norm modules in eval mode")
    # read by triage and tests, not sent: the findings carry them to the agent (the tool list's size is budgeted)
    slow_norm_stats: list[str] = Field(default_factory=list, exclude=True)
    rows_mixed: dict | None = Field(None, exclude=True)  # row 0 set to row 1 in eval: the other rows that moved

    def headline(self) -> str:
        if self.error:
            return f"init_loss_check: {self._error_line()}"
        return (f"init_loss_check: loss at init {_fmt(self.loss)} vs expected {_fmt(self.expected)} "
                f"({self.expected_from}) -> {self.verdict}")


# A default-initialised head over unnormalised features (max-pooled, BatchNorm'd) starts with logits of std 1-2:
# ln C plus about a nat, 1.6x chance for 5 classes (dev healthy_headline_textcnn). A broken init is several times
# chance (an output layer with std 5: 7x). Up to this ratio the finding is a hypothesis.
MILD_INIT = 2.5


def init_report_from(raw: dict, **fields) -> InitLossReport:
    out = raw.get("output") or {}
    layers = [LayerScale(module=l["module"], module_type=l.get("module_type"), output_std=l.get("std"),
                         input_std=l.get("input_std"),
                         gain=(l["std"] / l["input_std"]) if is_finite(l.get("std")) and is_finite(l.get("input_std"))
                         and l["input_std"] > 0 else None) for l in raw.get("layers", [])]
    rep = InitLossReport(loss=raw.get("loss"), expected=raw.get("expected"), expected_from=raw.get("expected_from", ""),
                         best_constant_loss=raw.get("best_constant_loss"),
                         loss_kind=raw.get("loss_kind"), logit_std=out.get("std"), logit_mean=out.get("mean"),
                         constant_outputs=out.get("constant"), zero_weight_layers=out.get("zero_weight_layers") or [],
                         output_is_probability=out.get("is_probability"),
                         layers=layers, model_training=raw.get("training_mode"),
                         eval_mode_modules=[f"{n} ({t})" for n, t in raw.get("eval_mode_modules", [])],
                         slow_norm_stats=[f"{n} (momentum={m:g})" for n, m in raw.get("slow_norm_stats", [])], **fields)
    ri = raw.get("random_input") or {}
    rep.random_input_loss, rep.real_input_loss = ri.get("loss_random_inputs"), ri.get("loss_real_inputs")
    rep.random_input_note = ri.get("skipped")
    src = "init_loss_check"
    if is_finite(rep.loss) and is_finite(rep.expected) and rep.expected > 0:
        rep.ratio = rep.loss / rep.expected
        # MSE from a default-initialised net is E[y^2] + Var(output): several times E[y^2] is normal there
        high = 10.0 if rep.loss_kind == "mse_loss" else 1.5
        # too low only under what a constant could score: a sigmoid decoder at 0.5 beats an output at zero by itself
        beats_constant = not is_finite(rep.best_constant_loss) or rep.loss < 0.5 * rep.best_constant_loss
        rep.verdict = "too_high" if rep.ratio > high else "too_low" if rep.ratio < 0.5 and beats_constant else "ok"
    elif rep.loss is not None and not is_finite(rep.loss):
        rep.findings.append(Finding(failure_mode="nan_inf", confidence=0.9, summary="the loss is already non-finite at init",
                                    evidence=[Evidence(what="loss at init", value=rep.loss, source=src)],
                                    fix="Run nan_hook_run to find the op"))
    ev = [Evidence(what="loss at init", value=rep.loss, source=src),
          Evidence(what="expected", value=rep.expected, source=rep.expected_from),
          Evidence(what="logit std", value=rep.logit_std, source=src)]
    mode = eval_mode_finding(rep.model_training, rep.eval_mode_modules, src)
    if mode:
        rep.findings.append(mode)
    slow = slow_norm_finding(raw.get("slow_norm_stats") or [], src)
    if slow:
        rep.findings.append(slow)
    rep.rows_mixed = raw.get("rows_mixed")
    mixed = rows_mixed_finding(rep.rows_mixed, src)
    if mixed:
        rep.findings.append(mixed)
    if rep.verdict == "too_high" and mode and mode.confidence >= 0.8:
        # batch-norm layers in eval mode normalise with their untouched running stats (0/1): the output
        # scale blows up and the initial loss with it, so the mode explains the loss
        mode.evidence.append(Evidence(what="loss at init / chance", value=rep.ratio, source=src))
    elif rep.verdict == "too_high" and layers and is_finite(layers[0].input_std) and layers[0].input_std > RAW_SCALE:
        first = layers[0]
        rep.findings.append(Finding(
            failure_mode="data_pipeline", confidence=0.8,
            summary=(f"initial loss {rep.loss:.3g} is {rep.ratio:.1f}x the chance value because the inputs are not "
                     f"normalised: the first layer ({first.module}) receives values with std {first.input_std:.3g}"),
            evidence=ev + [Evidence(what=f"{first.module} input std", value=first.input_std, source=src)],
            location=first.module,
            fix="Standardise every input feature with the training split's mean/std (check which columns the scaler "
                "is fit and applied on), then re-check the initial loss"))
    elif rep.verdict == "too_high":
        big = max((l for l in layers if is_finite(l.gain)), key=lambda l: l.gain, default=None)
        culprit = big if big is not None and big.gain > 4 else (layers[-1] if layers else None)
        if culprit:
            ev.append(Evidence(what=f"{culprit.module} output std / input std", value=f"{_fmt(culprit.output_std)} / "
                               f"{_fmt(culprit.input_std)}", source=src))
        if rep.output_is_probability:
            rep.findings.append(Finding(failure_mode="loss_function", confidence=0.7,
                                        summary="the loss is fed probabilities, not logits", evidence=ev,
                                        facts={"probabilities_into_loss": True},
                                        fix="Give the loss the raw logits (no softmax/sigmoid before cross_entropy)"))
        else:
            mild = rep.loss_kind != "mse_loss" and rep.ratio <= MILD_INIT
            rep.findings.append(Finding(
                failure_mode="bad_init", confidence=0.45 if mild else 0.85,
                summary=(f"initial loss {rep.loss:.3g} is {rep.ratio:.1f}x the chance value {rep.expected:.3g}"
                         + (f"; {culprit.module} ({culprit.module_type}) blows the scale up {culprit.gain:.0f}x"
                            if culprit and is_finite(culprit.gain) and culprit.gain > 4 else
                            f"; the logits start with std {_fmt(rep.logit_std)}" if is_finite(rep.logit_std) else "")
                         + ("; mildly: a default-initialised head does that, and it costs the first steps, rarely "
                            "the run" if mild else "")),
                evidence=ev, location=culprit.module if culprit else None,
                fix=("Initialise that layer with a small std (e.g. nn.init.normal_(w, std=0.01) for the output layer, "
                     "default Kaiming/Xavier elsewhere) so the initial logits are near zero and the loss near ln(C)")))
    elif rep.verdict == "too_low" and is_finite(rep.loss) and rep.loss < 0:
        rep.findings.append(Finding(
            failure_mode="loss_function", confidence=0.85,
            summary=f"the loss at init is negative ({rep.loss:.3g}) where {rep.expected:.3g} is expected: its sign is flipped",
            evidence=ev, fix="Remove the extra minus sign (nll_loss / cross_entropy are already the negative log-likelihood)"))
    elif rep.verdict == "too_low":
        rep.findings.append(Finding(
            failure_mode="data_leakage", confidence=0.6,
            summary=f"initial loss {rep.loss:.3g} is far below the chance value {rep.expected:.3g}: the untrained model already 'knows' the answer",
            evidence=ev, fix="Check that labels are not in the inputs (run data_check) and that the loss is averaged the usual way"))
    if rep.output_is_probability and rep.loss_kind in ("cross_entropy", "nll_loss") and rep.loss_kind == "cross_entropy" \
            and not any(f.failure_mode == "loss_function" for f in rep.findings):
        rep.findings.append(Finding(failure_mode="loss_function", confidence=0.8,
                                    summary="cross_entropy receives probabilities (rows sum to 1): a double softmax",
                                    facts={"probabilities_into_loss": True},
                                    evidence=ev, fix="Remove the final softmax; cross_entropy applies log_softmax itself"))
    rate = _rate_read_as_log_rate(raw.get("poisson") or {}, src)
    if rate:
        rep.findings.append(rate)
    skipped = _class_ignored(raw.get("ignored_class") or {}, src)
    if skipped:
        rep.findings.append(skipped)
    backwards = _loss_pushes_wrong_way(raw.get("loss_direction") or {}, src)
    if backwards:
        rep.findings.append(backwards)
    short = _head_cannot_reach(raw.get("head_reach") or {}, rep.loss_kind, src)
    if short:
        rep.findings.append(short)
    li = raw.get("loss_input") or {}
    shape = (raw.get("loss_shapes") or [[]])[0]
    # one logit per row can sit on one side of 0 by its bias alone; many outputs per row cannot all do so
    if rep.loss_kind == "binary_cross_entropy_with_logits" and li.get("n", 0) >= 16 and len(shape) >= 2 \
            and math.prod(shape[1:]) >= 4 \
            and is_finite(li.get("min")) and 0 <= li["min"] and li["max"] <= 1:
        # logits at init straddle 0; all of them in [0, 1] means a sigmoid already ran (the loss stays ~ln 2 at
        # init either way, so the initial loss alone cannot show it)
        rep.findings.append(Finding(
            failure_mode="loss_function", confidence=0.85,
            summary=f"binary_cross_entropy_with_logits receives values all in [0, 1] ({_fmt(li['min'])}..{_fmt(li['max'])} "
                    f"over {li['n']}): they are probabilities, and the loss applies its sigmoid a second time",
            evidence=[Evidence(what="loss input min..max", value=f"{_fmt(li['min'])}..{_fmt(li['max'])}", source=src)],
            fix="Feed the raw logits (remove the final sigmoid / nn.Sigmoid) and apply torch.sigmoid only for predictions",
            avoid="Do not switch to BCELoss on top of a clamp: keep the logits and the fused, stable loss",
            facts={"probabilities_into_loss": True}))
    tr = ri.get("loss_input_trained") or {}
    # one logit per row may sit in [0, 1] at init; trained on rows labelled 0 it goes below 0, a probability cannot
    if rep.loss_kind == "binary_cross_entropy_with_logits" and tr.get("n", 0) >= 16 and ri.get("steps", 0) >= 20 \
            and min(tr.get("zeros", 0), tr.get("ones", 0)) >= 4 and is_finite(tr.get("min")) \
            and 0 <= tr["min"] and tr["max"] <= 1 and is_finite(li.get("min")) and 0 <= li["min"] and li["max"] <= 1 \
            and not any(f.failure_mode == "loss_function" for f in rep.findings):
        rep.findings.append(Finding(
            failure_mode="loss_function", confidence=0.8,
            summary=f"binary_cross_entropy_with_logits receives values in [0, 1] at init and still after {ri['steps']} "
                    f"training steps ({_fmt(tr['min'])}..{_fmt(tr['max'])} over {tr['n']}, {tr['zeros']} labelled 0): "
                    "a logit of a row labelled 0 is pushed below 0, a probability cannot go there, so the loss applies "
                    "its sigmoid a second time",
            evidence=[Evidence(what="loss input min..max at init", value=f"{_fmt(li['min'])}..{_fmt(li['max'])}",
                               source=src),
                      Evidence(what=f"after {ri['steps']} steps", value=f"{_fmt(tr['min'])}..{_fmt(tr['max'])}",
                               source=src)],
            fix="Feed the raw logits (remove the final sigmoid / nn.Sigmoid) and apply torch.sigmoid only for predictions",
            avoid="Do not switch to BCELoss on top of a clamp: keep the logits and the fused, stable loss",
            facts={"probabilities_into_loss": True}))
    if rep.loss_kind == "nll_loss" and li.get("n", 0) >= 16 and is_finite(li.get("max")) and li["max"] > 1e-3:
        rep.findings.append(Finding(
            failure_mode="loss_function", confidence=0.8,
            summary=f"nll_loss receives positive values (max {_fmt(li['max'])}): it expects log-probabilities (<= 0), "
                    "so it is being given raw logits or probabilities",
            evidence=[Evidence(what="loss input max", value=li["max"], source=src)],
            fix="Apply log_softmax before nll_loss, or use cross_entropy on the raw logits"))
    if rep.constant_outputs and not rep.zero_weight_layers:  # a zero-initialised head learns from its first step
        rep.findings.append(Finding(failure_mode="dead_units", confidence=0.7, summary="the output is constant across the batch at init",
                                    evidence=ev, fix="Check for an all-zero init, dead ReLUs or inputs that never reach the output"))
    shape = loss_shape_finding(raw, "init_loss_check") or outer_broadcast_finding(raw, "init_loss_check")
    if shape:
        rep.findings.append(shape)
    unloaded = unloaded_weights_finding(raw.get("weight_loads") or [], src)
    if unloaded:
        rep.findings.append(unloaded)
    fb, rr, rd = ri.get("loss_before"), rep.real_input_loss, rep.random_input_loss
    if all(is_finite(v) for v in (fb, rr, rd)) and rr < 0.9 * fb and abs(rd - rr) <= 0.05 * abs(rr) + 1e-6:
        rep.findings.append(Finding(
            failure_mode="data_pipeline", confidence=0.7,
            summary="after a short training the loss on random inputs equals the loss on the real ones: the inputs carry no information",
            evidence=[Evidence(what="loss real inputs", value=rr, source=src), Evidence(what="loss random inputs", value=rd, source=src)],
            fix="Print a batch as the model sees it: preprocessing may zero, overwrite or mis-index the inputs",
            facts={"symptom_only": True, "inputs_no_signal": True}))
    return rep


# standardised inputs have std ~1, images in [0, 1] or 0-255 stay below this; raw counts and currency do not
RAW_SCALE = 300.0


def eval_mode_finding(training: bool | None, eval_modules: list[str], src: str) -> Finding | None:
    if eval_modules and training is False:
        return Finding(
            failure_mode="train_eval_mode", confidence=0.9,
            summary=f"the model is in eval mode while training, with {len(eval_modules)} dropout/batch-norm "
                    "modules frozen in eval behaviour",
            evidence=[Evidence(what="model.training", value=False, source=src)]
            + [Evidence(what="eval-mode module", value=m, source=src) for m in eval_modules[:4]],
            fix="Call model.train() before the training steps (an evaluate() that calls model.eval() must switch back)")
    if eval_modules:
        return Finding(
            failure_mode="train_eval_mode", confidence=0.7,
            summary=f"{len(eval_modules)} dropout/batch-norm submodules are in eval mode inside a model in train mode",
            evidence=[Evidence(what="eval-mode module", value=m, source=src) for m in eval_modules[:4]],
            fix="Find the .eval() call on the submodule; call model.train() on the whole model before training "
                "(fine if you froze a pretrained backbone's batch-norm on purpose)")
    return None


INTERLEAVED = 0.2  # pixels C apart along W correlate this much more than neighbours: the channels sit side by side


def interleaved_channels_finding(i: "InputStat", src: str) -> Finding | None:
    ci = i.channel_interleave or {}
    lag1, lag_c, c = ci.get("lag1_corr"), ci.get("lag_channels_corr"), ci.get("channels")
    if not (is_finite(lag1) and is_finite(lag_c)) or lag_c < 0.5 or lag_c < lag1 + INTERLEAVED:
        return None
    image = ci.get("kind", "image") == "image"
    unit, axis = ("pixels", "W") if image else ("values", "time")
    return Finding(
        failure_mode="data_pipeline", confidence=0.75,
        summary=f"{i.name} {i.shape} looks like channels-last data read as channels-first: along its last axis, "
                f"{unit} {c} apart correlate {lag_c:.2f} but neighbours only {lag1:.2f}, so each step's {c} channels "
                "sit side by side ("
                + ("an (N, H, W, C) array reshaped or viewed to (N, C, H, W) scrambles rows and colours)" if image else
                   "a time-major (T, C) stream reshaped or viewed to (N, C, L) mixes every channel into each row)"),
        evidence=[Evidence(what=f"correlation of neighbouring values along {axis}", value=lag1, source=src),
                  Evidence(what=f"correlation of values {c} apart along {axis}", value=lag_c, source=src)],
        fix=("Move the channel axis with x.permute(0, 3, 1, 2) (then .contiguous()), never .reshape/.view; show one "
             "image as the model receives it to check") if image else
            ("Cut windows as (N, L, C) and move the channel axis with x.transpose(1, 2) (then .contiguous()), never "
             ".reshape/.view; plot one window's channels as the model receives them to check"),
        avoid=f"Do not retune the normalisation or the model: the {unit} are in the wrong order, not the wrong scale",
        location=i.name, facts={"channels_interleaved": True, "ndim": len(i.shape)})


PAD_OFFSET_BAND = (0.85, 1.15)  # every feature's real-step mean within this share of sqrt(p/(1-p))


def padding_in_scaler_finding(i: "InputStat", src: str) -> Finding | None:
    """Per-feature mean/std fitted over a zero-padded array (X.reshape(-1, F) with the pads in): each feature's real
    values all land near sqrt(p/(1-p)) of the pad share p, with a small spread, so what tells the sequences apart
    shrinks to a tenth of a unit (dev `ahu_cycle_gru_fault_classifier`: 62% padding, every feature at 1.26-1.31,
    stds 0.05-0.34; the run still learnt and read healthy)."""
    a = i.padding_in_scaler or {}
    lo_hi, spread, off = a.get("feature_mean_over_offset") or [], a.get("max_std_over_mean"), a.get("offset")
    if len(lo_hi) != 2 or not all(is_finite(v) for v in (*lo_hi, spread, off)) or off < 0.5:
        return None
    if not (PAD_OFFSET_BAND[0] <= lo_hi[0] and lo_hi[1] <= PAD_OFFSET_BAND[1] and spread < 0.5):
        return None
    share = a["pad_share"]
    return Finding(
        failure_mode="data_pipeline", confidence=0.75,
        summary=f"{i.name} {i.shape} was standardised with its padding counted in: {share:.0%} of its time steps are "
                f"padding, and every one of its {a['features']} features sits at {lo_hi[0] * off:.2f}-"
                f"{lo_hi[1] * off:.2f} on the real steps, which is sqrt(p/(1-p)) = {off:.2f} of that pad share, with "
                f"a spread of at most {spread:.2f} of it: the statistics were taken over the zeros, so the variation "
                "that tells the sequences apart is a fraction of a unit",
        evidence=[Evidence(what="share of all-zero time steps", value=share, source=src),
                  Evidence(what="feature means on real steps / sqrt(p/(1-p))", value=f"{lo_hi[0]:.2f}..{lo_hi[1]:.2f}",
                           source=src)],
        fix="Fit the mean/std over the real (unpadded) steps only, e.g. np.concatenate([s[:n] for s, n in "
            "zip(X, lengths)]).mean(0), on the training split, and pad after scaling",
        avoid="Do not read the weak accuracy as a hard task or a small model: the inputs were squashed",
        location=i.name, facts={"padding_in_scaler": True})


def constant_columns_finding(i: "InputStat", src: str) -> Finding | None:
    """Table columns that hold one value over every training row checked carry nothing the model can use. A
    hypothesis, not a verdict: a healthy table can keep a column of a category the sample does not hold (dev
    `campus_netflow_dense_ae`'s fixed twin: 2 of 22); a bug leaves the column it meant to fill flat (dev
    `loan_default_residual_mlp`: four missing-value flags built after an in-place fillna, always 0)."""
    if len(i.shape) != 2 or i.shape[0] < 64 or (i.features or 0) < 4 or not i.constant_features:
        return None
    cols = i.constant_features
    return Finding(
        failure_mode="data_pipeline", confidence=0.4,
        summary=f"{len(cols)}{'+' if len(cols) >= 20 else ''} of the {i.features} columns of {i.name} hold one value "
                f"over all {i.shape[0]} training rows checked (columns {', '.join(map(str, cols[:8]))}"
                f"{', ...' if len(cols) > 8 else ''}): a feature built after what it should carry was overwritten "
                "(a flag computed after an in-place fillna, a date diff after a cast), or left unfilled",
        evidence=[Evidence(what="constant columns", value=f"{len(cols)} of {i.features}", source=src)],
        fix="Print the preprocessing output for those columns on a few raw rows: each should vary as its raw "
            "field does; build flags and derived columns before anything fills or casts their source",
        avoid="Do not drop the columns to tidy up before knowing why they are flat",
        location=i.name, facts={"constant_columns": len(cols), "hypothesis_only": True})


# the channels' root-mean-square std under this, in data standardised to unit std along another axis: the
# within-channel variation is under 1% of the variance (dev hydraulic_pump_conv1d_ae 0.02 at most per channel; dev
# waist_imu_har_cnn1d rms 0.05, one magnetometer channel at 0.103)
CHANNEL_FLAT = 0.1


def across_channels_finding(i: "InputStat", src: str) -> Finding | None:
    """A standardisation whose statistics were taken along the wrong axis: every time step (or pixel row) of the
    batch has mean 0 and std 1, yet each channel is nearly constant, so what told the samples apart was divided away
    (dev `hydraulic_pump_conv1d_ae`: per-channel stds 0.003-0.024 against 1.0 per time step; dev
    `waist_imu_har_cnn1d`: a 1,008 hPa barometer beside accelerometers, stds 0.006-0.103, 0.05 in root mean square)."""
    a = i.standardised_across_channels or {}
    top, lo_hi = a.get("channel_std_max"), a.get("channel_mean_range") or []
    rms = a.get("channel_std_rms", top)
    if not is_finite(rms) or rms >= CHANNEL_FLAT or not is_finite(top) or len(lo_hi) != 2:
        return None
    axis, ch = a["standardised_axis"], a["channel_axis"]
    return Finding(
        failure_mode="data_pipeline", confidence=0.75,
        summary=f"{i.name} {i.shape} was standardised along axis {axis}, not per channel: every index of axis {axis} "
                f"has mean 0 and std 1, but each of the {a['channels']} channels (axis {ch}) is nearly constant (stds "
                f"{rms:.3g} in root mean square, up to {top:.3g}; means {lo_hi[0]:.3g}..{lo_hi[1]:.3g}): the "
                "variation within each channel, which tells the samples apart, was scaled away",
        evidence=[Evidence(what=f"root-mean-square std of the channels (axis {ch})", value=rms, source=src),
                  Evidence(what=f"largest std of a channel (axis {ch})", value=top, source=src),
                  Evidence(what="channel means", value=f"{lo_hi[0]:.3g}..{lo_hi[1]:.3g}", source=src)],
        fix=f"Fit the mean/std per channel: reduce over every axis except axis {ch} (for (N, C, L) windows "
            "x.mean(axis=(0, 2)), keepdims), on the training split, and apply the same constants at eval time",
        avoid="Do not read the small loss as a model that fits: a near-constant input is easy to reproduce",
        location=i.name, facts={"standardised_across_channels": True})


def rows_mixed_finding(mixed: dict | None, src: str) -> Finding | None:
    """Karpathy's "use backprop to chart dependencies" (A Recipe for Training Neural Networks, 2019), done with a
    forward pass: in eval mode a row's output must not depend on the other rows of its batch."""
    if not mixed or not mixed.get("other_rows_moved"):
        return None
    n, rows, site = mixed["other_rows_moved"], mixed["rows"], mixed.get("site")
    return Finding(
        failure_mode="shape_mismatch", confidence=0.8,
        summary=f"the model mixes the rows of a batch: in eval mode, with row 0 replaced by a copy of row 1, the "
                f"outputs of {n} of the other {rows - 2} rows changed (first: row {mixed['first_moved']}), so each "
                "label is scored against features of other samples"
                + (f"; they first mix at {site['where']}: {site['code']}" if site else ""),
        evidence=[Evidence(what="other rows whose output moved", value=f"{n} of {rows - 2}", source=src),
                  Evidence(what="largest change / output scale", value=mixed.get("max_change"), source=src)],
        facts={"rows_mixed": True}, location=site["where"] if site else None,
        fix="Find the op that crosses the batch dimension: a .view/.reshape of a (layers*directions, B, H) RNN state "
            "(use h_n.permute(1, 0, 2).reshape(B, -1) or torch.cat([h_n[-2], h_n[-1]], 1)), an nn.LSTM/GRU/"
            "MultiheadAttention fed (B, T, ...) without batch_first=True, a mean/sum over dim 0 meant for time; "
            "print the shapes through forward()",
        avoid="Do not tune the LR or the data: the model pairs each label with other samples' features")


def slow_norm_finding(slow: list, src: str) -> Finding | None:
    """Batch-norm running statistics that move by `momentum` of the way per step reach the batches' statistics
    only after ~3/momentum steps; before that, evaluation normalises with values near their start (mean 0, var 1).
    Whether the run is that short is the log's to say (triage weighs it): here it is a risk."""
    if not slow:
        return None
    m = min(mom for _, mom in slow)
    return Finding(
        failure_mode="train_eval_mode", confidence=0.3,
        summary=f"{len(slow)} batch-norm layer(s) use momentum {m:g}: their running statistics average over "
                f"~{1 / m:.0f} steps, so a run shorter than ~{3 / m:.0f} optimizer steps evaluates with statistics "
                "still near their start (mean 0, variance 1) while training uses each batch's own",
        evidence=[Evidence(what="batch-norm momentum", value=f"{n} {mom:g}", source=src) for n, mom in slow[:4]],
        facts={"slow_norm_momentum": m},
        fix="Use momentum=0.1 (PyTorch's default; a TensorFlow decay d is momentum=1-d) or momentum=None (a "
            "cumulative average); then evaluation follows training",
        avoid="Do not evaluate in train mode or remove batch norm: the layers are in the right mode, only their "
              "running statistics lag")


async def init_loss_check(workspace_root: Path, target: str, python: str | None = None, timeout_s: float = 180.0,
                          on_progress: ProgressFn | None = None) -> InitLossReport:
    _need_target(target)
    raw, err, oc = await _run("mltriage_init_loss.py", {"target": target}, workspace_root, python, timeout_s,
                              on_progress, "init_loss_check")
    if err:
        rep = _error_report(InitLossReport, err, oc, target=target)
        rep.verdict = "error"
        return rep
    return init_report_from(raw, target=target, python=oc.python, duration_s=oc.duration_s)


# ---------------------------------------------------------------- data_check

class InputStat(BaseModel):
    name: str
    shape: list[int]
    dtype: str
    nan: int = 0
    inf: int = 0
    features: int | None = None
    absmax: Num = None
    feature_mean_range: list[Num] = Field(default_factory=list)
    feature_std_range: list[Num] = Field(default_factory=list)
    constant_features: list[int] = Field(default_factory=list)
    leak_feature: int | None = None
    leak_label_explained: Num = Field(None, description="share of label variance one feature alone explains")
    leak_exact_copy: bool | None = None
    channel_interleave: dict | None = None  # an image or Conv1d batch: correlation at lag 1 and lag C (last axis)
    standardised_across_channels: dict | None = None  # unit mean/std along another axis, channels near-constant
    padding_in_scaler: dict | None = None  # a padded (N, T, F) batch: pad share, real values against sqrt(p/(1-p))
    reconstructed: bool = Field(False, exclude=True)  # also the loss's target (an autoencoder's input)


class LabelStat(BaseModel):
    name: str
    shape: list[int]
    dtype: str
    counts: list[int] = Field(default_factory=list)
    classes_present: int | None = None
    majority_frac: Num = None
    imbalance_ratio: Num = None
    mean: Num = None
    std: Num = None


class DataCheckReport(ProbeReport):
    batches_checked: int = 0
    label_slot: str | None = None
    inputs: list[InputStat] = Field(default_factory=list)
    labels: LabelStat | None = None
    model_training: bool | None = None
    eval_mode_modules: list[str] = Field(default_factory=list)
    held_out_loss_real_labels: Num = None
    held_out_loss_permuted_labels: Num = None
    held_out_loss_at_init: Num = None
    train_loss_real_labels: list[Num] = Field(default_factory=list, description=(
        "first and last training loss of the copy trained on the real labels (did it fit its batches?)"))
    alignment_note: str | None = None
    alignment_steps: int | None = None  # the steps each copy trained (cut short by time on a heavy model)
    label_prior_loss: Num = None  # the run's own loss for the best constant prediction (the label prior)
    label_prior_scored_on: str = ""  # "training batches", or the validation loader the constant was scored on
    padding_output_change: Num = None  # how far cutting a row's padding moves its output (0: padding is not read)
    rows_kept_labels: Num = Field(None, description="rows keeping their own labels through the CSV pipeline (1: all; 0: chance)")
    rows_note: str = ""
    # the loaders the factory built, read against the training batches (triage reads it; the finding carries it)
    split_shift: dict | None = Field(None, exclude=True)
    batch_mixing: dict | None = Field(None, exclude=True)  # the training batches' label mix against a shuffle's
    pad_inside: dict | None = Field(None, exclude=True)  # an embedding's padding_idx found between real tokens
    unshuffled: dict | None = Field(None, exclude=True)  # an unshuffled training loader and how its batches mix
    reads_change_data: dict | None = Field(None, exclude=True)  # a dataset whose stored floats change when read
    coerced: dict | None = Field(None, exclude=True)  # numbers in a written format that to_numeric turned into NaN
    text_compared: dict | None = Field(None, exclude=True)  # a column of numbers read as text, compared with one
    sampler_reach: dict | None = Field(None, exclude=True)  # a weighted sampler with fewer weights than samples
    read_ahead: dict | None = Field(None, exclude=True)  # how far a prediction moves when a target at or after it does
    class_weights: dict | None = Field(None, exclude=True)  # the loss's per-class weights against the classes' shares

    def headline(self) -> str:
        if self.error:
            return f"data_check: {self._error_line()}"
        return (f"data_check: {self.batches_checked} batches, {len(self.inputs)} input tensors, labels at "
                f"{self.label_slot}, model in {'train' if self.model_training else 'eval'} mode")


# A feature that predicts the label well is what good data looks like; leakage is the label itself or
# something computed from it, which leaves (almost) no within-class spread at all.
NEAR_EXACT = 0.999


def _leakage_finding(i: InputStat, src: str) -> Finding | None:
    share = i.leak_label_explained
    if not is_finite(share) or (share < NEAR_EXACT and not i.leak_exact_copy):
        return None
    return Finding(
        failure_mode="data_leakage", confidence=0.95 if i.leak_exact_copy else 0.75,
        summary=(f"feature {i.leak_feature} of {i.name} is " + ("an exact copy of the label" if i.leak_exact_copy
                 else f"a near-exact function of the label ({share:.2%} of its variance, almost no spread within a class)")),
        evidence=[Evidence(what=f"{i.name}[:, {i.leak_feature}] label variance explained", value=share, source=src),
                  Evidence(what="exact copy of the label", value=bool(i.leak_exact_copy), source=src)],
        fix=(f"Remove column {i.leak_feature} from the inputs if it is the target or computed from it (a column "
             "derived after the outcome); a genuinely predictive feature is fine"),
        location=f"{i.name}[:, {i.leak_feature}]")


def _one_based_labels(lab: LabelStat | None, src: str) -> Finding | None:
    """Every class but 0 present, over enough labels that 0 would show by chance: class ids counted from 1.

    The head is sized max+1 so nothing crashes, training looks fine, and any 0-based evaluation or class
    mapping reads every prediction off by one.
    """
    c = lab.counts if lab else []
    if len(c) < 3 or c[0] != 0 or min(c[1:]) == 0 or sum(c) < 20 * len(c):
        return None
    return Finding(
        failure_mode="data_pipeline", confidence=0.55,
        summary=f"label 0 never occurs in {sum(c)} labels while labels 1..{len(c) - 1} all do: the class ids look "
                "1-based, so a 0-based evaluation or class mapping is off by one",
        evidence=[Evidence(what="label counts by class id (0 first)", value=", ".join(map(str, c[:12])), source=src)],
        fix="Map the class ids to 0..C-1 once, in the dataset, and use the same mapping for training and evaluation",
        location=lab.name)


NO_LABEL_SIGNAL = "generalises no better than training on permuted labels"
FITS = 0.75  # a training loss at or under this share of its start has fitted something


def fits(first_last) -> bool:
    """The copy trained on the real labels cut its own training loss by a quarter or more: that LR moves the model
    onto its batches (at an LR too small to learn, the toy lr_too_low run's loss does not move at all at 30x)."""
    if len(first_last) != 2:
        return False
    first, last = first_last
    return is_finite(first) and is_finite(last) and first > 0 and 0 <= last <= FITS * first


# A model that masks, packs or gathers at each row's length changes its output by float rounding (~1e-7 of
# the spread between rows) when a row's padding is cut; one that reads the pads moves it by a visible share.
# Dev: a left-padded GRU drifts 0.005 over its pads and a TextCNN max-pooling over them 0.008 (both healthy);
# attention without its padding mask read at [CLS] 0.08, a BiLSTM's unpacked final state 0.27, a GRU read at
# the padded last step 0.55, a mean over pads 1.5-5 (all bugs).
PAD_READ = 0.05      # a hypothesis
PAD_HARMS = 0.15     # a verdict
PAD_DOMINATES = 1.0  # the padding moves a row's output more than rows differ from one another


NOISE_MARGIN = 2.0  # with a loss function that draws random numbers, the cut must move the output this many times more


def _padding_finding(pad: dict, src: str) -> Finding | None:
    change, noise = pad.get("output_change"), pad.get("loss_noise")
    if not is_finite(change) or change < PAD_READ:
        return None
    if is_finite(noise) and change < NOISE_MARGIN * noise:
        return None  # the loss function's own draws (token dropout in loss_fn) move the output as much
    dominates = change >= PAD_DOMINATES
    where = f" in {pad['forward_name']}" if pad.get("forward") else ""
    return Finding(
        failure_mode="data_pipeline", confidence=0.75 if dominates else 0.6 if change >= PAD_HARMS else 0.45,
        summary=(f"the model reads the padding{where}: cutting the {pad.get('side')} padding of the {pad.get('rows')} "
                 f"shortest rows of {pad.get('tensor')} from {pad.get('steps')} to {pad.get('cut_to')} steps moves "
                 f"their outputs by {_fmt(change)}x the spread between rows"
                 + (", more than rows differ from one another" if dominates else "")),
        evidence=[Evidence(what="output change when only the padding is cut / spread of outputs between rows",
                           value=change, source=src)]
        + ([Evidence(what="output change between two calls of the loss function on the same rows (its own "
                          "random draws)", value=noise, source=src)] if is_finite(noise) and noise > 1e-4 else []),
        location=f"{pad['forward']} ({pad['forward_name']})" if pad.get("forward") else pad.get("tensor"),
        fix=("Make the model see each row's real length: pool with a mask (sum over non-pad steps / length), take "
             "an RNN's output at lengths - 1 or pack with pack_padded_sequence(..., enforce_sorted=False) and use "
             "h_n, and pass the padding mask to attention (src_key_padding_mask / attention_mask)"),
        avoid="Do not tune the LR or the model size: short rows are read through steps that carry no content",
        facts={"reads_padding": True})


ROWS_MOVED = 0.9    # under this score (1.0 when rows stay whole, 0 at chance), rows were paired apart
ROWS_MOSTLY = 0.6   # a verdict, not a hypothesis
ROWS_UNCODED = 0.3  # with labels the coding may not have reached, a score under this is noise, not rows moved


def _tables_read(tables: list[dict]) -> tuple[str, list[str]]:
    """'a.csv, b.csv read at train.py:41 (label-like: y); ...', one entry per line of code that read tables
    (a loop over branch files is one line), and those lines."""
    by_line: dict = {}
    for t in tables:
        if t.get("file"):
            files, labels = by_line.setdefault(t.get("at") or "", ([], []))
            files.append(t["file"])
            labels += [c for c in t.get("label_like") or [] if c not in labels]
    parts = []
    for at, (files, labels) in list(by_line.items())[:4]:
        # in the order read: two lists of branch files stacked in different orders show it here
        names = ", ".join(files[:4]) + (f" and {len(files) - 4} more" if len(files) > 4 else "")
        parts.append(names + (f" read at {at}" if at else "") + (f" (label-like: {', '.join(labels[:3])})"
                                                                if labels else ""))
    return "; ".join(parts), [at for at in by_line if at][:4]


def _rows_finding(rows: dict, src: str) -> Finding | None:
    """The tables' rows coded by their id before the factory read them (mltriage_rows): a batch row whose
    features and label came from one source row keeps a feature code that determines the label."""
    kept = rows.get("kept")
    if not is_finite(kept) or kept >= ROWS_MOVED or rows.get("rows", 0) < 100:
        return None
    if kept < ROWS_UNCODED and not rows.get("label_coded"):
        return None  # the labels may come from somewhere the coding did not reach (the best of many columns)
    read_at, lines = _tables_read(rows.get("tables") or [])
    return Finding(
        failure_mode="data_pipeline", confidence=0.75 if kept < ROWS_MOSTLY else 0.6,
        summary=(f"rows carry other rows' labels: with every table coded by row id before your code read it, the "
                 f"coded feature {rows.get('column')} predicts the label of only {rows.get('purity', 0):.0%} of "
                 f"{rows['rows']} rows, {max(0.0, kept):.0%} of the way from chance ({rows.get('chance', 0):.0%}) "
                 "to the 100% of rows that stay whole: X and y were paired by position after one side's rows were "
                 "dropped, joined, sorted or reindexed"),
        evidence=[Evidence(what="rows whose coded feature predicts their label, chance removed (1: rows stay whole)",
                           value=kept, source=src)]
        + ([Evidence(what="tables read (pair X and y after these reads by a key)", value=read_at[:300], source=src)]
           if read_at else []),
        location=", ".join(lines) or rows.get("column"),
        fix=("Take X and y from one table after every drop, filter, sort, merge or reindex (join on a key, never "
             "by position); assert an id column matches row for row"),
        avoid="Do not tune the model or the LR: part of the rows teach a label that is not theirs",
        facts={"rows_moved_apart": True})


UNMIXED_RATIO, UNMIXED_TV = 4.0, 0.15  # dev: imu_activity_conv1d 9x the shuffled baseline; shuffled runs <= 1.4x


PAD_INSIDE_ROWS, PAD_INSIDE_SHARE = 0.2, 0.01  # rows with the pad id between real tokens; its share of positions there


def pad_inside_finding(pi: dict | None, src: str) -> Finding | None:
    """The embedding's padding_idx between real tokens: a vocabulary enumerated from 0 while 0 is the pad id
    gives a real token the pad's id. nn.Embedding keeps that row at zero and never updates it (PyTorch docs:
    "the entries at padding_idx do not contribute to the gradient"), and a mask or lengths computed as
    tokens != pad drop the token, and with right padding cut every row short."""
    if not pi or pi["rows_share"] < PAD_INSIDE_ROWS or pi["share"] < PAD_INSIDE_SHARE:
        return None
    return Finding(
        failure_mode="data_pipeline", confidence=0.75,
        summary=(f"token id {pi['pad']}, the padding_idx of the embedding that reads {pi['input']}, sits between real "
                 f"tokens in {pi['rows_share']:.0%} of its rows ({pi['share']:.0%} of the positions there): padding "
                 "only fills the ends of rows, so a real token is encoded with the pad's id. Its embedding stays at "
                 "zero and never trains, and a mask or lengths computed as tokens != pad drop it"),
        evidence=[Evidence(what=f"rows with id {pi['pad']} between real tokens", value=f"{pi['rows_with']} of {pi['rows']}",
                           source=src),
                  Evidence(what=f"share of inner positions holding id {pi['pad']}", value=pi["share"], source=src)],
        location=pi["input"],
        fix=(f"Reserve id {pi['pad']} for padding when building the vocabulary (enumerate(tokens, start=1), or put "
             "'<pad>' first) and size the embedding len(vocab) + 1; print one encoded row beside its text to check"),
        avoid="Do not tune the model or the LR: part of the input is erased before the model sees it",
        facts={"pad_inside": True})


# dev: gearbox_vibration_conv_ae (rows stored by regime, shuffle=False) 29x the shuffled spread; the other two
# unshuffled training loaders of the dev gallery 1.0x and 1.2x
UNSHUFFLED_RATIO, UNSHUFFLED_SPREAD = 4.0, 3.0


def unshuffled_loader_finding(u: dict | None, src: str) -> Finding | None:
    """A training DataLoader left at shuffle=False over rows stored in some order (exported by regime, class or
    source file): every epoch walks the kinds of rows one after another, each batch holds one kind, and the model
    drifts towards the last kind it saw. Bengio 2012 ("Practical recommendations for gradient-based training")
    asks for examples in random order within and across mini-batches. Labels are not needed (an autoencoder)."""
    if not u or u["spread"] < UNSHUFFLED_RATIO * u["shuffled"] or u["spread"] < UNSHUFFLED_SPREAD:
        return None
    return Finding(
        failure_mode="data_pipeline", confidence=0.7,
        summary=(f"the training DataLoader (built at {u['where']}) does not shuffle, and its {u['rows']:,} rows are "
                 f"stored in an order: the means of its batches of {u['batch_size']} sit {u['spread']:.1f}x as far "
                 f"apart as a shuffle would put them ({u['shuffled']:.1f}x), so each batch holds one kind of row and "
                 "each epoch walks them in turn, ending biased towards the last"),
        evidence=[Evidence(what="spread of batch input means over what iid rows give, in the loader's order",
                           value=f"{u['spread']:.2f} (shuffled: {u['shuffled']:.2f})", source=src),
                  Evidence(what="batches read, spread over the dataset", value=u["batches"], source=src)],
        location=u["where"],
        fix="Shuffle the training loader: DataLoader(train_ds, batch_size=..., shuffle=True) (keep validation in order)",
        avoid="Do not tune the LR or the model: each step fits one kind of row and forgets the others",
        facts={"loader_unshuffled": True})


def reads_change_data_finding(rc: dict | None, src: str) -> Finding | None:
    """A dataset whose stored float data changes each time samples are read: __getitem__ augments a view of the
    cached array in place (numpy indexing and [::-1] flips return views), so the augmentations accumulate in the
    data and every epoch trains on samples further from the original (and from the clean validation data)."""
    if not rc or "changed" not in rc:
        return None
    return Finding(
        failure_mode="data_pipeline", confidence=0.8,
        summary=(f"reading {rc['samples']} samples of {rc['dataset']} (the loader built at {rc['where']}) changes its "
                 f"stored {rc['attribute']} on every pass ({rc['changed']:,} values changed each time): __getitem__ "
                 "writes into the data it serves, an in-place augmentation on a view of the cached array, so noise "
                 "and gains pile up and each epoch trains on data further from the original"),
        evidence=[Evidence(what=f"values of {rc['dataset']}.{rc['attribute']} changed by one more read of the same "
                                f"{rc['samples']} samples", value=f"{rc['changed']:,} of {rc['of']:,}", source=src),
                  Evidence(what="changed again on a second repeat read", value="yes", source=src)],
        location=f"{rc['dataset']}.__getitem__ ({rc['where']})",
        fix=("Copy the sample before augmenting it (x = self.data[idx].copy(), or .clone() for a tensor), or build "
             "new arrays (x = x * gain + noise) instead of x *= gain / x += noise"),
        avoid="Do not tune the LR or the augmentation strength: the stored training data drifts every epoch",
        facts={"reads_change_data": True})


def coerced_numbers_finding(c: dict | None, src: str) -> Finding | None:
    """pandas.to_numeric(errors='coerce') meant to clear 'n/a' cells, on a column read as text because its numbers
    are written for people ('1,980', '$750', '12%'): they become NaN, and an imputer then fills them with one value,
    so the feature is erased for those rows (typically the large values) without an error."""
    if not c:
        return None
    share = c["formatted"] / max(1, c["values"])
    examples = ", ".join(repr(v) for v in c["examples"])
    return Finding(
        failure_mode="data_pipeline", confidence=0.8,
        summary=(f"to_numeric(errors='coerce') turned {c['formatted']:,} of the {c['values']:,} values of "
                 f"{c['column']} ({share:.0%}) into NaN although they are numbers written in a format it does not "
                 f"read ({examples}): the column was read as text, and whatever fills the NaNs erases the feature "
                 "for those rows"),
        evidence=[Evidence(what=f"values of {c['column']} lost to NaN that are formatted numbers",
                           value=f"{c['formatted']:,} of {c['values']:,}", source=src),
                  Evidence(what="examples", value=examples, source=src)],
        location=c.get("at"),
        fix=("Read the numbers as numbers: pd.read_csv(..., thousands=',') (decimal=',' for a decimal comma), or "
             "strip the separators, currency and percent signs (.str.replace(r'[,$%]', '', regex=True)) before "
             "to_numeric; then count the NaNs it leaves"),
        avoid="Do not tune the model or the imputer: the feature's values are gone before either sees them",
        facts={"numbers_coerced": True})


def text_compared_finding(c: dict | None, src: str) -> Finding | None:
    """A column of numbers that pandas read as text (a '?' or 'n/a' among them makes it object dtype), compared
    with a number: '1' != 1, so `df[col] != 1` is True on every row and `df[col] == 1` on none; the filter it feeds
    keeps or drops everything (dev `campus_netflow_dense_ae`: every attack flow kept in the 'benign' training set)."""
    if not c:
        return None
    examples = ", ".join(repr(v) for v in c["examples"])
    keeps = (c["op"] == "!=") == c["result"]
    return Finding(
        failure_mode="data_pipeline", confidence=0.8,
        summary=(f"{c['column']} was read as text ({examples}; {c['as_text']:,} of {c['values']:,} cells are numbers "
                 f"written as text), and `{c['column']} {c['op']} {c['value']!r}` compares it with a number: text is "
                 f"never equal to a number, so the comparison is {c['result']} on every row and a filter on it "
                 + ("selects every row" if c["result"] else "selects none")
                 + (" (a subset meant to exclude some rows keeps them all)" if keeps and c["result"] else "")),
        evidence=[Evidence(what=f"rows where `{c['column']} {c['op']} {c['value']!r}` holds",
                           value=f"{c['values'] if c['result'] else 0:,} of {c['values']:,}", source=src),
                  Evidence(what="values", value=examples, source=src)],
        location=c.get("at"),
        fix=(f"Convert before comparing: pd.to_numeric(df[{c['column']!r}], errors='coerce') {c['op']} {c['value']!r} "
             "(or read_csv(..., na_values=['?'])), then count the rows each side of the filter"),
        avoid="Do not tune the model: the rows it trains on are not the ones the filter was written to select",
        facts={"text_compared_with_number": True})


def sampler_reach_finding(sr: dict | None, src: str) -> Finding | None:
    """A WeightedRandomSampler given fewer weights than the dataset has samples (a weight per class where it wants
    one per sample): it draws only indices below len(weights)."""
    if not sr:
        return None
    n = sr["weights"]
    return Finding(
        failure_mode="data_pipeline", confidence=0.85,
        summary=(f"the WeightedRandomSampler of the loader built at {sr['where']} has {n} weights for the "
                 f"{sr['samples']:,} samples of its {sr['dataset']}: it draws only indices 0-{n - 1}, so each epoch's "
                 f"{sr['num_samples']:,} draws repeat the same {n} samples (a weight per class where it takes one per "
                 "sample), the model memorises them, and validation reads like overfitting"),
        evidence=[Evidence(what="sampler weights / dataset samples", value=f"{n} / {sr['samples']:,}", source=src),
                  Evidence(what="draws per epoch", value=sr["num_samples"], source=src)],
        location=sr["where"],
        fix=("Give the sampler one weight per sample: WeightedRandomSampler(class_w[labels], num_samples=len(ds)) "
             "(index the per-class weights by each sample's label)"),
        avoid="Do not add regularisation or data: the loader never shows the model more than those samples",
        facts={"sampler_short": True})


# a prediction at or before the changed target step moving by this share of the predictions' spread reads it (dev
# chiller_load_lstm_encdec: 2.0 with the decoder fed torch.roll(y, -1), exactly 0 with roll(y, 1))
READ_AHEAD = 0.01


def read_ahead_finding(ra: dict | None, src: str) -> Finding | None:
    """Teacher forcing fed the wrong targets: the decoder's input at step t must be the target at t-1 (shifted right,
    a start value first); fed the target at t or later (torch.roll(y, -1), a shift forgotten), training lets it copy
    the answer, its training loss collapses, and at inference, fed its own predictions, it has nothing to copy: the
    validation error grows as training goes on, which reads like overfitting."""
    if not ra or not is_finite(ra.get("before")) or ra["before"] < READ_AHEAD:
        return None
    t = ra["step"]
    return Finding(
        failure_mode="data_leakage", confidence=0.8,
        summary=(f"the model reads the targets it is asked to predict: changing {ra['tensor']} at step {t} alone moved "
                 f"its predictions at step {t} or before by {ra['before']:.3g} of their spread (after step {t}: "
                 f"{ra['after']:.3g}). A decoder fed the targets (teacher forcing) must see step t-1's target when it "
                 "predicts step t; fed step t's or a later one, it copies the answer in training and has nothing to "
                 "copy at inference"),
        evidence=[Evidence(what=f"change of the predictions at steps <= {t} when only target step {t} changes, "
                                "over their spread", value=ra["before"], source=src),
                  Evidence(what=f"the same after step {t} (a right shift moves only these)", value=ra["after"],
                           source=src)],
        location=ra.get("forward") or ra.get("forward_name"),
        fix=("Shift the targets right before feeding them back: dec_in[:, 0] = start value, dec_in[:, 1:] = "
             "y[:, :-1] (torch.roll(y, shifts=1, dims=1) with step 0 overwritten), never roll(y, -1) or y itself; "
             "check that changing target t leaves the predictions up to t unchanged"),
        avoid="Do not add regularisation or stop early: the training loss is low because the answer is in the input",
        facts={"reads_ahead": True})


CLASS_WEIGHT_FIT, CLASS_WEIGHT_OFF, CLASS_WEIGHT_POWER = 1.5, 2.0, 0.25


def misordered_class_weights_finding(cw: dict | None, src: str) -> Finding | None:
    """Per-class loss weights whose values, once sorted, are a falling law of the class frequencies (1/n, 1/sqrt(n):
    computed from the counts) but which are handed to the classes in another order: the counts were taken in one
    class order (pandas value_counts(), most frequent first) and the labels encoded in another. The rare classes
    then weigh least and the model learns to ignore them harder than with no weights at all. Weights set by hand
    (a cost per class) fit no such law and are not judged."""
    if not cw or not (cw["fit"] <= CLASS_WEIGHT_FIT and cw["power"] >= CLASS_WEIGHT_POWER
                      and cw["assigned"] >= CLASS_WEIGHT_OFF and cw["rank_corr"] > -0.5):
        return None
    most, least = cw["most_frequent"], cw["least_frequent"]
    return Finding(
        failure_mode="loss_function", confidence=0.7,
        summary=(f"the loss's class weights are inverse class frequencies handed to the wrong classes: sorted, they "
                 f"follow 1/n^{cw['power']:.2f} within {cw['fit']:.2f}x, but a class's weight misses what its own share "
                 f"gives by up to {cw['assigned']:.1f}x: the most frequent class {most['class']} "
                 f"({most['share']:.0%} of rows) weighs {most['weight']:.3g} and the rarest, {least['class']} "
                 f"({least['share']:.0%}), {least['weight']:.3g}"),
        evidence=[Evidence(what="largest miss of a class's weight against its frequency", value=cw["assigned"], source=src),
                  Evidence(what="rank correlation of weight with frequency (balancing weights: -1)",
                           value=cw["rank_corr"], source=src),
                  Evidence(what=f"class {most['class']} / class {least['class']}: share, weight",
                           value=f"{most['share']:.0%}, {most['weight']:.3g} / {least['share']:.0%}, {least['weight']:.3g}",
                           source=src)],
        fix=("Compute the weights in the label encoding's order: index the counts by class id (np.bincount(y, "
             "minlength=C), or value_counts().reindex(encoder.classes_) / sort_index()), never in value_counts() "
             "order; print each class name with its weight to check"),
        avoid="Do not drop the weights or tune the LR: the rare classes are down-weighted by an ordering slip",
        facts={"class_weights_misordered": True})


def unmixed_batches_finding(mix: dict | None, label_slot: str | None, src: str) -> Finding | None:
    """Batches that each hold one class (or one stretch of a sorted target): SGD then follows each batch's own
    class in turn and forgets the others, and batch norm subtracts what the batch's rows share, which is the
    class. Bengio 2012 ("Practical recommendations for gradient-based training") asks for examples in random
    order within and across mini-batches."""
    if not mix:
        return None
    got, shuffled = mix["stat"], mix["shuffled"]
    seen = f"{got:.2f} (shuffled: {shuffled:.2f})"
    if mix["regression"]:
        if not (got * UNMIXED_RATIO <= shuffled and got <= 0.25):
            return None
        what = "within-batch variance of the target / pooled variance"
        summary = (f"the training batches are cut from rows sorted by the target: each batch's target varies "
                   f"{got:.2f}x as much as the whole set does (shuffled batches of {mix['rows']} rows: {shuffled:.2f}x)")
    else:
        if not (got >= UNMIXED_RATIO * shuffled and got >= UNMIXED_TV):
            return None
        what = "distance of each batch's class mix from the pooled mix (TV)"
        summary = (f"the training batches do not mix the classes: a batch holds a median {mix['classes_per_batch']} of "
                   f"{mix['classes']} classes and its class mix sits {got:.2f} from the pooled one (total variation; "
                   f"shuffled batches of {mix['rows']} rows: {shuffled:.2f}): the rows are sorted by class and only "
                   "the batch order is shuffled")
    return Finding(
        failure_mode="data_pipeline", confidence=0.7, summary=summary,
        evidence=[Evidence(what=what, value=seen, source=src),
                  Evidence(what="training batches read", value=mix["batches"], source=src)],
        location=f"batch{label_slot}" if label_slot else None,
        fix="Shuffle the rows, not the batches: DataLoader(..., shuffle=True), or a fresh torch.randperm over the "
            "rows each epoch before cutting batches; print the labels of a few batches to check",
        avoid="Do not tune the LR or batch norm: each step fits one class and forgets the others",
        facts={"batches_unmixed": True})


def split_shift_finding(shift: dict | None, src: str) -> Finding | None:
    """A loader whose inputs sit far from the training batches while another loader matches them: the same model
    sees validation (or test) data on another scale than it trained on, so validation is bad however well
    training goes, which the log reads as overfitting."""
    o = (shift or {}).get("apart")
    if not o:
        return None
    return Finding(
        failure_mode="data_pipeline", confidence=0.7,
        summary=f"the loader built at {o['where'] or '?'} ({o['dataset']}, {o['rows']} rows) feeds "
                f"{'the regression target ' if o.get('target') else ''}{o['input']} on "
                f"another scale than training: its {'' if o.get('target') else 'feature '}means sit a median "
                f"{o['mean_shift_sd']:.1f} training SDs "
                f"away and its spread is {o['spread_ratio']:.2g}x, while another loader matches the training "
                "batches: that split is prepared differently",
        evidence=[Evidence(what="median |mean - training mean| / training SD", value=o["mean_shift_sd"], source=src),
                  Evidence(what="median SD / training SD", value=o["spread_ratio"], source=src)],
        location=o["where"],
        fix="Build every split through one function with the transforms fitted on training (the same scaler, "
            "/255, vocabulary, column order); print a batch of each split's summary statistics side by side",
        avoid="Do not regularise or early-stop for overfitting: the model is scored on inputs it never saw the "
              "like of",
        facts={"splits_apart": True})


def clipped_in_training_finding(shift: dict | None, src: str) -> Finding | None:
    """Training samples piled up at one bound that another split's values cross: a clamp that runs on the training
    side only, in units it was not written for (a colour jitter that clamps to [0, 1] placed after Normalize blanks
    every below-average pixel). The model trains on clipped inputs and is scored on whole ones."""
    c = (shift or {}).get("clipped")
    if not c or (shift or {}).get("apart"):
        return None
    below = "below" if c["side"] == "min" else "above"
    return Finding(
        failure_mode="data_pipeline", confidence=0.7,
        summary=f"training inputs {c['input']} are clipped: in {c['samples']:.0%} of the training samples "
                f"{c['pile']:.0%} of the values sit exactly at {c['bound']:.4g}, their {c['side']}imum, while "
                f"{c['beyond']:.0%} of the values fed by the loader built at {c['where'] or '?'} ({c['dataset']}) "
                f"lie {below} it (its range {c['other_range'][0]:.3g} to {c['other_range'][1]:.3g}): a clamp runs "
                "on training inputs only, in units it was not meant for (a jitter that clamps to [0, 1] after "
                "Normalize), so the model trains on blanked inputs and is scored on whole ones",
        evidence=[Evidence(what=f"share of a clipped sample's values at {c['bound']:.4g}", value=c["pile"], source=src),
                  Evidence(what="share of training samples clipped there", value=c["samples"], source=src),
                  Evidence(what=f"share of the other loader's values {below} it", value=c["beyond"], source=src)],
        location=c["where"],
        fix="Run the clamping transform (ColorJitter, brightness/contrast, anything that clamps to [0, 1]) before "
            "Normalize, on [0, 1] images; then check a training batch's range against validation's",
        avoid="Do not drop the augmentation or regularise for overfitting: move the clamp to the units it expects",
        facts={"splits_apart": True})


def misaligned_targets_finding(shift: dict | None, src: str) -> Finding | None:
    """A same-shaped target that lines up with its input in another loader but not in training: the training
    augmentation moved the input and not the target (or the reverse), so the model learns the average over the
    transforms: a blurred reconstruction, a smeared mask."""
    m = (shift or {}).get("misaligned")
    if not m or (shift or {}).get("apart"):
        return None
    return Finding(
        failure_mode="data_pipeline", confidence=0.7,
        summary=f"training targets {m['target']} do not line up with their inputs {m['input']}: a sample's input and "
                f"target correlate a median {m['train']:.2f} in the training batches but {m['aligned']:.2f} in the "
                f"loader built at {m['where'] or '?'} ({m['dataset']}): an augmentation (flip, roll, crop) moves "
                "the input and not its target, so the model learns the average over the transforms",
        evidence=[Evidence(what="median per-sample input/target correlation, training", value=m["train"], source=src),
                  Evidence(what="the same in the other loader", value=m["aligned"], source=src)],
        location=m["where"],
        fix="Apply each geometric augmentation to the input and its target together (augment first, then corrupt "
            "the input; return the augmented clean sample as the target); then check one training pair by eye",
        avoid="Do not enlarge the model or train longer: no model can undo a transform it never sees",
        facts={"splits_apart": True})


def swamping_augmentation_finding(shift: dict | None, src: str) -> Finding | None:
    """A loader whose augmentation moves one feature several times that feature's own spread in the loader that
    does not augment: the model trains on noise where validation has the signal (jitter or a gain meant for
    standardised units applied in raw units, before the scaler)."""
    sw = (shift or {}).get("augmentation_swamps")
    if not sw or (shift or {}).get("apart"):
        return None
    return Finding(
        failure_mode="data_pipeline", confidence=0.65,
        summary=f"the loader built at {sw['where'] or '?'} ({sw['dataset']}) augments feature {sw['feature']} of "
                f"{sw['input']} with noise of SD {sw['noise_sd']:.3g} between two reads of the same rows: "
                f"{sw['noise_over_clean_sd']:.1f}x that feature's whole spread ({sw['clean_sd']:.3g}) in the loader "
                f"built at {sw['clean_where'] or '?'}, which does not augment. In training that feature is mostly "
                "noise, so the model learns to ignore it; an augmentation tuned for standardised units applied in "
                "raw units (before the scaler) does this",
        evidence=[Evidence(what=f"feature {sw['feature']}: augmentation noise SD / clean SD",
                           value=sw["noise_over_clean_sd"], source=src),
                  Evidence(what="features compared", value=sw["features"], source=src)],
        location=sw["where"],
        fix="Augment after the scaler, in the units the noise and gain were chosen for (or scale the noise per "
            "feature); then check a batch's per-feature SD against validation's",
        avoid="Do not regularise or early-stop: the model is trained on a drowned copy of that feature",
        facts={"augmentation_swamps": True})


IGNORED_SHARE = 0.05  # rows of the first batch whose label the loss ignores: one stray row is not the finding


def _class_ignored(ic: dict, src: str) -> Finding | None:
    """cross_entropy(ignore_index=k) with k one of the classes of a per-example classifier: every row of class k
    is dropped from the loss, so that class is never learnt nor predicted, while the loss over the other rows
    looks normal (blind dev `helpdesk_intent_tiny_transformer`: the pretraining loss's padding id 0 reused for the
    intent head, where 0 is the largest intent)."""
    if not ic or not is_finite(ic.get("share")) or ic["share"] < IGNORED_SHARE:
        return None
    k = ic["ignore_index"]
    return Finding(
        failure_mode="loss_function", confidence=0.8,
        summary=f"the cross-entropy ignores label {k} (ignore_index={k}), which is one of the {ic['classes']} classes "
                f"the head scores and {ic['share']:.0%} of the first batch's rows: those rows never train, so class "
                f"{k} is never learnt and never predicted, while the loss over the rest looks normal",
        evidence=[Evidence(what=f"rows labelled {k}", value=f"{ic['share']:.0%} of {ic['rows']}", source=src),
                  Evidence(what="ignore_index", value=k, source=src)],
        fix=f"Build this head's loss without ignore_index (or with -100, torch's default); keep ignore_index={k} "
            "only for the token-level loss whose padding it names",
        avoid="Do not reweight the classes or tune the LR: the class is removed from the loss",
        facts={"class_ignored": True})


WRONG_WAY = 0.5  # share of one label's rows the loss pushes toward the other label, at one prediction level


def _loss_pushes_wrong_way(ld: dict, src: str) -> Finding | None:
    """The loss's gradient at a constant prediction points away from the label for most rows of one label: past
    that probability training drives those rows to the wrong answer, and the loss still falls (blind dev
    `card_fraud_entity_embedding_mlp`: a focal term (1 - p) ** 2 on every row, so a legitimate transaction scored
    above 0.39 is pushed up to 1; its log shows only average precision drifting down)."""
    bad = [c for c in ld.get("checks") or [] if is_finite(c.get("wrong")) and c["wrong"] >= WRONG_WAY]
    if not bad:
        return None
    label = bad[0]["label"]
    mine = [c for c in bad if c["label"] == label]
    lo = min(c["probability"] for c in mine)
    other = 1 - label
    return Finding(
        failure_mode="loss_function", confidence=0.8,
        summary=f"the loss pushes rows labelled {label} toward {other}: with every prediction set to probability "
                f"{lo:g}{' or more' if label == 0 else ' or less'}, the gradient on {mine[0]['wrong']:.0%} of them "
                f"points away from their label, so training makes those mistakes more confident while the loss "
                "still falls",
        evidence=[Evidence(what=f"rows labelled {label} pushed toward {other}",
                           value=", ".join(f"{c['wrong']:.0%} at p={c['probability']:g}" for c in mine[:3]),
                           source=src),
                  Evidence(what="output read as", value=ld.get("output"), source=src)],
        fix="Check the loss's per-row weighting against its label: a focal term is (1 - p_t) ** gamma with "
            "p_t = p for label 1 and 1 - p for label 0, not (1 - p) ** gamma on every row; the gradient of the "
            "loss must lower the prediction of a 0 and raise that of a 1 at every p",
        avoid="Do not tune the LR, the class weights or the threshold: the loss rewards the wrong answer there",
        facts={"loss_wrong_way": True})


HEAD_OUT_OF_REACH = 0.1  # share of target values outside the head's range: a few outliers are not the finding


def _head_cannot_reach(hr: dict, loss: str | None, src: str) -> Finding | None:
    """A prediction squashed by a sigmoid (0..1) or tanh (-1..1) scored against targets of which a good share lie
    outside that range: the loss has a floor no training removes, and the log reads as a weak model (blind dev
    `glyph_images_conv_ae`: images standardised to -0.44..2.66 for a sigmoid decoder)."""
    if not hr or not is_finite(hr.get("target_outside")) or hr["target_outside"] < HEAD_OUT_OF_REACH:
        return None
    lo, hi = hr["range"]
    return Finding(
        failure_mode="data_pipeline", confidence=0.7,
        summary=f"the prediction {loss} scores comes out of a {hr['op']} ({lo:g} to {hi:g}), but "
                f"{hr['target_outside']:.0%} of the target values lie outside that range (they span "
                f"{hr['target_min']:.3g} to {hr['target_max']:.3g}): no weight can reach them, so the loss keeps a "
                "floor that reads as a weak model",
        evidence=[Evidence(what=f"share of targets outside {hr['op']}'s range", value=hr["target_outside"], source=src),
                  Evidence(what="target min, max", value=f"{hr['target_min']:.3g}, {hr['target_max']:.3g}", source=src)],
        fix=f"Scale the targets into the {hr['op']}'s range (min-max to [{lo:g}, {hi:g}] instead of a z-score), or "
            f"drop the final {hr['op']} and let the head output unbounded values",
        avoid="Do not train longer or widen the model: the unreachable part of the loss stays",
        facts={"head_out_of_reach": True})


def _rate_read_as_log_rate(po: dict, src: str) -> Finding | None:
    """poisson_nll_loss with log_input=True (its default, and nn.PoissonNLLLoss's) computes exp(input) - y*input:
    it reads the prediction as a log-rate, which is negative wherever the expected count is under 1. A prediction
    that is >= 0 on every element at init is a rate already (an exp, a softplus, a ReLU head), so the loss
    exponentiates it a second time and the model learns log-counts, stuck at a rate of 1 for every rare bin."""
    if not po.get("log_input") or po.get("elements", 0) < 16 or not is_finite(po.get("input_min")) \
            or po["input_min"] < 0:
        return None
    # conclusive from the call itself, so it ranks above what training under it shows (blind dev
    # sku_daily_demand_lstm: a head ReLU 38% dead at init, 73% after the script's own steps)
    return Finding(
        failure_mode="loss_function", confidence=0.85,
        summary=f"poisson_nll_loss reads its input as a log-rate (log_input=True) but all {po['elements']} predictions "
                f"are >= 0 (the smallest {po['input_min']:.3g}): the model already outputs a rate (exp/softplus), so "
                "the loss exponentiates it again and no expected count can go under 1",
        evidence=[Evidence(what="smallest prediction fed to poisson_nll_loss", value=po["input_min"], source=src),
                  Evidence(what="log_input", value=True, source=src)],
        fix="Pass log_input=False (nn.PoissonNLLLoss(log_input=False)) when the model outputs the rate, or drop the "
            "final exp/softplus and keep log_input=True",
        avoid="Do not tune the LR or the model: the loss is the wrong one for this output",
        facts={"rate_as_log_rate": True})


STREAM_REACH = 0.5  # share of its stored stream a windowed dataset's items can ever read


def stream_reach_finding(r: dict | None, src: str) -> Finding | None:
    """A dataset that cuts windows from a stream it stores, whose last item ends early in that stream: every epoch
    serves the same first stretch of the data, so training memorises it and validation reads as overfitting."""
    if not r or r.get("reach", 1.0) >= STREAM_REACH:
        return None
    return Finding(
        failure_mode="data_pipeline", confidence=0.75,
        summary=f"{r['dataset']} (built at {r['where'] or '?'}) has {r['items']} items cut from its "
                f"{r['length']}-long `{r['stream']}`, but its last item ends at position {r['read_up_to']}: the items "
                f"only ever read the first {r['reach']:.1%} of the stream (a window start of i where i * block_size "
                "or i * stride was meant), so training sees that stretch over and over",
        evidence=[Evidence(what="share of the stream the items read", value=r["reach"], source=src),
                  Evidence(what="items, stream length", value=f"{r['items']}, {r['length']}", source=src)],
        location=r["where"],
        fix="Start item i at i * block_size (or i * stride) in __getitem__, and check that the last item ends "
            "near the stream's end",
        avoid="Do not regularise or early-stop for the overfitting: the model has seen a sliver of the data",
        facts={"stream_unreached": True})


SCALE_EXPLAINS = 0.3  # share of the label one erased per-sample statistic explains: a trace is not the finding


def self_standardised_finding(r: dict | None, src: str) -> Finding | None:
    """Every sample z-scored over its own steps, while the stored data carries the label in a channel's level or
    amplitude: the model is handed windows with that information removed, trains smoothly, agrees on train and
    validation, and plateaus like a hard problem (blind dev `gearbox_sensor_gru`)."""
    if not r or not is_finite(r.get("label_explained")) or r["label_explained"] < SCALE_EXPLAINS:
        return None
    what = "level (mean)" if r["statistic"] == "mean" else "amplitude (SD)"
    steps = "rows" if r["axis"] == 0 else "columns"
    return Finding(
        failure_mode="data_pipeline", confidence=0.7,
        summary=f"{r['dataset']} (built at {r['where'] or '?'}) hands out every sample standardised by its own "
                f"statistics (each of its {r['channels']} channels at mean 0, SD 1 over the sample's {steps}), but in "
                f"the stored `{r['stored']}` channel {r['channel']}'s per-sample {what} alone explains "
                f"{r['label_explained']:.0%} of the label: the standardisation erases what separates the classes, "
                "so the model never sees it",
        evidence=[Evidence(what=f"label explained by channel {r['channel']}'s per-sample {what}, stored",
                           value=r["label_explained"], source=src),
                  Evidence(what="samples read, all standardised by their own statistics", value=r["samples"],
                           source=src)],
        location=r["where"],
        fix="Standardise with statistics fitted once on the training data (per channel, over all training steps) "
            "and applied to every sample, not each sample's own mean and SD",
        avoid="Do not add capacity or train longer: the information is removed before the model reads it",
        facts={"self_standardised": True})


def measured(raw: dict, key: str) -> dict | None:
    """The record a data_check part returned, or None when it was skipped (its reason is in `raw`)."""
    got = raw.get(key)
    return got if isinstance(got, dict) and "skipped" not in got else None


def data_report_from(raw: dict, **fields) -> DataCheckReport:
    inputs = []
    for i in raw.get("inputs", []):
        lk = i.get("leakage") or {}
        inputs.append(InputStat(leak_feature=lk.get("feature"), leak_label_explained=lk.get("label_explained"),
                                leak_exact_copy=lk.get("exact_copy"),
                                **{k: v for k, v in i.items() if k in InputStat.model_fields}))
    lab = raw.get("labels")
    al = raw.get("alignment") or {}
    rep = DataCheckReport(batches_checked=raw.get("batches_checked", 0), label_slot=raw.get("label_slot"), inputs=inputs,
                          labels=LabelStat(**{k: v for k, v in lab.items() if k in LabelStat.model_fields}) if lab else None,
                          model_training=raw.get("model_training"),
                          eval_mode_modules=[f"{n} ({t})" for n, t in raw.get("eval_mode_modules", [])],
                          held_out_loss_real_labels=(al.get("real") or {}).get("held_out_loss"),
                          held_out_loss_permuted_labels=(al.get("permuted") or {}).get("held_out_loss"),
                          held_out_loss_at_init=al.get("held_out_loss_at_init"), alignment_note=al.get("skipped"),
                          alignment_steps=al.get("steps"),
                          train_loss_real_labels=[(al.get("real") or {}).get(k) for k in ("first_loss", "last_train_loss")]
                          if al.get("real") else [],
                          label_prior_loss=(raw.get("label_prior") or {}).get("loss"),
                          label_prior_scored_on=(raw.get("label_prior") or {}).get("scored_on") or "",
                          padding_output_change=(raw.get("padding") or {}).get("output_change"),
                          rows_kept_labels=(raw.get("rows") or {}).get("kept"),
                          rows_note=(raw.get("rows") or {}).get("skipped") or "",
                          batch_mixing=raw.get("batch_mixing"), class_weights=raw.get("class_weights"),
                          pad_inside=raw.get("pad_inside"),
                          reads_change_data=raw.get("reads_change_data"),
                          sampler_reach=measured(raw, "sampler_reach"), coerced=raw.get("coerced"),
                          text_compared=raw.get("text_compared"),
                          read_ahead=measured(raw, "read_ahead"),
                          unshuffled=measured(raw, "unshuffled"),
                          split_shift=measured(raw, "split_shift"),
                          **fields)
    src = "data_check"
    for i in inputs:
        if i.nan or i.inf:
            rep.findings.append(Finding(failure_mode="data_pipeline", confidence=0.9,
                                        summary=f"{i.name} contains {i.nan} NaN and {i.inf} Inf values",
                                        evidence=[Evidence(what=f"{i.name} NaN / Inf", value=f"{i.nan} / {i.inf}", source=src)],
                                        fix="Find the rows in the raw data / preprocessing (division, log) and drop or repair them",
                                        location=i.name))
        leak = _leakage_finding(i, src)
        if leak:
            rep.findings.append(leak)
        inter = interleaved_channels_finding(i, src)
        if inter:
            rep.findings.append(inter)
        across = across_channels_finding(i, src)
        if across:
            rep.findings.append(across)
        padded_scale = padding_in_scaler_finding(i, src)
        if padded_scale:
            rep.findings.append(padded_scale)
        flat = constant_columns_finding(i, src)
        if flat:
            rep.findings.append(flat)
        lo_hi = i.feature_mean_range + i.feature_std_range
        if not i.reconstructed and len(lo_hi) == 4 and all(is_finite(v) for v in lo_hi) and (
                max(abs(lo_hi[0]), abs(lo_hi[1])) > 10 or lo_hi[3] > 20):
            rep.findings.append(Finding(
                failure_mode="data_pipeline", confidence=0.4,
                summary=f"{i.name} is not normalised: feature means {_fmt(lo_hi[0])}..{_fmt(lo_hi[1])}, stds up to {_fmt(lo_hi[3])}",
                evidence=[Evidence(what="feature mean range", value=f"{_fmt(lo_hi[0])}..{_fmt(lo_hi[1])}", source=src),
                          Evidence(what="max feature std", value=lo_hi[3], source=src)],
                fix="Standardise each feature with the training set's mean/std (the same constants at eval time)",
                location=i.name, facts={"inputs_not_normalised": True}))
    same = raw.get("identical_batches") or {}
    if same.get("batches", 0) >= 3 and same.get("equal_to_first") == same.get("batches"):
        rep.findings.append(Finding(
            failure_mode="data_pipeline", confidence=0.75,
            summary=f"all {same['batches']} batches the data yields are identical: the loop trains on one batch "
                    "over and over (a fresh iter(loader) each step returns its first batch)",
            evidence=[Evidence(what="batches equal to the first, tensor for tensor",
                               value=f"{same['equal_to_first']} of {same['batches']}", source=src)],
            fix="Create the iterator once (it = iter(loader), or a cycling iterator) and call next(it) each step",
            avoid="Do not read the falling train loss as learning: the model memorises one batch"))
    ln = raw.get("lengths") or {}
    if ln.get("rows", 0) >= 8 and ln.get("mismatched", 0) >= 0.25 * ln["rows"]:
        shuffled = ln.get("same_lengths_other_rows")
        rep.findings.append(Finding(
            failure_mode="data_pipeline", confidence=0.85 if shuffled else 0.5,
            summary=(f"{ln['mismatched']} of {ln['rows']} rows of {ln['tokens']} have a length in {ln['lengths']} that "
                     "is not their own (content before the trailing padding)"
                     + ("; the lengths are those of other rows: they were sorted without reordering the rows"
                        if shuffled else "")),
            evidence=[Evidence(what="rows whose length disagrees with their padding",
                               value=f"{ln['mismatched']} of {ln['rows']}", source=src),
                      Evidence(what="first rows: [content length, given length]", value=str(ln.get("first_rows")),
                               source=src)],
            location=ln.get("lengths"),
            fix=("Sort once and apply the same permutation to every per-row tensor: lengths, order = "
                 "lengths.sort(descending=True); x = x[order]; y = y[order] (or pack with enforce_sorted=False)"),
            avoid="Do not drop pack_padded_sequence or tune the model: each row is read over another row's span"))
    pad = _padding_finding(raw.get("padding") or {}, src)
    if pad:
        rep.findings.append(pad)
    shift = (split_shift_finding(rep.split_shift, src) or misaligned_targets_finding(rep.split_shift, src)
             or clipped_in_training_finding(rep.split_shift, src)
             or swamping_augmentation_finding(rep.split_shift, src))
    if shift:
        rep.findings.append(shift)
    unmixed = unmixed_batches_finding(rep.batch_mixing, rep.label_slot, src)
    if unmixed:
        rep.findings.append(unmixed)
    pad_in = pad_inside_finding(rep.pad_inside, src)
    if pad_in:
        rep.findings.append(pad_in)
    ordered = unshuffled_loader_finding(rep.unshuffled, src)
    if ordered:
        rep.findings.append(ordered)
    mutated = reads_change_data_finding(rep.reads_change_data, src)
    if mutated:
        rep.findings.append(mutated)
    as_text = text_compared_finding(rep.text_compared, src)
    if as_text:
        rep.findings.append(as_text)
    lost = coerced_numbers_finding(rep.coerced, src)
    if lost:
        rep.findings.append(lost)
    few = sampler_reach_finding(rep.sampler_reach, src)
    if few:
        rep.findings.append(few)
    erased = self_standardised_finding(measured(raw, "self_standardised"), src)
    if erased:
        rep.findings.append(erased)
    short = stream_reach_finding(measured(raw, "stream_reach"), src)
    if short:
        rep.findings.append(short)
    peeks = read_ahead_finding(rep.read_ahead, src)
    if peeks:
        rep.findings.append(peeks)
    misweighted = misordered_class_weights_finding(rep.class_weights, src)
    if misweighted:
        rep.findings.append(misweighted)
    moved = _rows_finding(raw.get("rows") or {}, src)
    if moved:
        rep.findings.append(moved)
    one_based = _one_based_labels(rep.labels, src)
    if one_based:
        rep.findings.append(one_based)
    if rep.labels and is_finite(rep.labels.majority_frac) and rep.labels.majority_frac > 0.9 and (rep.labels.classes_present or 0) > 1:
        rep.findings.append(Finding(
            failure_mode="data_pipeline", confidence=0.4,
            summary=f"labels are imbalanced: the majority class is {rep.labels.majority_frac:.0%} of the batches checked",
            evidence=[Evidence(what="imbalance ratio", value=rep.labels.imbalance_ratio, source=src)],
            fix="Use a weighted loss or resampling, and judge by per-class metrics, not accuracy"))
    mode = eval_mode_finding(rep.model_training, rep.eval_mode_modules, src)
    if mode:
        rep.findings.append(mode)
    r, p, i0 = rep.held_out_loss_real_labels, rep.held_out_loss_permuted_labels, rep.held_out_loss_at_init
    # a training cut short by the time cap (a heavy model) learns too little to tell real from permuted labels
    # and a training that diverged on both (held-out losses far above the loss at init: an LR the short run
    # cannot take) says nothing about the labels either
    diverged = all(is_finite(v) for v in (r, p, i0)) and min(r, p) > 3 * i0
    if all(is_finite(v) for v in (r, p, i0)) and r > p - 0.05 * i0 and r > 0.95 * i0 and not al.get("cut_short") \
            and not diverged:
        rep.findings.append(Finding(
            failure_mode="data_pipeline", confidence=0.65,
            summary=f"training on the real labels {NO_LABEL_SIGNAL}: the labels do not match the inputs",
            evidence=[Evidence(what="held-out loss, trained on real labels", value=r, source=src),
                      Evidence(what="held-out loss, trained on permuted labels", value=p, source=src),
                      Evidence(what="held-out loss at init", value=i0, source=src)],
            fix=("Index inputs and labels together (one permutation, one filter for both) and look at a batch; "
                 "if overfit_test also fails, rule out the model first"),
            # the comparison means something only at an LR where the real-label copy fits its own batches
            facts={"symptom_only": True, "labels_no_signal": True,
                   "fits_batches": fits(rep.train_loss_real_labels)}))  # triage.weigh_by_labels acts on it
    return rep


async def data_check(workspace_root: Path, target: str, python: str | None = None, timeout_s: float = 180.0,
                     on_progress: ProgressFn | None = None, lr_scale: float = 1.0) -> DataCheckReport:
    """`lr_scale` multiplies the user's LR in the real-vs-permuted-labels trainings (triage: the LR a one-batch
    test learnt at, when the user's own was too small to learn anything)."""
    _need_target(target)
    args = {"target": target, **({"lr_scale": lr_scale} if lr_scale != 1.0 else {})}
    raw, err, oc = await _run("mltriage_data_check.py", args, workspace_root, python, timeout_s,
                              on_progress, "data_check")
    if err:
        return _error_report(DataCheckReport, err, oc, target=target)
    rep = data_report_from(raw, target=target, python=oc.python, duration_s=oc.duration_s)
    for f in rep.findings:
        if f.facts.get("channels_interleaved"):
            _place_reshape(f, workspace_root, target)
        if f.facts.get("standardised_across_channels") or f.facts.get("padding_in_scaler"):
            _place_scaler(f, workspace_root, target)
    return rep


def _target_source(workspace_root: Path, target: str) -> tuple[str, str] | None:
    """(path relative to the workspace, text) of the file the target's factory lives in."""
    path = (workspace_root / target.split(":", 1)[0]).resolve()
    if not path.is_relative_to(workspace_root.resolve()) or not path.is_file():
        return None
    try:
        return path.relative_to(workspace_root.resolve()).as_posix(), path.read_text(errors="replace")
    except OSError:
        return None


def _place_scaler(f: Finding, workspace_root: Path, target: str) -> None:
    """Name the lines of the target's file that take a std/var outside the model and the training loop: where the
    standardisation was fitted (the probe sees the scaled tensor, not the line). Up to three; none when more."""
    src = _target_source(workspace_root, target)
    sites = scaler_fits(src[1]) if src else []
    if not sites or len(sites) > 3:
        return
    file = src[0]
    f.location = f"{file}:{sites[0][0]}"
    if len(sites) == 1:
        f.summary += f"; the one std/var in {file} outside the model and the training loop is line {sites[0][0]}: " \
                     f"`{sites[0][1][:100]}`"
    else:
        f.summary += f"; the std/var calls in {file} outside the model and the training loop are lines " \
                     f"{', '.join(str(line) for line, _ in sites)}"
    f.evidence[:0] = [Evidence(what="code", value=code[:200], source=f"{file}:{line}") for line, code in sites]


def _place_reshape(f: Finding, workspace_root: Path, target: str) -> None:
    """Name the line of the target's file that reshaped the batch to channels-first, when exactly one reshape/view
    to that many axes outside the model has no transpose after it (the probe sees the tensor, not where it was cut)."""
    src = _target_source(workspace_root, target)
    sites = layout_reshapes(src[1], f.facts.get("ndim", 0)) if src else []
    if len(sites) == 1:
        line, code = sites[0]
        file = src[0]
        f.location = f"{file}:{line}"
        f.summary += f"; the one reshape to that layout in {file} is line {line}: `{code[:100]}`"
        f.evidence.insert(0, Evidence(what="code", value=code[:200], source=f"{file}:{line}"))


# ---------------------------------------------------------------- lr_range_test

class LrPoint(BaseModel):
    lr: float
    loss: Num = None
    smoothed: Num = None


class LrRangeReport(ProbeReport):
    curve: list[LrPoint] = Field(default_factory=list, description="loss vs LR, downsampled")
    steps_run: int = 0
    suggested_lr: Num = Field(None, description="the LR at the minimum of the smoothed loss / 10")
    steepest_lr: Num = Field(None, description="the LR where the smoothed loss falls fastest")
    min_loss_lr: Num = None
    diverged_at_lr: Num = None
    current_lr: Num = None
    current_position: Literal["below", "near", "high", "above", "diverging", "unknown"] = Field(
        "unknown", description="near: within 10x below the suggestion up to 3x above it; high: more than 3x above the "
                               "suggestion but below the min-loss LR; above: past the min-loss LR")
    stopped: str | None = None
    optimizer: str | None = None

    def headline(self) -> str:
        if self.error:
            return f"lr_range_test: {self._error_line()}"
        return (f"lr_range_test: suggested LR {_fmt(self.suggested_lr)} (min loss at {_fmt(self.min_loss_lr)}, "
                f"diverges from {_fmt(self.diverged_at_lr)}); current LR {_fmt(self.current_lr)} is {self.current_position}")


HIGH_OVER_SUGGESTION = 3.0  # a current LR this many times the suggestion is "high", short of the min-loss LR


def lr_report_from(raw: dict, **fields) -> LrRangeReport:
    rep = LrRangeReport(curve=[LrPoint(lr=c[0], loss=c[1], smoothed=c[2]) for c in raw.get("curve", [])],
                        **{k: v for k, v in raw.items() if k in LrRangeReport.model_fields and k != "curve"}, **fields)
    cur, sug, mn, dv = rep.current_lr, rep.suggested_lr, rep.min_loss_lr, rep.diverged_at_lr
    if is_finite(cur) and is_finite(sug):
        if is_finite(dv) and cur >= dv:
            rep.current_position = "diverging"
        elif is_finite(mn) and cur > mn:
            rep.current_position = "above"
        elif cur < sug / 10:
            rep.current_position = "below"
        elif cur > HIGH_OVER_SUGGESTION * sug:
            rep.current_position = "high"
        else:
            rep.current_position = "near"
    ev = [Evidence(what="current lr", value=cur, source="optimizer"), Evidence(what="suggested lr", value=sug, source="lr_range_test"),
          Evidence(what="min-loss lr", value=mn, source="lr_range_test"), Evidence(what="loss diverges from lr", value=dv, source="lr_range_test")]
    if rep.current_position in ("diverging", "above"):
        rep.findings.append(Finding(failure_mode="lr_too_high", confidence=0.8 if rep.current_position == "diverging" else 0.6,
                                    summary=f"the current LR {cur:.3g} is past the loss minimum of the range test"
                                            + (" and in the region where the loss blows up" if rep.current_position == "diverging" else ""),
                                    evidence=ev, fix=f"Use an LR near {sug:.2g}"))
    elif rep.current_position == "high":
        # one signal, and a weak one: the suggestion is a rule of thumb (a tenth of the min-loss LR, fast.ai's
        # lr_find habit on the curve of Smith 2015, "Cyclical Learning Rates"), and healthy runs train above it
        rep.findings.append(Finding(failure_mode="lr_too_high", confidence=0.35,
                                    summary=f"the current LR {cur:.3g} is {cur / sug:.1f}x the suggested {sug:.3g}, within "
                                            f"{mn / cur:.1f}x of the LR where the range test's loss bottoms out",
                                    evidence=ev, fix=(f"Confirm before changing it: overfit_test at lr={cur / 10:.3g} "
                                                      "memorising the batch faster than at the current LR, or spikes in "
                                                      f"the logged loss, say lower it toward {sug:.2g}")))
    elif rep.current_position == "below":
        rep.findings.append(Finding(failure_mode="lr_too_low", confidence=0.5,
                                    summary=f"the current LR {cur:.3g} is more than 10x below the suggested {sug:.3g}",
                                    evidence=ev, fix=f"Try an LR near {sug:.2g} (check the update/weight ratio with grad_norm_snapshot)"))
    return rep


async def lr_range_test(workspace_root: Path, target: str, min_lr: float = 1e-7, max_lr: float = 10.0, steps: int = 100,
                        python: str | None = None, timeout_s: float = 300.0,
                        on_progress: ProgressFn | None = None) -> LrRangeReport:
    _need_target(target)
    if not (0 < min_lr < max_lr):
        raise TriageError(f"min_lr={min_lr} must be positive and below max_lr={max_lr}", "e.g. min_lr=1e-7, max_lr=10")
    raw, err, oc = await _run("mltriage_lr_range.py", {"target": target, "min_lr": min_lr, "max_lr": max_lr,
                                                       "steps": steps}, workspace_root, python, timeout_s,
                              on_progress, "lr_range_test")
    if err:
        return _error_report(LrRangeReport, err, oc, target=target)
    return lr_report_from(raw, target=target, python=oc.python, duration_s=oc.duration_s)


# ---------------------------------------------------------------- script mode (instruments injected via sitecustomize)

async def _run_script(workspace_root: Path, command: list[str], mode: str, args: dict, python: str | None,
                      timeout_s: float, on_progress: ProgressFn | None, what: str):
    interp = choose_python(python, workspace_root)
    argv = script_argv(command, interp)
    pp = os.environ.get("PYTHONPATH", "")
    env = {"PYTHONPATH": str(INJECT_DIR) + (os.pathsep + pp if pp else ""), "MLTRIAGE_MODE": mode}
    args = {**args, "_stack_dump_after_s": stack_dump_after(timeout_s)}
    outcome = await run_probe("mltriage_script", {"mode": mode, **args}, workspace_root=workspace_root, python=interp,
                              timeout_s=timeout_s, on_progress=on_progress, env=env, command=argv)
    reports = outcome.reports
    if not reports:
        if outcome.timed_out or outcome.crashed_by:
            raise _infrastructure_error(outcome, timeout_s, what)
        if "Traceback" in (outcome.stderr_tail or ""):
            raise ScriptCrashed(outcome)
        raise TriageError(f"{what}: the script exited with code {outcome.returncode} before any optimizer step was seen"
                          f"{_stderr_hint(outcome)}",
                          "Check the command runs by itself and trains with a torch.optim optimizer; "
                          "a crash in the script shows in the stderr tail above")
    return reports, outcome


def _eval_step_finding(raw: dict) -> Finding | None:
    """An optimizer step taken while the model was in eval mode: an evaluate() that never switched back."""
    step = raw.get("eval_mode_step")
    if step is None:
        return None
    mods = [f"{n} ({t})" for n, t in raw.get("eval_mode_step_modules", [])]
    return Finding(failure_mode="train_eval_mode", confidence=0.9,
                   summary=f"optimizer step {step} ran with the model in eval mode ({len(mods)} dropout/batch-norm "
                           "modules in eval behaviour): an evaluation left it there",
                   evidence=[Evidence(what="first training step in eval mode", value=step, source="script instruments")]
                   + [Evidence(what="eval-mode module", value=m, source="script instruments") for m in mods[:3]],
                   fix="Call model.train() at the start of every training epoch (after each evaluate(), which calls "
                       "model.eval())")


def _script_fields(command, oc):
    return {"mode": "script", "command": command, "python": oc.python, "duration_s": oc.duration_s}


class ScriptCrashed(Exception):
    """The user's script raised before the instruments had anything to report: the traceback is the finding."""

    def __init__(self, outcome: ProbeOutcome):
        self.outcome = outcome


def _innermost_user_frame(stderr: str) -> str | None:
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', stderr)
    theirs = [f for f in frames if "/torch/" not in f[0] and "mltriage_" not in f[0] and "/lib/python" not in f[0]]
    return f"{theirs[-1][0]}:{theirs[-1][1]} in {theirs[-1][2]}" if theirs else None


def _script_crash(oc: ProbeOutcome, rep: ProbeReport) -> None:
    """A script that raised: its traceback is the strongest evidence there is, so it leads (0.9)."""
    if oc.returncode not in (0, None) and "Traceback" in (oc.stderr_tail or ""):
        tail = oc.stderr_tail.strip().splitlines()
        last = next((l for l in reversed(tail) if re.match(r"^[\w.]+(Error|Exception|Interrupt)\b", l)), tail[-1] if tail else "")
        mode = crash_mode(last)
        where = _innermost_user_frame(oc.stderr_tail)
        rep.findings.append(Finding(failure_mode=mode, confidence=0.9,
                                    summary=f"the script crashed (exit code {oc.returncode}): {last[:300]}",
                                    evidence=[Evidence(what="exception", value=last[:300], source="script stderr")]
                                    + ([Evidence(what="innermost frame of your code", value=where, source="script stderr")]
                                       if where else []),
                                    location=where,
                                    fix=crash_fix(last) or "Read the traceback (stderr tail) and fix the line it names"))


async def _script_grad(workspace_root, command, steps, python, timeout_s, on_progress) -> GradNormReport:
    try:
        reports, oc = await _run_script(workspace_root, command, "grad", {"step": steps}, python, timeout_s,
                                        on_progress, "grad_norm_snapshot")
    except ScriptCrashed as e:
        rep = GradNormReport(**_script_fields(command, e.outcome))
        _script_crash(e.outcome, rep)
        return rep
    ranked = sorted(reports.values(), key=lambda r: r.get("rank") or 0)
    snap = next((r for r in ranked if r.get("params")), None)
    if snap is None:
        seen = max((r.get("steps_seen", 0) for r in ranked), default=0)
        raise TriageError(f"grad_norm_snapshot: the script made {seen} optimizer steps, fewer than step={steps}"
                          f"{_stderr_hint(oc)}", "Ask for an earlier step or let the script run longer")
    rep = grad_report_from(snap, **_script_fields(command, oc))
    mode = eval_mode_finding(snap.get("model_training"), [f"{n} ({t})" for n, t in snap.get("eval_mode_modules", [])],
                             "script instruments") or _eval_step_finding(snap)
    if mode:
        rep.findings.append(mode)
    zb = snap.get("zeroed_before_step") or 0
    if zb and zb >= (snap.get("step") or 1):
        # grads wiped between backward() and step() look like a cut graph; the cause is the call order
        rep.findings = [f for f in rep.findings if f.failure_mode not in ("broken_graph", "frozen_params")]
        rep.findings.insert(0, Finding(
            failure_mode="missing_zero_grad", confidence=0.9,
            summary=(f"zero_grad() ran after backward() and before optimizer.step() in {zb} of {snap.get('step')} "
                     "steps: every step applies a zero (or None) gradient, so the weights never learn"),
            evidence=[Evidence(what="steps whose gradients were zeroed between backward and step", value=zb,
                               source="script instruments"),
                      Evidence(what="global grad norm at step", value=rep.global_grad_norm, source="script instruments")],
            fix="Call optimizer.zero_grad() before loss.backward() (or right after optimizer.step()), never between them",
            avoid="Do not raise the LR or rebuild the optimizer: the gradients are computed, then wiped before the step"))
    mz = snap.get("missing_zero_grad")
    if mz:
        rep.findings.append(Finding(
            failure_mode="missing_zero_grad", confidence=0.8 if mz.get("growing") else 0.55,
            summary=f"no zero_grad() call seen in {mz['steps']} optimizer steps"
                    + (" and the gradient norm grows" if mz.get("growing") else ""),
            evidence=[Evidence(what="zero_grad calls", value=0, source="script instruments"),
                      Evidence(what="grad norm by step", value=", ".join(_fmt(g) for g in mz["grad_norms"][-6:]), source="script instruments")],
            fix="Call optimizer.zero_grad(set_to_none=True) once per step, before loss.backward()"))
    _script_crash(oc, rep)
    return rep


async def _script_nan(workspace_root, command, max_steps, python, timeout_s, on_progress) -> NanHookReport:
    try:
        reports, oc = await _run_script(workspace_root, command, "nan", {"max_steps": max_steps}, python, timeout_s,
                                        on_progress, "nan_hook_run")
    except ScriptCrashed as e:
        rep = NanHookReport(**_script_fields(command, e.outcome))
        _script_crash(e.outcome, rep)
        return rep
    order = {"forward": 0, "loss": 1, "backward": 2, "optimizer_step": 3}
    ranked = sorted(reports.values(), key=lambda r: r.get("rank") or 0)
    hits = [r for r in ranked if r.get("found")]
    first = min(hits, key=lambda r: (r["step"], order.get(r.get("phase"), 9), r.get("rank") or 0)) if hits else None
    base = first or max(ranked, key=lambda r: r.get("steps_run", 0))
    rep = nan_report_from(base, **_script_fields(command, oc))
    rep.steps_run = max(r.get("steps_run", 0) for r in ranked)
    if len(ranked) > 1 or any(r.get("rank") is not None for r in ranked):
        rep.rank = base.get("rank") if first else None
        rep.ranks = [RankResult(rank=r.get("rank") or 0, found=bool(r.get("found")), step=r.get("step"),
                                phase=r.get("phase"), steps_run=r.get("steps_run", 0),
                                module=(r.get("module") or {}).get("module")) for r in ranked]
        if first:
            rep.findings[0].evidence.insert(0, Evidence(what="first rank", value=rep.rank, source=f"{len(ranked)} rank reports"))
            rep.findings[0].summary += f" (rank {rep.rank} of {len(ranked)})"
    if not first:
        _script_crash(oc, rep)
    mode = _eval_step_finding(base)
    if mode:
        rep.findings.insert(0, mode)
    return rep
