"""schedule_check: the LR a schedule gives at every step of the training horizon, measured without training.

Two sources:
- a function of the step ('train.py:get_lr'). A training script such as nanoGPT's train.py runs the whole
  training when imported, so a .py file is never imported: the function and only the module-level
  statements it needs (its constants, imports, helper functions) are executed, found from the file's AST.
  The same goes for the config names read for the horizon (max_iters, warmup_iters, learning_rate, ...).
- the `scheduler` (or `make_scheduler(optimizer)`) a target factory returns, stepped `horizon` times on a
  copy of its optimizer; no optimizer step, no gradient.
The probe measures the curve and its landmarks; tools/loop_checks.py judges them.
"""

import ast
import builtins
import copy
import math
import os
import sys
import types
import warnings
from pathlib import Path

from mltriage_io import UserCodeError, main
from mltriage_target import TargetSpecError, import_callable

HORIZON_NAMES = ("max_iters", "max_steps", "total_steps", "num_training_steps", "num_iters", "train_steps",
                 "total_iters", "max_iter", "num_steps", "train_iters", "n_iters", "n_steps")
WARMUP_NAMES = ("warmup_iters", "warmup_steps", "num_warmup_steps", "warmup")
BASE_NAMES = ("learning_rate", "lr", "max_lr", "base_lr", "peak_lr")
MIN_NAMES = ("min_lr", "final_lr", "lr_min", "end_lr", "eta_min")
DECAY_NAMES = ("lr_decay_iters", "decay_steps", "decay_iters", "lr_decay_steps")
FLAG_NAMES = ("decay_lr",)
TARGET_HORIZON_KEYS = ("horizon", "max_steps", "total_steps", "max_iters", "num_training_steps", "steps")
MAX_EVAL = 2_000_000
CURVE_POINTS = 32
DECAYING = ("CosineAnnealingLR", "StepLR", "MultiStepLR", "ExponentialLR", "PolynomialLR", "OneCycleLR")
CYCLIC = ("CyclicLR", "CosineAnnealingWarmRestarts")


# ---------------------------------------------------------------- a function from a file, without running the file

def _bound(stmt) -> list:
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [stmt.name]
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in stmt.names if a.name != "*"]
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(
        stmt, (ast.AnnAssign, ast.AugAssign)) and getattr(stmt, "value", None) is not None else []
    return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]


def _needs(stmt, path) -> set:
    """The module-level names a top-level statement reads when it runs.

    For a def, the globals its body reads (the code objects' co_names, not its locals) plus what the def line
    itself evaluates (decorators, defaults, annotations): a local `model` must not make us build the module's model.
    """
    if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    code = compile(ast.Module(body=[stmt], type_ignores=[]), str(path), "exec")
    names, stack = set(), [c for c in code.co_consts if isinstance(c, types.CodeType)]
    while stack:
        c = stack.pop()
        names |= set(c.co_names)
        stack += [k for k in c.co_consts if isinstance(k, types.CodeType)]
    a = stmt.args
    header = [*stmt.decorator_list, *a.defaults, *[d for d in a.kw_defaults if d is not None], stmt.returns,
              *[x.annotation for x in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg) if x is not None]]
    return names | {n.id for h in header if h is not None for n in ast.walk(h)
                    if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


class ModuleScope:
    """The module-level names of a file, each executed on demand with what it needs, and nothing else."""

    def __init__(self, path: Path):
        self.path = path
        src = path.read_text()
        self.tree = ast.parse(src, filename=str(path))
        self.defs: dict = {}
        for stmt in self.tree.body:
            for name in _bound(stmt):
                self.defs.setdefault(name, []).append(stmt)
        self.ns = {"__name__": f"mltriage_schedule_{path.stem}", "__file__": str(path), "__builtins__": builtins}
        self.failed: dict = {}
        self._busy: set = set()
        # values a script sets at run time (nanoGPT's `exec(open('configurator.py').read())`, globals().update)
        self.dynamic = any(isinstance(n, ast.Call) and getattr(n.func, "id", "") in ("exec", "globals")
                           for stmt in self.tree.body for n in ast.walk(stmt)
                           if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))

    def need(self, name: str) -> None:
        if name in self.ns or name in self._busy or name not in self.defs:
            return
        self._busy.add(name)
        try:
            for stmt in self.defs[name]:  # every top-level binding, in file order: the last one wins
                try:
                    for n in _needs(stmt, self.path) - {name}:
                        self.need(n)
                    exec(compile(ast.Module(body=[stmt], type_ignores=[]), str(self.path), "exec"), self.ns)
                except Exception as e:  # noqa: BLE001 - a name we cannot compute stays undefined; said if used
                    self.failed[name] = f"{type(e).__name__}: {e}"[:200]
        finally:
            self._busy.discard(name)

    def value(self, name: str):
        self.need(name)
        return self.ns.get(name)


