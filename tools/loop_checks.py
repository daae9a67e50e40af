"""Checks of the training loop around the model: a sequence model's causality, targets and padding, and the LR
schedule over the whole horizon (issue #14: bugs there were invisible to every other probe).

`sequence_check` runs tools/probe/mltriage_sequence.py, `schedule_check` runs tools/probe/mltriage_schedule.py,
both in the user's interpreter through tools.probes' runner; the probes measure, this module judges.
A finding here must be right on code nobody here wrote: a bidirectional model whose targets are not the next
token is not leaking, a warmup from zero is not a jump, a restart of a cyclic scheduler is not a bug.
"""

import math
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from tools.errors import TriageError
from tools.probe_runner import ProgressFn
from tools.probes import ProbeReport, _error_report, _need_target, _run
from tools.report import Evidence, Finding, Num, is_finite

# A run that ends during its warmup; triage weighs it against whether the loss still falls (a short run).
STILL_WARMING = "the LR is still rising at the end of the run"

Detail = Literal["summary", "full"]


def _r(x):
    """4 significant digits for a finite float; anything else unchanged."""
    return float(f"{x:.4g}") if isinstance(x, float) and math.isfinite(x) else x


def _g(x) -> str:
    return f"{x:.4g}" if isinstance(x, float) else str(x)


def _pct(x) -> str:
    return f"{x:.0%}" if is_finite(x) else str(x)


def _compact_error(rep):
    """The runner's traceback tail is long; the agent needs its last frames."""
    if rep.error is not None:
        rep.error.traceback_tail = rep.error.traceback_tail[-1200:]
    return rep


# ---------------------------------------------------------------- sequence_check

class CausalityCut(BaseModel):
    t: int = Field(description="tokens after position t were replaced by random other tokens")
    past_change: Num = Field(None, description="max |change| of the logits at positions <= t (0 for a causal model)")
    future_change: Num = Field(None, description="max |change| of the logits at positions > t, for scale")
    leak: bool = False


Objective = Literal["next_token", "same_position", "other", "unknown"]


class SequenceCheckReport(ProbeReport):
    sequence_model: bool | None = Field(None, description="the model maps (B, T) integer tokens to (B, T, V) logits")
    note: str | None = None
    tokens_shape: list[int] = Field(default_factory=list)
    logits_shape: list[int] = Field(default_factory=list)
    causal: bool | None = Field(None, description="no logit at <= t moved when only tokens after t changed")
    causality: list[CausalityCut] = Field(default_factory=list)
    tolerance: Num = Field(None, description="a logit change below this is float rounding")
    leak_module: str | None = Field(None, description="deepest module whose output at <= t moves while its input does not")
    leak_module_type: str | None = None
    leak_location: str | None = None
    leak_hints: list[str] = Field(default_factory=list, description="lines that discard a mask or skip is_causal")
    modules_changed: list[str] = Field(default_factory=list, description="detail='full': modules whose past outputs moved")
    objective: Objective = Field("unknown", description=(
        "what the loss scores position t against, read from d loss / d logits: next_token (x[t+1]), "
        "same_position (x[t], the input itself), other (tags, masked tokens), unknown"))
    targets_next_frac: Num = Field(None, description="share of scored positions whose target is the next input token")
    targets_same_frac: Num = Field(None, description="share of scored positions whose target is the input token itself")
    scored_frac: Num = Field(None, description="share of positions the loss counts (non-zero gradient)")
    targets_best_shift_frac: Num = Field(None, description=(
        "share of scored positions whose target equals the input token at the best offset in -3..3 (1.0 for an LM)"))
    targets_input_tv: Num = Field(None, description=(
        "total-variation distance between the scored targets' and the input tokens' frequencies (small: same stream)"))
    targets_chance_match: Num = Field(None, description="share that unrelated tokens of these frequencies would match")
    labels_same_frac: Num = Field(None, description="the batch's labels: share equal to the inputs at the same position")
    labels_shift_frac: Num = Field(None, description="the batch's labels: share with y[:, t] == x[:, t+1]")
    pad_id: int | None = None
    pad_from: str | None = None
    pad_frac: Num = Field(None, description="share of input tokens that are padding")
    pad_counted_frac: Num = Field(None, description="share of the positions the loss counts whose target is padding")
    loss: Num = None
    ce_with_pad: Num = Field(None, description="cross-entropy over the scored positions, padding included")
    ce_without_pad: Num = Field(None, description="the same cross-entropy with padding targets left out")
    loss_location: str | None = None
    forecast_channel: int | None = Field(None, description=(
        "a float-series forecaster: the input channel its targets are, one step ahead (y[:, t] == x[:, t+1, c])"))

    def headline(self) -> str:
        if self.error:
            return f"sequence_check: {self._error_line()}"
        if not self.sequence_model and self.forecast_channel is not None:
            worst = max((x for x in self.causality if x.leak), key=lambda x: x.past_change or 0, default=None)
            return (f"sequence_check: a next-step forecaster of input channel {self.forecast_channel}, "
                    + (f"sees later inputs (outputs at <= {worst.t} move by {_g(worst.past_change)})" if worst else
                       f"causal ({len(self.causality)} cuts, past outputs unchanged)"))
        if not self.sequence_model:
            return f"sequence_check: not a sequence model ({self.note or 'no (B, T) tokens -> (B, T, V) logits'})"
        if self.causal is None:
            c = "causality not tested (T < 2)"
        elif self.causal:
            c = f"causal ({len(self.causality)} cuts, past logits unchanged)"
        else:
            worst = max((x for x in self.causality if x.leak), key=lambda x: x.past_change or 0)
            c = f"sees later tokens (logits at <= {worst.t} move by {_g(worst.past_change)})"
            if self.objective == "other":
                c += ", fine for targets that are not the next token"
        pad = ("no padding found" if self.pad_id is None else
               f"pad {self.pad_id}: {_pct(self.pad_frac)} of tokens, {_pct(self.pad_counted_frac)} of loss positions")
        return (f"sequence_check {self.tokens_shape}->{self.logits_shape}: {c}; loss targets: {self.objective}; {pad}")


