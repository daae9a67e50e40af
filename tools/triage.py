"""Walk the triage decision tree automatically and rank the hypotheses.

Order (seed 001, part 6.3, stop at the first match): static scan (always) -> the log (exception? curve?)
-> non-finite values -> init loss -> overfit one batch -> gradient health -> data -> curve shape.
A step whose finding is decisive (confidence >= DECISIVE) ends the probing; the static scan and the
log are always read because they are cheap and they corroborate.
"""

import ast
import os
import re
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
from pydantic import BaseModel, Field

from tools import compact
from tools.errors import TriageError
from tools.report import Evidence, Finding, Report, is_finite

DECISIVE = 0.8
# the confidence from which a finding is a verdict an agent may act on; below it, a hypothesis to confirm
VERDICT = 0.5
NOISE = 0.2
# a risk the code carries that the run did not show (a NaN risk in a run whose loss stayed finite)
RISK_ONLY = 0.3
# A short run, not one step: update ratios mean nothing at Adam's first step (see probes.STEADY_STEP).
GRAD_STEPS = 12
# Steps that measure the model itself; their wording leads a merged finding because it localises.
PROBES = frozenset({"nan_hook_run", "init_loss_check", "overfit_test", "grad_norm_snapshot", "data_check",
                    "sequence_check", "schedule_check"})
# Bugs whose usual symptom is a loss that turns NaN: when the NaN comes only from the log, they explain it.
DIVERGENCE_CAUSES = ("missing_zero_grad", "lr_too_high", "loss_function", "train_eval_mode", "data_pipeline", "bad_init")
# Steps a NaN hunt or a NaN regression test runs the user's script at most, and the script test's default.
NAN_STEPS_MAX = 2000
SCRIPT_STEPS_DEFAULT = 50
SCHEDULE_STEPS = 200  # the script test's length for a per-epoch schedule stepped per batch
# static rules about the scheduler (where scheduler.step() runs, what its lr_lambda returns): lr_range_test sweeps
# the base LR of a factory that steps no scheduler, so it would call such an LR fine
SCHEDULER_RULES = {"epoch_schedule_stepped_per_batch", "scheduler_stepped_per_micro_batch",
                   "scheduler_step_before_optimizer_step", "learning_rate_as_lambda_factor", "plateau_mode_against_metric"}
# A finding seen by two independent steps is more likely: combine as independent evidence, capped.
CORROBORATED_CAP = 0.97


class TriageStep(BaseModel):
    name: str = Field(description="the tool this step ran")
    status: str = Field(description="ok, error, timeout or skipped")
    seconds: float = Field(0.0, description="wall-clock seconds (left out in detail='summary')")
    summary: str = ""
    findings: list[str] = Field(default_factory=list, description="failure modes this step found")


class NextStep(BaseModel):
    tool: str
    args: dict = Field(default_factory=dict)
    why: str


class TriageReport(Report):
    keep_all = ("steps", "next_steps")  # what ran and what to do next: part of the answer, never cut
    text_gives_alternatives = True  # "Alternative hypothesis (...)": the text's own line for the second finding
    # which step found what is in each finding's evidence sources; the seconds add up to elapsed_s
    summary_drops = ("steps.seconds", "steps.findings")

    def trim_summary(self, data: dict, tight: int = 0) -> None:
        """In detail='summary' the steps that ran fine are named in one note (what they found is in the findings,
        whose evidence names the step; what they ruled out is in detail='full'), counted only at the last
        tightening step; a skipped, failed or timed-out step keeps its record with the line saying why, said once
        when several steps share it."""
        steps = data.get("steps") or []
        fine = [s["name"] for s in steps if s.get("status") == "ok"]
        data["steps"], said = [], {}
        for record in steps:
            if record.get("status") == "ok":
                continue
            why = record.get("summary", "")
            if record.get("status") == "skipped" and why.startswith("skipped: "):  # the status says so already
                why = record["summary"] = why[len("skipped: "):]
            if why in said:
                record["summary"] = f"as {said[why]}"
            said.setdefault(why, record["name"])
            data["steps"].append(record)
        if fine:
            data.setdefault("omitted", {})["steps"] = (f"{len(fine)} that ran fine: {', '.join(fine)}" if tight < compact.LAST_TIGHT
                                                       else f"{len(fine)} ran fine, named in detail='full'")

    healthy: bool
    decisive_step: str | None = Field(None, description="the step whose finding ended the walk early")
    steps: list[TriageStep]
    next_steps: list[NextStep] = Field(default_factory=list)
    budget_s: float
    elapsed_s: float

    def headline(self) -> str:
        ran = ", ".join(f"{s.name}:{s.status}" for s in self.steps)
        return f"triage ran {len(self.steps)} steps in {self.elapsed_s:.1f} s ({ran})"

    def short_headline(self) -> str:
        """The headline with the steps that ran fine counted, not listed (the structured steps list them)."""
        odd = [f"{s.name}:{s.status}" for s in self.steps if s.status != "ok"]
        ok = len(self.steps) - len(odd)
        return (f"triage ran {len(self.steps)} steps in {self.elapsed_s:.1f} s: {ok} ok"
                + (f", {', '.join(odd)}" if odd else ""))

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
        lines += self._next_lines()
        return "\n".join(lines)

    def summary_text(self) -> str:
        """detail='summary': the top finding in full, the others one line each (their evidence is in the
        structured content), what ran, what to do next."""
        lines = [self.short_headline()]
        labels = ["Most likely cause", "Alternative hypothesis", "Also consider"]
        remote = []  # below the top two and below 0.5: named with where, their reasons are in the findings
        for i, f in enumerate(self.findings):
            if i >= 2 and f.confidence < VERDICT:
                remote.append(f"{f.failure_mode} {f.confidence:.0%}"
                              + (f" at {compact.first_place(f.location)}" if f.location else ""))
                continue
            label = labels[i] if i < len(labels) else "Also seen"
            # a second finding that does not contend reads as in the structured content: what it is, not every reason
            summary = (f.summary if i != 1 or compact.contends(f.confidence, self.findings[0].confidence)
                       else compact.clip(f.summary, compact.REMOTE_SUMMARY_MAX))
            lines.append(f"{label} ({f.confidence:.0%}): {f.failure_mode} — {summary}")
            if i == 0:
                lines += [f"  Where: {f.location}"] if f.location else []
                lines += [f"  Evidence: {_facts(f.evidence[:3])}"] if f.evidence else []
                lines += [f"  Fix: {f.fix}"] if f.fix else []
                lines += [f"  Avoid: {f.avoid}"] if f.avoid else []
        lines += [f"Less likely: {', '.join(remote)}"] if remote else []
        lines += self._next_lines()
        return "\n".join(lines)

    def _next_lines(self) -> list[str]:
        if not self.next_steps:
            return []
        return ["Next:"] + [f"  {n.tool}({', '.join(f'{k}={v!r}' for k, v in n.args.items())}): {n.why}"
                            for n in self.next_steps]


def merge_findings(found: list[tuple[str, Finding]]) -> list[Finding]:
    """One finding per failure mode, ranked; corroboration by a second step raises confidence."""
    # per mode: the merged finding, the steps behind it, and the rank of the finding that leads it
    by_mode: dict[str, tuple[Finding, set[str], tuple]] = {}
    for step, f in found:
        # the script run of a probe measures the same signal, and tail_log and log_metrics read the same
        # file: neither is independent corroboration
        step = "log" if step in ("tail_log", "log_metrics") else step.split(":")[0]
        # a finding that says what is wrong leads one that only sees that something is (the labels carry no
        # signal: which bug? a static rule names the line); then the measured (probe) one; among equals, the
        # more confident one. The leader's own confidence counts, not what corroboration has raised it to.
        rank = (not f.facts.get("symptom_only"), step in PROBES, f.confidence)
        if f.failure_mode not in by_mode:
            by_mode[f.failure_mode] = (f.model_copy(deep=True), {step}, rank)
            continue
        best, steps, best_rank = by_mode[f.failure_mode]
        if step in steps:  # the same step saying it twice is not new evidence; what says what is wrong leads
            if rank > best_rank:  # (data_check: "the model reads its pads" over "the labels carry no signal")
                by_mode[f.failure_mode] = (f.model_copy(deep=True), steps, rank)
            continue
        f_leads = rank > best_rank
        alone = f.facts.get("hypothesis_only"), best.facts.get("hypothesis_only")
        if alone[0] != alone[1]:  # a hypothesis never leads another reading of its mode, nor shields it from the
            f_leads = not alone[0]  # rules that weigh that reading (a no-signal reading's cap, say)
        lead, other = (f, best) if f_leads else (best, f)
        merged = lead.model_copy(deep=True)
        merged.confidence = min(CORROBORATED_CAP, 1 - (1 - f.confidence) * (1 - best.confidence))
        if any(alone):  # nor does it corroborate: a flat column sits beside a healthy run's weak readings too
            merged.confidence = max(f.confidence, best.confidence)
        if (step == "log" and best.facts.get("reads_log")) or ("log" in steps and f.facts.get("reads_log")):
            # the LR experiment's verdict already counts the log's flat loss: the log saying so again is not new
            merged.confidence = max(f.confidence, best.confidence)
        if f.facts.get("norm_scales_with_loss") or best.facts.get("norm_scales_with_loss"):
            # the probe measured the norm and found it no larger than the loss's own scale: a log's guess that
            # the norm grows ("growing loss often comes with a growing norm") is answered, not confirmed
            merged.confidence = max(f.confidence, best.confidence)
        merged.evidence = lead.evidence + [e for e in other.evidence if e not in lead.evidence]
        merged.location = lead.location or other.location
        merged.facts = {**other.facts, **lead.facts}
        if not lead.facts.get("symptom_only"):  # what leads says what is wrong
            merged.facts.pop("symptom_only", None)
        by_mode[f.failure_mode] = (merged, steps | {step}, max(rank, best_rank))
    # the cause nan_hook_run attributed a NaN to outranks the NaN itself (the symptom)
    cause = next((f for step, f in found if step.startswith("nan_hook_run") and f.failure_mode != "nan_inf"
                  and f.confidence >= DECISIVE), None)
    if cause is not None and "nan_inf" in by_mode:
        nan, steps, probe = by_mode["nan_inf"]
        top = by_mode[cause.failure_mode][0]
        if nan.confidence >= top.confidence:
            nan.confidence = max(0.0, top.confidence - 0.05)
    # a NaN only the log shows (no probe localised an op) is a symptom: a bug that makes training diverge,
    # found in the code or measured, is its cause and leads
    if "nan_inf" in by_mode and not by_mode["nan_inf"][1] & PROBES:  # no probe measured it
        nan = by_mode["nan_inf"][0]
        causes = [by_mode[m][0] for m in DIVERGENCE_CAUSES if m in by_mode and by_mode[m][0].confidence >= 0.6]
        if causes and nan.confidence >= max(c.confidence for c in causes):
            nan.confidence = max(0.0, max(c.confidence for c in causes) - 0.05)
    # LR too high and too low at once, both with weight: the signals contradict each other, neither is a
    # verdict (a faint opposite hint next to a strong schedule finding is not a contradiction)
    if "lr_too_high" in by_mode and "lr_too_low" in by_mode \
            and min(by_mode["lr_too_high"][0].confidence, by_mode["lr_too_low"][0].confidence) >= 0.4:
        hi, lo = by_mode["lr_too_high"][0], by_mode["lr_too_low"][0]
        for f, other in ((hi, lo), (lo, hi)):
            f.confidence = min(f.confidence, VERDICT - 0.05)
            f.summary += (f" (but {other.failure_mode} is also suggested: the LR signals disagree; "
                          "lr_range_test settles it)")
    ranked = sorted((f for f, _, _ in by_mode.values()), key=lambda f: -f.confidence)
    return [f for f in ranked if f.failure_mode != "healthy"] or ranked


# A step gets its timeout in seconds and a progress callback; `cap` is its timeout when the budget is not the limit.
StepFn = Callable[..., Awaitable[Report]]
Step = tuple[str, StepFn, float]
# Cheap checks that always run, whatever an earlier step found: the static scan and the log corroborate,
# init_loss_check carries the model's train/eval mode, the short grad snapshot the optimizer's coverage.
ALWAYS = frozenset({"static_scan", "tail_log", "log_metrics", "init_loss_check", "grad_norm_snapshot",
                    "sequence_check", "schedule_check"})
# Steps whose findings are hypotheses to confirm, not measurements of the model.
READ_ONLY = frozenset({"static_scan", "tail_log", "log_metrics"})


MAX_FINDINGS, MAX_EVIDENCE, MAX_SUMMARY = 6, 4, 200


def _facts(evidence: list[Evidence]) -> str:
    """Facts on one line, their source said once when they share it."""
    sources = {e.source for e in evidence}
    if len(sources) == 1 and "" not in sources:
        plain = [str(e.model_copy(update={"source": ""})) for e in evidence]
        return f"{'; '.join(plain)} ({sources.pop()})"
    return "; ".join(str(e) for e in evidence)


