"""Schedule bugs read from a log's LR series: warmup that never ends, no decay, a peak far above the configured
LR, a >10x jump, and a NaN or divergence the climbing LR led to.

The loss curve's shape alone cannot tell an LR problem from a dozen others (tools/logs.py keeps those findings
below 0.5); the LR the run actually used, next to what its header says it should be, can. Each finding names
the step where the schedule goes wrong. A warmup still in progress at the end of the log, with the loss
falling, is a healthy run and gives nothing at or above 0.5.
"""

import math
from dataclasses import dataclass

from tools.report import Evidence, Finding

# what a header or config dump calls these (nanoGPT, HF TrainingArguments, Megatron args, argparse Namespaces)
_PEAK_KEYS = ("learning_rate", "lr", "max_lr", "peak_lr", "base_lr", "lr0", "initial_lr")
_WARMUP_KEYS = ("warmup_iters", "warmup_steps", "num_warmup_steps", "lr_warmup_iters", "lr_warmup_steps", "warmup")
_HORIZON_KEYS = ("lr_decay_iters", "lr_decay_steps", "decay_steps", "max_iters", "train_iters", "max_steps",
                 "total_steps", "num_training_steps")
_DECAY_KEYS = ("lr_decay_iters", "lr_decay_steps", "decay_steps", "min_lr", "lr_min", "eta_min", "final_lr")
_EPOCH_KEYS = ("num_train_epochs", "num_epochs", "epochs", "max_epochs", "n_epochs")
_JUMP = 10.5  # a x0.1 step decay (MultiStepLR) is 10x exactly: not a bug
_STEP_UNITS = ("step", "global_step", "num_updates", "iteration", "iter", "it", "steps")


@dataclass
class Curve:
    """A bucketed series as tools/logs.py keeps it: per point its first step, mean, min and max."""
    name: str
    steps: list[float]
    mean: list[float]
    lo: list[float]
    hi: list[float]


@dataclass
class Config:
    peak: float | None = None
    peak_key: str | None = None
    warmup: float | None = None
    warmup_key: str | None = None
    horizon: float | None = None
    decays: str | None = None  # the key that says the LR should decay
    finished: bool = False  # the log says the run ended (HF Trainer's closing train_runtime line)
    unit: str = "step"

    @classmethod
    def from_log(cls, values: dict[str, str], step_key: str) -> "Config":
        """What the log's header states; step counts only when the log's steps are steps (not epochs)."""
        low = {k.lower().rsplit("/", 1)[-1]: v for k, v in values.items()}
        c = cls(unit="epoch" if step_key.lower() == "epoch" else "step")
        c.peak, c.peak_key = _first(low, _PEAK_KEYS)
        if c.peak is not None and not 0 < c.peak < 10:
            c.peak = c.peak_key = None
        if step_key.lower() in _STEP_UNITS:
            c.warmup, c.warmup_key = _first(low, _WARMUP_KEYS)
            c.horizon, _ = _first(low, _HORIZON_KEYS)
            frac, _ = _first(low, ("lr_warmup_fraction", "warmup_ratio"))
            if c.warmup is None and frac is not None and c.horizon and 0 < frac < 1:
                c.warmup, c.warmup_key = frac * c.horizon, "warmup fraction x horizon"
        elif step_key.lower() == "epoch":  # HF Trainer's dict lines count epochs; its header says how many
            c.horizon, _ = _first(low, _EPOCH_KEYS)
        c.decays = next((k for k in _DECAY_KEYS if k in low and _num(low[k]) is not None), None)
        c.finished = "train_runtime" in low
        return c


def _num(v: str) -> float | None:
    try:
        x = float(v.replace(",", ""))
    except ValueError:
        return None
    return x if math.isfinite(x) else None


def _first(values: dict[str, str], keys: tuple[str, ...]) -> tuple[float | None, str | None]:
    for k in keys:
        if k in values and (x := _num(values[k])) is not None:
            return x, k
    return None, None


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def _step(x: float) -> int | float:
    return int(x) if float(x).is_integer() else x