def unaligned_stream(rep: SequenceCheckReport) -> bool:
    """Targets from the inputs' own text (a tagger's tags have other frequencies) scored at nearly every position
    (masked-token models score a few), yet at no small offset from the inputs: x and y drawn at different offsets."""
    nums = (rep.targets_best_shift_frac, rep.targets_input_tv, rep.targets_chance_match, rep.scored_frac)
    if rep.objective != "other" or not all(is_finite(v) for v in nums):
        return False
    return (rep.scored_frac >= 0.9 and rep.targets_input_tv <= 0.2
            and rep.targets_best_shift_frac <= max(0.3, 3 * rep.targets_chance_match))


def _seq_findings(rep: SequenceCheckReport) -> list[Finding]:
    out: list[Finding] = []
    src = "sequence_check"
    leaks = sorted((c for c in rep.causality if c.leak), key=lambda c: c.t)
    if leaks:
        lm_like = rep.objective in ("next_token", "same_position")
        shifted = is_finite(rep.labels_shift_frac) and rep.labels_shift_frac >= 0.9
        if lm_like or rep.objective == "unknown":
            conf = 0.9 if lm_like else 0.8 if shifted else 0.45
            first = leaks[0]
            where = f" (first in {rep.leak_module}, {rep.leak_module_type})" if rep.leak_module else ""
            summary = (f"position {first.t}'s logits change by {_g(first.past_change)} when only tokens after {first.t} "
                       f"change: the model sees the future{where}")
            if not lm_like and not shifted:
                summary += "; this is a leak only if the model predicts the next token (a causal LM)"
            ev = [Evidence(what=f"max |change| of logits at positions <= {c.t} when tokens > {c.t} change",
                           value=c.past_change, source=f"{src}, t={c.t}") for c in leaks[:3]]
            ev.append(Evidence(what=f"max |change| at positions > {first.t} (scale)", value=first.future_change, source=src))
            ev.append(Evidence(what="loss targets", value=rep.objective, source=f"{src}: d loss / d logits"))
            ev += [Evidence(what="hint", value=h, source=src) for h in rep.leak_hints[:2]]
            fix = ("Mask attention to later positions before the softmax and keep the result: "
                   "att = att.masked_fill(mask[:, :, :T, :T] == 0, float('-inf')), or "
                   "F.scaled_dot_product_attention(q, k, v, is_causal=True); for nn.MultiheadAttention / "
                   "nn.TransformerEncoder pass a causal attn_mask")
            if rep.leak_hints:  # the line and the mask that let the future in say more than the recipe
                fix = f"{rep.leak_hints[0]}; sequence_check must then report the model causal"
            out.append(Finding(failure_mode="data_leakage", confidence=conf, summary=summary, evidence=ev, fix=fix,
                               location=rep.leak_location or rep.leak_module,
                               avoid=("Do not celebrate the low loss or tune around it: the model reads the tokens it "
                                      "must predict. Once the future is masked the training loss rises: that is the "
                                      "fix working, not a reason to revert")))
    if rep.objective == "same_position":
        out.append(Finding(
            failure_mode="data_leakage", confidence=0.9,
            summary=(f"the loss scores logits[:, t] against x[:, t], the token the model is given at t "
                     f"({_pct(rep.targets_same_frac)} of scored positions): it learns to copy its input, not to predict"),
            evidence=[Evidence(what="scored positions whose target is the input token at t", value=rep.targets_same_frac,
                               source=f"{src}: d loss / d logits"),
                      Evidence(what="scored positions whose target is the next token x[t+1]", value=rep.targets_next_frac,
                               source=src),
                      Evidence(what="batch labels equal to the inputs", value=rep.labels_same_frac, source=src)],
            fix=("Shift by one: inputs x = tokens[:, :-1], targets y = tokens[:, 1:] (y[:, t] == x[:, t+1]), or compare "
                 "logits[:, :-1] with labels[:, 1:] in the loss"),
            location=rep.loss_location))
    elif rep.objective == "unknown" and is_finite(rep.labels_same_frac) and rep.labels_same_frac >= 0.9:
        out.append(Finding(
            failure_mode="data_leakage", confidence=0.4,
            summary=(f"the batch's labels equal its inputs at the same positions ({_pct(rep.labels_same_frac)}); unless "
                     "the model shifts them itself (Hugging Face causal LMs do), each position is scored on its own input"),
            evidence=[Evidence(what="labels equal to inputs", value=rep.labels_same_frac, source=src),
                      Evidence(what="labels equal to the next input token", value=rep.labels_shift_frac, source=src)],
            fix="Make targets the next token (y = tokens[:, 1:]) or check that the loss shifts them",
            location=rep.loss_location))
    if unaligned_stream(rep):
        out.append(Finding(
            failure_mode="data_pipeline", confidence=0.85,
            summary=(f"the loss scores each position against a token of the inputs' own text (same frequencies) that is "
                     f"neither the next input token ({_pct(rep.targets_next_frac)}) nor any token within 3 positions "
                     f"(best {_pct(rep.targets_best_shift_frac)}, chance {_pct(rep.targets_chance_match)}): the targets "
                     "were cut from other places in the text than the inputs"),
            evidence=[Evidence(what="scored positions whose target is the next input token x[t+1]",
                               value=rep.targets_next_frac, source=f"{src}: d loss / d logits"),
                      Evidence(what="best match of target and input at an offset in -3..3",
                               value=rep.targets_best_shift_frac, source=src),
                      Evidence(what="distance between target and input token frequencies (0 = same text)",
                               value=rep.targets_input_tv, source=src)],
            fix=("Draw inputs and targets from one offset: ix = torch.randint(...); x = data[i:i+T], "
                 "y = data[i+1:i+T+1] for the same i (one index for both, like one permutation for features and labels)"),
            location=rep.loss_location))
    if rep.pad_id is not None and is_finite(rep.pad_counted_frac) and rep.pad_counted_frac >= 0.1:
        out.append(Finding(
            failure_mode="loss_function", confidence=0.8,
            summary=(f"padding is scored by the loss: {_pct(rep.pad_counted_frac)} of the positions it counts have the "
                     f"pad token {rep.pad_id} as target, so the model is trained to predict padding"),
            evidence=[Evidence(what="pad id", value=rep.pad_id, source=rep.pad_from or src),
                      Evidence(what="padding share of input tokens", value=rep.pad_frac, source=src),
                      Evidence(what="share of counted loss positions with a pad target", value=rep.pad_counted_frac,
                               source=f"{src}: d loss / d logits"),
                      Evidence(what="loss through the target's loss_fn", value=rep.loss, source="loss_fn"),
                      Evidence(what="cross-entropy counting pad targets", value=rep.ce_with_pad, source=src),
                      Evidence(what="cross-entropy ignoring pad targets", value=rep.ce_without_pad, source=src)],
            fix=(f"Leave padding out of the loss: F.cross_entropy(logits.view(-1, V), y.view(-1), "
                 f"ignore_index={rep.pad_id}), or set the labels at padded positions to -100"),
            location=rep.loss_location))
    return out