def _short(text: str) -> str:
    """A step's one-line summary: the first line, cut (a timeout's stderr tail belongs to the probe's own report)."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= MAX_SUMMARY else line[:MAX_SUMMARY - 1] + "…"


class Skip(Exception):
    """A step that decides, from what earlier steps saw, that it has nothing to add."""


class _Progress:
    """What a probe reported while it ran: a probe that completes steps is slow, not hung."""

    def __init__(self):
        self.ticks, self.last = 0, None

    async def __call__(self, progress, total=None, message=None):
        if self.last is None or progress != self.last:
            self.ticks += 1
        self.last = progress


async def triage(
    steps: list[Step],
    budget_s: float = 180.0,
    on_progress: Callable[[float, float | None, str | None], Awaitable[None]] | None = None,
    always: frozenset[str] = ALWAYS,
    next_steps: Callable[[list[Finding], frozenset[str]], list[NextStep]] | None = None,
    concurrency: int = 2,
    weigh: Callable[[list[Finding]], list[Finding]] | None = None,
) -> TriageReport:
    """Run `steps` (name, async fn(timeout_s, on_progress) -> Report, cap_s) in tree order under a wall-clock budget,
    the static scan and the log first, then the probes `concurrency` at a time (each probe is its own process).

    A decisive probe finding (>= DECISIVE) ends the probing: only the cheap `always` steps still run. A decisive
    finding of the static scan or the log is a hypothesis: after it only the probe that confirms it still runs
    (besides `always`). A step that times out is a hang only if it completed no step (judged from its progress,
    not its wall clock), with where it waited when the probe's stack dump shows it.
    """
    from tools.probe_runner import PROBE_THREADS

    start = time.monotonic()
    ran: dict[int, TriageStep] = {}
    found: list[tuple[str, Finding]] = []
    state = {"decisive": None, "confirm": set(), "done": 0}
    slots = anyio.Semaphore(max(1, concurrency))

    async def run_one(i: int, name: str, fn: StepFn, cap: float) -> None:
        base = name.split(":")[0]
        async with slots:
            left = budget_s - (time.monotonic() - start)
            decisive, confirm = state["decisive"], state["confirm"]
            skip_why = None
            if decisive and (base not in always or any(f.failure_mode == "hang" for _, f in found)):
                skip_why = f"skipped: decisive finding from {decisive}"
            elif confirm and base not in always and base not in confirm:
                skip_why = f"skipped: the static/log finding is confirmed by {', '.join(sorted(confirm))} instead"
            elif left < min(cap, 5.0):
                skip_why = "skipped: budget used up"
            if skip_why:
                ran[i] = TriageStep(name=name, status="skipped", seconds=0.0, summary=skip_why)
                return
            if on_progress:
                await on_progress(state["done"], len(steps), f"triage: {name}")
            t = time.monotonic()
            prog = _Progress()
            try:
                with anyio.fail_after(max(1.0, left + 5.0)):
                    report = await fn(min(cap, left), prog)
            except Skip as e:
                ran[i] = TriageStep(name=name, status="skipped", seconds=time.monotonic() - t, summary=f"skipped: {e}")
                return
            except (TriageError, TimeoutError) as e:
                msg = str(e) or "the step did not finish within the budget"
                status = "timeout" if isinstance(e, TimeoutError) or "did not finish" in msg else "error"
                ran[i] = TriageStep(name=name, status=status, seconds=time.monotonic() - t, summary=_short(msg))
                if status == "timeout" and left >= cap:  # cut short by the budget says nothing
                    f = _timeout_finding(name, msg, prog.ticks)
                    if f is not None:
                        found.append((name, f))
                        if f.confidence >= DECISIVE:  # every later probe runs the same data: it would wait too
                            state["decisive"] = state["decisive"] or name
                return
            finally:
                state["done"] += 1
            real = [f for f in report.findings if f.failure_mode != "healthy"]
            found.extend((name, f) for f in report.findings)
            ran[i] = TriageStep(name=name, status="ok", seconds=time.monotonic() - t,
                                summary=_short(report.headline()), findings=[f.failure_mode for f in real])
            strong = [f for f in real if f.confidence >= DECISIVE]
            if state["decisive"] is None and strong:
                if base in READ_ONLY:
                    state["confirm"] |= {NEXT_FOR.get(f.failure_mode, ("",))[0] for f in strong}
                elif base not in always:
                    state["decisive"] = name

    # the static scan and the log first, in order: they decide which probes still need to run
    indexed = list(enumerate(steps))
    for i, (name, fn, cap) in indexed:
        if name.split(":")[0] in READ_ONLY:
            await run_one(i, name, fn, cap)
    # then the probes, `concurrency` at a time in tree order (each its own process: two cores, two probes),
    # sharing the cores between them
    threads = PROBE_THREADS.set(max(1, (os.cpu_count() or 1) // max(1, concurrency)))
    try:
        async with anyio.create_task_group() as tg:  # forked from the shared fork server once it is up
            for i, (name, fn, cap) in indexed:
                if name.split(":")[0] not in READ_ONLY:
                    tg.start_soon(run_one, i, name, fn, cap)
                    await anyio.sleep(0)  # start in order: the task that asked first gets the next slot
    finally:
        PROBE_THREADS.reset(threads)
    decisive = state["decisive"]
    ran = [ran[i] for i in sorted(ran)]
    if on_progress:
        await on_progress(len(steps), len(steps), "triage: done")
    # below NOISE a finding is not worth an agent's reading: it would push a real hypothesis out of the top three
    merged = merge_findings(found)
    if weigh is not None:  # what the steps measured together (a model that learns) re-weighs single findings
        merged = sorted(weigh(merged), key=lambda f: -f.confidence)
    findings = [f for f in merged if f.failure_mode == "healthy" or f.confidence >= NOISE]
    # below 0.5 a finding is a hypothesis to confirm, not a verdict: with nothing stronger, the run is
    # called healthy and the weak hypotheses follow it
    weak = [f for f in findings if f.failure_mode != "healthy" and f.confidence < VERDICT]
    healthy = not findings or findings[0].failure_mode == "healthy" or len(weak) == len(findings)
    checked = [s.name for s in ran if s.status == "ok"]
    if healthy:
        probes_ok = [n for n in checked if n.split(":")[0] not in READ_ONLY]
        if not checked:  # not a clean bill of health: `healthy` stays false, the finding says why
            healthy = False
            findings = [Finding(failure_mode="healthy", confidence=0.0,
                                summary="nothing was checked: every step was skipped or failed (see steps)",
                                evidence=[Evidence(what="steps that ran clean", value=0, source="triage")],
                                fix="Raise budget_s or fix the errors the steps report, then triage again")] + weak
        else:
            findings = [Finding(failure_mode="healthy",
                                confidence=(0.7 if len(probes_ok) >= 3 else 0.4) - (0.1 if weak else 0.0),
                                summary=f"no failure found by {', '.join(checked)}"
                                        + (f"; {len(weak)} weak hypotheses below {VERDICT} follow" if weak else ""),
                                evidence=[Evidence(what="steps that ran clean", value=len(checked), source="triage")],
                                fix="Nothing to fix by these checks; if the run still disappoints, read the curve "
                                    "(log_metrics with plot=True) and compare against a baseline run.")] + weak
    # compact by default: an agent pays for every character (the evidence of a merged finding can run long)
    findings = [f.model_copy(update={"evidence": f.evidence[:MAX_EVIDENCE]}) for f in findings[:MAX_FINDINGS]]
    return TriageReport(findings=findings, healthy=healthy, decisive_step=decisive, steps=ran,
                        next_steps=next_steps(findings, frozenset(s.name for s in ran if s.status == "ok"))
                        if next_steps else [], budget_s=budget_s,
                        elapsed_s=time.monotonic() - start)


WAITS = re.compile(r"\b(get|wait|acquire|_poll|poll|select|recv|accept|sleep|join|read|_recv_bytes|"
                   r"_try_get_data|_get_data|barrier|all_reduce|communicate)\b")


def stack_of(message: str) -> list[str]:
    """The main thread's frames (innermost first) from a faulthandler dump in a probe's stderr tail."""
    lines = message.splitlines()
    starts = [i for i, l in enumerate(lines) if re.match(r"(Current thread|Thread) 0x", l.strip())]
    if not starts:
        return []
    blocks = [lines[a + 1:b] for a, b in zip(starts, starts[1:] + [len(lines)])]
    # the main thread is the one whose outermost frame is the script's <module>
    block = next((b for b in blocks if any("in <module>" in l for l in b)), blocks[-1])
    return [l.strip() for l in block if l.strip().startswith("File ")]


def _timeout_finding(step: str, message: str, ticks: int) -> Finding | None:
    """A probe that completed no step and whose stack sits in a wait is hung; one that made progress, or whose
    stack dump shows it computing, was only slow (a loaded machine); with no stack to read it is a hypothesis."""
    if ticks > 1:
        return None
    frames = stack_of(message)
    wait = next((f for f in frames if WAITS.search(f)), None)
    if frames and not wait:
        return None
    user = next((f for f in frames if "/torch/" not in f and "/mltriage_" not in f and "/lib/python" not in f), None)
    where = (user or wait or "").replace("File ", "")
    ev = [Evidence(what="probe outcome", value="timeout with no completed step", source=step)]
    if wait:
        ev.append(Evidence(what="innermost wait in the stack dump", value=wait.replace("File ", "")[:200], source=step))
    return Finding(failure_mode="hang", confidence=0.85 if wait else 0.4,
                   summary=(f"{step} completed no step before its timeout"
                            + (f": it waits in {where[:160]}" if where else " (no stack to tell a hang from a slow step)")),
                   evidence=ev, location=where[:200] or None,
                   fix="Read where it waits (process_check(stack=True) on the real run): a data-loader queue with no "
                       "producer, a lock, a collective one rank never reaches; fix that wait, not the timeout")


LR_PROBE_FACTOR = 30.0  # the second one-batch test's LR, in multiples of the user's
LITTLE_PROGRESS = 0.75  # the run's loss ended above this fraction of where it started: it barely learnt


def learns_faster(slow: "probes.OverfitReport", other: "probes.OverfitReport") -> bool:
    """The one-batch test at another LR memorised the batch, or got most of the way where the run's LR got a
    fraction of it; either way it ends at most half as high as the run's LR did (a batch the run's LR took from
    0.69 to 0.060, just short of the pass mark, is learnt at that LR: passing at 0.035 elsewhere says nothing)."""
    fell, fell_other = slow.drop_fraction, other.drop_fraction
    lower = is_finite(slow.final_loss) and is_finite(other.final_loss) and other.final_loss <= 0.5 * slow.final_loss
    return lower and (other.passed or (is_finite(fell_other) and is_finite(fell) and fell_other >= 0.6
                                       and fell_other >= 2 * max(fell, 0.0)))


VAL_LEARNT = 0.92  # validation's best at or under this fraction of its first value: the run did learn


def val_learnt(val) -> bool:
    """Validation's best is at least 8% under its first value (a validation loss series of 4 or more points)."""
    first, low = getattr(val, "first", None), getattr(val, "min", None)
    return (val is not None and (val.count or 0) >= 4 and is_finite(first) and is_finite(low) and first > 0
            and low <= VAL_LEARNT * first)


ONE_BATCH_LEARNS = 2 / 3  # one batch losing this share of its loss in 200 steps at the run's LR is being learnt


def val_stopped_improving(val) -> bool:
    """Validation improved (its best at least 8% under its first value) and then stopped: its last point is not its
    best and its last fifth is flat or rising. A too-small LR keeps improving to the end; a run that got what the
    data allows (noisy labels, a hard target) stops."""
    return (val_learnt(val) and val.count >= 6 and is_finite(val.last) and val.last > val.min
            and val.trend in ("flat", "increasing"))


def crawl_beside_learning(rep: "probes.OverfitReport") -> "probes.OverfitReport":
    """A one-batch crawl in a run whose log shows it learning is one more reading of the same slow progress at the
    same LR, not a second signal: it must not lift the log's own LR reading to a verdict when they merge (blind dev
    review_sentiment_transformer_finetune, healthy: a head over a frozen encoder crawled on one batch, and that 0.3
    beside the log's "slow burn" 0.45 read lr_too_low 0.61)."""
    rep.findings = [f.model_copy(update={"facts": {**f.facts, "reads_log": True}}) if f.failure_mode == "lr_too_low"
                    else f for f in rep.findings]
    return rep


