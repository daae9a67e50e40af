"""The report shape every tool returns (DESIGN.md: Reports).

JSON has no NaN/Inf, and our domain is full of them, so a number that may be non-finite
is typed `Num`: a float when finite, else the marker string "nan", "inf" or "-inf".
"""

import math
from typing import Annotated, Any, Callable, ClassVar, Literal

from pydantic import BaseModel, BeforeValidator, Field, model_validator

from tools.failure_modes import FailureMode, avoid_for

NonFinite = Literal["nan", "inf", "-inf"]


def mark_nonfinite(x: Any) -> Any:
    """float('nan') -> "nan", float('inf') -> "inf"; anything else unchanged."""
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    return x


Num = Annotated[float | NonFinite | None, BeforeValidator(mark_nonfinite)]


def is_finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


class Evidence(BaseModel):
    """One measured fact behind a finding."""

    what: str = Field(description="the quantity, e.g. 'global grad norm'")
    value: Annotated[float | int | str | bool | None, BeforeValidator(mark_nonfinite)] = None
    source: str = Field("", description="where it was measured: tool name, file:line, log line")

    def __str__(self) -> str:
        v = f"{self.value:.4g}" if isinstance(self.value, float) else self.value
        return f"{self.what} = {v}" + (f" ({self.source})" if self.source else "")


class Finding(BaseModel):
    """A diagnosis: which failure mode, how sure, the measured evidence, the fix and the trap to avoid."""

    failure_mode: FailureMode
    confidence: float = Field(ge=0.0, le=1.0)
    summary: str
    evidence: list[Evidence] = Field(default_factory=list)
    fix: str = ""
    avoid: str = ""
    location: str | None = Field(None, description="file:line, module name or parameter name")
    # what later steps act on (the next steps, the regression test's parameters), kept as data rather than
    # re-read from the prose; internal: the reply already states it in the summary and evidence
    facts: dict[str, float | int | bool | str] = Field(default_factory=dict, exclude=True)

    @model_validator(mode="after")
    def _default_avoid(self) -> "Finding":
        if not self.avoid:
            self.avoid = avoid_for(self.failure_mode)
        return self

    def text(self) -> str:
        lines = [f"[{self.failure_mode} {self.confidence:.0%}] {self.summary}"]
        if self.location:
            lines.append(f"  where: {self.location}")
        lines += [f"  evidence: {e}" for e in self.evidence[:6]]
        if self.fix:
            lines.append(f"  fix: {self.fix}")
        if self.avoid:
            lines.append(f"  avoid: {self.avoid}")
        return "\n".join(lines)


class Report(BaseModel):
    """Base of every tool's report. Subclasses override `text()` for their headline numbers.

    `rank_by`, `keep_all` and `summary_drops` tell tools/compact.py how this report is cut in
    detail='summary': a ranking key per list field (highest first), top-level list fields never cut
    (besides `findings`, which never is), and fields that repeat another one ('list.field' for a
    field of every record of a list).
    """

    rank_by: ClassVar[dict[str, Callable[[dict], float]]] = {}
    keep_all: ClassVar[tuple[str, ...]] = ()
    summary_drops: ClassVar[tuple[str, ...]] = ()
    # the text reply gives each alternative's summary line: a reply over budget may then show the second finding
    # as its mode, confidence and place only (compact.fitted_summary's last step)
    text_gives_alternatives: ClassVar[bool] = False

    findings: list[Finding] = Field(default_factory=list)
    # detail='summary' (tools/compact.py): field path -> {n, first, last, min, max, trend} of a number series
    # cut from the report, and field path -> what was cut; detail='full' with a large report: the workspace
    # file holding all of it. Plain types without descriptions: every tool's output schema carries them, and
    # a typed model here costs ~10 ms of start-up for 27 schemas (benchmarks/bench_evidence.py --startup-only).
    summarised: dict[str, dict] = Field(default_factory=dict)
    omitted: dict[str, str] = Field(default_factory=dict)
    full_data: str | None = None

    def trim_summary(self, data: dict, tight: int = 0) -> None:
        """Leave out, in place, what the report's own dump repeats in detail='summary' (before the generic rules);
        `tight` is compact.cap_evidence's tightening step for a reply over budget."""

    def headline(self) -> str:
        return ""

    def text(self) -> str:
        """The short human summary sent beside the structured content."""
        parts = [self.headline()] if self.headline() else []
        parts += [f.text() for f in sorted(self.findings, key=lambda f: -f.confidence)]
        return "\n".join(parts) or "no findings"

    def summary_text(self) -> str:
        """The text beside the structured content in detail='summary' (a report that repeats itself trims here)."""
        return self.text()