def load_schedule(spec: str, workspace: str):
    """(function, {config name: value}, notes) for 'file.py:name' or 'pkg.module:name'."""
    if ":" not in spec:
        raise TargetSpecError(f"lr_schedule {spec!r} must look like 'train.py:get_lr'")
    where, name = spec.rsplit(":", 1)
    notes = []
    if not where.endswith(".py"):
        fn = import_callable(spec, workspace, what="schedule")
        g = getattr(fn, "__globals__", {})
        config = {k.lower(): g[k] for k in g if k.lower() in _config_names()}
        return fn, config, notes
    path = Path(where) if Path(where).is_absolute() else Path(workspace) / where
    if not path.is_file():
        raise TargetSpecError(f"lr_schedule file {where!r} does not exist")
    for p in (workspace, str(path.parent)):
        if p and p not in sys.path:
            sys.path.insert(0, p)
    try:
        scope = ModuleScope(path)
    except SyntaxError as e:
        raise UserCodeError("import", e) from e
    if name not in scope.defs:
        raise TargetSpecError(f"{path.name} defines no top-level {name!r}")
    fn = scope.value(name)
    if not callable(fn):
        why = scope.failed.get(name)
        raise TargetSpecError(f"{path.name}: {name!r} is not a function" + (f" ({why})" if why else ""))
    config = {}
    for k in scope.defs:
        if k.lower() in _config_names():
            v = scope.value(k)
            if isinstance(v, (int, float)) and not isinstance(v, bool) or isinstance(v, bool) and k.lower() in FLAG_NAMES:
                config[k.lower()] = v
    if scope.dynamic:
        notes.append(f"{path.name} changes its globals at run time (exec/globals()); the values here are its "
                     "top-level defaults, without command-line or config-file overrides: pass horizon to override")
    scope_failed = {k: v for k, v in scope.failed.items() if k != name}
    if scope_failed:
        notes.append("not computed: " + "; ".join(f"{k} ({v})" for k, v in list(scope_failed.items())[:3]))
    return fn, config, notes


def _config_names():
    """Config names in lower case: a script's MAX_ITERS / WARMUP_ITERS constants are the same settings."""
    return HORIZON_NAMES + WARMUP_NAMES + BASE_NAMES + MIN_NAMES + DECAY_NAMES + FLAG_NAMES


def _first(config, names):
    for n in names:
        v = config.get(n)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return n, v
    return None, None


def _as_float(v) -> float:
    if isinstance(v, (list, tuple)):
        v = v[0]
    if hasattr(v, "item"):
        v = v.item()
    return float(v)


def _steps(horizon: int, landmarks) -> list:
    """Every step when affordable, else a grid plus every step of the start and around the landmarks."""
    if horizon + 1 <= MAX_EVAL:
        return list(range(horizon + 1))
    stride = math.ceil((horizon + 1) / MAX_EVAL)
    pts = set(range(0, horizon + 1, stride)) | set(range(min(horizon + 1, 20001))) | {horizon}
    for m in landmarks:
        pts |= {s for s in range(int(m) - 2, int(m) + 3) if 0 <= s <= horizon}
    return sorted(pts)