def lr_off(slow: "probes.OverfitReport", other: "probes.OverfitReport", log_loss, log_val=None) -> Finding:
    """lr_too_low (or lr_too_high) when the batch the model could not learn at its LR is learnt at a larger (smaller)
    one. Two signals must agree for a verdict (>= 0.5): that experiment, and a run whose logged loss barely fell.
    A healthy fine-tune at a small LR crawls on one batch too, but its log shows it learning."""
    mode = "lr_too_low" if other.lr > slow.lr else "lr_too_high"
    factor = other.lr / slow.lr
    label = f"{factor:g}x" if factor > 1 else f"1/{1 / factor:g}"
    fell, fell_other = max(slow.drop_fraction or 0.0, 0.0), other.drop_fraction
    evidence = [Evidence(what=f"one-batch loss at lr {slow.lr:.3g} (the run's)", value=f"{slow.outcome}: "
                         f"{_fmt(slow.initial_loss)} -> {_fmt(slow.final_loss)} in {slow.steps_run} steps",
                         source="overfit_test"),
                Evidence(what=f"one-batch loss at lr {other.lr:.3g} ({label})",
                         value=f"{other.outcome}: {_fmt(other.initial_loss)} -> {_fmt(other.final_loss)} in "
                               f"{other.steps_run} steps", source="overfit_test")]
    first, last = _first_last(log_loss)
    run_stalled = stalled(log_loss)
    floor = mode == "lr_too_high" and not run_stalled and at_lr_floor(slow, log_loss)
    if run_stalled:
        evidence.append(Evidence(what=f"logged {log_loss.name} first -> last", value=f"{_fmt(first)} -> {_fmt(last)}",
                                 source="log_metrics"))
    # the training loss fell little, but validation learnt and then levelled off: the data's limit, not the LR's
    at_limit = mode == "lr_too_low" and run_stalled and val_stopped_improving(log_val)
    # the run's own LR takes most of one batch's loss: it moves the model (a healthy fine-tune at 5e-5; a run
    # whose inputs or labels are broken); a larger LR learning faster is then a hypothesis, not the bug
    learning = mode == "lr_too_low" and run_stalled and not at_limit and fell >= ONE_BATCH_LEARNS
    if at_limit or (learning and val_learnt(log_val)):
        evidence.append(Evidence(what=f"logged {log_val.name} first -> best -> last",
                                 value=f"{_fmt(log_val.first)} -> {_fmt(log_val.min)} -> {_fmt(log_val.last)}",
                                 source="log_metrics"))
    if floor:
        evidence.append(Evidence(what=f"lowest logged {log_loss.name}", value=_fmt(log_loss.min), source="log_metrics"))
    fix = (f"Raise the LR toward {slow.lr * 10:.3g}-{other.lr:.3g}" if mode == "lr_too_low" else
           f"Lower the LR toward {other.lr:.3g} (or warm it up)") + " and place it with lr_range_test"
    if at_limit:
        said = (f", and the run's loss barely fell, but its {log_val.name} improved and then levelled off (a too-small "
                "LR keeps improving to the end): the run may have got what the data allows, so this is a hypothesis")
    elif learning:
        said = (", and the run's loss fell little, but its own LR takes most of one batch's loss"
                + (f" and {log_val.name} improved ({_fmt(log_val.first)} -> {_fmt(log_val.min)}): the run learns at "
                   "its LR, so a larger one is a hypothesis" if val_learnt(log_val) else
                   ": the LR moves the model, so a larger one is a hypothesis; look at what the model is given"))
    elif run_stalled:
        said = ", and the run's loss barely fell"
    elif floor:
        said = ", and one batch stalls at this LR about where the whole run's loss sits: the LR sets the floor"
    else:
        said = "; the log does not show a stalled run, so this is a hypothesis"
    first_b, last_b = slow.initial_loss, slow.final_loss
    measured = ({"one_batch_steps": slow.steps_run, "one_batch_ratio": last_b / first_b}
                if is_finite(first_b) and is_finite(last_b) and first_b > 0 and last_b >= 0 and slow.steps_run else {})
    measured.update(lr_experiment=True, reads_log=run_stalled)  # the log's flat loss is already inside this verdict
    return Finding(
        failure_mode=mode, confidence=0.75 if run_stalled and not (at_limit or learning) else 0.7 if floor else 0.45,
        evidence=evidence,
        summary=f"at {label} its LR the model learns one batch ({fell_other:.0%} of the loss gone), at its own {fell:.0%}"
                + said, fix=fix, location="optimizer lr", facts=measured)


FLOOR_NEAR = 0.8  # one batch at the run's LR ends at or above this fraction of the run's lowest logged loss


def at_lr_floor(slow: "probes.OverfitReport", log_loss) -> bool:
    """One batch trained at the run's LR ends about where the whole run's loss got to.

    At a workable LR a single batch is memorised far below the population loss; when the LR is so high that
    the optimizer's own noise sets the floor, one batch gets no lower than the run did. Together with a tenth
    of the LR memorising that batch, it is the second signal a too-high-LR verdict needs."""
    low, final = getattr(log_loss, "min", None), slow.final_loss
    return is_finite(low) and low > 0 and is_finite(final) and final >= FLOOR_NEAR * low


# Findings read off the model's insides (gradient scale across layers, the share of ReLU units at zero at one
# step): a failure only when the model does not learn. A healthy CNN has 92% of its last ReLU's units at zero
# at step 12 (cnn_bn/bracket_orientation_flip_aug's fixed twin).
INSIDE_ONLY = ("vanishing_gradients", "dead_units")


def weigh_by_learning(findings: list[Finding], overfit, log_loss, log_val=None) -> list[Finding]:
    """A model that memorises one batch, or whose validation loss learnt, in a run whose logged loss falls, has
    gradients that reach where they must and units that work: a per-layer scale pattern or idle units alone are
    then a hypothesis, not a verdict (a conv autoencoder's first layer gets a gradient 1000x smaller than its last
    and trains fine). Validation stands in for the one-batch test where a loss has a floor one batch cannot
    pass under (a VAE's KL term and the entropy of grey pixels under BCE)."""
    from tools.loop_checks import STILL_WARMING

    memorised = overfit is not None and getattr(overfit, "passed", False)
    generalised = log_loss is not None and val_learnt(log_val)
    if not (memorised or generalised) or (log_loss is not None and stalled(log_loss)):
        return findings
    first, last = _first_last(log_loss)
    seen_learning = ", ".join(
        ([f"one batch memorised in {overfit.steps_run} steps"] if memorised else [])
        + ([f"the run's {log_loss.name} fell {_fmt(first)} -> {_fmt(last)}"] if log_loss is not None else [])
        + ([f"{log_val.name} {_fmt(log_val.first)} -> best {_fmt(log_val.min)}"] if generalised else []))
    shown = (Evidence(what="overfit_test", value="passed", source="overfit_test") if memorised else
             Evidence(what=f"{log_val.name} first -> best", value=f"{_fmt(log_val.first)} -> {_fmt(log_val.min)}",
                      source="log_metrics"))
    out = []
    for f in findings:
        # a run that stops during its warmup while its loss still falls is short, not broken (issue 13's healthy
        # "warmup still in progress"); validation learning a little does not show that (a warmup longer than the
        # run learns a little too), so this one needs the memorised batch
        warming = memorised and f.failure_mode == "lr_too_low" and f.summary.startswith(STILL_WARMING)
        if (f.failure_mode in INSIDE_ONLY or warming) and f.confidence >= VERDICT:
            f = f.model_copy(update={
                "confidence": VERDICT - 0.05,
                "summary": f"{f.summary} (but the model learns: {seen_learning})",
                "evidence": f.evidence + [shown]})
        out.append(f)
    return out



def weigh_by_recurrence(findings: list[Finding], script_grads) -> list[Finding]:
    """In a recurrent net whose loop never clips (measured in the user's script), a gradient norm that blows up
    is the recurrence's explosion, which clipping fixes (Pascanu, Mikolov & Bengio 2013); a divergence read as
    'the LR' is then the alternative, not the cause (lowering the LR is the anti-pattern there). The same holds
    for a loop that clips after optimizer.step(), in any net."""
    from tools.probes import RECURRENT

    unclipped = (script_grads is not None and getattr(script_grads, "clipped", None) is False
                 and any(m.type in RECURRENT for m in getattr(script_grads, "modules", [])))
    by = {f.failure_mode: f for f in findings}
    lr, ex = by.get("lr_too_high"), by.get("exploding_gradients")
    if lr is None or ex is None or ex.confidence > lr.confidence:
        return findings
    # a clip that runs after optimizer.step() leaves every step unclipped just the same, whatever the net: the LR
    # was chosen for clipped steps (blind dev syslog_char_lstm_lm: SGD at lr 20 with a 0.25 clip after the step)
    late = from_rule(ex, "clip_after_step")
    if not (late or (unclipped and ex.facts.get("unclipped_recurrent"))):
        return findings
    lead = max(ex.confidence, lr.confidence)
    why = "the clip runs after the step: move it before" if late else "in a recurrent net that never clips: clip first"
    out = [f.model_copy(update={"confidence": lead}) if f is ex else
           f.model_copy(update={"confidence": max(0.0, lead - 0.05),
                                "summary": f"{f.summary} ({why})",
                                "facts": {**f.facts, "waits_for_clipping": True}})
           if f is lr else f for f in findings]
    return out


# static rules that say the loss is fed probabilities where it expects logits
PROBABILITIES_INTO_LOSS = {"sigmoid_into_bce_with_logits", "softmax_into_cross_entropy", "softmax_into_nll_loss"}


def from_rule(f: Finding, *rules: str) -> bool:
    """Does the finding rest on one of these static rules (its evidence names the rule)?"""
    return any(e.what == "rule" and e.value in rules for e in f.evidence)


def weigh_by_named_cause(findings: list[Finding]) -> list[Finding]:
    """Bugs that make the model learn something other than the task, each with the readings it causes: a loss over
    every row against every row (the batch mean fits it at any LR, for any labels), weights that never loaded (a
    probe on random features beats permuted labels by nothing), layers meant to be unfrozen that never train (the
    same, through the head alone), a validation loader prepared apart from training (its loss stays high while
    training falls, as overfitting does), a denoiser scored against its own noisy input (its
    error against the clean signal turns up, which reads as overfitting). Those readings are marked its symptoms."""
    # data_check's labels that carry no signal, and a validation that never beat the label prior: nothing learnt
    labels_flat = lambda f: f.failure_mode == "data_pipeline" and (  # noqa: E731
        f.facts.get("labels_no_signal") or f.facts.get("never_beat_prior"))
    slow_or_flat = lambda f: f.failure_mode == "lr_too_low" or labels_flat(f)  # noqa: E731
    causes = [
        (lambda f: f.facts.get("rows_against_rows"),
         "a loss that pairs every row with every row is minimised by the batch mean, at any LR and for any labels",
         slow_or_flat),
        (lambda f: f.facts.get("rows_mixed"),
         "a model that mixes the rows of a batch scores each label against other samples' features", slow_or_flat),
        (lambda f: f.facts.get("weights_not_loaded"),
         "features from weights that never loaded carry little of the labels", labels_flat),
        (lambda f: from_rule(f, "optimizer_built_before_unfreeze", "requires_grad_set_on_module"),
         "a model whose unfrozen layers never train fits its labels only through the head", labels_flat),
        (lambda f: f.facts.get("splits_apart"),
         "a split prepared differently from training scores badly however well the model learns",
         lambda f: f.failure_mode == "overfitting"),
        (lambda f: from_rule(f, "denoising_target_is_corrupted"),
         "a model trained to copy its noisy input fits the noise, so its error against the clean signal rises",
         lambda f: f.failure_mode == "overfitting"),
    ]
    for is_cause, why, is_symptom in causes:
        cause = next((f for f in findings if f.confidence >= VERDICT and is_cause(f)), None)
        if cause is not None:
            findings = symptoms_explained(findings, cause, why, is_symptom)
    return findings


def weigh_by_loss_input(findings: list[Finding]) -> list[Finding]:
    """A loss fed probabilities where it expects logits (a sigmoid before BCEWithLogits, a softmax before
    cross-entropy) squashes its gradient: the model learns slowly at any LR, so while that is the top finding an
    LR reading that says "too low" (a one-batch test that crawls, small updates) is its symptom, not a second
    cause. Fix the loss, then triage again."""
    top = max(findings, key=lambda f: f.confidence, default=None)
    if top is None or top.failure_mode != "loss_function" or top.confidence < VERDICT:
        return findings
    if from_rule(top, "kl_against_mean_reconstruction"):
        # a KL weighted by the input size holds one batch's loss at the collapsed posterior's floor, at any LR
        return slow_lr_explained(findings, top, "a KL that outweighs the reconstruction stops the loss at the "
                                 "collapsed posterior's floor at any LR")
    if not (top.facts.get("probabilities_into_loss") or from_rule(top, *PROBABILITIES_INTO_LOSS)):
        return findings
    return slow_lr_explained(findings, top, "a loss fed probabilities learns slowly at any LR: its gradient is squashed")


def weigh_by_padding(findings: list[Finding]) -> list[Finding]:
    """A model measured to read its padding (data_check cut the pads of short rows and their outputs moved) sees
    short rows through steps that carry no content: it fits even one batch slowly and its loss starts flat, at any
    LR. An LR reading that says "too low" is then its symptom, not a second cause."""
    pad = next((f for f in findings if f.failure_mode == "data_pipeline" and f.facts.get("reads_padding")
                and f.confidence >= VERDICT), None)
    if pad is None:
        return findings
    return slow_lr_explained(findings, pad, "a model that reads its padding fits slowly at any LR: short rows are "
                             "read through pads")


