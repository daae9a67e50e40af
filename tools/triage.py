"""Walk the triage decision tree automatically and rank the hypotheses.

Order (seed 001, part 6.3, stop at the first match): static scan (always) -> the log (exception? curve?)
-> non-finite values -> init loss -> overfit one batch -> gradient health -> data -> curve shape.
A step whose finding is decisive (confidence >= DECISIVE) ends the probing; the static scan and the
log are always read because they are cheap and they corroborate.
"""

import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from pydantic import BaseModel, Field

from tools.errors import TriageError
from tools.report import Evidence, Finding, Report

DECISIVE = 0.8
# Steps that measure the model itself; their wording leads a merged finding because it localises.
PROBES = frozenset({"nan_hook_run", "init_loss_check", "overfit_test", "grad_norm_snapshot", "data_check"})
# A finding seen by two independent steps is more likely: combine as independent evidence, capped.
CORROBORATED_CAP = 0.97


class TriageStep(BaseModel):
    name: str = Field(description="the tool this step ran")
    status: str = Field(description="ok, error, timeout or skipped")
    seconds: float
    summary: str = ""
    findings: list[str] = Field(default_factory=list, description="failure modes this step found")


class NextStep(BaseModel):
    tool: str
    args: dict = Field(default_factory=dict)
    why: str


class TriageReport(Report):
    healthy: bool
    decisive_step: str | None = Field(None, description="the step whose finding ended the walk early")
    steps: list[TriageStep]
    next_steps: list[NextStep] = Field(default_factory=list)
    budget_s: float
    elapsed_s: float

    def headline(self) -> str:
        ran = ", ".join(f"{s.name}:{s.status}" for s in self.steps)
        return f"triage ran {len(self.steps)} steps in {self.elapsed_s:.1f} s ({ran})"

    def text(self) -> str:
        """The seeds' diagnosis format: most likely (~80%), alternative (~15%), also consider (~5%)."""
        lines = [self.headline(), "", "Diagnosis", "========="]
        labels = ["Most likely cause", "Alternative hypothesis", "Also consider"]
        for label, f in zip(labels, self.findings):
            lines.append(f"{label} ({f.confidence:.0%}): {f.failure_mode} — {f.summary}")
            if f.location:
                lines.append(f"  Where: {f.location}")
            for e in f.evidence[:4]:
                lines.append(f"  Evidence: {e}")
            if f.fix:
                lines.append(f"  Fix: {f.fix}")
            if f.avoid:
                lines.append(f"  Avoid: {f.avoid}")
        for f in self.findings[3:]:
            lines.append(f"Also seen ({f.confidence:.0%}): {f.failure_mode} — {f.summary}")
        if self.next_steps:
            lines.append("Next:")
            lines += [f"  {n.tool}({', '.join(f'{k}={v!r}' for k, v in n.args.items())}): {n.why}"
                      for n in self.next_steps]
        return "\n".join(lines)


def merge_findings(found: list[tuple[str, Finding]]) -> list[Finding]:
    """One finding per failure mode, ranked; corroboration by a second step raises confidence."""
    by_mode: dict[str, tuple[Finding, set[str], bool]] = {}
    for step, f in found:
        probe = step in PROBES
        if f.failure_mode not in by_mode:
            by_mode[f.failure_mode] = (f.model_copy(deep=True), {step}, probe)
            continue
        best, steps, best_probe = by_mode[f.failure_mode]
        if step in steps:  # the same step saying it twice is not new evidence
            if f.confidence > best.confidence:
                by_mode[f.failure_mode] = (f.model_copy(deep=True), steps, probe)
            continue
        # the measured (probe) finding leads; among equals, the more confident one
        f_leads = (probe, f.confidence) > (best_probe, best.confidence)
        lead, other = (f, best) if f_leads else (best, f)
        merged = lead.model_copy(deep=True)
        merged.confidence = min(CORROBORATED_CAP, 1 - (1 - f.confidence) * (1 - best.confidence))
        merged.evidence = lead.evidence + [e for e in other.evidence if e not in lead.evidence]
        merged.location = lead.location or other.location
        by_mode[f.failure_mode] = (merged, steps | {step}, probe or best_probe)
    # the cause nan_hook_run attributed a NaN to outranks the NaN itself (the symptom)
    cause = next((f for step, f in found if step == "nan_hook_run" and f.failure_mode != "nan_inf"
                  and f.confidence >= DECISIVE), None)
    if cause is not None and "nan_inf" in by_mode:
        nan, steps, probe = by_mode["nan_inf"]
        top = by_mode[cause.failure_mode][0]
        if nan.confidence >= top.confidence:
            nan.confidence = max(0.0, top.confidence - 0.05)
    ranked = sorted((f for f, _, _ in by_mode.values()), key=lambda f: -f.confidence)
    return [f for f in ranked if f.failure_mode != "healthy"] or ranked