def return_line(fn, arg) -> str | None:
    """file:line: source of the statement `fn(arg)` returned from (sys.settrace on fn's own frame)."""
    code = getattr(inspect_unwrap(fn), "__code__", None)
    if code is None:
        return None
    seen = {}

    def local(frame, event, _):
        if event == "return" and frame.f_code is code:
            seen["line"] = frame.f_lineno
        return local

    def glob(frame, event, _):
        return local if frame.f_code is code else None

    old = sys.gettrace()
    sys.settrace(glob)
    try:
        fn(arg)
    except Exception:  # noqa: BLE001 - the curve was computed already; a line is a bonus
        return None
    finally:
        sys.settrace(old)
    line = seen.get("line")
    if line is None:
        return None
    path = code.co_filename
    try:
        text = Path(path).read_text().splitlines()[line - 1].strip()
    except (OSError, IndexError):
        text = ""
    cwd = os.getcwd() + os.sep
    rel = path[len(cwd):] if path.startswith(cwd) else path
    return f"{rel}:{line}: {text}"[:240]


def inspect_unwrap(fn):
    while hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__
    return fn


def function_curve(job, fn, horizon, landmarks):
    steps = _steps(horizon, landmarks)
    lrs = []
    for i, s in enumerate(steps):
        try:
            lrs.append(_as_float(fn(s)))
        except TypeError as e:
            if i == 0 and "argument" in str(e):
                raise TargetSpecError(f"the schedule must be a function of the step alone, lr = f(step): {e}") from e
            raise UserCodeError("schedule", e) from e
        except NameError as e:
            # the file was not run: only its top-level plain assignments, imports and defs exist
            raise TargetSpecError(f"{e} when calling the schedule: it reads a name its file sets only when it runs "
                                  "(inside an if/for, from argparse or a config), or a misspelt one; make it a "
                                  "top-level constant or pass a small function with the values written in") from e
        except Exception as e:  # noqa: BLE001
            raise UserCodeError("schedule", e) from e
        if i % 100_000 == 0:
            job.progress(i, len(steps), f"step {s}")
    return steps, lrs


# ---------------------------------------------------------------- a scheduler from a target

def scheduler_from_target(spec, workspace):
    factory = import_callable(spec, workspace)
    try:
        raw = factory()
    except BaseException as e:
        raise UserCodeError("make_target", e) from e

    def get(k):
        return raw.get(k) if isinstance(raw, dict) else getattr(raw, k, None)

    sched = get("scheduler")
    if sched is None and callable(get("make_scheduler")):
        opt = get("optimizer")
        if opt is None and get("make_optimizer") is not None and get("model") is not None:
            opt = get("make_optimizer")(get("model").parameters())
        if opt is None:
            raise TargetSpecError("make_scheduler needs the target's 'optimizer' (or 'make_optimizer' and 'model')")
        try:
            sched = get("make_scheduler")(opt)
        except Exception as e:  # noqa: BLE001
            raise UserCodeError("make_scheduler", e) from e
    if sched is None or not hasattr(sched, "step"):
        raise TargetSpecError("the target returned no 'scheduler' (or 'make_scheduler(optimizer)') to evaluate")
    return sched, {k: get(k) for k in TARGET_HORIZON_KEYS if isinstance(get(k), int) and not isinstance(get(k), bool)}


def _describe(sched) -> str:
    keys = ("step_size", "gamma", "milestones", "T_max", "eta_min", "total_steps", "total_iters", "start_factor",
            "end_factor", "T_0", "power", "pct_start")
    parts = []
    for k in keys:
        v = getattr(sched, k, None)
        if v is not None and not callable(v):
            v = sorted(v) if isinstance(v, (set, dict)) or type(v).__name__ == "Counter" else v
            parts.append(f"{k}={v}")
    inner = getattr(sched, "_schedulers", None)
    if inner:
        parts.append("[" + ", ".join(_describe(s) for s in inner) + "]")
    return f"{type(sched).__name__}({', '.join(parts)})"