def sequence_report_from(raw: dict, detail: Detail = "summary", **fields) -> SequenceCheckReport:
    al = raw.get("alignment") or {}
    bl = raw.get("batch_labels") or {}
    leak = raw.get("leak") or {}
    cuts = [CausalityCut(t=c["t"], past_change=_r(c["past_change"]), future_change=_r(c["future_change"]),
                         leak=c["leak"]) for c in raw.get("causality", [])]
    rep = SequenceCheckReport(
        sequence_model=raw.get("sequence_model"), note=raw.get("note") or al.get("note"),
        tokens_shape=raw.get("tokens_shape", []), logits_shape=raw.get("logits_shape", []),
        causal=raw.get("causal"), causality=cuts, tolerance=_r(raw.get("tolerance")),
        leak_module=leak.get("module"), leak_module_type=leak.get("module_type"), leak_location=leak.get("location"),
        leak_hints=leak.get("hints", raw.get("leak_hints", [])),
        modules_changed=leak.get("modules_changed", []) if detail == "full" else [],
        objective=al.get("objective", "unknown"), targets_next_frac=_r(al.get("next_frac")),
        targets_same_frac=_r(al.get("same_frac")), scored_frac=_r(al.get("counted_frac")),
        targets_best_shift_frac=_r(al.get("best_shift_frac")), targets_input_tv=_r(al.get("target_input_tv")),
        targets_chance_match=_r(al.get("chance_match")),
        labels_same_frac=_r(bl.get("same_frac")), labels_shift_frac=_r(bl.get("shift_frac")),
        pad_id=raw.get("pad_id"), pad_from=raw.get("pad_from"), pad_frac=_r(raw.get("pad_frac")),
        pad_counted_frac=_r(raw.get("pad_counted_frac")), loss=_r(raw.get("loss")),
        ce_with_pad=_r(raw.get("ce_with_pad")), ce_without_pad=_r(raw.get("ce_without_pad")),
        loss_location=raw.get("loss_location"), forecast_channel=raw.get("forecast_channel"), **fields)
    if rep.sequence_model:
        rep.findings = _seq_findings(rep)
    elif rep.forecast_channel is not None:
        rep.findings = _forecast_findings(rep)
    return rep