# A step gets its timeout in seconds; `cap` is the timeout it gets when the budget is not the limit.
StepFn = Callable[[float], Awaitable[Report]]
Step = tuple[str, StepFn, float]


async def triage(
    steps: list[Step],
    budget_s: float = 180.0,
    on_progress: Callable[[float, float | None, str | None], Awaitable[None]] | None = None,
    always: frozenset[str] = frozenset({"static_scan", "tail_log", "log_metrics"}),
    next_steps: Callable[[list[Finding], frozenset[str]], list[NextStep]] | None = None,
) -> TriageReport:
    """Run `steps` (name, async fn(timeout_s) -> Report, cap_s) in tree order under a wall-clock budget.

    After a decisive finding only the steps in `always` still run. A step that times out at its full
    cap is evidence of a hang; one cut short by the budget is not.
    """
    start = time.monotonic()
    ran: list[TriageStep] = []
    found: list[tuple[str, Finding]] = []
    decisive: str | None = None
    for i, (name, fn, cap) in enumerate(steps):
        if on_progress:
            await on_progress(i, len(steps), f"triage: {name}")
        left = budget_s - (time.monotonic() - start)
        if (decisive and name not in always) or left < min(cap, 5.0):
            why = f"skipped: decisive finding from {decisive}" if decisive else "skipped: budget used up"
            ran.append(TriageStep(name=name, status="skipped", seconds=0.0, summary=why))
            continue
        t = time.monotonic()
        try:
            report = await fn(min(cap, left))
        except TriageError as e:
            status = "timeout" if "did not finish" in str(e) else "error"
            ran.append(TriageStep(name=name, status=status, seconds=time.monotonic() - t, summary=str(e)[:500]))
            if status == "timeout" and left >= cap:
                found.append((name, _timeout_finding(name, str(e))))
            continue
        real = [f for f in report.findings if f.failure_mode != "healthy"]
        found += [(name, f) for f in report.findings]
        ran.append(TriageStep(name=name, status="ok", seconds=time.monotonic() - t,
                              summary=report.headline()[:500], findings=[f.failure_mode for f in real]))
        if decisive is None and name not in always and any(f.confidence >= DECISIVE for f in real):
            decisive = name
    if on_progress:
        await on_progress(len(steps), len(steps), "triage: done")
    findings = merge_findings(found)
    healthy = not findings or findings[0].failure_mode == "healthy"
    if healthy:
        checked = [s.name for s in ran if s.status == "ok"]
        findings = [Finding(failure_mode="healthy", confidence=0.7 if len(checked) >= 4 else 0.4,
                            summary=f"no failure found by {', '.join(checked) or 'any step'}",
                            evidence=[Evidence(what="steps that ran clean", value=len(checked), source="triage")],
                            fix="Nothing to fix by these checks; if the run still disappoints, read the curve "
                                "(log_metrics with plot=True) and compare against a baseline run.")]
    return TriageReport(findings=findings, healthy=healthy, decisive_step=decisive, steps=ran,
                        next_steps=next_steps(findings, frozenset(s.name for s in ran if s.status == "ok"))
                        if next_steps else [], budget_s=budget_s,
                        elapsed_s=time.monotonic() - start)


def _timeout_finding(step: str, message: str) -> Finding:
    """A probe that never returns is itself evidence: the training step hangs."""
    return Finding(failure_mode="hang", confidence=0.75,
                   summary=f"{step} did not finish: a training step or the data loader blocks",
                   evidence=[Evidence(what="probe outcome", value="timeout", source=step)],
                   fix="Run the script with process_check(stack=True) or live_status(what=['stack']) while it "
                       "hangs and read where it waits (data-loader queue, lock, collective).")


NEXT_FOR = {
    "nan_inf": ("nan_hook_run", "names the first module whose output went non-finite and the inputs it choked on"),
    "exploding_gradients": ("grad_norm_snapshot", "per-layer norms show which layer grows"),
    "vanishing_gradients": ("grad_norm_snapshot", "per-layer norms show where the gradient dies"),
    "broken_graph": ("grad_norm_snapshot", "lists every parameter whose grad is None or zero"),
    "frozen_params": ("grad_norm_snapshot", "flags parameters that are not in any optimizer group"),
    "lr_too_high": ("lr_range_test", "shows where the loss diverges as the LR grows and suggests one"),
    "lr_too_low": ("lr_range_test", "shows how far the current LR sits below the useful range"),
    "bad_init": ("init_loss_check", "names the layer whose output scale is off"),
    "data_leakage": ("data_check", "names the feature that predicts the label"),
    "data_pipeline": ("data_check", "compares real against permuted labels"),
    "train_eval_mode": ("data_check", "reports the model's mode and its dropout/batch-norm layers"),
    "dead_units": ("grad_norm_snapshot", "reports the fraction of dead units per activation"),
    "loss_function": ("overfit_test", "a correct loss overfits one batch; re-run it after the fix"),
    "shape_mismatch": ("static_scan", "points at reshapes and broadcasts on the path to the loss"),
    "missing_zero_grad": ("static_scan", "names the loop that never zeroes gradients"),
    "hang": ("process_check", "with stack=True shows where the live process waits"),
    "slow_throughput": ("profile_steps", "counts host-device syncs per step with the line that causes each"),
    "exception": ("tail_log", "shows the traceback's innermost frame"),
    "oom": ("gpu_status", "shows memory per GPU and per process"),
    "overfitting": ("compare_runs", "aligns train and validation curves"),
}