def weigh_by_unregistered(findings: list[Finding]) -> list[Finding]:
    """Layers the optimizer never steps (kept in a plain list, see grad_norm_snapshot) leave the rest of the net to
    fit around random weights: one batch crawls at any LR. An LR reading that says "too low" is their symptom."""
    frozen = next((f for f in findings if f.failure_mode == "frozen_params" and f.confidence >= VERDICT and (
        f.facts.get("unregistered") or from_rule(f, "optimizer_built_before_unfreeze"))), None)
    if frozen is None:
        return findings
    return slow_lr_explained(findings, frozen, "layers no optimizer steps make the loss crawl at any LR")


def weigh_by_schedule(findings: list[Finding]) -> list[Finding]:
    """A per-epoch schedule stepped per batch (or per micro-batch) drives the LR to ~0 within the first epochs: the
    run's validation then learns nothing whatever its labels. data_pipeline's "never learnt" picture needs the run
    and data_check to agree; the run's half is the schedule's symptom, so what is left is one short probe: a
    hypothesis below the schedule, not a level second cause (blind dev lstm_slot_tagger_steplr: 72% vs 70%)."""
    sched = next((f for f in findings if f.failure_mode == "lr_too_low" and f.confidence >= VERDICT
                  and from_rule(f, "epoch_schedule_stepped_per_batch", "scheduler_stepped_per_micro_batch",
                                "learning_rate_as_lambda_factor")), None)
    if sched is None:
        return findings
    why = "a schedule that drove the LR to ~0 stops validation learning whatever the labels"
    # weights that never moved under that LR rounded away in float32; left out of the optimizer is another bug
    return [explained(f, sched, why) if f.failure_mode == "data_pipeline" and (
                f.facts.get("val_flat") or f.facts.get("labels_no_signal"))
            else explained(f, sched, "under an LR near 0 a float32 weight does not move")
            if f.failure_mode == "frozen_params" and f.facts.get("may_round_away")
            else f for f in findings]


def slow_lr_explained(findings: list[Finding], cause: Finding, why: str) -> list[Finding]:
    """Every "the LR is too low" reading, explained by `cause` (a bug that makes any LR learn slowly)."""
    return symptoms_explained(findings, cause, why, lambda f: f.failure_mode == "lr_too_low")


def symptoms_explained(findings: list[Finding], cause: Finding, why: str, is_symptom) -> list[Finding]:
    """The findings `is_symptom` picks, explained by `cause`; the others as they are."""
    return [explained(f, cause, why) if is_symptom(f) else f for f in findings]


def explained(symptom: Finding, cause: Finding, why: str) -> Finding:
    """A finding the cause's bug shows too: a hypothesis below VERDICT that says why, with no next step of its own
    (suggest_next skips what the top finding explains). The why comes first: an agent that stops reading after the
    first clause must not act on the symptom's claim."""
    return symptom.model_copy(update={"confidence": min(symptom.confidence, VERDICT - 0.05),
                                      "summary": f"Likely a symptom of {cause.failure_mode} ({why}): "
                                                 f"{symptom.summary}",
                                      "facts": {**symptom.facts, "explained_by": cause.failure_mode}})


PRIOR_WHAT = "label prior (best constant prediction, the run's loss)"


def prior_what(data) -> str:
    """PRIOR_WHAT, saying so when the constant was scored on the validation loader (the set the log's validation
    loss is measured on) rather than on training batches."""
    on = getattr(data, "label_prior_scored_on", "") or ""
    return PRIOR_WHAT[:-1] + ", on the validation loader)" if on.startswith("validation") else PRIOR_WHAT


def label_prior(data) -> float | None:
    """data_check's exact label prior, if it measured one (it skips a summed loss: another scale than the log's)."""
    v = getattr(data, "label_prior_loss", None)
    return v if is_finite(v) and v > 0 else None


PRIOR_MARGIN = 0.98  # validation's best above this share of the prior-only loss never beat the label distribution
# validation that ended under this share of the label prior learnt from the inputs. With the prior scored on the
# validation loader (the rows the log's validation loss is measured on), a noisy target's weak signal (AUC 0.6,
# R^2 0.02-0.05) ends 2-2.5% under it (dev bearing_vibration_failure_cnn1d_bn 0.9805, ad_click_ctr_mlp 0.978);
# labels that do not follow their inputs end at it or above (dev 0.997-1.07), a file order that keeps some pairs
# right just under it (bearing_rul_clip_file_order 0.989, its prior from training batches). The margin is thin.
RUN_LEARNT = 0.985
# validation that at its best barely beat the prior (this share of it) and ended worse than the prior ...
BARELY_BEAT, ENDED_WORSE = 0.85, 1.1
# ... while training fell to this band of the prior: it learnt (below the upper end) without memorising its rows
# (above the lower end; a model that overfits its way past the prior has near-zero training loss)
TRAIN_LEARNT = (0.15, 0.5)
VAR_MARGIN = 0.9  # a squared error's validation end above this share of the target variance: R^2 under 0.1
PRIOR_LEARNT = 0.9  # a permuted-label copy whose held-out loss fell under this share of init learnt the prior: the LR learns
NO_TRANSFER = 0.65  # validation and data_check agree that nothing transfers (before the +0.05 of two signals)


def weigh_by_prior(findings: list[Finding], data, log_val) -> list[Finding]:
    """The run's own validation against what a model knowing only the label distribution scores (data_check's copy
    trained on permuted labels, on a held-out batch): two independent measurements. Three pictures mean the rows
    and their labels (or the training and validation sets) do not go together:
    - a curve read as overfitting whose validation never got below the prior: nothing was learnt to overfit, the
      falling training loss is memorised labels that do not belong to their rows (a positional join);
    - a curve read as overfitting whose training learnt a lot without memorising while validation barely beat the
      prior and ended worse than it: what training learns does not hold on validation (two label maps);
    - validation that ended no better than its first value nor the prior, where data_check's real-label copy
      generalised no better than its permuted one although both learnt the label distribution (so the LR learns).
    The validation series must be on the probe's scale (its first value within 2x of the loss at init)."""
    fit = next((f for f in findings if f.failure_mode == "overfitting" and f.confidence >= VERDICT), None)
    p, i0 = getattr(data, "held_out_loss_permuted_labels", None), getattr(data, "held_out_loss_at_init", None)
    r = getattr(data, "held_out_loss_real_labels", None)
    first, best = getattr(log_val, "first", None), getattr(log_val, "min", None)
    if not all(is_finite(v) and v > 0 for v in (p, i0, first, best)):
        return findings
    exact = label_prior(data)
    # a regression target's prior under a squared error is its variance (R^2 = 0): validation logged after a first
    # epoch that already learnt the mean sits there, far under the probe's loss at init
    std = getattr(getattr(data, "labels", None), "std", None)
    var = std ** 2 if is_finite(std) and std > 0 and not getattr(data.labels, "counts", None) else None
    if var is not None and exact is not None:
        var = exact  # the same prior, over every batch and through the user's own loss
    on_var = var is not None and 0.5 * var <= first <= 2 * var and not 0.5 * i0 <= first <= 2 * i0
    if not (0.5 * i0 <= first <= 2 * i0 or on_var):
        return findings
    evidence = [Evidence(what=f"{log_val.name} first -> best", value=f"{_fmt(first)} -> {_fmt(best)}",
                         source="log_metrics"),
                Evidence(what=prior_what(data) if exact is not None else "held-out loss, trained on permuted labels "
                         "(near the label prior)", value=exact if exact is not None else p, source="data_check"),
                Evidence(what="held-out loss at init", value=i0, source="data_check")]
    lp, p = p, exact if exact is not None else p  # the permuted copy's own loss still judges the real-label copy
    pair_rows = ("Pair each row with its own label: join labels to features on a key (merge on the id, validate="
                 "'one_to_one'), never by position after a group-by, sort, filter or reset_index; index inputs and "
                 "labels together (one permutation, one order for both); print a few rows with their ids and labels")
    v_end, t_end = (fit.facts.get("val_end"), fit.facts.get("train_end")) if fit else (None, None)
    # judged at its end (an EMA), not its minimum: one noisy epoch's dip is not learning
    end = getattr(log_val, "smoothed_last", None)
    prior = var if on_var else p
    never_learnt = ((log_val.count or 0) >= 3 and is_finite(end) and end >= (1 - VAL_NEVER_LEARNT) * first
                    and end >= (VAR_MARGIN if on_var else RUN_LEARNT) * prior and is_finite(r)
                    and r > lp - 0.05 * i0 and lp <= PRIOR_LEARNT * i0)
    if on_var and not never_learnt:
        return findings  # the overfitting pictures compare with the probe's own scale only
    apart = False  # the training and validation sets are built apart (not rows and labels within one)
    if fit is not None and best >= PRIOR_MARGIN * p:
        why = "validation never beat the label prior: nothing was learnt to overfit"
        summary = (f"{log_val.name} never got below the loss of a model that knows only the label distribution "
                   f"(best {_fmt(best)}, the label prior {_fmt(p)}): the model learnt "
                   "nothing from the inputs, so its falling training loss is memorised labels that do not belong "
                   "to their rows")
        fix = pair_rows
    elif (fit is not None and is_finite(v_end) and is_finite(t_end) and best >= BARELY_BEAT * p
          and v_end >= ENDED_WORSE * p and TRAIN_LEARNT[0] * p <= t_end <= TRAIN_LEARNT[1] * p):
        # Overfitting first generalises, then memorises (Arpit et al. 2017, "A closer look at memorization in
        # deep networks"): training that learnt this much without memorising would have carried validation with it
        why, apart = "training learnt without memorising while validation got worse than the label prior", True
        summary = (f"training learnt (its loss fell to {_fmt(t_end)}, {t_end / p:.0%} of the label prior "
                   f"{_fmt(p)}) without memorising, yet {log_val.name} at its best barely beat the prior "
                   f"({_fmt(best)}) and ended worse than it ({_fmt(v_end)}): what training learns does not hold "
                   "on the validation data, so the two are labelled or prepared differently")
        evidence.append(Evidence(what=f"{log_val.name} end / training loss end", value=f"{_fmt(v_end)} / {_fmt(t_end)}",
                                 source="log_metrics"))
        fix = ("Build the training and validation sets through one code path: the same label/class-id map (fit it "
               "once, on all labels, e.g. sorted class names), the same scaler and encoders fitted on training and "
               "applied to both, rows joined to labels on a key; print a few validation rows with their ids and labels")
    elif fit is None and never_learnt:
        why = None
        learnt_what = "targets' mean" if on_var else "label distribution"
        said_prior = (f"the targets' variance is {_fmt(var)}, what predicting their mean scores" if on_var else
                      f"predicting the label frequencies alone scores {_fmt(p)}" if exact is not None else
                      f"a copy trained on permuted labels scores {_fmt(p)}")
        summary = (f"{log_val.name} ended no better than its first value nor the label prior ({_fmt(first)} -> "
                   f"{_fmt(end)}; {said_prior}), and a copy trained on the real labels "
                   f"generalises no better ({_fmt(r)}) although both learnt the {learnt_what} (from "
                   f"{_fmt(i0)} at init): the labels, as the pipeline delivers them, do not go with their inputs")
        evidence[0] = Evidence(what=f"{log_val.name} first -> end", value=f"{_fmt(first)} -> {_fmt(end)}",
                               source="log_metrics")
        evidence.insert(1, Evidence(what="held-out loss, trained on real labels", value=r, source="data_check"))
        if on_var:
            evidence.insert(1, Evidence(what="target variance (a squared error's prior)", value=var, source="data_check"))
        fix = pair_rows
    else:
        return findings
    cause = Finding(
        failure_mode="data_pipeline", confidence=round((fit.confidence if fit else NO_TRANSFER) + 0.05, 2),
        facts={"never_beat_prior": True, **({"splits_differ": True} if apart else {}),
               **({"val_flat": True} if fit is None else {})},  # the run learnt nothing at all
        summary=summary, evidence=evidence, fix=fix,
        avoid="Do not add regularisation, stop early or tune the LR: there is nothing learnt to keep")
    held = next((f for f in findings if f.failure_mode == "data_pipeline"), None)  # one finding per mode
    if held is not None and held.confidence >= VERDICT and not any(
            held.facts.get(k) for k in ("labels_no_signal", "symptom_only", "never_beat_prior")):
        # a finding that names the bug (batches sorted by class, a split on another scale) already says why the
        # labels do not generalise: this reading is its evidence, and its fix stays the one to act on
        named = held.model_copy(update={
            "confidence": max(cause.confidence, held.confidence),
            "evidence": held.evidence + [e for e in cause.evidence[:2] if e not in held.evidence],
            "facts": {**cause.facts, **held.facts}})
        return [named] + [explained(f, named, why) if f is fit else f for f in findings if f is not held]
    if held is not None:
        # its facts travel with it, as in merge_findings: weigh_by_labels still reads a label comparison's
        cause = cause.model_copy(update={"confidence": max(cause.confidence, held.confidence),
                                         "evidence": cause.evidence + held.evidence[:3],
                                         "facts": {**held.facts, **cause.facts}})
    return [cause] + [explained(f, cause, why) if f is fit else f for f in findings if f is not held]




