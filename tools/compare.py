"""Did the fix help? One metric of two logs, aligned by step, with a verdict and the numbers behind it.

Parsing is tools/logs.py's: `log_metrics` gives each run's statistics and curve shape, and
`metric_points` (below) reuses its line parser (or tools/stores.py's reader for a TensorBoard, W&B, MLflow, ...
run) for the raw (step, value) points the alignment needs.
"""

import math
import os
import re
import statistics
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tools import logfields, logs, stores
from tools.errors import TriageError
from tools.failure_modes import FAILURE_MODES
from tools.report import Evidence, Finding, Num, Report

Verdict = Literal["improved", "no_change", "worse"]
HIGHER_IS_BETTER = re.compile(r"acc|accuracy|reward|return|score|f1|auc|map\b|bleu|rouge|iou|precision|recall|top\d|success|si\b", re.I)
MIN_REL_CHANGE = 0.01  # smaller changes of the tail mean are "no_change" whatever the noise says


def metric_points(path: Path, name: str) -> list[tuple[float, float]]:
    """Every (step, value) of the series `name` (case-insensitive), NaN/Inf kept, in file order."""
    want = name.lower()
    by_key: dict[str, list[tuple[float, float]]] = {}
    points = by_key.setdefault(name, [])

    def wanted(key):
        return key.lower() == want or logfields.untagged(key).lower() == want

    def sink(key, steps, vals):
        if wanted(key):
            got = points if key.lower() == want else by_key.setdefault(key, [])
            got.extend((logs._float(s), logs._float(v)) for s, v in zip(steps, vals) if v != "")

    store = stores.detect(path)
    if store is not None:  # a run directory or a store's file (TensorBoard, W&B, MLflow, ...)
        for key, steps, vals in stores.read(store, lambda k: k.lower() == want):
            sink(key, steps, vals)
        return points
    parser = logs._Parser(wanted, sink)
    try:
        with open(path, "rb") as f:
            if logs._looks_binary(f.read(65536)):
                raise logs._binary_error(path)
            f.seek(0)
            records = logs.json_records(f, os.fstat(f.fileno()).st_size)  # log_metrics' own readers
            if records is not None:
                parser.feed(logs._as_lines(records))
            else:
                logs._read_sequential(f, parser, tick=lambda done: None)
            parser.finish()
    except OSError as e:
        raise logs._open_error(path, e) from e
    # log_metrics' rule: a phase tag on every line of the series (`[titan] ...`) is no phase of its own
    lone = logfields.lone_tag(name, [k for k, v in by_key.items() if v])
    return by_key[lone] if lone is not None else points


class RunSummary(BaseModel):
    model_config = ConfigDict(validate_assignment=True)  # a NaN set later still becomes "nan"
    path: str
    format: str = Field("text", description="text, tensorboard, wandb, mlflow, lightning_csv, hf_trainer or trackio")
    points: int
    first_step: float | None = None
    last_step: float | None = None
    first: Num = None
    final: Num = Field(None, description="the last logged value")
    tail_mean: Num = Field(None, description="mean of the comparison window (the last 10% of the common steps)")
    tail_std: Num = None
    best: Num = None
    best_step: float | None = None
    nonfinite: int = 0
    first_nonfinite_step: float | None = None
    shape: str | None = Field(None, description="log_metrics' curve shape of this series")


class Milestone(BaseModel):
    model_config = ConfigDict(validate_assignment=True)  # a NaN set later still becomes "nan"
    threshold: float
    what: str
    before_step: float | None = Field(None, description="first step the before-run reached it (null: never)")
    after_step: float | None = None


