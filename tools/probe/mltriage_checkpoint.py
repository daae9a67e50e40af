"""Read a checkpoint with torch.load(weights_only=True) and describe it; optionally diff it against another.

Runs in the user's interpreter. weights_only=True means the unpickler only rebuilds tensors and plain
containers: a checkpoint that needs any other global (a class, a function such as os.system) is
refused and its globals are listed without being executed.
"""

import math
import pickle

import torch

from mltriage_io import main

MAX_TENSORS = 400


def unsafe_globals(path: str) -> list[str]:
    try:
        return list(torch.serialization.get_unsafe_globals_in_checkpoint(path))
    except Exception:  # noqa: BLE001 - legacy (non-zip) format or an older torch
        import pickletools
        found, strings = [], []
        try:
            with open(path, "rb") as f:
                for op, arg, _ in pickletools.genops(f):  # parses opcodes, executes nothing
                    if op.name in ("GLOBAL", "INST") and arg:
                        found.append(str(arg).replace(" ", "."))
                    elif op.name == "STACK_GLOBAL" and len(strings) >= 2:  # protocol 4+: module, name pushed first
                        found.append(f"{strings[-2]}.{strings[-1]}")
                    elif isinstance(arg, str):
                        strings.append(arg)
        except Exception:  # noqa: BLE001
            pass
        return sorted(set(found))


def load(path: str):
    """(object, None) or (None, refusal dict)."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True), None
    except pickle.UnpicklingError as e:
        text = str(e)
        # torch's message is generic on its first line; the unpickler's own reason follows this marker
        # ("Unsupported global: GLOBAL posix.system" for code, "Unsupported operand 203" for bytes that are no pickle)
        detail = text.split("WeightsUnpickler error:", 1)[1] if "WeightsUnpickler error:" in text else ""
        detail = " ".join(detail.split("Check the documentation", 1)[0].split())
        return None, {"path": path, "reason": text.split("\n")[0][:500], "detail": detail[:500],
                      "unsafe_globals": unsafe_globals(path)}


def flatten(obj, prefix=""):
    """Every tensor in nested dicts/lists as (dotted name, tensor); plus scalar leaves."""
    tensors, scalars = {}, {}

    def walk(o, name):
        if isinstance(o, torch.Tensor):
            tensors[name] = o
        elif isinstance(o, dict):
            for k, v in o.items():
                walk(v, f"{name}.{k}" if name else str(k))
        elif isinstance(o, (list, tuple)):
            for i, v in enumerate(o):
                walk(v, f"{name}.{i}" if name else str(i))
        elif isinstance(o, (int, float, str, bool)) or o is None:
            scalars[name] = o

    walk(obj, prefix)
    return tensors, scalars


def is_optimizer_state(o) -> bool:
    return isinstance(o, dict) and "param_groups" in o and "state" in o


def find_optimizers(obj, name=""):
    if is_optimizer_state(obj):
        return [(name or "<root>", obj)]
    out = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += find_optimizers(v, f"{name}.{k}" if name else str(k))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            out += find_optimizers(v, f"{name}.{i}" if name else str(i))
    return out


def model_tensors(obj) -> tuple[str, dict]:
    """The model's state dict: the whole object if it is one, else the usual keys."""
    if isinstance(obj, dict) and obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
        return "<root>", obj
    if isinstance(obj, dict):
        for key in ("model", "state_dict", "model_state_dict", "model_state", "module", "net", "ema"):
            v = obj.get(key)
            if isinstance(v, dict) and v and any(isinstance(x, torch.Tensor) for x in v.values()):
                return key, {k: t for k, t in v.items() if isinstance(t, torch.Tensor)}
    tensors, _ = flatten({k: v for k, v in obj.items() if not is_optimizer_state(v)} if isinstance(obj, dict) else obj)
    return "<all tensors>", tensors


def optimizer_summary(name, sd) -> dict:
    groups = []
    for g in sd.get("param_groups", []):
        entry = {"n_params": len(g.get("params", []))}
        for k in ("lr", "weight_decay", "momentum", "betas", "eps"):
            if k in g:
                v = g[k]
                entry[k] = [float(x) for x in v] if isinstance(v, (list, tuple)) else float(v)
        groups.append(entry)
    steps, nonfinite = [], []
    for pid, st in sd.get("state", {}).items():
        if not isinstance(st, dict):
            continue
        s = st.get("step")
        if s is not None:
            steps.append(float(s))
        for k, v in st.items():
            if isinstance(v, torch.Tensor) and v.is_floating_point() and v.numel() and not bool(torch.isfinite(v).all()):
                nonfinite.append(f"state[{pid}].{k}")
    return {"key": name, "groups": groups, "step": max(steps) if steps else None,
            "n_states": len(sd.get("state", {})), "nonfinite_state": nonfinite[:50]}


