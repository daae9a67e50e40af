"""Loss-surface map of one loss component: values and autograd gradients on a 2-D grid (seed 001, Part 3).

The grid is evaluated in the user's interpreter (probe `mltriage_surface.py`); the analysis here is
plain Python and the contour + quiver PNG is drawn with matplotlib, imported only when a plot is asked for.
"""

import math
import statistics
from pathlib import Path

import anyio
from pydantic import BaseModel, ConfigDict, Field

from tools.errors import TriageError
from tools.probe_runner import ProgressFn, run_probe
from tools.failure_modes import crash_mode
from tools.report import Evidence, Finding, Num, Report

DEAD_REL = 1e-6          # |grad| below this fraction of the largest finite |grad| counts as zero
DEAD_FRACTION = 0.02     # a dead zone is a region, not the one grid point at the minimum
IMBALANCE = 1000.0       # seed 001: one axis' gradient 1000x the other's
MAX_N = 200


class SurfacePoint(BaseModel):
    model_config = ConfigDict(validate_assignment=True)  # a NaN set later still becomes "nan"
    label: str
    x: float
    y: float
    loss: Num
    grad_x: Num
    grad_y: Num
    flag: str = Field("", description="'non-finite loss', 'non-finite gradient', 'zero gradient' or ''")


class Region(BaseModel):
    model_config = ConfigDict(validate_assignment=True)  # a NaN set later still becomes "nan"
    cells: int
    lines: list[str] = Field(default_factory=list, description="whole grid lines inside the region, e.g. 'x = 0'")
    fraction: float
    x_min: float
    x_max: float
    y_min: float
    y_max: float
    example: SurfacePoint | None = None


class SurfaceReport(Report):
    model_config = ConfigDict(validate_assignment=True)  # a NaN set later still becomes "nan"
    function: str
    x_range: tuple[float, float]
    y_range: tuple[float, float]
    n: int
    mode: str | None = Field(None, description="'vectorised' (pointwise function) or 'pointwise' (evaluated one point at a time)")
    loss_min: Num = None
    loss_max: Num = None
    argmin: tuple[float, float] | None = Field(None, description="(x, y) of the smallest finite loss on the grid")
    argmin_on_boundary: bool = False
    median_abs_grad_x: Num = None
    median_abs_grad_y: Num = None
    grad_ratio_x_over_y: Num = Field(None, description="median |dL/dx| / median |dL/dy| outside dead zones")
    max_abs_grad_x: Num = None
    max_abs_grad_y: Num = None
    nonfinite: Region | None = None
    dead_zone: Region | None = None
    table: list[SurfacePoint] = Field(default_factory=list)
    plot: str = Field("", description="what the attached PNG shows, or why there is none")

    def headline(self, table: bool = True) -> str:
        lines = [f"loss surface of {self.function} on x in {list(self.x_range)}, y in {list(self.y_range)} ({self.n}x{self.n}, {self.mode})"]
        if self.loss_min is not None:
            lines.append(f"loss from {_fmt(self.loss_min)} to {_fmt(self.loss_max)}; minimum at {self.argmin}"
                         + (" (on the grid boundary: the true minimum may lie outside the range)" if self.argmin_on_boundary else ""))
            lines.append(f"median |dL/dx| {_fmt(self.median_abs_grad_x)}, median |dL/dy| {_fmt(self.median_abs_grad_y)}")
        if self.table and table:
            lines.append(f"{'point':<30} {'x':>10} {'y':>10} {'loss':>11} {'dL/dx':>11} {'dL/dy':>11}")
            for p in self.table:
                lines.append(f"{p.label:<30} {p.x:>10.4g} {p.y:>10.4g} {_fmt(p.loss):>11} {_fmt(p.grad_x):>11} {_fmt(p.grad_y):>11}"
                             + (f"  <-- {p.flag}" if p.flag else ""))
        if self.plot:
            lines.append(f"plot: {self.plot}")
        return "\n".join(lines)

    def summary_text(self) -> str:
        """Without the table of points: the structured `table` holds it, so it is not sent twice."""
        return "\n".join([self.headline(table=False), *(f.text() for f in sorted(self.findings, key=lambda f: -f.confidence))])


def _fmt(v) -> str:
    return f"{v:+.4g}" if isinstance(v, float) else str(v)


