"""inspect_checkpoint: what a checkpoint holds, read safely (weights_only) in the user's interpreter."""

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from tools.errors import TriageError
from tools.live import OptimizerGroup
from tools.probe_runner import ProgressFn, run_probe
from tools.report import Evidence, Finding, Num, Report, mark_nonfinite


class TensorInfo(BaseModel):
    name: str
    shape: list[int]
    dtype: str


class ModuleParams(BaseModel):
    module: str
    n_params: int
    tensors: list[TensorInfo]




class OptimizerState(BaseModel):
    key: str
    groups: list[OptimizerGroup]
    step: float | None = Field(None, description="largest per-parameter step count in the state")
    n_states: int
    nonfinite_state: list[str] = Field(default_factory=list)


class TensorChange(BaseModel):
    name: str
    max_abs_diff: Num = None
    rel_change: Num = Field(None, description="||a - b|| / ||b||, b = compare_to")


class CheckpointDiff(BaseModel):
    compare_to: str
    n_changed: int
    n_unchanged: int
    changed: list[TensorChange]
    unchanged: list[str]
    only_here: list[str]
    only_other: list[str]
    shape_changed: list[dict[str, Any]]


class CheckpointReport(Report):
    path: str
    loaded: bool
    refused_reason: str | None = None
    unsafe_globals: list[str] = Field(default_factory=list, description="globals the pickle needs; never executed")
    top_keys: list[str] = Field(default_factory=list)
    model_key: str | None = None
    step: float | None = None
    epoch: float | None = None
    n_tensors: int = 0
    n_params: int = 0
    n_modules: int = 0
    modules: list[ModuleParams] = Field(default_factory=list)
    nonfinite: list[dict[str, Any]] = Field(default_factory=list)
    all_zero: list[str] = Field(default_factory=list)
    optimizers: list[OptimizerState] = Field(default_factory=list)
    scalars: dict[str, Any] = Field(default_factory=dict)
    compare: CheckpointDiff | None = None

    def headline(self) -> str:
        if not self.loaded:
            return (f"{self.path}: REFUSED, not loaded: {self.refused_reason}"
                    + (f" (needs globals: {', '.join(self.unsafe_globals[:8])})" if self.unsafe_globals else ""))
        lines = [f"{self.path}: keys {self.top_keys[:12]}; step {self.step}, epoch {self.epoch}; "
                 f"{self.n_params:,} parameters in {self.n_tensors} tensors, {self.n_modules} modules (model under "
                 f"{self.model_key!r})"]
        for o in self.optimizers:
            lines.append(f"optimizer {o.key}: step {o.step}, lr " + ", ".join(
                f"{g.lr:.4g}" for g in o.groups if g.lr is not None))
        if self.nonfinite:
            lines.append("non-finite tensors: " + ", ".join(t["name"] for t in self.nonfinite[:8]))
        if self.all_zero:
            lines.append("all-zero tensors: " + ", ".join(self.all_zero[:8]))
        if self.compare:
            c = self.compare
            lines.append(f"vs {c.compare_to}: {c.n_changed} tensors changed, {c.n_unchanged} identical")
            lines += [f"  {t.name}: rel change {t.rel_change}, max |diff| {t.max_abs_diff}" for t in c.changed[:6]]
        return "\n".join(lines)


