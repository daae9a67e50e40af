"""Sweep statistics across seeds: is a parameter's effect real, or one lucky seed?

Within each (group, seed) the metric is z-scored across the parameter's values, which removes the
seed's own baseline; per value, the z-scores are then averaged across seeds and
t = mean_z / (std_z / sqrt(n_seeds)). |t| > 2 with >= 4 seeds reads as reliable (seed 001, Part 4).
Pure standard library: this runs in the server process.
"""

import csv
import json
import math
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tools import stores
from tools.errors import TriageError
from tools.report import Evidence, Finding, Num, Report

RELIABLE_T = 2.0
RELIABLE_SEEDS = 4
MAX_ROWS = 200_000
NAN_WORDS = {"", "nan", "-nan", "none", "null", "na", "n/a", "inf", "-inf", "+inf", "infinity", "-infinity"}


class ValueStats(BaseModel):
    """One parameter value inside one group."""

    model_config = ConfigDict(validate_assignment=True)  # a NaN set later still becomes "nan"

    value: str | float
    n_runs: int
    n_seeds: int = Field(description="seeds with a finite metric at this value that entered the z-scores")
    n_nonfinite: int = Field(description="runs whose metric is NaN/Inf or missing (diverged or crashed; reported, not used)")
    metric_mean: Num = None
    metric_q10: Num = None
    metric_q90: Num = None
    mean_z: Num = None
    std_z: Num = None
    t_stat: Num = Field(None, description="mean_z / (std_z / sqrt(n_seeds)); 'nan' when n_seeds < 2")
    reliable: bool = Field(False, description=f"|t| > {RELIABLE_T} with >= {RELIABLE_SEEDS} seeds")


class Trend(BaseModel):
    """Linear dose-response of the metric on a numeric parameter."""

    model_config = ConfigDict(validate_assignment=True)  # a NaN set later still becomes "nan"

    log_scale: bool = Field(description="the parameter spans > 2 decades, so r is computed on log10(value)")
    r_pooled: Num = Field(None, description="Pearson r between the parameter and the within-seed z-scores, all seeds pooled")
    r_mean: Num = Field(None, description="mean over seeds of the per-seed Pearson r")
    r_t_stat: Num = Field(None, description="t of the per-seed r across seeds (reliability of the trend)")
    n_seeds: int = 0


class GroupStats(BaseModel):
    model_config = ConfigDict(validate_assignment=True)  # a NaN set later still becomes "nan"
    group: str
    seeds: list[str]
    values: list[ValueStats]
    trend: Trend | None = None


class SweepReport(Report):
    model_config = ConfigDict(validate_assignment=True)  # a NaN set later still becomes "nan"
    path: str
    format: str = Field("table", description="table (CSV, JSON lines, per-run JSON files) or the metrics store whose "
                                             "runs became the rows: tensorboard, wandb, mlflow, trackio, ...")
    metric: str
    param: str
    group_column: str | None
    seed_column: str
    n_runs: int
    groups: list[GroupStats]
    confounders: list[str] = Field(default_factory=list, description="other config columns that also vary within a (group, seed)")
    warnings: list[str] = Field(default_factory=list)

    def headline(self) -> str:
        lines = [f"sweep {self.path}: {self.metric} vs {self.param}, {self.n_runs} runs, {len(self.groups)} group(s)"]
        for g in self.groups:
            lines.append(f"group {g.group} ({len(g.seeds)} seeds):")
            for v in g.values:
                t = f"{v.t_stat:+.2f}" if isinstance(v.t_stat, float) else str(v.t_stat)
                mark = " reliable" if v.reliable else ""
                nan = f", {v.n_nonfinite} non-finite" if v.n_nonfinite else ""
                mean = f"{v.metric_mean:.4g}" if isinstance(v.metric_mean, float) else v.metric_mean
                lines.append(f"  {self.param}={v.value}: mean {mean}, t={t} over {v.n_seeds} seeds{nan}{mark}")
            if g.trend:
                r = g.trend.r_pooled
                lines.append(f"  trend{' (log10)' if g.trend.log_scale else ''}: r={r if not isinstance(r, float) else round(r, 3)}"
                             f", t={g.trend.r_t_stat if not isinstance(g.trend.r_t_stat, float) else round(g.trend.r_t_stat, 2)}")
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


# ---------------------------------------------------------------- reading

def _number(x: Any) -> float | None:
    """A float for anything numeric (NaN/Inf included), None for words."""
    if isinstance(x, bool):
        return float(x)
    if isinstance(x, (int, float)):
        return float(x)
    if isinstance(x, str):
        s = x.strip()
        try:
            return float(s)
        except ValueError:
            return math.nan if s.lower() in NAN_WORDS else None
    return math.nan if x is None else None