def suggest_next(findings: list[Finding], target: str | None, log_path: str | None,
                 already_ran: frozenset[str] = frozenset()) -> list[NextStep]:
    steps: list[NextStep] = []
    for f in findings[:2]:
        if f.failure_mode == "healthy":
            break
        tool, why = NEXT_FOR.get(f.failure_mode, ("tail_log", "look at the raw evidence"))
        if tool in already_ran:
            continue
        args = {"target": target} if target and tool in {"nan_hook_run", "grad_norm_snapshot", "lr_range_test",
                                                         "init_loss_check", "data_check", "overfit_test",
                                                         "profile_steps"} else {}
        steps.append(NextStep(tool=tool, args=args, why=f"to confirm {f.failure_mode}: it {why}"))
    top = findings[0] if findings else None
    if top is not None and top.failure_mode != "healthy":
        steps.append(NextStep(tool="journal_append", args={"failure_mode": top.failure_mode},
                              why="after the fix is verified, record symptom, evidence, cause and fix"))
        steps.append(NextStep(tool="write_regression_test",
                              args={"failure_mode": top.failure_mode, **({"target": target} if target else {})},
                              why="pin the bug with a test that fails on it and passes on the fix"))
    elif log_path:
        steps.append(NextStep(tool="log_metrics", args={"path": log_path, "plot": True},
                              why="nothing is broken by these checks; look at the whole curve"))
    return steps


def source_paths_for(target: str | None, command: list[str] | None, workspace: Path) -> list[str]:
    """What to scan statically when the caller named no sources: the target's file, the script."""
    out: list[str] = []
    if target and ":" in target and target.rsplit(":", 1)[0].endswith(".py"):
        out.append(target.rsplit(":", 1)[0])
    for arg in command or []:
        if arg.endswith(".py") and (workspace / arg).exists():
            out.append(arg)
    return out


async def run_triage(
    workspace_root: Path,
    target: str | None = None,
    command: list[str] | None = None,
    log_file: Path | None = None,
    log_name: str | None = None,
    sources: list[Path] | None = None,
    python: str | None = None,
    budget_s: float = 180.0,
    on_progress=None,
    target_label: str | None = None,
) -> TriageReport:
    """The decision tree over whatever the caller could give: a target factory, a command, a log, sources."""
    import anyio

    from tools import probes
    from tools.logs import log_metrics, tail_log
    from tools.static_scan import static_scan

    async def in_thread(fn, *args):
        return await anyio.to_thread.run_sync(lambda: fn(*args))

    steps: list[Step] = [("static_scan", lambda t: in_thread(static_scan, sources or []), 30.0)]
    if log_file is not None:
        steps.append(("tail_log", lambda t: in_thread(tail_log, log_file, 80), 30.0))
        steps.append(("log_metrics", lambda t: in_thread(log_metrics, log_file), 60.0))
    w, py = workspace_root, python
    if target:
        steps += [
            ("nan_hook_run", lambda t: probes.nan_hook_run(w, target, None, 50, py, t), 60.0),
            ("init_loss_check", lambda t: probes.init_loss_check(w, target, py, t), 45.0),
            ("overfit_test", lambda t: probes.overfit_test(w, target, 200, None, py, t), 60.0),
            ("grad_norm_snapshot", lambda t: probes.grad_norm_snapshot(w, target, None, 1, py, t), 45.0),
            ("data_check", lambda t: probes.data_check(w, target, py, t), 45.0),
        ]
    elif command:
        steps += [
            ("nan_hook_run", lambda t: probes.nan_hook_run(w, None, command, 50, py, t), 90.0),
            ("grad_norm_snapshot", lambda t: probes.grad_norm_snapshot(w, None, command, 1, py, t), 90.0),
        ]
    if not target and not command and log_file is None and not sources:
        raise TriageError("nothing to triage", "Pass at least one of target, command, log_path or source_paths")
    return await triage(steps, budget_s, on_progress,
                        next_steps=lambda fs, ran: suggest_next(fs, target_label or target, log_name, ran))