def weigh_signal_by_run(findings: list[Finding], data, log_val) -> list[Finding]:
    """data_check's "real labels generalise no better than permuted ones" comes from 40 steps on a few batches;
    the run's own validation, over all its data and steps, is the stronger witness. Where that ended clearly under
    the label prior (on the same scale), the labels carry signal as the pipeline delivers them: the short
    comparison was too short to show it (a noisy target, a slow-learning model), so it stays a hypothesis."""
    # init_loss_check's "random inputs score as well as real ones after a short training" is the same short
    # witness: a weak signal is not learnt in a few steps, a whole run that beat the prior used its inputs
    no_signal = next((f for f in findings if f.failure_mode == "data_pipeline" and f.facts.get("symptom_only")
                      and (f.facts.get("labels_no_signal") or f.facts.get("inputs_no_signal"))
                      and not f.facts.get("never_beat_prior") and f.confidence >= VERDICT), None)
    if no_signal is None or not is_finite(getattr(data, "held_out_loss_at_init", None)) \
            or not under_prior(log_val, data, "smoothed_last", RUN_LEARNT):
        return findings
    prior, end = label_prior(data), log_val.smoothed_last
    return [f.model_copy(update={
        "confidence": min(f.confidence, VERDICT - 0.15),
        "facts": {**f.facts, "labels_no_signal": False, "inputs_no_signal": False, "run_learnt": True},
        "summary": f"{f.summary}; but the run's own {log_val.name} ended at {_fmt(end)}, under the label prior "
                   f"{_fmt(prior)}: over the whole run the labels do carry signal, the short comparison was too short "
                   "to show it",
        "evidence": f.evidence + [Evidence(what=f"{log_val.name} end (EMA) / label prior", value=f"{_fmt(end)} / "
                                           f"{_fmt(prior)}", source="log_metrics, data_check")]})
        if f is no_signal else f for f in findings]


def weigh_by_labels(findings: list[Finding], at_lr, overfit=None) -> list[Finding]:
    """Real labels that generalise no better than permuted ones (data_check, trained at the user's LR) and a one-batch
    test that learns only at a larger LR (lr_too_low) confound each other: at an LR too small to learn, neither
    copy learns anything. `at_lr` is data_check re-run at the LR the one-batch test learnt at: real labels that
    clearly generalise there (held-out loss 5% under init and under the permuted copy's) clear the data, the first
    comparison only showed the LR. Labels without signal there decide nothing: 40 steps at that LR may still be
    too few to learn (a toy MLP at 1e-5 learns nothing at 30x it either)."""
    from tools.probes import fits
    # by its fact, not its text: a merge may put another data_pipeline finding's summary in front of it
    no_signal = next((f for f in findings if f.failure_mode == "data_pipeline" and f.facts.get("labels_no_signal")),
                     None)
    moved = next((f for f in findings if f.failure_mode == "data_pipeline" and f.confidence >= 0.5
                  and from_rule(f, *LABELS_ELSEWHERE)), None)
    if moved is not None:  # the code pairs rows with other rows' labels: no LR experiment unsays that
        return labels_explain_slow_batch(findings, moved)
    # validation that never learnt while training fell, at an LR where the model fits its batches (data_check's
    # copy did, or one batch is memorised at the run's LR) and real labels generalise no better than permuted
    # ones: that curve is the model memorising labels that are noise to it
    never = next((f for f in findings if f.failure_mode == "overfitting"
                  and is_finite(f.facts.get("val_fell")) and f.facts["val_fell"] < VAL_NEVER_LEARNT), None)
    fits_here = no_signal is not None and (no_signal.facts.get("fits_batches") or getattr(overfit, "passed", False))
    if fits_here and never is not None:
        return labels_explain_slow_batch(findings, no_signal, memorised=never)
    if no_signal is None:
        return findings
    if at_lr is None:
        return labels_untested_at_an_lr_that_learns(findings, no_signal)
    r, p, i0 = at_lr.held_out_loss_real_labels, at_lr.held_out_loss_permuted_labels, at_lr.held_out_loss_at_init
    if not all(is_finite(v) for v in (r, p, i0)):
        return findings
    if r >= p - 0.05 * i0 and r > 0.95 * i0 and fits(at_lr.train_loss_real_labels):
        fact = Evidence(what=f"at {LR_PROBE_FACTOR:g}x the LR (it fits its batches): held-out loss real labels / "
                             "permuted / init", value=f"{_fmt(r)} / {_fmt(p)} / {_fmt(i0)}", source="data_check")
        return labels_explain_slow_batch(findings, no_signal, fact)
    if not (r < LEARNT_AT_LR * i0 and r < p - 0.05 * i0):
        return findings
    fact = Evidence(what=f"held-out loss at {LR_PROBE_FACTOR:g}x the LR: real labels / permuted / init",
                    value=f"{_fmt(r)} / {_fmt(p)} / {_fmt(i0)}", source="data_check")
    return [f.model_copy(update={
        "confidence": RISK_ONLY, "evidence": f.evidence + [fact],
        "summary": f"{f.summary}, but only at the run's LR: at {LR_PROBE_FACTOR:g}x it, real labels generalise and "
                   "permuted ones do not (the LR, not the labels)"}) if f is no_signal else f for f in findings]


def labels_untested_at_an_lr_that_learns(findings: list[Finding], no_signal: Finding) -> list[Finding]:
    """data_check compared real and permuted labels at the run's LR, its real-label copy did not fit its own batches,
    and the one-batch test learns only at a larger LR (lr_too_low), but data_check was not re-run there (the
    budget ran out first: a slow machine): at an LR too small to learn, neither copy learns, so the comparison
    says nothing about the labels. It stays below the LR verdict instead of outranking it (a symptom of the log
    merged into it, such as a flat loss, is what the too-small LR explains too). When the LR reading is itself a
    hypothesis (the run's log shows it learning), the untested comparison is one too: it is no verdict either way,
    whatever the machine's speed let triage finish."""
    slow = next((f for f in findings if f.failure_mode == "lr_too_low"
                 and (f.confidence >= VERDICT or one_batch_at_run_lr(f))), None)
    # a finding that names a line (a static rule merged in) is no symptom of the LR: it stands
    if slow is None or no_signal.facts.get("fits_batches") or not no_signal.facts.get("symptom_only"):
        return findings
    cap = round(max(slow.confidence, VERDICT) - 0.05, 2)
    if no_signal.confidence <= cap:
        return findings
    return [f.model_copy(update={
        "confidence": cap, "facts": {**f.facts, "untested_at_lr": True},
        "summary": f"{f.summary}; but that copy did not fit its own batches at the run's LR, which the one-batch "
                   "test finds too small: raise the LR first, then run data_check again"}) if f is no_signal else f
        for f in findings]


NOTHING_LEARNT = 0.95  # a logged loss that ended above this share of its start learnt nothing in the whole run


def learnt_nothing(log_loss, log_val) -> bool:
    """Over the whole run the training loss stayed where it started (within 5%) and validation, if logged, never
    got 5% under its first value: the run learnt nothing, not slowly."""
    first, last = _first_last(log_loss)
    if not (is_finite(first) and is_finite(last) and first > 0 and last >= NOTHING_LEARNT * first
            and (log_loss.count or 0) >= 4):
        return False
    if log_val is None or (log_val.count or 0) < 3:
        return True
    return is_finite(log_val.first) and is_finite(log_val.min) and log_val.first > 0 \
        and log_val.min >= (1 - VAL_NEVER_LEARNT) * log_val.first


def under_prior(log_val, data, value: str, share: float) -> bool:
    """The validation series' `value` ("min", "smoothed_last") ended under `share` of data_check's label prior,
    the series being a loss on the probe's scale (at least 3 points, its first value between half the lower and
    twice the higher of the prior and the loss at init)."""
    prior, v, first = label_prior(data), getattr(log_val, value, None), getattr(log_val, "first", None)
    i0 = getattr(data, "held_out_loss_at_init", None)
    band = (prior, i0) if is_finite(i0) and i0 > 0 else (prior, prior)
    return prior is not None and is_finite(v) and v > 0 and is_finite(first) and (log_val.count or 0) >= 3 \
        and 0.5 * min(band) <= first <= 2 * max(band) and v < share * prior


def beat_the_prior(log_val, data) -> bool:
    """Validation got under the loss of the best constant prediction (data_check's label prior, the user's own
    loss): the model learnt something from the inputs, however little. A noisy target whose loss stays near its
    base rate does that; labels that do not follow their inputs cannot."""
    return under_prior(log_val, data, "min", PRIOR_MARGIN)


def weigh_by_run_progress(findings: list[Finding], overfit, log_loss, log_val, data=None) -> list[Finding]:
    """One batch is memorised at the run's own LR (the model, its loss and the optimizer can learn), yet the whole
    run learnt nothing: what one batch teaches does not carry over to the next, so the labels, as the loader
    delivers them, do not follow from the inputs (an augmentation that turns one class into another, labels
    paired with other rows, one side shuffled). Labels that are noise are memorised batch by batch but never
    generalise (Zhang et al. 2017); a too-small LR fails the one-batch test, and so does a bug in the model."""
    one_batch = overfit is not None and not getattr(overfit, "error", None) and (
        overfit.passed or (is_finite(overfit.drop_fraction) and overfit.drop_fraction >= ONE_BATCH_LEARNS))
    if not one_batch or log_loss is None or not learnt_nothing(log_loss, log_val) \
            or log_val is not None and beat_the_prior(log_val, data):
        return findings
    first, last = _first_last(log_loss)
    facts = [Evidence(what=f"one batch at the run's LR ({_fmt(overfit.lr)})",
                      value=f"{overfit.outcome}: {_fmt(overfit.initial_loss)} -> {_fmt(overfit.final_loss)} in "
                            f"{overfit.steps_run} steps", source="overfit_test"),
             Evidence(what=f"logged {log_loss.name} first -> last", value=f"{_fmt(first)} -> {_fmt(last)}",
                      source="log_metrics")]
    if log_val is not None and (log_val.count or 0) >= 3:
        facts.append(Evidence(what=f"logged {log_val.name} first -> best", value=f"{_fmt(log_val.first)} -> "
                              f"{_fmt(log_val.min)}", source="log_metrics"))
    # a bug named elsewhere (the loop, the code) may be why the run learns nothing: then this is its alternative
    rival = max((f.confidence for f in findings if f.failure_mode not in ("healthy", "data_pipeline")), default=0.0)
    conf = LEARNS_BATCH_NOT_RUN if rival < LEARNS_BATCH_NOT_RUN else VERDICT - 0.05
    said = (f"one batch is memorised at the run's LR, yet the whole run learnt nothing ({log_loss.name} "
            f"{_fmt(first)} -> {_fmt(last)}" + (f", {log_val.name} never under {_fmt(log_val.first)}"
                                                 if len(facts) > 2 else "")
            + "): what one batch teaches does not carry to the next, so the labels as the loader delivers them do "
              "not follow from the inputs")
    # an earlier data_pipeline finding (data_check, a static rule) stands if stronger; if weaker, this one takes its
    # place and carries its evidence and location
    earlier = next((f for f in findings if f.failure_mode == "data_pipeline"), None)
    if earlier is not None and earlier.confidence >= conf:
        return findings
    lead = Finding(
        failure_mode="data_pipeline", confidence=conf, summary=said,
        evidence=facts + (earlier.evidence if earlier else []),
        fix=("Look at what the training Dataset/loader does to a sample before it reaches the loss: an augmentation "
             "that changes the class (a flip, mirror, sign change or reversal when the class is a direction or "
             "side), labels indexed apart from their inputs (a sort, filter, shuffle or join of one side only); "
             "check a few samples and their labels by eye, then data_check"),
        avoid="Do not raise the LR or grow the model: one batch is learnt at this LR already",
        location=earlier.location if earlier else None,
        facts={**(earlier.facts if earlier else {}), "learnt_nothing": True})
    out = [lead if f is earlier else f for f in findings if f.failure_mode != "healthy" or conf < VERDICT]
    return out if earlier is not None else out + [lead]


LEARNS_BATCH_NOT_RUN = 0.6


SLOW_NORM_SEEN = 0.7  # slow batch-norm statistics and a validation that did not follow a training that learnt