class CompareReport(Report):
    model_config = ConfigDict(validate_assignment=True)  # a NaN set later still becomes "nan"
    metric: str = Field(description="the series compared (as each log names it: 'before / after' when they differ)")
    higher_is_better: bool
    verdict: Verdict
    reason: str
    failure_mode: str | None = Field(None, description="what the fix was for, when given")
    judged: Literal["held_out", "train", "metric"] = Field(description="held_out: a validation/test series; train: the training loss")
    train_loss_tail: tuple[float, float] | None = Field(
        None, description="judging held-out data: the training loss's tail mean before and after (it may rise by design)")
    aligned_by: Literal["step", "position"]
    common_steps: int
    window: tuple[float, float] | None = Field(None, description="steps of the comparison window")
    change: Num = Field(None, description="after tail mean - before tail mean")
    relative_change: Num = None
    tolerance: Num = Field(None, description="smallest change counted as real: max(2 x tail noise, 1% of the level)")
    before: RunSummary
    after: RunSummary
    milestones: list[Milestone] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)

    def headline(self) -> str:
        def f(v):
            return f"{v:.4g}" if isinstance(v, float) else str(v)

        b, a = self.before, self.after
        lines = [f"{self.verdict.upper()}: {self.metric} ({'higher' if self.higher_is_better else 'lower'} is better), {self.reason}",
                 f"before: final {f(b.final)}, best {f(b.best)} at step {f(b.best_step)}, {b.nonfinite} non-finite, shape {b.shape}",
                 f"after:  final {f(a.final)}, best {f(a.best)} at step {f(a.best_step)}, {a.nonfinite} non-finite, shape {a.shape}"]
        for m in self.milestones:
            lines.append(f"reach {m.what} ({m.threshold:.4g}): before at step {f(m.before_step)}, after at step {f(m.after_step)}")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def _finite(xs):
    return [x for x in xs if math.isfinite(x)]


def _summary(path: Path, pts, better, shape) -> RunSummary:
    vals = [v for _, v in pts]
    fin = [(s, v) for s, v in pts if math.isfinite(v)]
    bad = [s for s, v in pts if not math.isfinite(v)]
    store = stores.detect(path)
    s = RunSummary(path=path.name, format=store.format if store else "text", points=len(pts), nonfinite=len(bad),
                   shape=shape, first_nonfinite_step=bad[0] if bad else None)
    if pts:
        s.first_step, s.last_step, s.first, s.final = pts[0][0], pts[-1][0], vals[0], vals[-1]
    if fin:
        step, v = (max if better > 0 else min)(fin, key=lambda p: p[1])
        s.best, s.best_step = v, step
    return s


def _tail(values: list[float]) -> tuple[float, float, bool]:
    """(mean, std, all finite) of a window; a window holding any non-finite value is non-finite."""
    if not values:
        return math.nan, math.nan, False
    if not all(math.isfinite(v) for v in values):
        return math.nan, math.nan, False
    return statistics.fmean(values), (statistics.pstdev(values) if len(values) > 1 else 0.0), True


def _first_reach(pts, threshold, better) -> float | None:
    for s, v in pts:
        if math.isfinite(v) and (v >= threshold if better > 0 else v <= threshold):
            return s
    return None


def _shape(path: Path, metric: str):
    try:
        r = logs.log_metrics(path, names=[metric])
    except TriageError:
        return None, []
    return (r.shape, r.findings) if r.loss_series and r.loss_series.lower() == metric.lower() else (None, [])


# a fix for these is judged on data the model did not train on; for the rest, on the training loss
HELD_OUT_MODES = ("data_leakage", "overfitting")
MODES = (*FAILURE_MODES, "plateau")
VAL_ALIASES = ("val", "validation", "valid", "eval", "held_out", "heldout")
TRAIN_ALIASES = ("loss", "train", "training", "train_loss")


def _resolve(path: Path, role: str, metric: str) -> tuple[str, list[tuple[float, float]]]:
    """The series `metric` names in this log and its points: a name as printed, `val` (the log's validation
    loss), or `loss` (its training loss when no series is called exactly that)."""
    low = metric.lower()
    pts = metric_points(path, metric)
    if pts and low not in VAL_ALIASES:
        return metric, pts
    r = logs.log_metrics(path)
    name = r.val_series if low in VAL_ALIASES else r.loss_series if low in TRAIN_ALIASES else None
    if name:
        return name, metric_points(path, name)
    available = ", ".join([s.name for s in r.series] + r.other_series[:20]) or "none"
    what = "validation series" if low in VAL_ALIASES else f"series {metric!r}"
    raise TriageError(f"the {role} log {path.name} has no {what} (series found: {available})",
                      "Pass metric= one of the series names above" + (
                          "; judging a held-out fix needs the runs to log a validation loss" if low in VAL_ALIASES else ""))