def _forecast_findings(rep: SequenceCheckReport) -> list[Finding]:
    leaks = sorted((c for c in rep.causality if c.leak), key=lambda c: c.t)
    if not leaks:
        return []
    first, src = leaks[0], "sequence_check"
    bidi = [h for h in rep.leak_hints if "bidirectional" in h]
    return [Finding(
        failure_mode="data_leakage", confidence=0.85,
        summary=(f"the targets are input channel {rep.forecast_channel} one step ahead, and the output at step "
                 f"{first.t} changes by {_g(first.past_change)} when only inputs after {first.t} change: the model "
                 "reads the value it is asked to predict" + (f" ({bidi[0]})" if bidi else "")),
        evidence=[Evidence(what=f"max |change| of outputs at steps <= {c.t} when inputs > {c.t} change",
                           value=c.past_change, source=f"{src}, t={c.t}") for c in leaks[:2]]
        + [Evidence(what="targets", value=f"y[:, t] == x[:, t+1, {rep.forecast_channel}]", source=src)],
        fix=("Make the model causal in time: bidirectional=False for an RNN predicting the next step (size the head "
             "for one direction), left-padded causal convolutions, a causal mask in attention; or predict only "
             "after the window from its last state"),
        avoid=("Do not trust the training or teacher-forced validation loss: it is read off the answer; judge by a "
               "forecast that sees only the past"),
        location=bidi[0].split(" ")[0] if bidi else None)]