def weigh_by_norm_stats(findings: list[Finding], log_loss, log_val) -> list[Finding]:
    """Batch norm with a tiny momentum (init_loss_check reads it) is a risk until the log shows its symptom:
    training learnt (its loss at most half its start) while validation, on the same kind of data, kept less than
    half of that progress and ends at least twice the training loss. Training normalises each batch with its own
    statistics; evaluation uses running ones that are still near their start."""
    slow = next((f for f in findings if f.facts.get("slow_norm_momentum")), None)
    if slow is None or log_loss is None or log_val is None or (log_val.count or 0) < 3:
        return findings
    (first, last), (v_first, v_end), v_best = _first_last(log_loss), _first_last(log_val), log_val.min
    if not all(is_finite(v) and v > 0 for v in (first, last, v_first, v_best, v_end)) or last > 0.5 * first:
        return findings
    learnt, followed = 1 - last / first, 1 - v_best / v_first
    if followed >= 0.5 * learnt or v_end < 2 * last:
        return findings
    seen = slow.model_copy(update={
        "confidence": SLOW_NORM_SEEN,
        "summary": (f"training learnt ({log_loss.name} {_fmt(first)} -> {_fmt(last)}) but {log_val.name} did not "
                    f"follow ({_fmt(v_first)} -> best {_fmt(v_best)}, ends {_fmt(v_end)}): {slow.summary}"),
        "evidence": slow.evidence + [
            Evidence(what=f"logged {log_loss.name} first -> last", value=f"{_fmt(first)} -> {_fmt(last)}",
                     source="log_metrics"),
            Evidence(what=f"logged {log_val.name} first -> best -> end",
                     value=f"{_fmt(v_first)} -> {_fmt(v_best)} -> {_fmt(v_end)}", source="log_metrics")]})
    return [seen if f is slow else f for f in findings if f.failure_mode != "healthy"]


def parsed_sources(sources: list[Path]):
    """(path, module AST) of each Python source that parses; the others are skipped."""
    for path in sources:
        if path.suffix != ".py" or not path.is_file():
            continue
        try:
            yield path, ast.parse(path.read_text(errors="replace"))
        except (SyntaxError, ValueError, OSError):
            continue


EPOCH_NAMES = {"epochs", "num_epochs", "n_epochs", "max_epochs", "total_epochs", "num_train_epochs", "train_epochs"}
WARMUP_NEVER_ENDED = 0.65  # the LR still rising when the run reached the last epoch its script sets


def script_epochs(sources: list[Path]) -> tuple[int, str] | None:
    """(epochs, "file:line") the training script sets: a module-level constant (EPOCHS = 8), a config dict or
    dataclass field of that name, or an argparse default (--epochs, default=8). None when absent or ambiguous."""
    found: dict[int, str] = {}

    def note(name: str, value: ast.AST, path: Path, line: int) -> None:
        if name.lower() in EPOCH_NAMES and isinstance(value, ast.Constant) and type(value.value) is int \
                and 0 < value.value < 100_000:
            found.setdefault(value.value, f"{path.name}:{line}")

    for path, tree in parsed_sources(sources):
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and node in tree.body:
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        note(t.id, node.value, path, node.lineno)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                note(node.target.id, node.value, path, node.lineno)  # a dataclass field or a typed constant
            elif isinstance(node, ast.Dict):
                for k, v in zip(node.keys, node.values):
                    if isinstance(k, ast.Constant) and isinstance(k.value, str):
                        note(k.value, v, path, k.lineno)
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
                flag = next((a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
                             and a.value.startswith("--")), None)
                default = next((k.value for k in node.keywords if k.arg == "default"), None)
                if flag and default is not None:
                    note(flag.lstrip("-").replace("-", "_"), default, path, node.lineno)
    return next(iter(found.items())) if len(found) == 1 else None


def weigh_by_run_end(findings: list[Finding], lm, sources: list[Path]) -> list[Finding]:
    """An LR still rising at the end of the log is a warmup in progress (healthy) or one that never ends (the
    warmup sized in samples or epochs where scheduler.step() counts batches: the whole run trains at a fraction
    of its peak). The log's epoch series reaching the last epoch its script sets tells them apart."""
    rising = next((f for f in findings if f.facts.get("lr_rising")), None)
    epoch = next((x for x in lm.series if x.name.lower() == "epoch"), None) if lm is not None and rising else None
    cfg = script_epochs(sources) if epoch is not None else None
    if cfg is None or not is_finite(epoch.max) or not is_finite(epoch.min):
        return findings
    n, where = cfg
    last = epoch.max + (1 if epoch.min == 0 else 0)  # epochs counted from 0 end at n - 1
    if last < n:
        return findings
    lr_first, lr_end = rising.facts.get("lr_first"), rising.facts.get("lr_end")
    ended = Finding(
        failure_mode="lr_too_low", confidence=WARMUP_NEVER_ENDED,
        summary=f"the run reached its last epoch ({_fmt(epoch.max)}; {where} sets {n}) with the LR still rising "
                f"({_fmt(lr_first)} -> {_fmt(lr_end)}): its warmup never ended, so the whole run trained at a "
                "fraction of its peak LR and the decay never came",
        # the two facts that make it a bug come first: a compact reply shows the first three
        evidence=[Evidence(what="last epoch logged", value=epoch.max, source="log_metrics"),
                  Evidence(what="epochs the script sets", value=n, source=where)] + rising.evidence,
        fix="Count the warmup (and the schedule's horizon) in the unit scheduler.step() is called in: with a "
            "per-batch step, warmup_steps = warmup_epochs * len(train_loader), not len(train_set) (samples); check "
            "the LR at the end of warmup with schedule_check or by printing it",
        avoid="Do not raise the base LR or lengthen the run: the peak is right, the warmup bound is wrong",
        facts={"warmup_never_ended": True, "warmup_spans_run": True})  # the same next steps and test
    return [ended if f is rising else f for f in findings]


LOG_SOURCES = ("tail_log", "series ", "log_metrics")


def weigh_by_recovery(findings: list[Finding], lm) -> list[Finding]:
    """A NaN/Inf the log shows, when the training loss ends finite and no logged loss turned non-finite for good:
    weights that went non-finite stay so (every later step reads them), so the run's parameters never did. What
    prints a NaN and recovers is the logging (a mean over zero steps or batches, a ratio of a metric still at 0), a
    step an AMP GradScaler skipped, or a loop that skips non-finite losses: a hypothesis to check, not a verdict."""
    if lm is None or not lm.series:
        return findings
    losses = [x for x in lm.series if x.kind == "loss" and x.count]
    finite = [x for x in losses if is_finite(x.last)]
    loss = next((x for x in lm.series if x.name == lm.loss_series), None)
    # a series NaN at every point beside a finite training loss is computed from nothing (a meter read just after
    # its reset: blind dev building_load_gru_forecaster); one that turned NaN and stayed so is a divergence
    turned = any(not is_finite(x.last) and x.nonfinite < x.count for x in losses)
    if loss is None or loss.count < FINITE_POINTS or not is_finite(loss.last) or turned:
        return findings
    out = []
    for f in findings:
        from_log = f.evidence and all((e.source or "").startswith(LOG_SOURCES) for e in f.evidence)
        if f.failure_mode == "nan_inf" and from_log and f.confidence > RISK_ONLY:
            shown = ", ".join(f"{x.name} {_fmt(x.last)}" for x in finite[:3])
            f = f.model_copy(update={
                "confidence": RISK_ONLY,
                "summary": f"{f.summary}; but the run recovered: the logged losses end finite ({shown}), "
                           "and weights that turn non-finite stay so, so its parameters never did",
                "fix": "Read the line: a mean over zero steps or batches (a NaN at the first print or an epoch "
                       "boundary), a metric's ratio, or an AMP step the GradScaler skipped is logging, not "
                       "training; a loop that skips non-finite losses hides a bad batch (find it with nan_hook_run)"})
        out.append(f)
    return out


# static rules that say each row carries another row's label (the labels are noise to the model)
LABELS_ELSEWHERE = {"rows_moved_apart_from_labels", "inputs_and_targets_drawn_apart"}


VAL_NEVER_LEARNT = 0.05  # validation that fell less than this share of its start before turning up never learnt


LEARNT_AT_LR = 0.95  # real labels whose held-out loss ends under this share of init (and under permuted) carry signal


def labels_explain_slow_batch(findings: list[Finding], no_signal: Finding, measured: Evidence | None = None,
                              memorised: Finding | None = None) -> list[Finding]:
    """At an LR where the model fits its training batches, real labels still generalise no better than permuted
    ones (`measured`: the held-out losses at that LR), or the code pairs each row with another row's label (a
    static rule; `measured` is None): the labels are noise to the model. Labels that are noise are also slow to
    memorise at any LR (random labels take longer to fit: Zhang et al. 2017, "Understanding deep learning requires
    rethinking generalization"), so a one-batch test that crawls at the run's LR is the labels' symptom, not the
    LR's, and so, when the code names the misalignment, is a curve whose validation turns up while training falls;
    `memorised` is that curve when validation never learnt at all, which needs no rule in the code to read so."""
    slow = next((f for f in findings if f.failure_mode == "lr_too_low" and one_batch_at_run_lr(f)), None)
    # memorising labels that are noise is what overfitting looks like in the log (train falls, validation
    # turns up at once): with the code naming the misalignment, that curve is its symptom too
    if memorised is None and measured is None:
        memorised = next((f for f in findings if f.failure_mode == "overfitting"), None)
    if measured is None and slow is None and memorised is None:
        return findings
    lead = max(no_signal.confidence, *(f.confidence + 0.05 for f in (slow, memorised) if f is not None))
    cause = {"confidence": lead}
    if measured is not None:
        cause.update(evidence=[measured] + no_signal.evidence,
                     summary=f"{no_signal.summary}, also at {LR_PROBE_FACTOR:g}x the LR, where the model fits its "
                             "batches")
    but = [(slow, "labels that carry no signal are slow to memorise at any LR"),
           (memorised, "a model memorising labels that belong to other rows shows the same curve")]
    out = []
    for f in findings:
        why = next((w for g, w in but if g is f), None)
        if f is no_signal:
            f = f.model_copy(update=cause)
        elif why is not None:
            f = explained(f, no_signal, why)
        out.append(f)
    return out


LR_SERIES = re.compile(r"^series .*(lr|learning)", re.I)


def schedule_behind(f: Finding) -> bool:
    """Does the finding rest on the schedule too: a static rule naming its line, the LR series the log shows?"""
    return (any(e.what == "rule" or e.source == "log header" or LR_SERIES.match(e.source or "") for e in f.evidence)
            or bool(f.facts.get("warmup_spans_run") or f.facts.get("lr_rising")))


LARGER_LR_GENERALISES = 0.05  # at 30x the LR, real labels' held-out loss must fall this share of init further


def weigh_lr_by_held_out(findings: list[Finding], at_run_lr, at_larger_lr) -> list[Finding]:
    """A one-batch test that memorises only at 30x the LR, in a run whose loss fell little, is an LR verdict only if
    the larger LR also generalises better. data_check trains a copy on the real labels for the same steps at the
    run's LR and at 30x it: when the held-out loss at 30x is not lower by LARGER_LR_GENERALISES of the loss at
    init, the larger LR only memorises faster (any batch of noisy labels does) and the loss that fell little is
    what the data allows (dev `healthy_courier_agg_join`, a weak-signal table at Adam 1e-3: one batch 58% at its
    LR, 95% at 30x; its loss fell 0.68 -> 0.58). The two signals disagree, and the finding says so."""
    # the experiment's own verdict only: a rule naming the schedule's line, or the schedule the log shows, is not
    # answered by the initial LR's held-out loss
    slow = next((f for f in findings if f.failure_mode == "lr_too_low" and f.confidence >= VERDICT
                 and f.facts.get("lr_experiment") and not schedule_behind(f)), None)
    if slow is None or at_run_lr is None or at_larger_lr is None:
        return findings
    r1, r30, i0 = (at_run_lr.held_out_loss_real_labels, at_larger_lr.held_out_loss_real_labels,
                   at_run_lr.held_out_loss_at_init)
    n1, n30 = at_run_lr.alignment_steps, at_larger_lr.alignment_steps
    if not all(is_finite(v) for v in (r1, r30, i0)) or i0 <= 0 or not n1 or n30 != n1:
        return findings  # different step counts (cut short by time) compare nothing
    if r30 < r1 - LARGER_LR_GENERALISES * i0:
        return findings
    fact = Evidence(what=f"held-out loss after {n1} steps on the real labels: at the run's LR / at "
                         f"{LR_PROBE_FACTOR:g}x / at init", value=f"{_fmt(r1)} / {_fmt(r30)} / {_fmt(i0)}",
                    source="data_check")
    return [f.model_copy(update={
        "confidence": min(f.confidence, VERDICT - 0.05), "evidence": f.evidence + [fact],
        "summary": f"{f.summary}; but trained {n1} steps on the training batches, the larger LR generalises no better "
                   f"(held-out {_fmt(r30)} against {_fmt(r1)} at the run's LR): it memorises one batch faster, as "
                   "any batch of noisy labels is, so the loss that fell little may be what the data allows",
        "avoid": "Do not raise the LR on this alone: run lr_range_test and compare validation at both LRs first"})
        if f is slow else f for f in findings]


STATIC_SOURCE = re.compile(r"\.py:\d+$")
FINITE_POINTS = 10  # a logged loss this long and finite throughout shows the run did not go NaN