def split_function_spec(spec: str) -> tuple[str, str]:
    """'path/file.py:fn' -> ('path/file.py', 'fn'); a module spec 'pkg.mod:fn' -> ('', spec)."""
    spec = (spec or "").strip()
    if ":" not in spec or not spec.rsplit(":", 1)[1].isidentifier():
        raise TriageError(f"function {spec!r} must look like 'losses.py:entropy' or 'pkg.module:entropy'",
                          "Name a function of two tensors (x, y) that returns the loss per point")
    where, name = spec.rsplit(":", 1)
    return (where, name) if where.endswith(".py") else ("", spec)


def _check_range(r, name: str) -> tuple[float, float]:
    try:
        lo, hi = (float(v) for v in r)
    except (TypeError, ValueError):
        raise TriageError(f"{name} must be two numbers [low, high], got {r!r}", f"e.g. {name}=[0, 1]") from None
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo >= hi:
        raise TriageError(f"{name}={[lo, hi]} is not a finite interval with low < high", f"e.g. {name}=[0, 1]")
    return lo, hi


def representative_points(xr, yr) -> list[tuple[float, float, str]]:
    """Zero, small, typical and the corners (degenerate inputs live at the edges of a range)."""
    def zero(r):
        return min(max(0.0, r[0]), r[1])

    def small(r):
        z, step = zero(r), 1e-3 * (r[1] - r[0])
        return z + step if z + step <= r[1] else z - step

    pts = [(zero(xr), zero(yr), "zero"), (small(xr), small(yr), "small"),
           ((xr[0] + xr[1]) / 2, (yr[0] + yr[1]) / 2, "typical (centre)"),
           (xr[0], yr[0], "corner (x low, y low)"), (xr[1], yr[1], "corner (x high, y high)"),
           (xr[0], yr[1], "corner (x low, y high)"), (xr[1], yr[0], "corner (x high, y low)")]
    seen, out = set(), []
    for x, y, label in pts:
        if (x, y) not in seen:
            seen.add((x, y))
            out.append((x, y, label))
    return out


def _flag(loss, gx, gy, max_g) -> str:
    if not math.isfinite(loss):
        return "non-finite loss"
    if not (math.isfinite(gx) and math.isfinite(gy)):
        return "non-finite gradient"
    if math.hypot(gx, gy) <= max(1e-30, DEAD_REL * max_g):
        return "zero gradient"
    return ""


def _region(cells: list[tuple[int, int]], xs, ys, total: int, example: SurfacePoint | None) -> Region | None:
    if not cells:
        return None
    n = len(xs)
    per_x, per_y = [0] * n, [0] * n
    for i, j in cells:
        per_x[i] += 1
        per_y[j] += 1
    lines = [f"x = {xs[i]:.4g}" for i in range(n) if per_x[i] == n] + [f"y = {ys[j]:.4g}" for j in range(n) if per_y[j] == n]
    return Region(cells=len(cells), lines=lines[:8] if len(lines) < n else [], fraction=len(cells) / total,
                  x_min=min(xs[i] for i, _ in cells), x_max=max(xs[i] for i, _ in cells),
                  y_min=min(ys[j] for _, j in cells), y_max=max(ys[j] for _, j in cells), example=example)