def _sched_facts(sched):
    """(horizon or None, where from, base lr, where from, warmup or None, decaying?, cyclic?)."""
    name = type(sched).__name__
    opt = sched.optimizer
    horizon = horizon_from = None
    for attr in ("total_steps", "T_max"):
        v = getattr(sched, attr, None)
        if isinstance(v, int) and v > 0:
            horizon, horizon_from = v, f"{name}.{attr}"
            break
    if horizon is None and name == "PolynomialLR":
        horizon, horizon_from = sched.total_iters, "PolynomialLR.total_iters"
    g0 = opt.param_groups[0]
    if "max_lr" in g0:  # OneCycleLR / CyclicLR: max_lr is the intended peak, initial_lr only the start
        base, base_from = float(g0["max_lr"]), f"{name} max_lr"
    else:
        base = float(getattr(sched, "base_lrs", [g0.get("initial_lr", g0["lr"])])[0])
        base_from = "optimizer lr"
    warmup = None
    kids = getattr(sched, "_schedulers", None) or []
    first = kids[0] if kids else sched
    if type(first).__name__ == "LinearLR" and first.start_factor < first.end_factor:
        warmup = int(first.total_iters)
    elif name == "OneCycleLR":
        warmup = int(getattr(sched, "_schedule_phases", [{}])[0].get("end_step", 0)) or None
    if kids and warmup is not None and name == "SequentialLR":
        warmup = int(sched._milestones[0])
    types = [type(s).__name__ for s in (kids or [sched])]
    decaying = any(t in DECAYING for t in types) or any(
        type(s).__name__ == "LinearLR" and s.end_factor < s.start_factor for s in (kids or [sched]))
    cyclic = any(t in CYCLIC for t in types)
    return horizon, horizon_from, base, base_from, warmup, decaying, cyclic


def scheduler_curve(job, sched, horizon):
    try:
        opt_c, sched_c = copy.deepcopy((sched.optimizer, sched))
    except Exception:  # noqa: BLE001 - this process is thrown away after the probe; stepping the original is harmless
        opt_c, sched_c = sched.optimizer, sched
    lrs = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "scheduler.step() before optimizer.step()": on purpose, nothing trains
        for s in range(horizon + 1):
            lrs.append(float(opt_c.param_groups[0]["lr"]))
            if s == horizon:
                break
            try:
                sched_c.step()
            except Exception as e:  # noqa: BLE001
                raise UserCodeError("scheduler.step", e) from e
            if s % 100_000 == 0:
                job.progress(s, horizon, f"step {s}")
    return list(range(horizon + 1)), lrs, len(opt_c.param_groups)


# ---------------------------------------------------------------- landmarks of the curve

def _sig(x):
    return float(f"{x:.4g}") if math.isfinite(x) else x