def weigh_by_log(findings: list[Finding], log_loss, script_hunt: "probes.NanHookReport | None" = None) -> list[Finding]:
    """A NaN risk read from the code alone (a division by std without epsilon, a log of a probability) is not
    why this run failed when its logged loss stayed finite throughout, or when the user's own script ran under
    the NaN hooks without a non-finite value (and its log, if any, shows none): it stays a hypothesis, below 0.5."""
    clean_hunt = (script_hunt is not None and not script_hunt.error and not script_hunt.found
                  and script_hunt.steps_run >= 10)
    if log_loss is not None and log_loss.nonfinite:
        return findings
    if not clean_hunt and (log_loss is None or log_loss.count < FINITE_POINTS):
        return findings
    out = []
    for f in findings:
        static_only = f.evidence and all(e.source == "static_scan" or STATIC_SOURCE.search(e.source or "")
                                         for e in f.evidence)
        if f.failure_mode == "nan_inf" and static_only and f.confidence > RISK_ONLY:
            shown = (f"the logged {log_loss.name} stayed finite over {log_loss.count} points"
                     if log_loss is not None and log_loss.count >= FINITE_POINTS else
                     f"the script ran {script_hunt.steps_run} steps under NaN hooks without one")
            f = f.model_copy(update={"confidence": RISK_ONLY, "summary": f"{f.summary} (a risk in the code: {shown})"})
        out.append(f)
    return out


def _first_last(series) -> tuple:
    return getattr(series, "first", None), getattr(series, "smoothed_last", None) or getattr(series, "last", None)


def stalled(series) -> bool:
    """The logged loss ended above LITTLE_PROGRESS of where it started (a positive loss; None without a log)."""
    first, last = _first_last(series)
    return is_finite(first) and is_finite(last) and first > 0 and last >= 0 and last >= LITTLE_PROGRESS * first


def _fmt(x) -> str:
    return f"{x:.4g}" if is_finite(x) else str(x)


NEXT_FOR = {
    "nan_inf": ("nan_hook_run", "names the first module that went non-finite, with its inputs"),
    "exploding_gradients": ("grad_norm_snapshot", "per-layer norms show which layer grows"),
    "vanishing_gradients": ("grad_norm_snapshot", "per-layer norms show where the gradient dies"),
    "broken_graph": ("grad_norm_snapshot", "lists every parameter whose grad is None or zero"),
    "frozen_params": ("grad_norm_snapshot", "flags parameters that are not in any optimizer group"),
    "lr_too_high": ("lr_range_test", "shows where the loss diverges and suggests an LR"),
    "lr_too_low": ("lr_range_test", "shows how far below the useful range the LR sits"),
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


def enclosing_function(location: str | None, workspace: Path | None) -> str | None:
    """'train.py:evaluate' for a location 'train.py:152' (absolute or workspace-relative) inside `def evaluate`."""
    m = re.match(r"(.+\.py):(\d+)$", location or "")
    if not m or workspace is None:
        return None
    path, line = Path(m.group(1)), int(m.group(2))
    path = path if path.is_absolute() else workspace / path
    try:
        tree = ast.parse(path.read_text())
        rel = path.resolve().relative_to(workspace.resolve())
    except (OSError, SyntaxError, ValueError):
        return None
    inside = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
              and min([n.lineno] + [d.lineno for d in n.decorator_list]) <= line <= (n.end_lineno or n.lineno)]
    return f"{rel}:{max(inside, key=lambda n: n.lineno).name}" if inside else None


def suggest_next(findings: list[Finding], target: str | None, log_path: str | None,
                 already_ran: frozenset[str] = frozenset(), command: list[str] | None = None,
                 schedule_fns: list[str] | None = None, nan_step: int | None = None,
                 workspace: Path | None = None) -> list[NextStep]:
    steps: list[NextStep] = []
    later: list[NextStep] = []  # a weak alternative's probe under a verdict: after the top finding's test
    for f in findings[:2]:
        if f.failure_mode == "healthy":
            break
        tool, why = NEXT_FOR.get(f.failure_mode, ("tail_log", "look at the raw evidence"))
        if tool in already_ran or f.facts.get("waits_for_clipping"):
            continue  # an LR reading in a net that must be clipped first: probing the LR now would mislead
        if f.facts.get("explained_by") == findings[0].failure_mode:
            continue  # the top finding's cause shows this symptom too: fix that first, then triage again
        if f is not findings[0] and f.confidence < 0.5 and findings[0].confidence >= 0.75:
            continue  # a hypothesis under a strong top finding: its probe would only delay the fix and its test
        if tool == "lr_range_test" and (from_rule(f, *SCHEDULER_RULES) or f.facts.get("warmup_spans_run")):
            continue  # it sweeps the base LR of the factory, which steps no scheduler: it would call the LR fine
        args = {"target": target} if target and tool in {"nan_hook_run", "grad_norm_snapshot", "lr_range_test",
                                                         "init_loss_check", "data_check", "overfit_test",
                                                         "profile_steps"} else {}
        if f is not findings[0] and f.confidence < VERDICT <= findings[0].confidence:
            # the top finding's test, failing on the unfixed code, confirms it in one call; this probe only
            # matters if it does not (dev gearbox_vibration_conv_ae: lr_too_low 0.3 was probed before data_pipeline
            # 0.7 was tested)
            later.append(NextStep(tool=tool, args=args, why=f"only if that test passes on the unfixed code (then "
                                  f"{findings[0].failure_mode} is not the bug): to confirm {f.failure_mode}: it {why}"))
            continue
        steps.append(NextStep(tool=tool, args=args, why=f"to confirm {f.failure_mode}: it {why}"))
    top = findings[0] if findings else None
    if top is not None and top.failure_mode != "healthy":
        # the test exercises the code where the bug lives: the factory, the user's own script, and for an LR
        # finding the schedule function itself
        args = {"failure_mode": top.failure_mode, **({"target": target} if target else {}),
                **({"command": list(command)} if command else {})}
        if top.failure_mode in ("lr_too_high", "lr_too_low") and schedule_fns:
            args["function"] = schedule_fns[0]
        clip_late = from_rule(top, "clip_after_step")
        if top.failure_mode == "exploding_gradients" and command and (top.facts.get("unclipped_recurrent")
                                                                       or clip_late):
            # the fix is clipping in the loop (adding it, or moving it before the step): pre-clip norms stay
            # large after it, the norm the optimizer steps with does not; only the script shows it (the
            # factory's clean loop has no clip to add)
            args.pop("target", None)
            args["params"] = {"script.checks": ["finite_loss", "applied_grad_norm_bounded"]}
        if top.failure_mode == "lr_too_low" and command and from_rule(top, "epoch_schedule_stepped_per_batch"):
            # the bug is where scheduler.step() sits in the loop: only the script steps the user's scheduler (the
            # factory has none, a schedule function is right by itself); by 200 optimizer steps a per-epoch
            # schedule stepped per batch has decayed far below its peak, stepped per epoch it has barely moved
            args.pop("target", None)
            args.pop("function", None)
            args["params"] = {"script.steps": SCHEDULE_STEPS, "script.checks": ["lr_holds"]}
        if from_rule(top, "learning_rate_as_lambda_factor"):
            # the fix wraps get_lr (get_lr(it) / learning_rate), which stays as it was: a test of get_lr alone
            # would fail after the fix too; the script and the update ratio see the LR the optimizer really uses
            args.pop("function", None)
        if from_rule(top, "functional_dropout_always_on") and target:
            # a module-mode check passes on this bug (no dropout module exists); the loss in eval mode does not
            args["params"] = {"eval_deterministic": True}
        if top.facts.get("rows_mixed") and target:
            # the loss's shapes can match while the model pairs rows with other rows' features
            args["params"] = {"rows_apart": True}
        if top.facts.get("batches_unmixed") and target:
            # the label checks pass on this bug (every row keeps its own label): the batches' order is what is wrong
            args["params"] = {"batches_mixed": True}
        if top.facts.get("class_weights_misordered") and target:
            # the factory's batches and loss show the bug; the script's progress checks and the real-vs-shuffled
            # labels test say nothing about it, and a slow learner fails them after the fix too (blind dev
            # dna_promoter_motif_lstm: held-out 0.60 vs 0.65 shuffled after 600 steps of the fixed code)
            args.pop("command", None)
        alone = next((check for fact, check in CHECK_ALONE.items() if top.facts.get(fact)), None)
        if alone and target:
            # the label, progress and input-leakage checks pass on these bugs and a slow learner fails them after
            # the fix too: the one check that measures the finding runs alone, from the factory, without the script
            args.pop("command", None)
            args["params"] = {"only": [alone]}
        if top.facts.get("loader_unshuffled") and target:
            # the label checks pass on this bug (and an autoencoder has none): the loader's order is what is wrong
            args["params"] = {"loader_shuffled": True}
        if top.facts.get("splits_apart") and target:
            # the label checks pass on this bug (training's own rows and labels are fine): the other loader is not
            args["params"] = {"splits_alike": True}
        if top.facts.get("slow_norm_momentum") and target:
            # the mode checks pass on this bug (every layer is in the right mode): what is wrong is how slowly the
            # running statistics follow, which the factory's model shows after some training-mode passes
            args["params"] = {"norm_stats_follow": True}
        if from_rule(top, "denoising_target_is_corrupted") and target:
            # the one-batch and sign checks pass on a denoiser scored against its own input: it minimises that fine
            args["params"] = {"target_not_input": True}
        if from_rule(top, "optimizer_built_before_unfreeze") and command:
            # the factory hands over the model before any unfreeze: only the script reaches the epoch where layers
            # are unfrozen (and, with the bug, never move), so it runs to its end
            args.pop("target", None)
            args["params"] = {"script.steps": WHOLE_RUN_STEPS, "script.checks": ["every_param_changes"]}
        if top.failure_mode == "lr_too_low" and command and top.facts.get("warmup_spans_run"):
            # the schedule's length is computed in the script's main loop, not in the schedule function: only the
            # whole run shows where the LR first peaks
            args.pop("target", None)
            args.pop("function", None)
            args["params"] = {"script.steps": WHOLE_RUN_STEPS, "script.checks": ["warmup_ends"]}
        if from_rule(top, "weight_average_skips_buffers") and command:
            # the averaged copy lives in the script's loop, not in the factory: the script's evaluations show it
            args.pop("target", None)
            args["params"] = {"script.steps": WHOLE_RUN_STEPS, "script.checks": ["eval_norm_stats_trained"]}
        if from_rule(top, "plateau_mode_against_metric") and command:
            # the scheduler cuts the LR once per epoch from the values the loop hands it: only the script run sees them
            args.pop("target", None)
            args.pop("function", None)
            args["params"] = {"script.steps": WHOLE_RUN_STEPS, "script.checks": ["plateau_follows_metric"]}
        if from_rule(top, "kl_against_mean_reconstruction") and target:
            # the bug is the reduction of the reconstruction term: the test watches the loss calls the target makes
            args["params"] = {"recon_summed": True}
        if top.failure_mode == "nan_inf" and command and nan_step and nan_step > SCRIPT_STEPS_DEFAULT:
            # the script test must run as far as the NaN the run met, with some slack
            args["params"] = {"script.steps": min(NAN_STEPS_MAX, int(nan_step * 1.2) + 10)}
        evaluation = enclosing_function(top.location, workspace) if target and any(
            e.value == "evaluation_in_train_mode" for e in top.evidence) else None
        if top.failure_mode == "train_eval_mode" and evaluation:
            # the bug is in the user's evaluation: the test runs it and checks the mode its layers see
            args.update(function=evaluation, params={"phase": "eval"})
        lr_finding = top.failure_mode in ("lr_too_low", "lr_too_high")
        measured = one_batch_at_run_lr(top) if lr_finding and target else None
        if measured:
            # the finding rests on one batch stalling at the run's LR where another LR learns it: the test asserts
            # that batch is learnt, by a margin past what the buggy LR managed (the loose update-ratio band lets a
            # 300x-too-small SGD LR and a 50x-too-large AdamW LR through)
            n, ratio = measured
            args.pop("command", None)
            args.pop("function", None)
            args.update(template="overfit_one_batch",
                        params={"steps": n, "max_final_ratio": round(min(0.5, ONE_BATCH_MARGIN * ratio), 3)})
        if top.failure_mode == "data_pipeline" and top.facts.get("inputs_not_normalised") \
                and not top.facts.get("never_beat_prior"):  # a scale note folded into a label finding is no cause
            args["params"] = {"check_scale": True}  # the test asserts what the finding measured
        if top.failure_mode == "data_pipeline" and top.facts.get("reads_padding"):
            # the model's outputs with and without pads decide, in seconds: no training, no script run
            args.pop("command", None)
            args["template"] = "padding"
        why = "BEFORE the fix: it must fail now, and pass after the fix"
        if top.facts.get("splits_differ") and target:
            # the factory hands over training batches only: the bug is in how validation is built
            why += ("; add function='<file>.py:<fn>' returning the validation batches or one (inputs, labels) "
                    "pair: the bug is in how validation is built, which the target does not hand over")
        if top.failure_mode == "data_pipeline" and top.facts.get("rows_moved_apart"):
            # the coded tables decide, in seconds; real vs permuted labels passes while most rows keep theirs
            args.pop("command", None)
            args["template"] = "rows"
        steps.append(NextStep(tool="write_regression_test", args=args, why=why))
        steps += later
        steps.append(NextStep(tool="journal_append", args={"failure_mode": top.failure_mode},
                              why="once that test passes on the fix"))
    elif log_path:
        steps.append(NextStep(tool="log_metrics", args={"path": log_path, "plot": True},
                              why="nothing is broken by these checks; look at the whole curve" if already_ran else
                              "no step ran (see steps): read the whole curve, or triage again with a larger budget_s"))
    return steps


