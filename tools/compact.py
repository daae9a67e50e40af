"""Compact reports: what an agent decides on, at a price it can afford (issue 15).

An agent pays for every character a tool returns, and some clients show the model only the
structured content. `summary()` shapes any report the same way, so no tool trims itself by hand:

- floats keep 4 significant digits;
- a long series of numbers becomes first/last/min/max/trend (in `summarised`, keyed by its path);
- a long curve (a list of points) is downsampled to at most 32 points, its extremes kept;
- a long list of records keeps the top k: the ones the findings name or that carry a flag first,
  then the report's own ranking (`Report.rank_by`), then the original order (findings and a report's
  `Report.keep_all` lists are never cut); `omitted` says what was cut;
- fields that repeat another one (`Report.summary_drops`; `list.field` for a field of every record) are left out;
- evidence repeated under several findings is shown once, and a finding shows at most 3 facts (none and no
  fix below the top one and a second that contends with it, and their summaries keep their first 200
  characters; avoid for the top one only);
- records of a cut list, of `findings` and of `Report.keep_all` lists leave out their empty default
  fields (None, [], "", False);
- a very long string keeps its head and tail (a traceback's last frames are where it failed).

The result is validated against the report's own model, so it stays valid against the tool's
output schema; if a rule ever breaks that, the rounded full report is returned instead.
"""

import copy
import json
import math
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

Detail = Literal["summary", "full"]
BOOKKEEPING = ("summarised", "omitted", "full_data")  # Report's own fields about the shaping
NEVER_CUT = ("findings",)  # the decision itself: every finding stays, however many

SIG_DIGITS = 4
TOP_K = 6
EVIDENCE_MAX = 3  # facts shown per finding
CONTENDER, CONTENDER_GAP = 0.5, 0.25  # a second finding this strong, or this close to the top, keeps its facts
REMOTE_SUMMARY_MAX = 200  # characters of a remote hypothesis's summary (the rest is in detail='full')
MIN_K = 3  # records shown from a long list even when none stands out
SERIES_MAX = 8  # a number list longer than this is summarised
CURVE_POINTS = 32
LIST_BYTES = 1200  # a list of records is cut to the top k only when it costs more than this
STR_MAX = 1500
STR_HEAD, STR_TAIL = 300, 900


def round_sig(x: float) -> float:
    if not math.isfinite(x) or x == 0:
        return x
    return float(f"{x:.{SIG_DIGITS}g}")


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_numlike(v: Any) -> bool:
    """A number, or the JSON stand-ins of a non-finite one (tools.report.Num)."""
    return _is_num(v) or v is None or v in ("nan", "inf", "-inf")


def _is_point(v: Any) -> bool:
    """One point of a curve: [x, y, ...] or {"lr": .., "loss": ..} with numbers only."""
    if isinstance(v, list):
        return 2 <= len(v) <= 6 and all(_is_numlike(x) for x in v)
    if isinstance(v, dict):
        return 2 <= len(v) <= 8 and all(_is_numlike(x) for x in v.values())
    return False


def _finite(values: list) -> list[float]:
    return [v for v in values if _is_num(v) and math.isfinite(v)]


def series_summary(values: list) -> dict:
    """first/last/min/max/trend of a number series (non-finite markers kept as they are)."""
    finite = _finite(values)
    out: dict[str, Any] = {"n": len(values), "first": values[0], "last": values[-1]}
    if finite:
        out["min"], out["max"] = round_sig(min(finite)), round_sig(max(finite))
    out["trend"] = _trend(values, finite)
    return {k: round_sig(v) if isinstance(v, float) else v for k, v in out.items()}