def _aligned(pts: dict) -> tuple[str, list[tuple[float, float, float]], list[str]]:
    """(how, (step, before, after) pairs, notes): by the logs' own steps; logs that restart the step count or
    print none fall back to position."""
    b_by = {s: v for s, v in pts["before"]}
    a_by = {s: v for s, v in pts["after"]}
    common = sorted(set(b_by) & set(a_by))
    if len(common) >= 2:
        notes = [f"compared on the {len(common)} steps both logs have (before {len(b_by)}, after {len(a_by)} points)"] \
            if len(common) < max(len(b_by), len(a_by)) else []
        return "step", [(s, b_by[s], a_by[s]) for s in common], notes
    n = min(len(pts["before"]), len(pts["after"]))
    return "position", [(float(i), pts["before"][i][1], pts["after"][i][1]) for i in range(n)], \
        ["the two logs share no step numbers; compared point by point in order"]


def _window(pairs) -> list:
    return pairs[-max(1, math.ceil(len(pairs) * 0.1)):]


def compare_runs(before: Path, after: Path, metric: str | None = None, plot: bool = False,
                 failure_mode: str | None = None) -> tuple[CompareReport, bytes | None]:
    """Verdict improved / no_change / worse for `metric` of `after` against `before`, plus an optional PNG overlay.

    `failure_mode` (what the fix is for) picks the series when `metric` is not given: the validation loss for
    data_leakage and overfitting, the training loss for the rest."""
    if failure_mode is not None and failure_mode not in MODES:
        raise TriageError(f"unknown failure_mode {failure_mode!r}", "Pass one of: " + ", ".join(MODES))
    if metric is not None and not metric.strip():
        raise TriageError("empty metric name", "Pass the series name as the log prints it, e.g. metric='loss'")
    held_out = failure_mode in HELD_OUT_MODES
    metric = metric.strip() if metric else ("val" if held_out else "loss")
    if before.resolve() == after.resolve():
        raise TriageError("before and after are the same file", "Pass the log (or run directory) of the run before the fix and the one after it")
    names, pts = {}, {}
    for role, path in (("before", before), ("after", after)):
        names[role], pts[role] = _resolve(path, role, metric)
    shown = names["before"] if names["before"] == names["after"] else f"{names['before']} / {names['after']}"
    better = 1 if HIGHER_IS_BETTER.search(shown) and "loss" not in shown.lower() else -1
    if logfields.kind(names["after"]) == "throughput":
        better = -1 if re.search(r"time|elapsed|runtime|wall|latency|duration|_ms$|^dt$|data", names["after"], re.I) else 1

    aligned_by, pairs, notes = _aligned(pts)
    window = _window(pairs)
    b_mean, b_std, b_ok = _tail([b for _, b, _ in window])
    a_mean, a_std, a_ok = _tail([a for _, _, a in window])

    shapes = {role: _shape(path, names[role]) for role, path in (("before", before), ("after", after))}
    b_sum = _summary(before, pts["before"], better, shapes["before"][0])
    a_sum = _summary(after, pts["after"], better, shapes["after"][0])
    b_sum.tail_mean, b_sum.tail_std, a_sum.tail_mean, a_sum.tail_std = b_mean, b_std, a_mean, a_std

    change = rel = tol = math.nan
    if b_ok and a_ok:
        change = a_mean - b_mean
        level = max(abs(b_mean), abs(a_mean), 1e-12)
        rel = change / max(abs(b_mean), 1e-12)
        tol = max(2 * max(b_std, a_std), MIN_REL_CHANGE * level)
        gain = better * change
        verdict: Verdict = "improved" if gain > tol else "worse" if gain < -tol else "no_change"
        reason = (f"tail mean {b_mean:.4g} -> {a_mean:.4g} over the last {len(window)} common step(s) "
                  f"(change {change:+.4g}, {rel:+.1%}; noise tolerance {tol:.3g})")
    elif a_ok and not b_ok:
        verdict, reason = "improved", (f"the before-run is non-finite at the end (first at step {_fmt(b_sum.first_nonfinite_step)}); "
                                       f"the after-run stays finite, tail mean {a_mean:.4g}")
    elif b_ok and not a_ok:
        verdict, reason = "worse", (f"the after-run becomes non-finite (first at step {_fmt(a_sum.first_nonfinite_step)}) "
                                    f"where the before-run ends at {b_mean:.4g}")
    else:
        verdict = "no_change"
        reason = (f"both runs end non-finite (first at step {_fmt(b_sum.first_nonfinite_step)} before, "
                  f"{_fmt(a_sum.first_nonfinite_step)} after): the fix did not remove the NaN/Inf")

    train_change = _train_change(before, after) if held_out else None
    judged = "held_out" if _is_val(names["after"]) else "train" if logfields.kind(names["after"]) == "loss" else "metric"
    if judged == "train" and verdict == "worse" and failure_mode is None and _has_val(before, after):
        notes.append("the logs also have a validation loss: a fix for data_leakage or overfitting raises the training "
                     "loss by design; judge it with failure_mode='data_leakage'/'overfitting' (or metric='val')")
    if train_change is not None and train_change[1] > train_change[0] * (1 + MIN_REL_CHANGE):
        notes.append(f"the training loss rose {train_change[0]:.4g} -> {train_change[1]:.4g}: "
                     + ("the expected effect of removing a leak (the model can no longer read the answer from its inputs)"
                        if failure_mode == "data_leakage" else
                        "the expected effect of regularising (weight decay, dropout, less capacity, earlier stop)")
                     + f"; the held-out {names['after']} decides")

    milestones = _milestones(pts, b_sum, a_sum, better)
    report = CompareReport(metric=shown, higher_is_better=better > 0, verdict=verdict, reason=reason,
                           failure_mode=failure_mode, judged=judged,
                           aligned_by=aligned_by, common_steps=len(pairs), window=(window[0][0], window[-1][0]),
                           change=change, relative_change=rel, tolerance=tol, before=b_sum, after=a_sum,
                           train_loss_tail=train_change, milestones=milestones, notes=notes)
    report.findings = _findings(report, shapes["after"][1], after.name)
    png = _plot(report, pts) if plot else None
    return report, png