def schedule_findings(lr: Curve, loss: Curve | None, nan_step: float | None, shape: str | None,
                      config: Config) -> list[Finding]:
    """Findings about the LR schedule the log shows (lr_too_high / lr_too_low), each naming its step."""
    # by step: a line whose shape the parser held back (nanoGPT's first "step 0: ... lr" eval line) lands
    # after later points, and read in that order it looks like a 51x drop
    pts = sorted(((s, m, lo, hi) for s, m, lo, hi in zip(lr.steps, lr.mean, lr.lo, lr.hi) if math.isfinite(m)),
                 key=lambda p: p[0])
    if len(pts) < 3:
        return []
    steps = [p[0] for p in pts]
    vals = [p[1] for p in pts]
    peak = max(p[3] for p in pts)
    if peak <= 0:
        return []
    where, header = f"series {lr.name}", "log header"
    out: list[Finding] = []

    def at(step: float) -> float:
        """The LR logged at `step` (the last point at or before it)."""
        i = max(0, next((k for k, s in enumerate(steps) if s > step), len(steps)) - 1)
        return vals[i]

    def first_from(step: float) -> tuple[float, float] | None:
        """The first logged (step, LR) at or after `step`: the end of a warmup may fall between two logged steps."""
        return next(((s, v) for s, v in zip(steps, vals) if s >= step), None)

    # a NaN or a divergence the climbing LR led to: the schedule is the cause, not the numerics
    broke = nan_step if nan_step is not None else (_divergence_step(loss) if shape == "diverging" and loss else None)
    if broke is not None and steps[0] < broke:
        ref, ref_what = _reference(config, first_from, steps)
        before = [v for s, v in zip(steps, vals) if s <= broke]
        lr_then = before[-1]
        earlier = before[:max(1, len(before) // 2)]
        rose = len(before) >= 3 and max(before) > 1.2 * min(earlier)
        climbing = rose and lr_then >= 0.99 * max(before)
        # far above what the header configures after rising, or (with nothing to compare it with, below 0.5: it
        # may still be a numerical bug) still rising when the loss broke
        if ref is not None and rose and lr_then > 1.5 * ref or ref is None and climbing:
            what = "became non-finite" if nan_step is not None else "diverged"
            how = (f"while {lr.name} was still climbing: {_fmt(lr_then)}" if climbing else
                   f"after {lr.name} rose to {_fmt(max(before))} ({_fmt(lr_then)} then)")
            ev = [Evidence(what=f"{lr.name} at step {_step(broke)}", value=lr_then, source=where),
                  Evidence(what=ref_what, value=ref, source=header if "configured" in ref_what else where) if ref is not None
                  else Evidence(what=f"{lr.name} at step {_step(steps[0])}", value=vals[0], source=where)]
            out.append(Finding(
                failure_mode="lr_too_high", confidence=0.75 if ref is not None else 0.45,
                summary=(f"the loss {what} at step {_step(broke)} {how}"
                         + (f", {lr_then / ref:.1f}x the {ref_what}" if ref else "") + ": a schedule bug, not a numerical one"),
                evidence=ev, location=f"step {_step(broke)}",
                fix="Make the LR stop rising at the end of warmup and decay after it (schedule_check on the LR "
                    "function shows the whole horizon); lowering the base LR only postpones the blow-up"))
    if nan_step is not None:  # what the schedule did after the loss was gone says nothing more
        keep = [k for k, s in enumerate(steps) if s <= nan_step]
        if len(keep) < 3:
            return _one_per_mode(out)
        pts = [pts[k] for k in keep]
        steps, vals = [p[0] for p in pts], [p[1] for p in pts]
        peak = max(p[3] for p in pts)

    # rising after the configured warmup
    if config.warmup and steps[-1] > 1.1 * config.warmup and not out:
        s_w, lr_w = first_from(config.warmup)
        after = [(s, v) for s, v in zip(steps, vals) if s > s_w]
        top_s, top = max(after, key=lambda p: p[1]) if after else (s_w, lr_w)
        if lr_w > 0 and top > 1.05 * lr_w and top_s > 1.1 * config.warmup:
            out.append(Finding(
                failure_mode="lr_too_high", confidence=0.7,
                summary=f"{lr.name} keeps rising after {config.warmup_key}={_step(config.warmup)}: {_fmt(lr_w)} at step "
                        f"{_step(s_w)}, {_fmt(top)} at step {_step(top_s)}",
                evidence=[Evidence(what=config.warmup_key, value=config.warmup, source=header),
                          Evidence(what=f"{lr.name} at the end of warmup", value=lr_w, source=where),
                          Evidence(what=f"{lr.name} max after warmup (step {_step(top_s)})", value=top, source=where)],
                location=f"step {_step(config.warmup)}",
                fix="The warmup branch tests the wrong bound (e.g. `it < lr_decay_iters` for `it < warmup_iters`): "
                    "schedule_check shows where the LR should turn"))

    # peaking far above what the header configures
    if config.peak and peak > 1.5 * config.peak:
        first_above = next(s for s, lo, hi in zip(steps, (p[2] for p in pts), (p[3] for p in pts)) if hi > 1.01 * config.peak)
        out.append(Finding(
            failure_mode="lr_too_high", confidence=0.6,
            summary=f"{lr.name} peaks at {_fmt(peak)}, {peak / config.peak:.1f}x the configured {config.peak_key}="
                    f"{_fmt(config.peak)}; above it from step {_step(first_above)}",
            evidence=[Evidence(what=f"configured {config.peak_key}", value=config.peak, source=header),
                      Evidence(what=f"{lr.name} max", value=peak, source=where)],
            location=f"step {_step(first_above)}",
            fix="Find what scales the LR past its setting (a warmup that overshoots, a scheduler multiplying instead of "
                "setting, an LR scaled by world size or batch twice); schedule_check on the LR function"))

    # jumps between consecutive logged values; not from near 0, not along a linear warmup logged sparsely
    # (`step 1` then `step 50`: the LR grows with the step), not out of the LR the run started at (timm's
    # per-epoch warmup holds warmup_lr=1e-5 for an epoch, then jumps to the base LR)
    top = 0.0
    for i in range(1, len(vals)):
        v0, v1 = vals[i - 1], vals[i]
        top = max(top, v0)
        if v0 <= 0 or v0 < 0.05 * top:
            continue
        ramp = steps[i - 1] > 0 and v1 / v0 <= 1.2 * steps[i] / steps[i - 1]
        from_start = all(v == vals[0] for v in vals[:i])
        if v1 > _JUMP * v0 and not ramp and not from_start:
            out.append(_jump(lr.name, "lr_too_high", "jumps up", steps[i - 1], v0, steps[i], v1, where, 0.6))
            break
        # an LR that later climbs back to half of where it dropped from is a warm restart (SGDR, Loshchilov &
        # Hutter 2017: cosine cycles that each anneal near zero), not a collapse (blind dev texture_cnn_sgdr_mixup)
        restarts = any(v >= 0.5 * v0 for v in vals[i + 1:])
        if v1 * _JUMP < v0 and i < len(vals) - 1 and not restarts:  # at the last point, a bug and a schedule's end look alike
            stays = all(v < 0.01 * peak for v in vals[i:])
            out.append(_jump(lr.name, "lr_too_low", "drops", steps[i - 1], v0, steps[i], v1, where,
                             0.55 if stays else 0.45, "and stays there" if stays else ""))
            break

    # collapsed: below 1% of its peak early in the run, and never back (an epoch schedule stepped per batch)
    horizon = max(config.horizon or 0, steps[-1])
    low_from = next((k for k in range(len(vals)) if all(v < 0.01 * peak for v in vals[k:])), None)
    if low_from is not None and 0 < low_from < len(vals) - 1 and steps[low_from] - steps[0] < 0.4 * (horizon - steps[0]) \
            and not any(f.failure_mode == "lr_too_low" and f.confidence >= 0.5 for f in out):
        out = [f for f in out if f.failure_mode != "lr_too_low"]
        out.append(Finding(
            failure_mode="lr_too_low", confidence=0.6,
            summary=f"{lr.name} collapses to {_fmt(vals[low_from])} by step {_step(steps[low_from])} (<1% of its peak "
                    f"{_fmt(peak)}) and stays there to step {_step(steps[-1])}",
            evidence=[Evidence(what=f"{lr.name} peak", value=peak, source=where),
                      Evidence(what=f"{lr.name} at step {_step(steps[low_from])}", value=vals[low_from], source=where),
                      Evidence(what=f"{lr.name} at step {_step(steps[-1])}", value=vals[-1], source=where)],
            location=f"step {_step(steps[low_from])}",
            fix="An epoch-based scheduler (StepLR, ExponentialLR, MultiStepLR) stepped every batch: call "
                "scheduler.step() once per epoch, or give it its horizon in batches; schedule_check"))

    # never decaying though the header names a decay
    peak_i = vals.index(max(vals))
    if config.decays and not any(f.failure_mode == "lr_too_high" for f in out):
        start_decay = config.warmup or steps[peak_i]
        horizon = config.horizon or steps[-1]
        late = [v for s, v in zip(steps, vals) if s > start_decay]
        if late and steps[-1] - start_decay > 0.2 * max(horizon - start_decay, 1) and min(late) >= 0.99 * max(vals):
            out.append(Finding(
                failure_mode="lr_too_high", confidence=0.55,
                summary=f"{lr.name} never decays: still {_fmt(vals[-1])} at step {_step(steps[-1])}, though the "
                        f"header sets {config.decays}",
                evidence=[Evidence(what=f"{lr.name} at step {_step(start_decay)}", value=at(start_decay), source=where),
                          Evidence(what=f"{lr.name} at step {_step(steps[-1])}", value=vals[-1], source=where),
                          Evidence(what="decay setting", value=config.decays, source=header)],
                location=f"step {_step(start_decay)}",
                fix="The scheduler is not stepped (scheduler.step() missing or called before the optimizer is "
                    "built) or its horizon is far longer than the run: schedule_check"))

    # a warmup that takes most of a run that reached its end: the schedule was sized in another unit than its
    # step() calls (micro-batches against optimizer steps under gradient accumulation, batches against epochs)
    top_v = max(vals)
    reach = next(k for k, v in enumerate(vals) if v >= 0.95 * top_v)
    horizon = config.horizon
    ended = horizon is not None and (steps[-1] >= 0.9 * horizon or config.finished)
    if not out and ended and horizon > 0 and vals[0] < 0.5 * top_v and steps[reach] >= 0.5 * horizon:
        decayed = 1 - vals[-1] / top_v
        out.append(Finding(
            failure_mode="lr_too_low", confidence=0.6,
            summary=f"{lr.name} warms up for {steps[reach] / horizon:.0%} of the run: it first reaches its peak "
                    f"{_fmt(top_v)} at {config.unit} {_step(steps[reach])} of {_step(horizon)}, and has decayed {decayed:.0%} by "
                    f"the end: the schedule is sized for a longer run than the steps that call it",
            evidence=[Evidence(what=f"{lr.name} at step {_step(steps[0])}", value=vals[0], source=where),
                      Evidence(what=f"{lr.name} first at its peak", value=f"{config.unit} {_step(steps[reach])}",
                               source=where),
                      Evidence(what="run length", value=horizon, source=header),
                      Evidence(what=f"{lr.name} at step {_step(steps[-1])}", value=vals[-1], source=where)],
            location=f"{config.unit} {_step(steps[reach])}",
            fix="Count the schedule's horizon in the unit scheduler.step() is called in: with gradient accumulation "
                "num_training_steps = (len(loader) // accum_steps) * epochs, not len(loader) * epochs; with a "
                "per-epoch step, epochs, not batches. schedule_check shows the whole horizon",
            avoid="Do not raise the base LR: the peak is right, the warmup is too long and the decay never comes.",
            facts={"warmup_spans_run": True}))

    # rising through the whole log: a warmup in progress, or one that never ends
    in_warmup = config.warmup is not None and steps[-1] <= 1.1 * config.warmup
    rising = vals[-1] >= 0.99 * max(vals) and vals[-1] > 2 * vals[len(vals) // 4] and len(vals) >= 5
    if not out and rising and not in_warmup:
        late = config.horizon is not None and steps[-1] >= 0.5 * config.horizon  # half the run, still warming up
        healthy = shape in ("decreasing", "converged", None)
        out.append(Finding(
            failure_mode="lr_too_high", confidence=0.6 if late else 0.3 if healthy else 0.45,
            summary=f"{lr.name} rises through the whole log ({_fmt(vals[0])} -> {_fmt(vals[-1])} at step "
                    f"{_step(steps[-1])}): a warmup still in progress, or one that never ends",
            evidence=[Evidence(what=f"{lr.name} at step {_step(steps[0])}", value=vals[0], source=where),
                      Evidence(what=f"{lr.name} at step {_step(steps[-1])}", value=vals[-1], source=where)],
            fix="If the run is past its warmup, the warmup bound is wrong: schedule_check on the LR function",
            facts={"lr_rising": True, "lr_first": vals[0], "lr_end": vals[-1]}))
    return _one_per_mode(out)


def _one_per_mode(found: list[Finding]) -> list[Finding]:
    """The strongest finding per failure mode, the next one's summary as its evidence (one fix to read, not four)."""
    out = []
    for mode in dict.fromkeys(f.failure_mode for f in found):
        same = sorted((f for f in found if f.failure_mode == mode), key=lambda f: -f.confidence)
        top = same[0]
        if len(same) > 1:
            top = top.model_copy(update={"evidence": [*top.evidence, Evidence(what="also", value=same[1].summary)]})
        out.append(top)
    return out


def _reference(config: Config, first_from, steps: list[float]) -> tuple[float | None, str]:
    """What the LR should not exceed: the configured peak, else its value where the warmup ends."""
    if config.peak:
        return config.peak, f"configured {config.peak_key}"
    if config.warmup and steps[0] <= config.warmup and (got := first_from(config.warmup)):
        return got[1], f"LR at the end of warmup (step {_step(got[0])})"
    return None, ""


def _divergence_step(loss: Curve) -> float | None:
    """Where a diverging loss turned: the step of its minimum."""
    fin = [(s, m) for s, m in zip(loss.steps, loss.mean) if math.isfinite(m)]
    if not fin:
        return None
    return min(fin, key=lambda p: p[1])[0]


def _jump(name: str, mode: str, verb: str, s0, v0, s1, v1, where: str, conf: float, tail: str = "") -> Finding:
    return Finding(
        failure_mode=mode, confidence=conf,
        summary=f"{name} {verb} {max(v0, v1) / max(min(v0, v1), 1e-300):.0f}x between logged steps {_step(s0)} and "
                f"{_step(s1)} ({_fmt(v0)} -> {_fmt(v1)}) {tail}".rstrip(),
        evidence=[Evidence(what=f"{name} at step {_step(s0)}", value=v0, source=where),
                  Evidence(what=f"{name} at step {_step(s1)}", value=v1, source=where)],
        location=f"step {_step(s1)}",
        fix=("An epoch-based scheduler (StepLR, ExponentialLR) stepped every batch, or a wrong horizon: schedule_check"
             if mode == "lr_too_low" else
             "A scheduler that multiplies the LR instead of setting it, or a restart to a wrong value: schedule_check"))