def _flatten(obj: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in obj.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def store_runs(path: Path) -> tuple[str, list[dict]] | None:
    """One row per run of a metrics store (a W&B directory of runs, an MLflow experiment, a TensorBoard logdir of
    runs, a Trackio project): the run's config and the last value of each of its series; None when `path` is no
    store."""
    try:
        fmt, found = stores.runs(path)
    except TriageError:
        return None  # a directory without a store: per-run JSON files
    if fmt == "text" or not found:
        return None
    rows = []
    for run in found[:MAX_ROWS]:
        row: dict = {"run": run.run, **stores.last_values(run)}
        row.update(stores.params(run))  # the swept value is the config's (an `lr` series would be the schedule's last)
        row["run"] = run.run
        rows.append(row)
    return fmt, rows


def read_runs(path: Path) -> list[dict]:
    """Rows of a sweep table: CSV/TSV, JSON lines, a JSON list, or a folder of per-run JSON files."""
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix == ".json" and p.is_file())
        if not files:
            raise TriageError(f"{path} holds no *.json run files", "Pass a CSV/JSONL table or a folder of per-run .json files")
        rows = []
        for f in files:
            try:
                obj = json.loads(f.read_text())
            except (OSError, ValueError) as e:
                raise TriageError(f"{f.name} is not valid JSON ({e})", "Fix or remove that run file") from None
            if not isinstance(obj, dict):
                raise TriageError(f"{f.name} holds a JSON {type(obj).__name__}, not one run object", "One object per run file")
            rows.append(_flatten(obj))
        return rows
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise TriageError(f"cannot read {path}: {e}", "Check the path and its permissions") from None
    if not text.strip():
        raise TriageError(f"{path.name} is empty", "Point at the sweep's results table")
    first = text.lstrip()[:1]
    if first in "[{":
        return _read_json(text, path.name)
    sample = text[:8192]
    try:
        dialect = csv.Sniffer().sniff(sample, delimiters=",\t;|")
    except csv.Error:
        dialect = csv.excel_tab if path.suffix in (".tsv", ".tab") else csv.excel
    rows = list(csv.DictReader(text.splitlines(), dialect=dialect))
    if not rows or len(rows[0]) < 2:
        raise TriageError(f"{path.name} does not parse as a table with a header row",
                          "Use CSV/TSV with a header (e.g. seed,lr,loss), JSON lines, or a folder of per-run JSON files")
    return rows[:MAX_ROWS]


def _read_json(text: str, name: str) -> list[dict]:
    try:
        obj = json.loads(text)
        items = obj if isinstance(obj, list) else [obj]
    except ValueError:
        items = []
        for i, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                items.append(json.loads(line))
            except ValueError:
                raise TriageError(f"{name} line {i} is not JSON", "Use one JSON object per line (JSON lines)") from None
    bad = [i for i, r in enumerate(items) if not isinstance(r, dict)]
    if bad:
        raise TriageError(f"{name}: entry {bad[0]} is not an object", "Each run must be a JSON object of config and metrics")
    return [_flatten(r) for r in items[:MAX_ROWS]]


def _column(rows: list[dict], name: str, role: str) -> str:
    """The column called `name`, or the unique flattened column ending in '.name' (config.lr)."""
    columns = {k for r in rows for k in r}
    if name in columns:
        return name
    suffixed = sorted(c for c in columns if c.endswith("." + name))
    if len(suffixed) == 1:
        return suffixed[0]
    shown = ", ".join(sorted(columns)[:30])
    hint = f" (ambiguous: {', '.join(suffixed)})" if suffixed else ""
    raise TriageError(f"no {role} column {name!r}{hint} among the columns: {shown}",
                      f"Pass {role}= one of the column names above")


def _label(v: Any) -> str:
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return "" if v is None else str(v)


# ---------------------------------------------------------------- statistics

def _mean_std(xs: list[float]) -> tuple[float, float]:
    mean = statistics.fmean(xs)
    return mean, (statistics.stdev(xs) if len(xs) > 1 else math.nan)


def t_stat(xs: list[float]) -> float:
    """mean / (std / sqrt(n)); NaN for n < 2, +-inf when every seed agrees exactly and the mean is not 0."""
    if len(xs) < 2:
        return math.nan
    mean, std = _mean_std(xs)
    if std <= 1e-12 * max(1.0, abs(mean)):  # every seed agrees up to rounding
        return 0.0 if mean == 0 else math.copysign(math.inf, mean)
    return mean / (std / math.sqrt(len(xs)))