def _is_val(name: str) -> bool:
    return logfields.is_val(name)


def _train_change(before: Path, after: Path) -> tuple[float, float] | None:
    """Tail means of the training loss (before, after), when both logs have one and it is finite."""
    try:
        pts = {role: _resolve(path, role, "loss")[1] for role, path in (("before", before), ("after", after))}
    except TriageError:
        return None
    window = _window(_aligned(pts)[1])
    (b, _, b_ok), (a, _, a_ok) = _tail([p[1] for p in window]), _tail([p[2] for p in window])
    return (float(f"{b:.4g}"), float(f"{a:.4g}")) if b_ok and a_ok else None


def _has_val(before: Path, after: Path) -> bool:
    try:
        return all(_resolve(path, role, "val") for role, path in (("before", before), ("after", after)))
    except TriageError:
        return False


def _fmt(v) -> str:
    return "?" if v is None else (str(int(v)) if isinstance(v, float) and v.is_integer() else str(v))


def _milestones(pts, b: RunSummary, a: RunSummary, better) -> list[Milestone]:
    out = []
    start = next((v for _, v in pts["before"] if math.isfinite(v)), None)
    if start is None or b.best is None or not isinstance(b.best, float):
        return out
    levels = [(start + 0.5 * (b.best - start), "half of the before-run's improvement"),
              (start + 0.9 * (b.best - start), "90% of the before-run's improvement"),
              (b.best, "the before-run's best")]
    for threshold, what in levels:
        if threshold == start:
            continue
        out.append(Milestone(threshold=threshold, what=what, before_step=_first_reach(pts["before"], threshold, better),
                             after_step=_first_reach(pts["after"], threshold, better)))
    return out