async def sequence_check(workspace_root: Path, target: str, python: str | None = None, timeout_s: float = 120.0,
                         on_progress: ProgressFn | None = None, detail: Detail = "summary") -> SequenceCheckReport:
    """Causality, target alignment and padding of a (B, T) tokens -> (B, T, V) logits model, with findings."""
    _need_target(target)
    raw, err, oc = await _run("mltriage_sequence.py", {"target": target}, workspace_root, python, timeout_s,
                              on_progress, "sequence_check")
    if err:
        return _compact_error(_error_report(SequenceCheckReport, err, oc, target=target))
    return sequence_report_from(raw, detail, target=target, python=oc.python, duration_s=_r(oc.duration_s))


# ---------------------------------------------------------------- schedule_check

SCHEDULE_SPEC = ("Pass lr_schedule='train.py:get_lr' (a top-level function lr = f(step); horizon= the number of "
                 "steps unless the file sets max_iters), or target='train.py:make_target' returning {'scheduler': "
                 "scheduler, 'max_steps': N} or {'optimizer': opt, 'make_scheduler': fn(optimizer), 'max_steps': N}")
AVOID = ("Do not lower or raise the base LR to compensate for the schedule; fix the step where the curve goes wrong "
         "and keep the configured LR")


class SchedulePoint(BaseModel):
    step: int
    lr: Num = None


class ScheduleCheckReport(ProbeReport):
    lr_schedule: str | None = Field(None, description="the function evaluated, 'file.py:get_lr'")
    source: Literal["function", "scheduler"] | None = None
    schedule: str | None = Field(None, description="the function, or the scheduler class with its settings")
    note: str | None = None
    horizon: int | None = Field(None, description="the last step evaluated")
    horizon_from: str | None = None
    steps_evaluated: int = 0
    base_lr: Num = Field(None, description="the configured LR (learning_rate, the optimizer's lr, OneCycle max_lr)")
    base_lr_from: str | None = None
    warmup: int | None = Field(None, description="the warmup end step (configured, or inferred from the curve)")
    warmup_inferred: bool | None = None
    decay_expected: bool | None = Field(None, description="the configuration asks for a decay (lr_decay_iters, min_lr, "
                                                          "a decaying scheduler)")
    first_lr: Num = None
    peak_lr: Num = None
    peak_step: int | None = None
    final_lr: Num = None
    curve: list[SchedulePoint] = Field(default_factory=list, description="<= 32 points, landmarks included")
    config: dict[str, float | int | bool] = Field(default_factory=dict, description="the module's schedule settings")
    lines: dict[str, str] = Field(default_factory=dict, description="detail='full': step -> the return line it took")
    notes: list[str] = Field(default_factory=list)

    def headline(self) -> str:
        if self.error:
            return f"schedule_check: {self._error_line()}"
        if self.note:
            return f"schedule_check: {self.schedule}: {self.note}"
        return (f"schedule_check {self.schedule} over {self.horizon} steps ({self.horizon_from}): "
                f"lr {_g(self.first_lr)} -> peak {_g(self.peak_lr)} at step {self.peak_step} -> {_g(self.final_lr)}"
                + (f"; configured {_g(self.base_lr)}" if self.base_lr is not None else "")
                + ("" if self.findings else "; no problem found"))


def _line(raw: dict, step) -> str | None:
    return (raw.get("lines") or {}).get(str(step)) if step is not None else None


def _loc(raw: dict, step) -> str | None:
    """file:line of the return statement that step went through (without the source text)."""
    ln = _line(raw, step)
    return ln.split(": ", 1)[0] if ln else None