def pearson(xs: list[float], ys: list[float]) -> float:
    if len(xs) < 3:
        return math.nan
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else math.nan


def _quantile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def sweep_analysis(path: Path, metric: str, param: str, group: str | None = None, seed: str = "seed") -> SweepReport:
    """Per-value t-statistics of within-(group, seed) z-scores, trend, and the warnings that qualify them."""
    got = store_runs(path)
    fmt, rows = got if got is not None else ("table", read_runs(path))
    if not rows:
        raise TriageError(f"{path.name} holds no runs", "Point at the sweep's results table")
    metric_c = _column(rows, metric, "metric")
    param_c = _column(rows, param, "param")
    seed_c = _column(rows, seed, "seed")
    group_c = _column(rows, group, "group") if group else None
    if len({metric_c, param_c, seed_c, group_c} - {None}) < 3 + (group_c is not None):
        raise TriageError("metric, param, seed and group must be different columns", "Pass distinct column names")

    warnings: list[str] = []
    missing_param = sum(1 for r in rows if r.get(param_c) in (None, ""))
    if missing_param:
        warnings.append(f"{missing_param} run(s) have no {param_c!r} value and were left out")
    rows = [r for r in rows if r.get(param_c) not in (None, "")]
    if not rows:
        raise TriageError(f"no run has a value for {param_c!r}", "Check the param column name")

    raw_values = {_label(r[param_c]) for r in rows}
    as_numbers = {v: _number(v) for v in raw_values}
    numeric = all(x is not None and math.isfinite(x) for x in as_numbers.values())

    def value_key(r):
        lab = _label(r[param_c])
        return as_numbers[lab] if numeric else lab

    # (group, seed) -> value -> [metric, ...]
    cells: dict[tuple[str, str], dict[Any, list[float]]] = defaultdict(lambda: defaultdict(list))
    nonfinite: dict[tuple[str, Any], int] = defaultdict(int)
    unparseable = 0
    for r in rows:
        g = _label(r.get(group_c)) if group_c else "all"
        s = _label(r.get(seed_c))
        m = _number(r.get(metric_c))
        if m is None:
            unparseable += 1
            m = math.nan
        if not s:
            s = "(no seed)"
        cells[(g, s)][value_key(r)].append(m)
        if not math.isfinite(m):
            nonfinite[(g, value_key(r))] += 1
    if unparseable:
        warnings.append(f"{unparseable} run(s) have a non-numeric {metric_c!r}; counted as non-finite")
    if any(s == "(no seed)" for _, s in cells):
        warnings.append(f"some runs have no {seed_c!r} value; they form one pseudo-seed '(no seed)'")
    dup = sum(1 for c in cells.values() for ms in c.values() if len(ms) > 1)
    if dup:
        warnings.append(f"{dup} (group, seed, value) cell(s) hold more than one run; their finite metrics were averaged")

    confounders = _confounders(rows, {metric_c, param_c, seed_c, group_c}, group_c, seed_c, param_c)
    if confounders:
        warnings.append("also varies within a (group, seed): " + ", ".join(confounders)
                        + f" -- the effect cannot be attributed to {param_c!r} alone")

    findings: list[Finding] = []
    groups_out = []
    for g in sorted({g for g, _ in cells}):
        seeds = sorted({s for gg, s in cells if gg == g})
        values = sorted({v for (gg, _), c in cells.items() if gg == g for v in c}, key=lambda v: (isinstance(v, str), v))
        z: dict[Any, list[float]] = defaultdict(list)
        raw: dict[Any, list[float]] = defaultdict(list)
        n_runs: dict[Any, int] = defaultdict(int)
        trend_pts: list[tuple[float, float]] = []
        per_seed_r: list[float] = []
        for s in seeds:
            cell = cells[(g, s)]
            finite = {}
            for v, ms in cell.items():
                n_runs[v] += len(ms)
                ok = [m for m in ms if math.isfinite(m)]
                raw[v] += ok
                if ok:
                    finite[v] = statistics.fmean(ok)
            if len(finite) < 2:
                continue
            mu = statistics.fmean(finite.values())
            sigma = statistics.pstdev(finite.values())
            if sigma == 0:
                warnings.append(f"group {g} seed {s}: every value gives the same {metric_c}; z-scores undefined, seed skipped")
                continue
            for v, m in finite.items():
                z[v].append((m - mu) / sigma)
            if numeric:
                trend_pts += [(v, (m - mu) / sigma) for v, m in finite.items()]
        missing = {v: [s for s in seeds if v not in cells[(g, s)]] for v in values}
        for v, miss in missing.items():
            if miss:
                warnings.append(f"group {g}: {param_c}={_label(v)} is missing seed(s) {', '.join(miss)}")
        if len(seeds) == 1:
            warnings.append(f"group {g} has a single seed: t-statistics are undefined; replicate with >= {RELIABLE_SEEDS} seeds")
        elif len(seeds) < RELIABLE_SEEDS:
            warnings.append(f"group {g} has {len(seeds)} seeds: |t| > {RELIABLE_T} needs >= {RELIABLE_SEEDS} seeds to read as reliable")

        stats = []
        for v in values:
            zs, ms = z.get(v, []), raw.get(v, [])
            mean_z, std_z = _mean_std(zs) if zs else (math.nan, math.nan)
            t = t_stat(zs)
            stats.append(ValueStats(
                value=v if numeric else str(v), n_runs=n_runs[v], n_seeds=len(zs), n_nonfinite=nonfinite[(g, v)],
                metric_mean=statistics.fmean(ms) if ms else math.nan,
                metric_q10=_quantile(ms, 0.1) if ms else math.nan, metric_q90=_quantile(ms, 0.9) if ms else math.nan,
                mean_z=mean_z, std_z=std_z, t_stat=t,
                reliable=not math.isnan(t) and len(zs) >= RELIABLE_SEEDS and abs(t) > RELIABLE_T,
            ))
            if nonfinite[(g, v)]:
                findings.append(Finding(
                    failure_mode="nan_inf", confidence=min(0.9, 0.4 + 0.5 * nonfinite[(g, v)] / max(1, n_runs[v])),
                    summary=f"{nonfinite[(g, v)]} of {n_runs[v]} run(s) at {param_c}={_label(v)} (group {g}) ended with a "
                            f"non-finite or missing {metric_c}: they diverged or crashed",
                    evidence=[Evidence(what=f"runs with non-finite {metric_c}", value=nonfinite[(g, v)],
                                       source=f"{path.name}, group {g}, {param_c}={_label(v)}")],
                    fix="Read those runs' logs (tail_log / log_metrics) for the step where the loss went non-finite, "
                        "then localise it with nan_hook_run before comparing values",
                    location=f"{param_c}={_label(v)}"))
        trend = _trend(trend_pts, cells, g, seeds, numeric) if numeric and len(values) >= 3 else None
        groups_out.append(GroupStats(group=g, seeds=seeds, values=stats, trend=trend))

    return SweepReport(path=str(path), format=fmt, metric=metric_c, param=param_c, group_column=group_c, seed_column=seed_c,
                       n_runs=len(rows), groups=groups_out, confounders=confounders,
                       warnings=list(dict.fromkeys(warnings)), findings=findings)