def _findings(r: CompareReport, after_findings: list[Finding], after_name: str) -> list[Finding]:
    out = []
    src = f"compare_runs {r.before.path} vs {r.after.path}"
    ev = [Evidence(what=f"{r.metric} tail mean before", value=r.before.tail_mean, source=r.before.path),
          Evidence(what=f"{r.metric} tail mean after", value=r.after.tail_mean, source=r.after.path),
          Evidence(what="non-finite values before / after", value=f"{r.before.nonfinite} / {r.after.nonfinite}", source=src)]
    if r.train_loss_tail is not None:
        ev.append(Evidence(what="training loss tail mean before / after", value=f"{r.train_loss_tail[0]:.4g} / "
                           f"{r.train_loss_tail[1]:.4g}", source=src))
    rose = r.train_loss_tail is not None and r.train_loss_tail[1] > r.train_loss_tail[0] * (1 + MIN_REL_CHANGE)
    if r.after.nonfinite:
        out.append(Finding(failure_mode="nan_inf", confidence=0.8 if r.verdict != "improved" else 0.5,
                           summary=f"the after-run still logs {r.after.nonfinite} non-finite {r.metric} value(s), first at step "
                                   f"{_fmt(r.after.first_nonfinite_step)}",
                           evidence=ev, fix="The fix did not remove the source: run nan_hook_run on the fixed code"))
    elif r.verdict == "improved":
        what = f"the held-out {r.metric}" if r.judged == "held_out" else r.metric
        out.append(Finding(failure_mode="healthy", confidence=0.7, summary=f"the fix helped {what}: {r.reason}"
                           + ("; the training loss rose, as it should once the model cannot shortcut" if rose else ""),
                           evidence=ev, fix="Confirm on a longer run, then journal_append and write_regression_test"))
    elif r.failure_mode in HELD_OUT_MODES and r.judged == "held_out":
        out.append(Finding(
            failure_mode=r.failure_mode, confidence=0.5,
            summary=f"the held-out {r.metric} did not improve ({r.verdict}): {r.reason}", evidence=ev,
            fix=("If the validation set shared the leak, its loss rising is the honest number: judge on data the leak "
                 "cannot reach (data_check)" if r.failure_mode == "data_leakage" else
                 "Regularise harder or stop at the best validation step; more data beats both")))
    elif r.failure_mode in FAILURE_MODES and r.failure_mode not in ("healthy", "nan_inf") and r.judged == "train":
        out.append(Finding(failure_mode=r.failure_mode, confidence=0.5,
                           summary=f"the {r.failure_mode} fix did not move the training loss ({r.verdict}): {r.reason}",
                           evidence=ev, fix="The symptom is still there: go back to the probe that found it"))
    # what the after-run's own curve still shows (log_metrics' classification), unless it is healthy
    for f in after_findings:
        if f.failure_mode != "healthy" and not (f.failure_mode == "nan_inf" and r.after.nonfinite):
            out.append(f.model_copy(update={"summary": f"after the fix, {after_name}: {f.summary}",
                                            "confidence": round(f.confidence * 0.8, 3)}))
    return out


def _plot(r: CompareReport, pts) -> bytes:
    """Both curves on one axis; non-finite points marked at the top edge."""
    import io

    try:
        from matplotlib.figure import Figure  # no pyplot: no global backend state, safe on a worker thread
    except ImportError as e:
        raise TriageError("plot=True needs matplotlib, which is not installed in the server's environment",
                          "pip install 'mltriage[plot]' (or matplotlib), or call compare_runs without plot") from e
    fig = Figure(figsize=(8, 4.5), dpi=100)
    ax = fig.add_subplot()
    finite_all = []
    for role, color in (("before", "C3"), ("after", "C0")):
        fin = [(s, v) for s, v in pts[role] if math.isfinite(v)]
        finite_all += [v for _, v in fin]
        if fin:
            ax.plot([s for s, _ in fin], [v for _, v in fin], color=color, linewidth=1.5,
                    label=f"{role}: {getattr(r, role).path}")
    top = max(finite_all) if finite_all else 1.0
    for role, color in (("before", "C3"), ("after", "C0")):
        bad = [s for s, v in pts[role] if not math.isfinite(v)]
        if bad:
            ax.scatter(bad, [top] * len(bad), marker="x", color=color, label=f"{role}: non-finite")
    if finite_all and min(finite_all) > 0 and max(finite_all) / min(finite_all) > 100:
        ax.set_yscale("log")
    ax.set_xlabel("step" if r.aligned_by == "step" else "log position")
    ax.set_ylabel(r.metric)
    ax.set_title(f"{r.metric}: {r.verdict}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return buf.getvalue()