def _sched_findings(rep: ScheduleCheckReport, raw: dict) -> list[Finding]:
    out: list[Finding] = []
    src = "schedule_check"
    H, peak, base, W = rep.horizon or 0, rep.peak_lr, rep.base_lr, rep.warmup
    cyclic = bool(raw.get("cyclic"))

    def ev_line(step):
        ln = _line(raw, step)
        return [Evidence(what=f"return taken at step {step}", value=ln.split(": ", 1)[1], source=ln.split(": ", 1)[0])] \
            if ln and ": " in ln else []

    if raw.get("nonfinite_step") is not None:
        s = raw["nonfinite_step"]
        out.append(Finding(failure_mode="nan_inf", confidence=0.9, summary=f"the LR is NaN/Inf from step {s}",
                           evidence=[Evidence(what="first non-finite LR step", value=s, source=src)] + ev_line(s),
                           fix="Guard the division in the schedule (a zero-length warmup or decay span)",
                           location=_loc(raw, s)))
    if raw.get("negative_step") is not None:
        s = raw["negative_step"]
        out.append(Finding(failure_mode="lr_too_high", confidence=0.8,
                           summary=f"the LR is negative from step {s}: the optimizer climbs the loss (gradient ascent)",
                           evidence=[Evidence(what="first negative LR step", value=s, source=src),
                                     Evidence(what="lowest LR", value=_r(raw.get("min_lr_seen")), source=src)] + ev_line(s),
                           fix="Clamp the schedule's progress to [0, 1] (e.g. past the decay span return min_lr)",
                           location=_loc(raw, s)))
    high = None
    if is_finite(base) and base > 0 and is_finite(peak) and peak > 2 * base:
        s = raw.get("first_above_base_step")
        rise = raw.get("rise_start_step") if not rep.warmup_inferred else None
        summary = (f"the LR climbs to {_g(peak)} at step {rep.peak_step}, {peak / base:.3g}x the configured "
                   f"{rep.base_lr_from or 'lr'} {_g(base)}; it first exceeds it at step {s}")
        if rise is not None and W:
            summary += f", right after the warmup ends at step {W}: it keeps rising instead of decaying"
        high = Finding(failure_mode="lr_too_high", confidence=0.85, summary=summary,
                       evidence=[Evidence(what="peak LR", value=_r(peak), source=f"{src}, step {rep.peak_step}"),
                                 Evidence(what=f"configured {rep.base_lr_from or 'lr'}", value=_r(base), source=src),
                                 Evidence(what="first step above the configured LR", value=s, source=src)]
                       + ([Evidence(what="warmup end", value=W, source=raw.get("warmup_from") or src)] if W else [])
                       + ev_line(s),
                       fix=("Make the warmup branch cover only the warmup steps (nanoGPT: `if it < warmup_iters`), so the "
                            "LR peaks at the configured value and decays after"),
                       location=_loc(raw, s))
        out.append(high)
    elif (not rep.warmup_inferred and W and not cyclic and is_finite(raw.get("max_after_warmup"))
          and is_finite(raw.get("lr_at_warmup_end")) and raw["lr_at_warmup_end"] > 0
          and raw["max_after_warmup"] > 1.5 * raw["lr_at_warmup_end"]):
        s = raw.get("rise_start_step")
        high = Finding(failure_mode="lr_too_high", confidence=0.6,
                       summary=(f"the LR keeps rising after the warmup ends at step {W}: from {_g(raw['lr_at_warmup_end'])} "
                                f"to {_g(raw['max_after_warmup'])} at step {raw.get('max_after_warmup_step')}"),
                       evidence=[Evidence(what="LR at the warmup end", value=_r(raw["lr_at_warmup_end"]), source=src),
                                 Evidence(what="highest LR after it", value=_r(raw["max_after_warmup"]), source=src)]
                       + ev_line(s),
                       fix="End the warmup branch at warmup_iters and decay from there", location=_loc(raw, s))
        out.append(high)
    rb = raw.get("rebound")
    if rb and not cyclic and high is None:
        out.append(Finding(
            failure_mode="lr_too_high", confidence=0.6,
            summary=(f"the LR decays to {_g(rb['from_lr'])} at step {rb['from_step']}, then climbs back to "
                     f"{_g(rb['to_lr'])} by step {rb['to_step']} (a cosine run past its period?) unless restarts are meant"),
            evidence=[Evidence(what="LR at the bottom", value=_r(rb["from_lr"]), source=f"{src}, step {rb['from_step']}"),
                      Evidence(what="LR after the climb", value=_r(rb["to_lr"]), source=f"{src}, step {rb['to_step']}"),
                      Evidence(what="horizon", value=H, source=rep.horizon_from or src)] + ev_line(rb["start_step"]),
            fix=("Make the decay span equal the number of steps (T_max / lr_decay_iters = the steps the loop runs, in the "
                 "unit the scheduler is stepped in) and hold min_lr after it"),
            location=_loc(raw, rb["start_step"])))
    first, final = rep.first_lr, rep.final_lr
    never_warm = (high is None and H and rep.peak_step is not None and rep.peak_step >= 0.9 * H and is_finite(first)
                  and is_finite(peak) and peak > 0 and first < 0.5 * peak and (rep.warmup_inferred or (W or 0) >= 0.5 * H))
    if never_warm:
        out.append(Finding(
            failure_mode="lr_too_low", confidence=0.5,
            summary=(f"{STILL_WARMING}: it reaches its peak {_g(peak)} only at step "
                     f"{rep.peak_step} of {H}, so most steps run far below it"),
            evidence=[Evidence(what="LR at step 0", value=_r(first), source=src),
                      Evidence(what="peak step", value=rep.peak_step, source=src),
                      Evidence(what="warmup", value=W, source=raw.get("warmup_from") or "inferred")],
            fix="Warm up for a few % of the run (e.g. warmup_iters ~ 1-5% of max_iters), then decay",
            location=_loc(raw, rep.peak_step)))
    if (rep.decay_expected and high is None and not never_warm and not rb and is_finite(final) and is_finite(peak)
            and peak > 0 and final >= 0.9 * peak):
        cfg = rep.config
        ev = [Evidence(what="final LR", value=_r(final), source=f"{src}, step {H}"),
              Evidence(what="peak LR", value=_r(peak), source=src)]
        for k in ("lr_decay_iters", "min_lr", "max_iters"):
            if k in cfg:
                ev.append(Evidence(what=k, value=cfg[k], source=rep.lr_schedule or src))
        out.append(Finding(
            failure_mode="lr_too_high", confidence=0.45,
            summary=(f"the LR never decays: {_g(final)} at the last step, {final / peak:.0%} of its peak, though the "
                     "configuration asks for a decay"),
            evidence=ev,
            fix=("Set the decay span to the run's length (nanoGPT: lr_decay_iters = max_iters; a scheduler: T_max / "
                 "total_steps = the number of scheduler.step() calls)"),
            location=_loc(raw, H)))
    low = raw.get("below_1pct_step")
    collapse = (low is not None and H and low <= 0.05 * H and is_finite(raw.get("below_1pct_share_after"))
                and raw["below_1pct_share_after"] >= 0.9)
    if collapse:
        sched = rep.source == "scheduler"
        out.append(Finding(
            failure_mode="lr_too_low", confidence=0.8,
            summary=(f"the LR falls below 1% of its peak {_g(peak)} by step {low}, {low / H:.1%} of the {H}-step horizon, "
                     f"and stays there: the rest of the run barely trains"),
            evidence=[Evidence(what="step the LR falls below 1% of its peak", value=low, source=src),
                      Evidence(what="share of later steps below 1%", value=_r(raw["below_1pct_share_after"]), source=src),
                      Evidence(what="horizon", value=H, source=rep.horizon_from or src),
                      Evidence(what="schedule", value=rep.schedule, source=src)] + ev_line(low),
            fix=("The scheduler counts in a different unit than it is stepped in: its step_size / milestones / T_max "
                 "look like epochs while scheduler.step() runs every batch; multiply them by the steps per epoch or "
                 "step it once per epoch" if sched else
                 "Express the decay span in the same unit as the step the function is called with (iterations, not epochs)"),
            location=_loc(raw, low)))
    jd, ju = raw.get("jump_down"), raw.get("jump_up")
    if jd and not collapse:
        out.append(Finding(
            failure_mode="lr_too_low", confidence=0.5,
            summary=f"the LR drops {1 / max(jd['ratio'], 1e-300):.3g}x in one step at step {jd['step']} "
                    f"({_g(jd['from_lr'])} -> {_g(jd['to_lr'])})",
            evidence=[Evidence(what="LR before / after", value=f"{_g(jd['from_lr'])} / {_g(jd['to_lr'])}",
                               source=f"{src}, step {jd['step']}")] + ev_line(jd["step"]),
            fix="Check the branch the schedule switches to at that step (a missing factor, min_lr 0, a wrong boundary)",
            location=_loc(raw, jd["step"])))
    if ju and high is None:
        out.append(Finding(
            failure_mode="lr_too_high", confidence=0.6,
            summary=f"the LR jumps {ju['ratio']:.3g}x in one step at step {ju['step']} ({_g(ju['from_lr'])} -> {_g(ju['to_lr'])})",
            evidence=[Evidence(what="LR before / after", value=f"{_g(ju['from_lr'])} / {_g(ju['to_lr'])}",
                               source=f"{src}, step {ju['step']}")] + ev_line(ju["step"]),
            fix="Check the branch the schedule switches to at that step (a missing division, a wrong boundary)",
            location=_loc(raw, ju["step"])))
    for f in out:
        if f.failure_mode in ("lr_too_high", "lr_too_low"):
            f.avoid = AVOID
    return out