# a finding's fact -> the one generated check that measures it (data_pipeline / data_leakage `only`)
CHECK_ALONE = {
    "pad_inside": "test_the_padding_id_only_pads",  # an embedding's padding id between real tokens
    "reads_change_data": "test_reading_the_data_leaves_it_unchanged",  # rows keep labels, the loss falls at first
    "numbers_coerced": "test_numbers_are_not_coerced_to_nan",  # rows keep labels; one feature is erased for some
    "sampler_short": "test_the_sampler_reaches_every_sample",  # every drawn row keeps its label
    "reads_ahead": "test_predictions_do_not_read_their_own_targets",  # no input column holds the label
    # the run learns a little: the label and progress checks pass, and a slow learner fails them after the fix too
    "standardised_across_channels": "test_inputs_are_standardised_per_channel",
    "padding_in_scaler": "test_padding_is_left_out_of_the_scaler",
    "text_compared_with_number": "test_no_text_column_is_compared_with_a_number",
    # loss_function: the one-batch check can fail on a slow learner after the fix too (blind dev
    # helpdesk_intent_tiny_transformer: its masked-LM phase falls 4.5% in 50 steps, bug or not)
    "class_ignored": "test_every_class_gets_a_gradient",
    "loss_wrong_way": "test_the_loss_pulls_each_row_toward_its_label",  # blind dev card_fraud_entity_embedding_mlp
    "self_standardised": "test_samples_are_not_standardised_by_their_own_statistics",  # blind dev gearbox_sensor_gru
}

WHOLE_RUN_STEPS = 100_000  # past any gallery run's end: the script test then sees the whole run (its timeout bounds it)
ONE_BATCH_MARGIN = 0.75  # the regression test's one-batch loss ratio must beat the buggy LR's by this factor


def one_batch_at_run_lr(f: Finding) -> tuple[int, float] | None:
    """(steps, final/initial loss) of the one-batch test at the run's own LR, as lr_off measured it."""
    steps, ratio = f.facts.get("one_batch_steps"), f.facts.get("one_batch_ratio")
    return (int(steps), float(ratio)) if steps and ratio is not None else None


SCHEDULE_NAME = re.compile(r"(^|_)(lr|learning_rate|schedule|scheduler)(_|$)|^get_lr|lr_lambda", re.I)


def schedule_functions(sources: list[Path], workspace: Path, limit: int = 2) -> list[str]:
    """'file.py:get_lr' for top-level one-argument functions named like an LR schedule (nanoGPT's get_lr(it))."""
    out: list[str] = []
    for path, tree in parsed_sources(sources):
        for node in tree.body:
            # one argument, the step: make_scheduler(optimizer) builds a scheduler, it is not a schedule
            if isinstance(node, ast.FunctionDef) and SCHEDULE_NAME.search(node.name) \
                    and len(node.args.args) == 1 and not node.args.vararg \
                    and not re.match(r"opt", node.args.args[0].arg):
                try:
                    rel = path.resolve().relative_to(workspace.resolve())
                except ValueError:
                    continue
                out.append(f"{rel}:{node.name}")
    return out[:limit]


def unique_paths(paths: list[Path]) -> list[Path]:
    """`paths` in their order, each file once (by its resolved path)."""
    seen: set[Path] = set()
    return [p for p in paths if not (p.resolve() in seen or seen.add(p.resolve()))]


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
    log_file: Path | list[Path] | None = None,
    log_name: str | None = None,
    sources: list[Path] | None = None,
    python: str | None = None,
    budget_s: float = 180.0,
    on_progress=None,
    target_label: str | None = None,
) -> TriageReport:
    """The decision tree over whatever the caller could give: a target factory, a command, a log, sources.

    With both a target and a command, both run: the factory probes measure the model, data and loss; the
    user's own script, run for a bounded number of steps under the instruments, shows what lives only in
    the loop (step order, schedules, a crash on the second batch).
    """
    from tools import loop_checks, probes, stores
    from tools.logs import log_metrics, tail_log
    from tools.static_scan import static_scan

    if not target and not command and log_file is None and not sources:
        raise TriageError("nothing to triage", "Pass at least one of target, command, log_path or source_paths")

    async def in_thread(fn, *args):
        return await anyio.to_thread.run_sync(lambda: fn(*args), abandon_on_cancel=True)

    w, py = workspace_root, python
    sources = unique_paths(sources or [])  # `train.py` and `./train.py` are one file: scanned and named once
    seen: dict[str, Report] = {}

    def keep(name, coro_fn):
        async def run(t, prog):
            rep = await coro_fn(t, prog)
            seen[name] = rep
            return rep
        return run

    def log_loss():
        lm = seen.get("log_metrics")
        return next((x for x in lm.series if x.name == lm.loss_series), None) if lm else None

    def log_val():
        lm = seen.get("log_metrics")
        return next((x for x in lm.series if x.name == lm.val_series), None) if lm and lm.val_series else None

    def nan_steps() -> int:
        """Far enough to reach the first non-finite step the log shows, bounded; a short look otherwise."""
        loss = log_loss()
        first = loss.first_nonfinite_step if loss is not None else None
        # the probe stops at the first NaN and its step's timeout bounds it: reaching the NaN is what matters
        return int(min(NAN_STEPS_MAX, max(20, first + 10))) if isinstance(first, (int, float)) else 20

    def script_horizon() -> int | None:
        """Optimizer steps a script test needs to reach the NaN: where the script probe met it, else the log's
        first non-finite step (its own step counter)."""
        rep = seen.get("nan_hook_run:script")
        if rep is not None and getattr(rep, "found", False) and rep.step is not None:
            return rep.step + 1
        loss = log_loss()
        first = loss.first_nonfinite_step if loss is not None else None
        return int(first) if isinstance(first, (int, float)) and first > 0 else None

    def finite_log() -> None:
        """A NaN hunt has nothing to find when the log's loss stayed finite (the script's crash, step order and
        eval mode are measured by grad_norm_snapshot:script, which still runs)."""
        loss = log_loss()
        if loss is not None and loss.nonfinite == 0 and (loss.count or 0) >= 10:
            raise Skip(f"the log's {loss.name} series stays finite over {loss.count} points")

    async def target_nan(t, prog):
        finite_log()
        return await probes.nan_hook_run(w, target, None, 50, py, t, prog)

    async def script_nan(t, prog):
        finite_log()
        return await probes.nan_hook_run(w, None, command, nan_steps(), py, t, prog)

    async def overfit(t, prog):
        """The one-batch test at the user's LR; when it only crawls, again at LR_PROBE_FACTOR x that LR: a model
        that then memorises the batch has no bug in the way, its LR is too small."""
        began = time.monotonic()
        rep = await probes.overfit_test(w, target, 200, None, py, t, prog)
        left = t - (time.monotonic() - began)
        if rep.outcome not in ("slow", "flat") or not is_finite(rep.lr) or rep.lr <= 0 or left < 10:
            return rep
        # which way is the LR off? a tenth of it first: Adam at too high an LR crawls on one batch too.
        # A follow-up that runs out of time (a slow machine) leaves what the run's LR showed: no step is lost.
        try:
            lower = await probes.overfit_test(w, target, 200, rep.lr / 10, py, left, prog)
        except TriageError:
            return rep
        if learns_faster(rep, lower):
            rep.findings = [f for f in rep.findings if f.failure_mode != "lr_too_low"] + [
                lr_off(rep, lower, log_loss(), log_val())]
            return rep
        left = t - (time.monotonic() - began)
        if log_loss() is not None and not stalled(log_loss()):
            return crawl_beside_learning(rep)  # a larger LR could only add a hypothesis, not a verdict
        if left < 10:
            return rep
        try:
            faster = await probes.overfit_test(w, target, 200, rep.lr * LR_PROBE_FACTOR, py, left, prog)
        except TriageError:
            return rep
        if learns_faster(rep, faster):
            rep.findings.append(lr_off(rep, faster, log_loss(), log_val()))
            left = t - (time.monotonic() - began)
            if left >= 10:  # at an LR that learns, do the labels carry signal? (see weigh_by_labels)
                try:
                    seen["labels_at_lr"] = await probes.data_check(w, target, py, left, None, LR_PROBE_FACTOR)
                except TriageError:
                    pass
        return rep

    steps: list[Step] = [("static_scan", keep("static_scan", lambda t, p: in_thread(static_scan, sources or [])), 30.0)]
    if isinstance(log_file, list):  # the rank logs of a distributed run
        from tools.ranks import metrics_ranks, tail_ranks
        steps.append(("tail_log", keep("tail_log", lambda t, p: in_thread(
            tail_ranks, log_file, 80, log_name or "", workspace_root)), 30.0))
        steps.append(("log_metrics", keep("log_metrics", lambda t, p: in_thread(
            metrics_ranks, log_file, None, False, log_name or "", workspace_root)), 60.0))
    elif log_file is not None:
        # a store's run (TensorBoard, W&B, ...) has no text log to tail, unless it captured the console (W&B)
        store = stores.detect(log_file)
        console = log_file if store is None else store.console_log
        if console is not None:
            steps.append(("tail_log", keep("tail_log", lambda t, p: in_thread(tail_log, console, 80)), 30.0))
        steps.append(("log_metrics", keep("log_metrics", lambda t, p: in_thread(log_metrics, log_file)), 60.0))
    if target:
        steps += [
            ("init_loss_check", lambda t, p: probes.init_loss_check(w, target, py, t, p), 45.0),
            ("grad_norm_snapshot", lambda t, p: probes.grad_norm_snapshot(w, target, None, GRAD_STEPS, py, t, p), 45.0),
            ("sequence_check", lambda t, p: loop_checks.sequence_check(w, target, py, t, p), 45.0),
        ]
    schedules = schedule_functions(sources or [], workspace_root)
    for fn in schedules:
        steps.append((f"schedule_check:{fn}", lambda t, p, fn=fn: loop_checks.schedule_check(w, fn, None, None, py, t, p),
                      45.0))
    if command:
        steps += [
            ("grad_norm_snapshot:script", keep("grad_norm_snapshot:script",
             lambda t, p: probes.grad_norm_snapshot(w, None, command, GRAD_STEPS, py, t, p)), 90.0),
            ("nan_hook_run:script", keep("nan_hook_run:script", script_nan), 90.0),
        ]
    if target:
        steps += [
            ("nan_hook_run", target_nan, 60.0),
            ("overfit_test", keep("overfit_test", overfit), 90.0),
            ("data_check", keep("data_check", lambda t, p: probes.data_check(w, target, py, t, p)), 45.0),
        ]
    report = await triage(steps, budget_s, on_progress,
                          next_steps=lambda fs, ran: suggest_next(fs, target_label or target, log_name, ran, command,
                                                                  schedules, script_horizon(), w),
                          weigh=lambda fs: weigh_by_recovery(weigh_by_run_end(weigh_by_norm_stats(weigh_by_run_progress(weigh_by_schedule(weigh_by_unregistered(weigh_by_padding(weigh_by_loss_input(weigh_by_named_cause(weigh_by_recurrence(
                              weigh_lr_by_held_out(weigh_by_labels(weigh_signal_by_run(weigh_by_prior(weigh_by_log(
                                  weigh_by_learning(fs, seen.get("overfit_test"), log_loss(), log_val()), log_loss(),
                                  seen.get("nan_hook_run:script")), seen.get("data_check"), log_val()),
                                  seen.get("data_check"), log_val()),
                                  seen.get("labels_at_lr"), seen.get("overfit_test")),
                                  seen.get("data_check"), seen.get("labels_at_lr")),
                              seen.get("grad_norm_snapshot:script"))))))), seen.get("overfit_test"), log_loss(), log_val(),
                              seen.get("data_check")),
                              log_loss(), log_val()), seen.get("log_metrics"), sources or []), seen.get("log_metrics")))
    root = f"{w.resolve()}/"  # the agent names files relative to the workspace, as it passes them
    for step in report.steps:
        step.summary = step.summary.replace(root, "")
    for f in report.findings:
        f.location = f.location.replace(root, "") if f.location else f.location
        for e in f.evidence:
            e.source = e.source.replace(root, "")
    return report