def downsample(steps, lrs, keep) -> list:
    """<= CURVE_POINTS [step, lr] pairs: the landmark steps plus an even spread."""
    n = len(steps)
    idx = {0, n - 1} | {i for i in keep if 0 <= i < n}
    room = CURVE_POINTS - len(idx)
    if room > 0:
        idx |= {round(k * (n - 1) / max(1, room - 1)) for k in range(room)}
    idx = sorted(idx)
    while len(idx) > CURVE_POINTS:  # drop evenly spaced non-landmarks
        spare = [i for i in idx if i not in keep and i not in (0, n - 1)]
        if not spare:
            idx = idx[:CURVE_POINTS]
            break
        idx.remove(spare[len(spare) // 2])
    return [[steps[i], _sig(lrs[i])] for i in idx]


def landmarks(steps, lrs, base, warmup):
    n = len(lrs)
    H = steps[-1]
    bad = next((i for i, v in enumerate(lrs) if not math.isfinite(v)), None)
    neg = next((i for i, v in enumerate(lrs) if math.isfinite(v) and v < 0), None)
    fin = [v if math.isfinite(v) else 0.0 for v in lrs]
    peak = max(fin)
    # the first step at the peak: a cycle that comes back a rounding error higher is not a later peak
    ip = next(i for i, v in enumerate(fin) if v >= peak - 1e-9 * abs(peak))
    out = {"horizon": H, "steps_evaluated": n, "first_lr": fin[0], "final_lr": fin[-1], "peak_lr": peak,
           "peak_step": steps[ip], "min_lr_seen": min(fin), "nonfinite_step": steps[bad] if bad is not None else None,
           "negative_step": steps[neg] if neg is not None else None}
    keep = [ip]
    if warmup is None:  # infer: a start well below the peak, reached early
        warmup_i = ip if fin[0] < 0.5 * peak and steps[ip] <= 0.25 * H else 0
        out["warmup_inferred"] = True
    else:
        warmup_i = min(range(n), key=lambda i: abs(steps[i] - min(warmup, H)))
        out["warmup_inferred"] = False
    out["warmup_end"] = steps[warmup_i]
    at_w = fin[warmup_i]
    out["lr_at_warmup_end"] = at_w
    post = range(warmup_i + 1, n)
    if len(post):
        j = max(post, key=lambda i: fin[i])
        out["max_after_warmup"], out["max_after_warmup_step"] = fin[j], steps[j]
        up = next((i for i in post if fin[i] > at_w * (1 + 1e-6) and fin[i] > 0), None)
        out["rise_start_step"] = steps[up] if up is not None else None
        keep += [j] + ([up] if up is not None else [])
    if base and math.isfinite(base) and base > 0:
        above = next((i for i in range(n) if fin[i] > base * (1 + 1e-6)), None)
        twice = next((i for i in range(n) if fin[i] > 2 * base), None)
        out["first_above_base_step"] = steps[above] if above is not None else None
        out["first_above_2x_base_step"] = steps[twice] if twice is not None else None
        keep += [i for i in (above, twice) if i is not None]
    # collapse: the LR falls below 1% of its peak (after the peak) and stays there
    if peak > 0:
        low = next((i for i in range(ip, n) if fin[i] <= 0.01 * peak), None)
        out["below_1pct_step"] = steps[low] if low is not None else None
        if low is not None:
            rest = fin[low:]
            out["below_1pct_share_after"] = sum(1 for v in rest if v <= 0.01 * peak) / len(rest)
            keep.append(low)
        # rebound: after decaying, the LR climbs back to >= 2x its running minimum and >= 10% of the peak
        run_min, run_min_i, reb = fin[ip], ip, None
        for i in range(ip, n):
            if fin[i] < run_min:
                run_min, run_min_i = fin[i], i
            elif fin[i] >= 2 * run_min and fin[i] >= 0.1 * peak and reb is None:
                reb = (run_min_i, i)
        if reb:
            top = max(fin[reb[1]:])
            after = next(i for i in range(reb[1], n) if fin[i] >= top - 1e-9 * abs(top))
            out["rebound"] = {"from_step": steps[reb[0]], "from_lr": fin[reb[0]], "start_step": steps[reb[1]],
                              "to_step": steps[after], "to_lr": fin[after]}
            keep += [reb[0], reb[1], after]
    # jumps between consecutive evaluated steps (a warmup from ~0 and the last 1% are not jumps)
    up_j = down_j = None
    run_max = fin[0]
    for i in range(1, n):
        a, b = fin[i - 1], fin[i]
        if a >= 0.01 * peak and a > 0:
            r = b / a
            if b > 10 * max(run_max, a) and (up_j is None or r > up_j[1]):
                up_j = (i, r)
            if r < 0.099 and steps[i] < 0.99 * H and (down_j is None or r < down_j[1]):
                down_j = (i, r)
        run_max = max(run_max, b)
    for key, j in (("jump_up", up_j), ("jump_down", down_j)):
        if j:
            out[key] = {"step": steps[j[0]], "from_lr": fin[j[0] - 1], "to_lr": fin[j[0]], "ratio": j[1]}
            keep.append(j[0])
    idx = {s: i for i, s in enumerate(steps)}
    return out, keep, idx


def run(job):
    a = job.args
    horizon = a.get("horizon")
    notes, facts = [], {}
    if a.get("lr_schedule"):
        fn, config, notes = load_schedule(a["lr_schedule"], a["workspace"])
        hname, hval = _first(config, HORIZON_NAMES)
        dname, dval = _first(config, DECAY_NAMES)
        if horizon:
            horizon_from = "the horizon argument"
        elif hval is not None:
            horizon, horizon_from = int(hval), hname
        elif dval is not None:
            horizon, horizon_from = int(dval), dname
        else:
            raise TargetSpecError(f"no horizon: {a['lr_schedule']} has no {'/'.join(HORIZON_NAMES[:4])} at module "
                                  "level; pass horizon= the number of training steps")
        wname, wval = _first(config, WARMUP_NAMES)
        bname, bval = _first(config, BASE_NAMES)
        mname, mval = _first(config, MIN_NAMES)
        decaying = dval is not None or (mval is not None and bval and mval < 0.9 * bval)
        if config.get("decay_lr") is False:
            decaying = False
        facts = {"source": "function", "schedule": a["lr_schedule"], "horizon_from": horizon_from,
                 "base_lr": bval, "base_lr_from": bname, "warmup": int(wval) if wval is not None else None,
                 "warmup_from": wname, "decay_expected": bool(decaying), "cyclic": False,
                 "config": {k: v for k, v in config.items()}}
        if horizon < 1:
            raise TargetSpecError(f"horizon {horizon} from {horizon_from} is not a positive number of steps")
        steps, lrs = function_curve(job, fn, int(horizon), [v for v in (wval, dval) if v is not None])
        line_fn = fn
        if bval and bval < 0.5 and abs(max(lrs) - 1.0) < 1e-9:
            # a LambdaLR-style multiplier peaking at exactly 1: the LR is bval times it
            facts["base_lr"], facts["base_lr_from"] = 1.0, "a multiplier (the function peaks at exactly 1.0)"
            notes.append(f"the values look like multipliers of {bname}={bval}, not learning rates")
    else:
        sched, target_h = scheduler_from_target(a["target"], a["workspace"])
        if type(sched).__name__ == "ReduceLROnPlateau":
            return {"source": "scheduler", "schedule": "ReduceLROnPlateau",
                    "note": "ReduceLROnPlateau follows the validation metric; there is no curve to evaluate ahead"}
        h, h_from, base, base_from, warmup, decaying, cyclic = _sched_facts(sched)
        if horizon:
            horizon_from = "the horizon argument"
        elif target_h:
            k = next(iter(target_h))
            horizon, horizon_from = target_h[k], f"the target's {k!r}"
        elif h:
            horizon, horizon_from = h, h_from
        else:
            raise TargetSpecError(f"no horizon for {type(sched).__name__}: pass horizon= the number of "
                                  "scheduler.step() calls the training makes (or return 'max_steps' from the target)")
        if horizon > MAX_EVAL:
            notes.append(f"horizon {horizon} capped at {MAX_EVAL} scheduler steps")
            horizon = MAX_EVAL
        facts = {"source": "scheduler", "schedule": _describe(sched), "horizon_from": horizon_from, "base_lr": base,
                 "base_lr_from": base_from, "warmup": warmup, "warmup_from": type(sched).__name__ if warmup else None,
                 "decay_expected": decaying, "cyclic": cyclic}
        steps, lrs, groups = scheduler_curve(job, sched, int(horizon))
        if groups > 1:
            notes.append(f"{groups} param groups; the curve is group 0's")
        lam = getattr(sched, "lr_lambdas", None)
        line_fn = lam[0] if lam and callable(lam[0]) else None
    marks, keep, idx = landmarks(steps, lrs, facts.get("base_lr"), facts.get("warmup"))
    lines = {}
    if line_fn is not None:
        wanted = {marks.get(k) for k in ("first_above_base_step", "first_above_2x_base_step", "rise_start_step",
                                         "below_1pct_step", "peak_step", "negative_step", "nonfinite_step")}
        wanted |= {marks[k]["step"] for k in ("jump_up", "jump_down") if k in marks}
        wanted |= {marks["rebound"]["start_step"]} if "rebound" in marks else set()
        wanted.add(marks["horizon"])
        for s in sorted(w for w in wanted if w is not None)[:12]:
            loc = return_line(line_fn, s)
            if loc:
                lines[str(s)] = loc
    job.progress(1, 1, "done", force=True)
    return {**facts, **marks, "curve": downsample(steps, lrs, keep), "lines": lines, "notes": notes}


if __name__ == "__main__":
    main(run)