def _trend(values: list, finite: list[float]) -> str:
    if len(finite) < len(values):
        return "non-finite"
    if len(finite) < 2:
        return "flat"
    span = max(finite) - min(finite)
    third = max(1, len(finite) // 3)
    head, tail = sum(finite[:third]) / third, sum(finite[-third:]) / third
    if span == 0 or abs(tail - head) < 0.05 * span:
        return "flat"
    steps = [b - a for a, b in zip(finite, finite[1:])]
    monotone = all(s >= 0 for s in steps) or all(s <= 0 for s in steps)
    direction = "rising" if tail > head else "falling"
    return direction if monotone or abs(tail - head) >= 0.3 * span else "mixed"


def downsample(points: list, n: int = CURVE_POINTS, key=None) -> list:
    """At most n points: evenly spaced, plus the first, the last and each column's min and max.

    With `key`, `points` are handles (indices) and key(point) is the point itself.
    """
    if len(points) <= n:
        return points
    handles, points = points, [key(p) for p in points] if key else points
    cols = points[0].keys() if isinstance(points[0], dict) else range(len(points[0]))
    fixed = {0, len(points) - 1}
    for c in list(cols)[1:]:  # the first column is the x axis (step, lr)
        ys = [(p[c], i) for i, p in enumerate(points) if c in (p if isinstance(p, dict) else range(len(p)))
              and _is_num(p[c]) and math.isfinite(p[c])]
        if ys:
            fixed |= {min(ys)[1], max(ys)[1]}
    room = max(2, n - len(fixed))
    keep = fixed | {round(i * (len(points) - 1) / (room - 1)) for i in range(room)}
    while len(keep) > n and keep - fixed:  # the ends and extremes win over the evenly spaced points
        spaced = sorted(keep - fixed)
        keep.discard(spaced[len(spaced) // 2])
    return [handles[i] for i in sorted(keep)]


class _Shaper:
    """One pass over a report's JSON: the rules in the module docstring, with notes of what was cut.

    `lean` runs beside the value: the same report dumped without its defaults, so a record knows
    which of its empty fields it may leave out.
    """

    def __init__(self, mentioned: str, rank_by: dict, keep_all: tuple[str, ...]):
        self.mentioned = mentioned
        self.rank_by = rank_by
        self.keep_all = NEVER_CUT + keep_all
        self.summarised: dict[str, dict] = {}
        self.omitted: dict[str, str] = {}

    def value(self, v: Any, path: str, lean: Any = None) -> Any:
        if isinstance(v, float):
            return round_sig(v)
        if isinstance(v, str):
            return self.string(v, path)
        if isinstance(v, dict):
            lean = lean if isinstance(lean, dict) else {}
            return {k: self.value(x, f"{path}.{k}" if path else k, lean.get(k)) for k, x in v.items()}
        if isinstance(v, list):
            return self.sequence(v, path, lean if isinstance(lean, list) and len(lean) == len(v) else None)
        return v

    def string(self, s: str, path: str) -> str:
        if len(s) <= STR_MAX:
            return s
        self.omitted[path] = f"{len(s) - STR_HEAD - STR_TAIL} of {len(s)} characters cut from the middle"
        return s[:STR_HEAD] + "\n[...]\n" + s[-STR_TAIL:]

    def sequence(self, items: list, path: str, lean: list | None) -> list:
        lean = lean or [None] * len(items)
        cut = False
        if len(items) > SERIES_MAX and all(_is_numlike(x) for x in items) and any(isinstance(x, float) for x in items):
            self.summarised[path] = series_summary(items)
            return []
        if len(items) > CURVE_POINTS and all(_is_point(x) for x in items):
            self.omitted[path] = f"{CURVE_POINTS} of {len(items)} points: evenly spaced, extremes kept"
            keep = downsample(list(range(len(items))), key=lambda i: items[i])
            items, lean = [items[i] for i in keep], [lean[i] for i in keep]
        elif (path not in self.keep_all and len(items) > TOP_K and all(isinstance(x, dict) for x in items)
              and _cost(items) > LIST_BYTES):
            keep = self.top_k(items, path)
            items, lean = [items[i] for i in keep], [lean[i] for i in keep]
            cut = True
        # records of a cut list and of the lists that make the answer (findings, triage's steps) leave out their
        # empty default fields, which they would repeat once per item; other records keep every key
        if cut or path in self.keep_all:
            items = [prune_empty(x, lean[i]) if isinstance(x, dict) and isinstance(lean[i], dict) else x
                     for i, x in enumerate(items)]
        return [self.value(x, f"{path}.{i}", lean[i]) for i, x in enumerate(items)]

    def top_k(self, items: list[dict], path: str) -> list[int]:
        """Indices of the records kept, in their original order: up to TOP_K that stand out (a finding names
        them, they carry a flag, or the report's ranking scores them above 0), at least MIN_K in all."""
        field = path.rsplit(".", 1)[-1]
        rank = self.rank_by.get(field)

        def score(i: int) -> tuple:
            item = items[i]
            return (self.is_named(item), _is_flagged(item), rank(item) if rank else 0.0)

        ranked = sorted(range(len(items)), key=lambda i: tuple(-x for x in score(i)) + (i,))
        standing_out = [i for i in ranked if any(score(i))][:TOP_K]
        kept = standing_out + [i for i in range(len(items)) if i not in standing_out][:max(0, MIN_K - len(standing_out))]
        why = "named by a finding or flagged first" + (f", {rank.__doc__}" if rank and rank.__doc__ else "")
        self.omitted[path] = f"{len(kept)} of {len(items)}: {why}"
        return sorted(kept)

    def is_named(self, item: dict) -> bool:
        names = [item.get(k) for k in ("name", "module", "param", "parameter", "file", "path", "rule")]
        return any(isinstance(n, str) and len(n) >= 3 and n in self.mentioned for n in names)


def _is_flagged(item: dict) -> bool:
    return bool(item.get("flags")) or item.get("constant") is True or bool(item.get("failure_mode"))


def _cost(v: Any) -> int:
    return len(json.dumps(v))


def prune_empty(full: dict, lean: dict) -> dict:
    """A record without the fields pydantic calls defaults (absent from `lean`) whose value is empty.

    Only None, [], {}, "" and False go (the schema says what a missing field defaults to); a default
    that is a decision (verdict="unknown") stays. The report's own top-level fields are never pruned.
    """
    empty = (None, [], {}, "", False)
    return {k: v for k, v in full.items()
            if k in lean or not any(v is e or (v == e and type(v) is type(e)) for e in empty)}


TIGHT_SECOND_FACTS = 2  # a close second's facts once the reply is over budget
TIGHT_SUMMARY_MAX = 80  # a remote hypothesis's summary at the first tightening step

FINDINGS_CUT = (  # what each tightening step of cap_evidence leaves of the findings, said in the reply
    f"top and close second: {EVIDENCE_MAX} facts+fix (avoid: top); others: summary ({REMOTE_SUMMARY_MAX} chars)",
    f"top: {EVIDENCE_MAX} facts+fix+avoid; close second: {TIGHT_SECOND_FACTS} facts+fix; others: summary "
    f"({TIGHT_SUMMARY_MAX} chars)",
    f"top: {EVIDENCE_MAX} facts+fix+avoid; close second: {TIGHT_SECOND_FACTS} facts+fix; others: mode, confidence "
    "and place only",
    f"top: {EVIDENCE_MAX} facts+fix+avoid; second: summary ({REMOTE_SUMMARY_MAX} chars) and place; others: mode, "
    "confidence and place only",
    f"top: {EVIDENCE_MAX} facts+fix+avoid; others: mode, confidence and place only (the text gives the second's "
    "summary)",
)

LAST_TIGHT = len(FINDINGS_CUT) - 1  # the deepest step: only for a report whose text gives the second finding


def contends(confidence: float, top: float) -> bool:
    """A second finding this strong, or this close to the top one, is shown with its facts and fix."""
    return confidence >= CONTENDER or confidence >= top - CONTENDER_GAP


def clip(text: str, keep: int) -> str:
    """The first `keep` characters of a summary, cut at a word, marked as cut ("" for keep 0)."""
    if len(text) <= keep:
        return text
    return text[:keep].rsplit(" ", 1)[0] + " [...]" if keep else ""


def cap_evidence(findings: list[dict], omitted: dict[str, str], tight: int = 0) -> None:
    """At most EVIDENCE_MAX facts and the fix for the top finding and for a second one that contends with it
    (>= CONTENDER, or within CONTENDER_GAP of the top); the ones below show their summary only (remote
    hypotheses: the summary says what they are); only the top finding keeps its avoid. The rest is in
    detail='full'. `tight` (a reply over budget): 1 keeps TIGHT_SUMMARY_MAX characters of a remote summary and
    TIGHT_SECOND_FACTS facts for the close second, 2 keeps a remote hypothesis's mode, confidence and place only,
    3 shows the close second as its summary and place (the text reply already gives its summary line), 4 shows it
    as its mode, confidence and place (its summary line is in the text beside)."""
    order = sorted(range(len(findings)), key=lambda i: -findings[i].get("confidence", 0))
    top = findings[order[0]].get("confidence", 0) if order else 0
    cut = False
    for rank, i in enumerate(order):
        f = findings[i]
        conf = f.get("confidence", 0)
        shown = rank == 0 or (rank == 1 and tight < 3 and contends(conf, top))
        cap = (EVIDENCE_MAX if rank == 0 or not tight else TIGHT_SECOND_FACTS) if shown else 0
        if len(f.get("evidence", [])) > cap:
            f["evidence"], cut = f["evidence"][:cap], True
        if "evidence" in f and not f["evidence"]:  # the schema's default: an empty list says nothing
            del f["evidence"]
        for field, keep in (("avoid", rank == 0), ("fix", shown)):
            if f.get(field) and not keep:
                f.pop(field)
                cut = True
        if not shown and f.get("location") and first_place(f["location"]) != f["location"]:
            f["location"], cut = first_place(f["location"]), True  # a remote hypothesis: where it starts will do
        keep = (REMOTE_SUMMARY_MAX if rank == 1 and tight == 3
                else (REMOTE_SUMMARY_MAX, TIGHT_SUMMARY_MAX, 0)[min(tight, 2)])
        if not shown and len(f.get("summary", "")) > keep:  # what it is, not every reason
            f["summary"], cut = clip(f["summary"], keep), True
    if cut:  # one note for the rule, not one per finding
        omitted["findings"] = FINDINGS_CUT[min(tight, len(FINDINGS_CUT) - 1)] + "; the rest in detail='full'"


def first_place(location: str) -> str:
    """'enc.0 (+2)' for 'enc.0, enc.1, enc.2': where a remote hypothesis starts is enough to look."""
    places = location.split(", ")
    return places[0] + (f" (+{len(places) - 1})" if len(places) > 1 else "")


def dedupe_evidence(findings: list[dict]) -> None:
    """Evidence already shown under a higher-ranked finding is replaced by a pointer to it."""
    seen: dict[tuple, int] = {}
    order = sorted(range(len(findings)), key=lambda i: -findings[i].get("confidence", 0))
    for i in order:
        kept, pointers = [], set()
        for ev in findings[i].get("evidence", []):
            key = (ev.get("what"), repr(ev.get("value")), ev.get("source"))
            if key in seen and seen[key] != i:
                pointers.add(seen[key])
            else:
                seen.setdefault(key, i)
                kept.append(ev)
        kept += [{"what": f"same evidence as findings[{j}]"} for j in sorted(pointers)]
        findings[i]["evidence"] = kept


REPLY_BUDGET = 4000  # characters of text + compact JSON an agent pays for one default reply (issue 15)


def reply_size(text: str, structured: dict) -> int:
    """What one default reply costs the agent: its text plus its structured content as compact JSON."""
    return len(text) + len(json.dumps(structured, separators=(",", ":"), ensure_ascii=False))


def fitted_summary(report: BaseModel, text: str) -> dict:
    """summary(), tightened step by step (see cap_evidence) until the text and the JSON fit REPLY_BUDGET together,
    or nothing more can go."""
    # the last step leaves the second finding's summary to the text: only where the text gives it (triage)
    deepest = LAST_TIGHT + (1 if getattr(report, "text_gives_alternatives", False) else 0)
    for tight in range(deepest):
        shaped = summary(report, tight)
        if reply_size(text, shaped) <= REPLY_BUDGET:
            break
    return shaped


def summary(report: BaseModel, tight: int = 0) -> dict:
    """The report's structured content in detail='summary' (see the module docstring)."""
    full = report.model_dump(mode="json")
    lean = report.model_dump(mode="json", exclude_defaults=True)
    # top-level fields left at None go (an absent optional field is null by the schema); empty lists
    # and False stay there, since an agent reads `entries == []` or `passed is False` as the answer
    data = {k: v for k, v in copy.deepcopy(full).items() if k in lean or v is not None}
    for own in BOOKKEEPING:  # set below only when something was cut
        data.pop(own, None)
    if hasattr(report, "trim_summary"):
        report.trim_summary(data, tight)
    trimmed = data.pop("omitted", {})  # what the report's own trim left out
    for name in getattr(report, "summary_drops", ()):  # fields that repeat another one (Report.summary_drops)
        if "." in name:  # "steps.seconds": that field of every record of the list `steps`
            field, sub = name.split(".", 1)
            for record in data.get(field) or []:
                if isinstance(record, dict):
                    record.pop(sub, None)
            continue
        if name in data:
            if type(report).model_fields[name].is_required():
                data[name] = ""
            else:
                del data[name]
    capped: dict[str, str] = {}
    if data.get("findings"):
        dedupe_evidence(data["findings"])
        cap_evidence(data["findings"], capped, tight)
    mentioned = " ".join(" ".join(filter(None, [f.get("location"), f.get("summary"),
                                                " ".join(str(e.get("what", "")) for e in f.get("evidence", []))]))
                         for f in full.get("findings", []))
    shaper = _Shaper(mentioned, getattr(report, "rank_by", {}) or {}, getattr(report, "keep_all", ()))
    shaper.omitted.update(capped)
    shaper.omitted.update(trimmed)
    shaped = shaper.value(data, "", lean)
    if shaper.summarised:
        shaped["summarised"] = shaper.summarised
    if shaper.omitted:
        shaped["omitted"] = shaper.omitted
    try:
        type(report).model_validate(shaped)
    except ValidationError:
        return _rounded(full)  # never reached by the reports we have; a safe answer if a new one breaks a rule
    return shaped


def _rounded(v: Any) -> Any:
    if isinstance(v, float):
        return round_sig(v)
    if isinstance(v, dict):
        return {k: _rounded(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_rounded(x) for x in v]
    return v