def describe(obj) -> dict:
    model_key, params = model_tensors(obj)
    modules, nonfinite, zeros = {}, [], []
    for name, t in params.items():
        mod = name.rsplit(".", 1)[0] if "." in name else "<top>"
        m = modules.setdefault(mod, {"module": mod, "n_params": 0, "tensors": []})
        m["n_params"] += t.numel()
        if len(m["tensors"]) < 20:
            m["tensors"].append({"name": name.rsplit(".", 1)[-1], "shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", "")})
        if t.is_floating_point() or t.is_complex():
            if t.numel() and not bool(torch.isfinite(t).all()):
                nonfinite.append({"name": name, "n_nan": int(torch.isnan(t).sum()), "n_inf": int(torch.isinf(t).sum())})
            elif t.numel() and not bool(t.count_nonzero()):
                zeros.append({"name": name, "ndim": t.dim()})
    _, scalars = flatten({k: v for k, v in obj.items() if k != model_key} if isinstance(obj, dict) else {})
    meta = {k: v for k, v in scalars.items() if "." not in k or k.split(".")[0] in ("config", "args", "hparams")}
    step = next((obj[k] for k in ("step", "global_step", "iteration", "iter", "it") if isinstance(obj, dict) and isinstance(obj.get(k), (int, float))), None)
    epoch = obj.get("epoch") if isinstance(obj, dict) and isinstance(obj.get("epoch"), (int, float)) else None
    return {
        "top_keys": [str(k) for k in obj.keys()][:100] if isinstance(obj, dict) else [type(obj).__name__],
        "model_key": model_key, "step": step, "epoch": epoch,
        "n_tensors": len(params), "n_params": sum(t.numel() for t in params.values()),
        "modules": list(modules.values())[:MAX_TENSORS], "n_modules": len(modules),
        "nonfinite": nonfinite[:100], "all_zero": zeros[:100],
        "optimizers": [optimizer_summary(n, sd) for n, sd in find_optimizers(obj)],
        "scalars": {k: v for k, v in list(meta.items())[:50]},
    }


def compare(a, b) -> dict:
    _, ta = model_tensors(a)
    _, tb = model_tensors(b)
    rows, same, shape_changed = [], [], []
    for name in ta.keys() & tb.keys():
        x, y = ta[name], tb[name]
        if x.shape != y.shape:
            shape_changed.append({"name": name, "shape": list(x.shape), "other_shape": list(y.shape)})
            continue
        if not (x.is_floating_point() and y.is_floating_point()):
            if not torch.equal(x, y):
                rows.append({"name": name, "max_abs_diff": None, "rel_change": None})
            continue
        x64, y64 = x.double(), y.double()
        diff = (x64 - y64)
        if not bool(diff.count_nonzero()) and bool(torch.isfinite(x64).all()):
            same.append(name)
            continue
        denom = float(y64.norm())
        rel = float(diff.norm()) / denom if denom > 0 else math.inf
        rows.append({"name": name, "max_abs_diff": float(diff.abs().max()), "rel_change": rel})
    rows.sort(key=lambda r: -(r["rel_change"] if isinstance(r["rel_change"], float) and not math.isnan(r["rel_change"]) else math.inf))
    return {"changed": rows[:MAX_TENSORS], "n_changed": len(rows), "unchanged": sorted(same)[:MAX_TENSORS],
            "n_unchanged": len(same), "only_here": sorted(ta.keys() - tb.keys())[:100],
            "only_other": sorted(tb.keys() - ta.keys())[:100], "shape_changed": shape_changed[:100]}


def run(job):
    path, other = job.args["path"], job.args.get("compare_to")
    obj, refused = load(path)
    if refused:
        return {"refused": refused}
    report = describe(obj)
    if other:
        obj2, refused2 = load(other)
        if refused2:
            return {**report, "refused": refused2}
        report["compare"] = compare(obj, obj2)
    return report


if __name__ == "__main__":
    main(run)