def _trend(points, cells, g, seeds, numeric) -> Trend:
    xs_all = [x for x, _ in points]
    log = bool(xs_all) and min(xs_all) > 0 and max(xs_all) / min(xs_all) > 100

    def f(x):
        return math.log10(x) if log else x

    r_pooled = pearson([f(x) for x, _ in points], [y for _, y in points])
    rs = []
    for s in seeds:
        finite = [(v, statistics.fmean([m for m in ms if math.isfinite(m)]))
                  for v, ms in cells[(g, s)].items() if any(math.isfinite(m) for m in ms)]
        if len(finite) >= 3:
            r = pearson([f(v) for v, _ in finite], [m for _, m in finite])
            if math.isfinite(r):
                rs.append(r)
    return Trend(log_scale=log, r_pooled=r_pooled, r_mean=statistics.fmean(rs) if rs else math.nan,
                 r_t_stat=t_stat(rs), n_seeds=len(rs))


def _confounders(rows, skip, group_c, seed_c, param_c) -> list[str]:
    """Config-like columns (values repeat across runs) that change within one (group, seed)."""
    out = []
    columns = sorted({k for r in rows for k in r} - skip)
    for c in columns:
        values = [_label(r.get(c)) for r in rows]
        if len(set(values)) < 2 or len(set(values)) > max(2, len(rows) // 2):
            continue  # constant, or unique per run (an id or another outcome)
        by_cell = defaultdict(set)
        for r, v in zip(rows, values):
            by_cell[(_label(r.get(group_c)) if group_c else "", _label(r.get(seed_c)))].add(v)
        if any(len(vs) > 1 for vs in by_cell.values()):
            out.append(c)
    return out