def schedule_report_from(raw: dict, detail: Detail = "summary", **fields) -> ScheduleCheckReport:
    cfg = {k: (_r(float(v)) if isinstance(v, float) else v) for k, v in (raw.get("config") or {}).items()}
    rep = ScheduleCheckReport(
        source=raw.get("source"), schedule=raw.get("schedule"), note=raw.get("note"), horizon=raw.get("horizon"),
        horizon_from=raw.get("horizon_from"), steps_evaluated=raw.get("steps_evaluated", 0),
        base_lr=_r(raw.get("base_lr")), base_lr_from=raw.get("base_lr_from"),
        warmup=raw.get("warmup_end") if raw.get("warmup_end") else raw.get("warmup"),
        warmup_inferred=raw.get("warmup_inferred"), decay_expected=raw.get("decay_expected"),
        first_lr=_r(raw.get("first_lr")), peak_lr=_r(raw.get("peak_lr")), peak_step=raw.get("peak_step"),
        final_lr=_r(raw.get("final_lr")), curve=[SchedulePoint(step=s, lr=v) for s, v in raw.get("curve", [])],
        config=cfg, lines=raw.get("lines", {}) if detail == "full" else {}, notes=raw.get("notes", []), **fields)
    if rep.note is None and rep.horizon is not None:
        rep.findings = _sched_findings(rep, raw)
    return rep