def _findings(r: CheckpointReport, raw: dict) -> list[Finding]:
    out = []
    bad_opt = [s for o in r.optimizers for s in o.nonfinite_state]
    if r.nonfinite or bad_opt:
        names = [t["name"] for t in r.nonfinite] + bad_opt
        out.append(Finding(
            failure_mode="nan_inf", confidence=0.95, location=names[0],
            summary=f"{len(names)} tensor(s) in the checkpoint hold NaN/Inf: {', '.join(names[:5])}",
            evidence=[Evidence(what=t["name"], value=f"{t['n_nan']} NaN, {t['n_inf']} Inf", source=r.path)
                      for t in r.nonfinite[:5]] + [Evidence(what="optimizer state", value=s, source=r.path) for s in bad_opt[:3]],
            fix="Resume from an earlier checkpoint and find the first non-finite op with nan_hook_run; "
                "a run that saved NaN weights diverged before this save."))
    weights = [z["name"] for z in raw.get("all_zero", []) if z.get("ndim", 0) >= 2]
    if weights:
        out.append(Finding(
            failure_mode="dead_units", confidence=0.5, location=weights[0],
            summary=f"{len(weights)} weight matrix(es) are all zero: {', '.join(weights[:5])}",
            evidence=[Evidence(what="all-zero weight", value=w, source=r.path) for w in weights[:5]],
            fix="An all-zero weight gives every unit the same output and gradient; check its init and whether "
                "weight decay or a mask zeroed it."))
    for o in r.optimizers:
        zero = [i for i, g in enumerate(o.groups) if g.lr == 0]
        if zero:
            out.append(Finding(failure_mode="frozen_params", confidence=0.6, location=f"{o.key}.param_groups{zero}",
                               summary=f"optimizer {o.key} has lr 0 in group(s) {zero}",
                               evidence=[Evidence(what="lr", value=0.0, source=f"{r.path}: {o.key}")],
                               fix="Give every group that should train a non-zero lr (or check the scheduler)."))
    c = r.compare
    if c is not None and c.n_unchanged and c.n_changed:
        frozen = [n for n in c.unchanged if not n.endswith(("running_mean", "running_var", "num_batches_tracked"))]
        if frozen:
            out.append(Finding(
                failure_mode="frozen_params", confidence=0.6, location=frozen[0],
                summary=f"{len(frozen)} tensor(s) are bit-identical between the two checkpoints while "
                        f"{c.n_changed} changed: {', '.join(frozen[:5])}",
                evidence=[Evidence(what="unchanged tensors", value=len(frozen), source=f"{r.path} vs {c.compare_to}"),
                          Evidence(what="changed tensors", value=c.n_changed, source=f"{r.path} vs {c.compare_to}")],
                fix="Check that these parameters are in the optimizer, have requires_grad=True and a non-zero lr."))
    return out


async def inspect_checkpoint(path: Path, compare_to: Path | None, *, workspace_root: Path, python: str | None = None,
                             timeout_s: float = 300.0, on_progress: ProgressFn | None = None,
                             shown_as: tuple[str, str | None] | None = None) -> CheckpointReport:
    """Describe `path` (and diff it against `compare_to`) by loading both with weights_only=True."""
    shown = shown_as or (str(path), str(compare_to) if compare_to else None)
    outcome = await run_probe("mltriage_checkpoint.py", {"path": str(path), "compare_to": str(compare_to) if compare_to else None},
                              workspace_root=workspace_root, python=python, timeout_s=timeout_s, on_progress=on_progress)
    if outcome.result is None:
        raise TriageError(f"inspect_checkpoint failed: {outcome.failure()}", f"stderr: {outcome.stderr_tail[-1500:]}")
    if not outcome.result.get("ok"):
        err = outcome.result["error"]
        raise TriageError(f"could not read the checkpoint: {err['type']}: {err['message'][:800]}",
                          "Check that it is a torch.save file (a truncated or still-being-written file fails like this)")
    raw = outcome.result["report"]
    refused = raw.get("refused")
    if refused and "describe" not in raw and "top_keys" not in raw:
        unsafe = refused.get("unsafe_globals", [])
        detail = refused.get("detail") or ""
        # "would run code" only when the pickle names globals; every weights_only failure (random bytes
        # included) starts with the same "Weights only load failed" line, so that line proves nothing
        reason = ("it needs Python objects beyond tensors and plain containers, so loading it would run code "
                  "from the file" if unsafe or "Unsupported global" in detail
                  else "not a torch checkpoint: neither a torch.save archive nor a pickle of tensors"
                       + (f" ({detail})" if detail else f" ({refused['reason']})"))
        which = shown[0] if refused["path"] == str(path) else shown[1]
        return CheckpointReport(path=which, loaded=False, refused_reason=reason, unsafe_globals=unsafe)
    if refused:
        raise TriageError(f"{shown[1]} was refused: it needs globals {refused.get('unsafe_globals')}",
                          "Compare against a checkpoint that loads with weights_only=True")
    report = CheckpointReport(
        path=shown[0], loaded=True, top_keys=raw["top_keys"], model_key=raw["model_key"], step=raw["step"],
        epoch=raw["epoch"], n_tensors=raw["n_tensors"], n_params=raw["n_params"], n_modules=raw["n_modules"],
        modules=raw["modules"], nonfinite=raw["nonfinite"], all_zero=[z["name"] for z in raw["all_zero"]],
        optimizers=raw["optimizers"], scalars={k: mark_nonfinite(v) for k, v in raw["scalars"].items()},
        compare=CheckpointDiff(compare_to=shown[1], **raw["compare"]) if raw.get("compare") else None)
    report.findings = _findings(report, raw)
    return report