def analyse(function: str, xr, yr, res: dict) -> SurfaceReport:
    """Findings and the summary table from the probe's grid."""
    n, xs, ys = res["n"], res["xs"], res["ys"]
    L, GX, GY = res["loss"], res["gx"], res["gy"]

    def point(i, j, label) -> SurfacePoint:
        k = i * n + j
        return SurfacePoint(label=label, x=xs[i], y=ys[j], loss=L[k], grad_x=GX[k], grad_y=GY[k],
                            flag=_flag(L[k], GX[k], GY[k], max_g))

    finite = [k for k in range(n * n) if math.isfinite(L[k]) and math.isfinite(GX[k]) and math.isfinite(GY[k])]
    norms = {k: math.hypot(GX[k], GY[k]) for k in finite}
    max_g = max(norms.values(), default=0.0)
    bad = [(k // n, k % n) for k in range(n * n) if not (math.isfinite(L[k]) and math.isfinite(GX[k]) and math.isfinite(GY[k]))]
    dead = [(k // n, k % n) for k in finite if norms[k] <= max(1e-30, DEAD_REL * max_g)]
    report = SurfaceReport(function=function, x_range=xr, y_range=yr, n=n, mode=res.get("mode"))
    report.nonfinite = _region(bad, xs, ys, n * n, point(*bad[0], "first non-finite cell") if bad else None)
    report.dead_zone = _region(dead, xs, ys, n * n, point(*dead[0], "first zero-gradient cell") if dead else None)
    if dead:
        lo = min(L[k] for k in finite)
        span = max(L[k] for k in finite) - lo
        res["dead_at_min"] = all(L[i * n + j] <= lo + 1e-6 * max(span, 1e-30) for i, j in dead)

    finite_loss = [k for k in range(n * n) if math.isfinite(L[k])]
    if finite_loss:
        kmin = min(finite_loss, key=lambda k: L[k])
        report.loss_min, report.loss_max = L[kmin], max(L[k] for k in finite_loss)
        i, j = divmod(kmin, n)
        report.argmin = (xs[i], ys[j])
        report.argmin_on_boundary = i in (0, n - 1) or j in (0, n - 1)
    live = [k for k in finite if norms[k] > max(1e-30, DEAD_REL * max_g)]  # dead zones are reported on their own
    if live:
        mx = statistics.median(abs(GX[k]) for k in live)
        my = statistics.median(abs(GY[k]) for k in live)
        report.median_abs_grad_x, report.median_abs_grad_y = mx, my
        report.grad_ratio_x_over_y = mx / my if my > 0 else (math.inf if mx > 0 else math.nan)
    report.max_abs_grad_x = max((abs(GX[k]) for k in finite), default=math.nan)
    report.max_abs_grad_y = max((abs(GY[k]) for k in finite), default=math.nan)

    pts = res.get("points") or {}
    for (x, y, label), l, gx, gy in zip(representative_points(xr, yr), pts.get("loss", []), pts.get("gx", []), pts.get("gy", [])):
        report.table.append(SurfacePoint(label=label, x=x, y=y, loss=l, grad_x=gx, grad_y=gy, flag=_flag(l, gx, gy, max_g)))
    if bad or dead:
        worst, label = (bad or dead)[0], "degenerate (worst grid cell)"
    elif finite:
        worst, label = divmod(min(finite, key=norms.__getitem__), n), "flattest grid cell"
    else:
        worst = None
    if worst is not None:
        report.table.append(point(*worst, label))

    report.findings = _findings(report, res, function)
    return report


def _findings(r: SurfaceReport, res: dict, function: str) -> list[Finding]:
    out = []
    where = f"{function} on x in {list(r.x_range)}, y in {list(r.y_range)}"
    if r.nonfinite:
        nf = r.nonfinite
        ex = nf.example
        out.append(Finding(
            failure_mode="nan_inf", confidence=0.9,
            summary=f"the loss or its gradient is non-finite on {nf.cells} of {r.n * r.n} grid points ("
                    + (f"along {' and '.join(nf.lines)}" if nf.lines else
                       f"x in [{nf.x_min:.4g}, {nf.x_max:.4g}], y in [{nf.y_min:.4g}, {nf.y_max:.4g}]") + ")",
            evidence=[Evidence(what="non-finite grid fraction", value=nf.fraction, source="loss_surface grid"),
                      Evidence(what=f"loss at ({ex.x:.4g}, {ex.y:.4g})", value=ex.loss, source="loss_surface grid"),
                      Evidence(what=f"dL/dx at ({ex.x:.4g}, {ex.y:.4g})", value=ex.grad_x, source="loss_surface grid"),
                      Evidence(what=f"dL/dy at ({ex.x:.4g}, {ex.y:.4g})", value=ex.grad_y, source="loss_surface grid")],
            fix="Make the component finite where training can land: clamp the argument of log (x.clamp_min(1e-8).log()), "
                "add an eps to denominators, use torch.xlogy / log1p / logsumexp forms; then re-run loss_surface",
            location=where))
    unused = [a for a, flag in (("x", res.get("x_unused")), ("y", res.get("y_unused"))) if flag]
    zero_axes = [a for a, m in (("x", r.max_abs_grad_x), ("y", r.max_abs_grad_y)) if m == 0.0 and a not in unused]
    for axis in unused:
        out.append(Finding(failure_mode="broken_graph", confidence=0.9,
                           summary=f"the loss has no autograd path to {axis}: its gradient is None everywhere",
                           evidence=[Evidence(what=f"d(loss)/d{axis}", value="None", source="loss_surface autograd")],
                           fix=f"Use {axis} through differentiable ops (no .detach(), .item(), argmax, round or torch.no_grad on it)",
                           location=where))
    for axis in zero_axes:
        out.append(Finding(failure_mode="broken_graph", confidence=0.7,
                           summary=f"the gradient with respect to {axis} is exactly zero on every finite grid point",
                           evidence=[Evidence(what=f"max |dL/d{axis}|", value=0.0, source="loss_surface grid")],
                           fix=f"Replace the non-differentiable or saturating op on {axis} (round, sign, comparison, clamp past its bound)",
                           location=where))
    if r.dead_zone and r.dead_zone.fraction >= DEAD_FRACTION and not zero_axes and not unused:
        dz = r.dead_zone
        # a flat region at the loss minimum is a satisfied margin/hinge, not a trap
        at_min = res.get("dead_at_min", False)
        out.append(Finding(
            failure_mode="dead_units", confidence=0.3 if at_min else min(0.85, 0.4 + dz.fraction),
            summary=f"dead zone: the gradient is ~0 on {dz.fraction:.0%} of the grid (x in [{dz.x_min:.4g}, {dz.x_max:.4g}], "
                    f"y in [{dz.y_min:.4g}, {dz.y_max:.4g}]); an optimizer that lands there stays there"
                    + ("; the loss there is at its minimum (a satisfied hinge or margin), harmless unless the "
                       "optimum you want lies elsewhere" if at_min else ""),
            evidence=[Evidence(what="zero-gradient grid fraction", value=dz.fraction, source="loss_surface grid"),
                      Evidence(what=f"loss at ({dz.example.x:.4g}, {dz.example.y:.4g})", value=dz.example.loss,
                               source="loss_surface grid")],
            fix="Give the region curvature (a smooth surrogate, softplus instead of relu/clamp), change the init so training "
                "starts outside it, or reparameterise",
            location=where))
    ratio = r.grad_ratio_x_over_y
    if isinstance(ratio, float) and math.isfinite(ratio) and ratio > 0 and (ratio > IMBALANCE or ratio < 1 / IMBALANCE):
        big, small = ("x", "y") if ratio > 1 else ("y", "x")
        out.append(Finding(
            failure_mode="loss_function", confidence=0.6,
            summary=f"axis imbalance: the typical gradient along {big} is {max(ratio, 1 / ratio):.3g}x the one along {small}; "
                    f"{big} dominates every update and {small} barely moves",
            evidence=[Evidence(what="median |dL/dx|", value=r.median_abs_grad_x, source="loss_surface grid"),
                      Evidence(what="median |dL/dy|", value=r.median_abs_grad_y, source="loss_surface grid"),
                      Evidence(what="ratio x/y", value=ratio, source="loss_surface grid")],
            fix=f"Rescale or normalise the terms, or decompose a product in log space (log|A| + log|B|) so {small} gets its own gradient",
            location=where))
    if not out:
        out.append(Finding(failure_mode="healthy", confidence=0.6,
                           summary="no non-finite region, dead zone or axis imbalance on this grid",
                           evidence=[Evidence(what="loss range", value=f"{_fmt(r.loss_min)} .. {_fmt(r.loss_max)}", source="loss_surface grid")],
                           fix="Check the operating point training actually reaches: re-run with x_range/y_range around it",
                           location=where))
    return out


def plot_surface(report: SurfaceReport, res: dict) -> bytes:
    """Contour of the loss, negative-gradient arrows (where the optimizer moves), non-finite cells marked."""
    import io

    import numpy as np
    from matplotlib.figure import Figure

    n = res["n"]
    xs, ys = np.array(res["xs"]), np.array(res["ys"])
    L = np.array(res["loss"], dtype=float).reshape(n, n)
    GX = np.array(res["gx"], dtype=float).reshape(n, n)
    GY = np.array(res["gy"], dtype=float).reshape(n, n)
    X, Y = np.meshgrid(xs, ys, indexing="ij")
    bad = ~(np.isfinite(L) & np.isfinite(GX) & np.isfinite(GY))
    fig = Figure(figsize=(6.4, 5.2), dpi=100)
    ax = fig.add_subplot()
    Lm = np.ma.masked_invalid(L)
    if Lm.count() >= 4 and float(Lm.max() - Lm.min()) > 0:
        cs = ax.contourf(X, Y, Lm, levels=30, cmap="viridis")
        fig.colorbar(cs, ax=ax, label="loss")
    step = max(1, n // 20)
    sl = (slice(None, None, step), slice(None, None, step))
    u, v = -GX[sl], -GY[sl]
    mag = np.hypot(u, v)
    ok = np.isfinite(mag) & (mag > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        un, vn = np.where(ok, u / np.where(ok, mag, 1), 0), np.where(ok, v / np.where(ok, mag, 1), 0)
    # direction only: near a singularity one arrow would dwarf the rest
    ax.quiver(X[sl][ok], Y[sl][ok], un[ok], vn[ok], color="white", alpha=0.85, angles="xy", pivot="mid")
    if bad.any():
        ax.scatter(X[bad], Y[bad], marker="x", s=12, color="red", label="non-finite")
        ax.legend(loc="upper right", fontsize=8)
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.set_title(f"{report.function}: loss and descent direction", fontsize=9)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return buf.getvalue()


async def loss_surface(function: str, x_range, y_range, n: int = 60, plot: bool = True, *, workspace_root: Path,
                       python: str | None = None, timeout_s: float = 120.0,
                       on_progress: ProgressFn | None = None) -> tuple[SurfaceReport, bytes | None]:
    """Evaluate `function` (resolved 'file.py:name' or 'pkg.module:name') on an n x n grid; report + optional PNG."""
    xr, yr = _check_range(x_range, "x_range"), _check_range(y_range, "y_range")
    if not 2 <= int(n) <= MAX_N:
        raise TriageError(f"n={n} is out of range", f"Use 2 <= n <= {MAX_N} (n*n points are evaluated)")
    where, _ = split_function_spec(function)
    if where and not (Path(where) if Path(where).is_absolute() else workspace_root / where).is_file():
        raise TriageError(f"function file {where!r} does not exist in {workspace_root}",
                          "Pass 'file.py:function' with the path relative to the workspace")
    args = {"function": function, "x_range": list(xr), "y_range": list(yr), "n": int(n),
            "points": [[x, y] for x, y, _ in representative_points(xr, yr)]}
    outcome = await run_probe("mltriage_surface.py", args, workspace_root=workspace_root, python=python,
                              timeout_s=timeout_s, on_progress=on_progress)
    if outcome.result is None:
        raise TriageError(f"loss_surface: {outcome.failure()} (python: {outcome.python})",
                          "Check that this interpreter has torch and that the function returns quickly; stderr tail:\n"
                          + outcome.stderr_tail[-2000:])
    if not outcome.result.get("ok"):
        err = outcome.result["error"]
        if err["kind"] == "user_code":
            where = f"{err['file']}:{err['line']}" if err.get("file") else function
            mode = "shape_mismatch" if crash_mode(err["message"]) == "shape_mismatch" else "exception"
            report = SurfaceReport(function=function, x_range=xr, y_range=yr, n=int(n), plot="none: the function raised")
            report.findings = [Finding(
                failure_mode=mode, confidence=0.9,
                summary=f"{function} raised {err['type']} during {err['phase']}: {err['message'][:300]}",
                evidence=[Evidence(what="exception", value=f"{err['type']}: {err['message'][:200]}", source=where)],
                fix="Make the function take two tensors of the same shape (x, y) and return the loss per point",
                location=where)]
            return report, None
        raise TriageError(f"loss_surface could not run {function!r}: {err['type']}: {err['message']}",
                          "Pass 'file.py:function' (relative to the workspace) naming a function of two tensors")
    res = outcome.result["report"]
    report = analyse(function, xr, yr, res)
    png = None
    if plot:
        try:
            png = await anyio.to_thread.run_sync(plot_surface, report, res)  # matplotlib must not block the event loop
            report.plot = "contour of the loss with negative-gradient (descent) arrows; red x = non-finite"
        except ImportError:
            report.plot = "none: matplotlib is not installed in the server's environment (pip install 'mltriage[plot]')"
    else:
        report.plot = "not requested"
    return report, png