async def schedule_check(workspace_root: Path, lr_schedule: str | None = None, target: str | None = None,
                         horizon: int | None = None, python: str | None = None, timeout_s: float = 120.0,
                         on_progress: ProgressFn | None = None, detail: Detail = "summary") -> ScheduleCheckReport:
    """The LR at every step of the horizon from `lr_schedule` ('file.py:fn', it -> lr) or the target's scheduler."""
    if bool(lr_schedule) == bool(target):
        raise TriageError("pass exactly one of lr_schedule and target",
                          "lr_schedule='train.py:get_lr' (a function of the step), or target='train.py:make_target' "
                          "returning a 'scheduler' (or 'make_scheduler(optimizer)')")
    if horizon is not None and horizon < 1:
        raise TriageError(f"horizon={horizon} must be a positive number of steps", "e.g. horizon=5000")
    args = {"lr_schedule": lr_schedule} if lr_schedule else {"target": target}
    try:
        raw, err, oc = await _run("mltriage_schedule.py", {**args, "horizon": horizon}, workspace_root, python,
                                  timeout_s, on_progress, "schedule_check")
    except TriageError as e:
        if e.what.startswith("bad target"):  # the runner's advice is about probe targets, not schedules
            raise TriageError(e.what.replace("bad target", "bad schedule", 1), SCHEDULE_SPEC) from e
        raise
    fields = {"target": target, "lr_schedule": lr_schedule}
    if err:
        return _compact_error(_error_report(ScheduleCheckReport, err, oc, **fields))
    return schedule_report_from(raw, detail, python=oc.python, duration_s=_r(oc.duration_s), **fields)
