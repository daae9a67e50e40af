"""Torch helpers every probe shares: fused norms, tensor statistics, the NaN localiser, activation stats.

Runs in the user's interpreter (stdlib + torch only). Anything that runs once per training step is
device-side and synchronises the host at most once; the expensive, precise passes (every op checked,
every gradient hooked) run only after a cheap check has tripped.
"""

import inspect
import os
import time
import sys

import torch
from torch.overrides import TorchFunctionMode

_TORCH_DIR = os.path.dirname(torch.__file__)
_PROBE_DIR = os.path.dirname(os.path.abspath(__file__))


# ---------------------------------------------------------------- norms, one sync

# The short trainings inside a probe (random-input test, real vs permuted labels) get at most this long, and at
# least this many steps: on a heavy model 40 steps can take a minute on a CPU, and they need only a direction.
SHORT_TRAIN_S, SHORT_TRAIN_MIN_STEPS = 8.0, 10


def short_train_over(start: float, step: int) -> bool:
    """Whether a probe's short training that began at time.monotonic() == start should stop before `step`."""
    return step >= SHORT_TRAIN_MIN_STEPS and time.monotonic() - start > SHORT_TRAIN_S


def norms(tensors) -> torch.Tensor:
    """The L2 norm of every tensor, as one device-side vector (no host synchronisation)."""
    tensors = [t.detach() for t in tensors]
    if not tensors:
        return torch.zeros(0)
    by_device: dict = {}
    for i, t in enumerate(tensors):
        by_device.setdefault((t.device, t.dtype), []).append(i)
    if len(by_device) == 1:
        return torch.stack(torch._foreach_norm(tensors)).float()
    out = [None] * len(tensors)
    first = tensors[0].device
    for idx in by_device.values():
        for i, n in zip(idx, torch._foreach_norm([tensors[i] for i in idx])):
            out[i] = n.float().to(first)
    return torch.stack(out)


def global_norm(tensors) -> torch.Tensor:
    v = norms(tensors)
    return v.norm() if v.numel() else torch.zeros(())


def to_floats(*parts) -> list:
    """Concatenate device-side scalars/vectors and bring them to the host in ONE synchronisation."""
    flat = [p.detach().reshape(-1).float().cpu() if p.device.type != "cpu" else p.detach().reshape(-1).float()
            for p in parts if p is not None]
    return torch.cat(flat).tolist() if flat else []


class StepGuard:
    """The cheap per-step NaN check of nan_hook_run: ONE host synchronisation per step, no module hooks.

    check() reads the loss, the global gradient norm and the parameter norm written by the previous
    optimizer step together; after_step() queues the parameter norm device-side for the next check.
    """

    def __init__(self, params):
        self.params = list(params)
        self.pnorm = None

    def check(self, loss: torch.Tensor) -> tuple:
        """(loss, grad norm, param norm after the previous step) as floats."""
        gn = global_norm([p.grad for p in self.params if p.grad is not None])
        prev = self.pnorm if self.pnorm is not None else torch.zeros((), device=loss.device)
        return tuple(to_floats(loss.detach().reshape(()), gn, prev))

    def after_step(self):
        self.pnorm = global_norm(self.params)


# ---------------------------------------------------------------- tensor statistics

STAT_KEYS = ("min", "max", "absmax", "mean", "std", "zero_frac", "neg_frac", "nan", "inf", "numel")


def stats_vector(t: torch.Tensor) -> torch.Tensor:
    """Statistics of a tensor as a device-side vector in STAT_KEYS order (finite values only for min/max/mean)."""
    t = t.detach()
    if t.is_complex():
        t = t.abs()
    t = t.float().reshape(-1)
    n = t.numel()
    if n == 0:
        return torch.full((len(STAT_KEYS),), float("nan"), device=t.device)
    fin = torch.isfinite(t)
    nan = torch.isnan(t).sum()
    inf = torch.isinf(t).sum()
    fin_n = fin.sum().clamp(min=1)
    tf = torch.where(fin, t, torch.zeros((), device=t.device))
    big = torch.finfo(torch.float32).max
    mn = torch.where(fin, t, torch.full((), big, device=t.device)).min()
    mx = torch.where(fin, t, torch.full((), -big, device=t.device)).max()
    mean = tf.sum() / fin_n
    std = ((torch.where(fin, t - mean, torch.zeros((), device=t.device)) ** 2).sum() / fin_n).sqrt()
    return torch.stack([mn, mx, torch.maximum(mn.abs(), mx.abs()), mean, std,
                        (t == 0).sum() / n, (t < 0).sum() / n, nan.float(), inf.float(),
                        torch.tensor(float(n), device=t.device)])


def stats_dict(values: list) -> dict:
    d = dict(zip(STAT_KEYS, values))
    d["nan"], d["inf"], d["numel"] = int(d["nan"]), int(d["inf"]), int(d["numel"])
    if d["nan"] + d["inf"] == d["numel"]:
        d["min"] = d["max"] = d["absmax"] = d["mean"] = d["std"] = float("nan")
    return d


def tensor_stats(named: list) -> list:
    """[(label, tensor)] -> [dict(label, shape, dtype, **stats)] with one synchronisation."""
    named = [(k, t) for k, t in named if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex()
                                                                           or t.dtype in _INT_TYPES)]
    if not named:
        return []
    vals = to_floats(*[stats_vector(t) for _, t in named])
    k = len(STAT_KEYS)
    return [{"name": label, "shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""),
             **stats_dict(vals[i * k:(i + 1) * k])} for i, (label, t) in enumerate(named)]


_INT_TYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool)


def prediction(out, scalar_ok: bool = False):
    """The model's prediction in its output: the first float tensor with a batch dimension, not a scalar loss it
    returns beside it (HF style {"loss": scalar, "logits": (B,)}); the first float scalar only if `scalar_ok`."""
    floats = [t for _, t in flatten(out) if t.is_floating_point()]
    return next((t for t in floats if t.dim() > 0), floats[0] if scalar_ok and floats else None)


def flatten(obj, path="") -> list:
    """Every tensor inside a (nested) tuple/list/dict/dataclass-like output, with its path."""
    if isinstance(obj, torch.Tensor):
        return [(path or "output", obj)]
    out = []
    if isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            out += flatten(v, f"{path}[{i}]")
    elif isinstance(obj, dict):
        for k, v in obj.items():
            out += flatten(v, f"{path}[{k!r}]")
    elif hasattr(obj, "__dict__") and not isinstance(obj, (torch.nn.Module, type)):
        for k, v in vars(obj).items():
            if isinstance(v, (torch.Tensor, list, tuple, dict)):
                out += flatten(v, f"{path}.{k}")
    return out


def all_finite(obj) -> bool:
    ts = [t for _, t in flatten(obj) if t.is_floating_point() or t.is_complex()]
    if not ts:
        return True
    return bool(torch.stack([torch.isfinite(t.detach()).all() for t in ts]).all())


def relative(path: str) -> str:
    """A path as the agent names it: relative to the workspace the probe runs in, when it lies inside it."""
    cwd = os.getcwd() + os.sep
    return path[len(cwd):] if path.startswith(cwd) else path


def source_of(obj) -> tuple:
    """(file relative to the cwd, first line, source lines) of a function or class, or (None, None, None)."""
    try:
        obj = inspect.unwrap(obj)
        lines, first = inspect.getsourcelines(obj)
        path = inspect.getsourcefile(obj) or ""
    except (OSError, TypeError):
        return None, None, None
    return relative(path), first, lines


def user_frame(skip_dirs=(_TORCH_DIR, _PROBE_DIR)) -> str | None:
    """file:line (function) of the innermost frame that belongs to the user's code."""
    f = sys._getframe(1)
    while f is not None:
        fn = f.f_code.co_filename
        if not fn.startswith(skip_dirs) and not fn.startswith("<"):
            return f"{relative(fn)}:{f.f_lineno} ({f.f_code.co_name})"
        f = f.f_back
    return None


def param_names(model: torch.nn.Module) -> dict:
    return {id(p): n for n, p in model.named_parameters()}


def owner_modules(model: torch.nn.Module) -> dict:
    """id(param) -> (module qualified name, module type)."""
    out = {}
    for mname, m in model.named_modules():
        for _, p in m.named_parameters(recurse=False):
            out.setdefault(id(p), (mname, type(m).__name__))
    return out


# ---------------------------------------------------------------- the NaN localiser (precise, slow, run on a trip)

def _fn_name(func) -> str:
    name = getattr(func, "__name__", None) or str(func)
    return name.strip("_") if name.startswith("__") else name


_SKIP = {"__get__", "__set__", "size", "dim", "numel", "stride", "data_ptr", "__len__", "__bool__", "item",
         "tolist", "is_floating_point", "detach", "register_hook", "__repr__", "__format__"}


class Localiser(TorchFunctionMode):
    """Re-runs a step with every op checked: the first op whose output is non-finite from finite inputs.

    Also records, for the backward pass, a gradient hook on every op output so the first op whose
    backward turned a finite gradient into a non-finite one is named.
    """

    def __init__(self, model: torch.nn.Module | None):
        super().__init__()
        self.model = model
        self.names = {id(m): n or "(root)" for n, m in model.named_modules()} if model is not None else {}
        self.stack: list = []
        self.first = None               # forward: dict describing the first non-finite op
        self.first_module = None        # forward: first module whose output is non-finite
        self.bad_input_module = None    # a module that received non-finite input first
        self.ops: list = []             # (name, module, where, output tensor, input op indices)
        self.by_tensor: dict = {}
        self.grad_ok: dict = {}
        self.grad_events: list = []
        self._hooks = []

    # module context via global hooks (only while localising)
    def __enter__(self):
        from torch.nn.modules import module as mm
        self._hooks = [mm.register_module_forward_pre_hook(self._pre),
                       mm.register_module_forward_hook(self._post)]
        return super().__enter__()

    def __exit__(self, *exc):
        for h in self._hooks:
            h.remove()
        return super().__exit__(*exc)

    def _mname(self, m):
        return self.names.get(id(m), type(m).__name__)

    def _pre(self, m, args):
        self.stack.append(m)
        if self.first is None and self.bad_input_module is None and not all_finite(args):
            self.bad_input_module = {"module": self._mname(m), "type": type(m).__name__,
                                     "inputs": tensor_stats([(f"input{p}", t) for p, t in flatten(args)])}

    def _post(self, m, args, out):
        if self.stack and self.stack[-1] is m:
            self.stack.pop()
        if self.first_module is None:
            bad = [p for p, t in flatten(out) if (t.is_floating_point() or t.is_complex())
                   and not bool(torch.isfinite(t.detach()).all())]
            if bad:
                self.first_module = {
                    "module": self._mname(m), "type": type(m).__name__, "output": bad[0],
                    "inputs": tensor_stats([(f"input{p}", t) for p, t in flatten(args)]),
                    "params": tensor_stats(list(m.named_parameters(recurse=False)) or list(m.named_parameters())[:8]),
                }

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if getattr(func, "__name__", "") in _SKIP:
            return out
        name = _fn_name(func)
        outs = [t for _, t in flatten(out) if isinstance(t, torch.Tensor)]
        fouts = [t for t in outs if t.is_floating_point() or t.is_complex()]
        if not fouts:
            return out
        ins = [t for _, t in flatten((args, kwargs))]
        module = self._mname(self.stack[-1]) if self.stack else None
        idx = len(self.ops)
        in_idx = [self.by_tensor[id(t)] for t in ins if id(t) in self.by_tensor]
        where = user_frame()
        self.ops.append((name, module, where, fouts, in_idx))
        for t in fouts:
            self.by_tensor[id(t)] = idx
            if t.requires_grad and t.grad_fn is not None:
                t.register_hook(self._grad_hook(idx))
        if self.first is None:
            out_ok = all(bool(torch.isfinite(t.detach()).all()) for t in fouts)
            if not out_ok:
                in_f = [t for t in ins if t.is_floating_point() or t.is_complex()]
                in_ok = all(bool(torch.isfinite(t.detach()).all()) for t in in_f)
                self.first = {
                    "op": name, "module": module, "where": where, "inputs_finite": in_ok,
                    "module_type": type(self.stack[-1]).__name__ if self.stack else None,
                    "inputs": tensor_stats([(f"arg{i}", t) for i, t in enumerate(ins)][:4]),
                    "output": tensor_stats([("output", fouts[0])])[0],
                }
        return out

    def _grad_hook(self, idx):
        def hook(g):
            ok = bool(torch.isfinite(g).all())
            self.grad_ok[idx] = self.grad_ok.get(idx, True) and ok
            self.grad_events.append((idx, ok))
            return None
        return hook

    def backward_culprit(self):
        """The op whose output gradient was finite but whose backward made an input gradient non-finite."""
        bad_first = next((i for i, ok in self.grad_events if not ok), None)
        if bad_first is None:
            return None
        # the op that consumed the first non-finite-gradient tensor and had a finite output gradient
        for i in range(len(self.ops) - 1, -1, -1):
            name, module, where, fouts, in_idx = self.ops[i]
            if self.grad_ok.get(i, True) and any(not self.grad_ok.get(j, True) for j in in_idx):
                return {"op": name, "module": module, "op_index": i, "where": where,
                        "inputs": tensor_stats([(f"arg{k}", self.ops[j][3][0]) for k, j in enumerate(in_idx)][:4])}
        name, module, where, fouts, in_idx = self.ops[bad_first]
        return {"op": name, "module": module, "op_index": bad_first, "where": where, "inputs": []}


# ---------------------------------------------------------------- activation statistics (one forward)

RELU_LIKE = {"relu", "relu_", "relu6", "leaky_relu", "elu", "gelu", "silu", "hardtanh", "threshold", "celu", "selu"}
SATURATING = {"sigmoid", "sigmoid_", "tanh", "tanh_"}


class ActivationRecorder(TorchFunctionMode):
    """Records device-side statistics of every activation function output (functional or nn.Module)."""

    def __init__(self, model: torch.nn.Module | None = None, max_records: int = 200):
        super().__init__()
        self.names = {id(m): n or "(root)" for n, m in model.named_modules()} if model is not None else {}
        self.stack: list = []
        self.records: list = []
        self.storages: list = []  # per record, the storage its tensor lives in (which one is the model's output?)
        self.max_records = max_records
        self._hooks = []
        self.module_order: list = []
        self.seen: set = set()

    def __enter__(self):
        from torch.nn.modules import module as mm
        self._hooks = [mm.register_module_forward_pre_hook(self._pre), mm.register_module_forward_hook(self._post)]
        return super().__enter__()

    def __exit__(self, *exc):
        for h in self._hooks:
            h.remove()
        return super().__exit__(*exc)

    def _pre(self, m, args):
        self.stack.append(m)
        name = self.names.get(id(m))
        if name is not None and name not in self.seen:
            self.seen.add(name)
            self.module_order.append(name)

    def _post(self, m, args, out):
        if self.stack and self.stack[-1] is m:
            self.stack.pop()
        # layers with their own weights: output scale vs input scale (the init check names the layer that blows up)
        if isinstance(out, torch.Tensor) and out.is_floating_point() and len(self.records) < self.max_records \
                and next(m.parameters(recurse=False), None) is not None:
            inp = next((t for _, t in flatten(args) if t.is_floating_point()), None)
            self.records.append((self.names.get(id(m), type(m).__name__), type(m).__name__, "output", "layer",
                                 _act_vector(out.detach(), "layer", "output", inp)))
            self.storages.append(storage_of(out))

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = _fn_name(func)
        kind = "relu" if name in RELU_LIKE else "saturating" if name in SATURATING else None
        if kind and isinstance(out, torch.Tensor) and out.is_floating_point() and len(self.records) < self.max_records:
            m = self.stack[-1] if self.stack else None
            label = self.names.get(id(m), type(m).__name__) if m is not None else "(top level)"
            self.records.append((label, type(m).__name__ if m is not None else None, name, kind,
                                 _act_vector(out.detach(), kind, name)))
            self.storages.append(storage_of(out))
        return out

    def results(self) -> list:
        return decode_acts(self.records, to_floats(*[r[4] for r in self.records])) if self.records else []


def storage_of(t: torch.Tensor) -> int:
    """Where a tensor's data lives: a view (squeeze, reshape) of an activation shares it."""
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):  # a tensor subclass without storage
        return -1


def decode_acts(records, vals) -> list:
    out = []
    for i, (label, mtype, op, kind, _) in enumerate(records):
        mean, std, zero, dead, sat, const, in_std = vals[i * 7:(i + 1) * 7]
        out.append({"module": label, "module_type": mtype, "op": op, "kind": kind, "mean": mean, "std": std,
                    "input_std": in_std if kind == "layer" else None, "zero_frac": zero,
                    "dead_unit_frac": dead if kind == "relu" else None,
                    "saturated_frac": sat if kind == "saturating" else None, "constant": const > 0.5})
    return out


def _act_vector(t: torch.Tensor, kind: str, op: str, inp: torch.Tensor | None = None) -> torch.Tensor:
    t = t.float()
    in_std = inp.detach().float().std() if inp is not None and inp.numel() > 1 else torch.zeros((), device=t.device)
    if t.dim() >= 2:
        unit_dim = 1 if t.dim() == 4 else t.dim() - 1
        units = t.movedim(unit_dim, -1).reshape(-1, t.shape[unit_dim])
    else:
        units = t.reshape(-1, 1)
    dead = (units == 0).all(dim=0).float().mean() if kind == "relu" else torch.zeros(())
    if op.startswith("tanh"):
        sat = (t.abs() > 0.99).float().mean()
    elif op.startswith("sigmoid"):
        sat = ((t < 0.01) | (t > 0.99)).float().mean()
    else:
        sat = torch.zeros(())
    rows = units.shape[0]
    const = ((units.max(0).values - units.min(0).values).abs().max() <= 1e-7 * (1 + units.abs().max())).float() \
        if rows > 1 else torch.zeros(())
    return torch.stack([t.mean(), t.std() if t.numel() > 1 else torch.zeros(()), (t == 0).float().mean(),
                        dead.to(t.device), sat.to(t.device), const.to(t.device), in_std.to(t.device)])


# ---------------------------------------------------------------- which loss, which labels

LOSSES = {"cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
          "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div", "gaussian_nll_loss"}


def outer_broadcast(a, b):
    """(shape of the operand with an extra size-1 axis, shape of the other, the result's shape, that axis) when one operand is
    the other plus a size-1 axis after the first ((N, 1) against (N,), (B, 1, T) against (B, T): a forgotten
    squeeze): the op's result then pairs every row with every row ((N, N), (B, B, T)); None otherwise. A leading
    size-1 axis broadcasts harmlessly, and a view of the same memory (x[:, None] - x) is a deliberate pairwise
    difference."""
    for x, y in ((a, b), (b, a)):
        if x.dim() != y.dim() + 1 or y.dim() < 1 or x.data_ptr() == y.data_ptr():
            continue
        for k in range(1, x.dim()):
            if x.shape[k] == 1 and tuple(x.shape[:k]) + tuple(x.shape[k + 1:]) == tuple(y.shape):
                out = torch.broadcast_shapes(x.shape, y.shape)
                if out.numel() > max(x.numel(), y.numel()):
                    return list(x.shape), list(y.shape), list(out), k
    return None


class BroadcastWatch(TorchFunctionMode):
    """Notes the ops of the user's own code where a (N, 1) tensor meets a (N,) one, or (B, 1, T) a (B, T) one
    (pred - target in a hand-written loss): they broadcast to (N, N) or (B, B, T) silently, and the mean over that matrix trains the model to
    predict the batch mean. F.mse_loss at least warns; `(pred - y) ** 2` does not."""

    def __init__(self):
        super().__init__()
        self.hits = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if len(self.hits) < 3 and getattr(func, "__name__", "") not in _SKIP:
            ts = [v for v in (*args[:2], kwargs.get("target")) if isinstance(v, torch.Tensor)]
            got = outer_broadcast(ts[0], ts[1]) if len(ts) >= 2 else None
            if got is not None and (where := user_frame()) is not None:
                self.hits.append({"op": _fn_name(func), "where": where, "shapes": got[:2], "result": got[2],
                                  "axis": got[3]})
        return func(*args, **kwargs)


class LossSpy(TorchFunctionMode):
    """Notes the first standard loss function the target's loss calls: its name, input and target."""

    def __init__(self):
        super().__init__()
        self.name = self.input = self.target = None
        self.shapes = None
        self.value = None        # what that loss call returned
        self.reduction = None
        self.weight = None       # the per-class weight a cross-entropy / NLL call was given, if any
        self.poisson = None      # a Poisson NLL call: is its input read as a log-rate, and its smallest value
        self.ignore_index = None  # a cross-entropy / NLL call's ignore_index

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name == "poisson_nll_loss" and self.poisson is None and args and isinstance(args[0], torch.Tensor) \
                and args[0].is_floating_point() and args[0].numel():
            log_input = kwargs.get("log_input", args[2] if len(args) > 2 else True)
            self.poisson = {"log_input": bool(log_input), "input_min": args[0].detach().min(),
                            "elements": args[0].numel()}
        if self.name is None and name in LOSSES:
            vals = list(args) + [kwargs.get("input"), kwargs.get("target")]
            ts = [v for v in vals if isinstance(v, torch.Tensor)]
            if len(ts) >= 2:
                self.name, self.input, self.target = name, ts[0].detach(), ts[1].detach()
                self.shapes = [list(ts[0].shape), list(ts[1].shape)]
                self.reduction = kwargs.get("reduction", "mean")
                weight = kwargs.get("weight", args[2] if len(args) > 2 else None)
                if name in ("cross_entropy", "nll_loss") and isinstance(weight, torch.Tensor):
                    self.weight = weight.detach().float().cpu()
                if name in ("cross_entropy", "nll_loss"):
                    self.ignore_index = kwargs.get("ignore_index", args[4] if len(args) > 4 else -100)
                out = func(*args, **kwargs)
                if isinstance(out, torch.Tensor):
                    self.value = out.detach()
                return out
        return func(*args, **kwargs)

    def per_element(self):
        """The loss call's value per element (a 0-dim tensor), whatever its reduction; None if unknown."""
        if self.value is None or self.input is None:
            return None
        v = self.value.float()
        if self.reduction == "mean":
            return v.reshape(())
        if self.name in ("cross_entropy", "nll_loss") and self.input.dim() >= 2:
            n = self.input.numel() // max(1, self.input.shape[1])
        else:
            n = self.target.numel()
        return v.sum() / max(1, n)


def label_slot(batch, spy: "LossSpy | None" = None):
    """Where the labels sit in a batch: an index / key, found by identity with the loss target, else by convention."""
    if spy is not None and spy.target is not None:
        for path, t in flatten(batch):
            if t is spy.target or (t.shape == spy.target.shape and t.data_ptr() == spy.target.data_ptr()):
                return path
    if isinstance(batch, dict):
        for k in ("labels", "label", "targets", "target", "y"):
            if k in batch:
                return f"[{k!r}]"
        return None
    if isinstance(batch, (list, tuple)) and len(batch) >= 2 and isinstance(batch[-1], torch.Tensor):
        return f"[{len(batch) - 1}]"
    return None


def _map_tensors(batch, fn):
    """A copy of `batch` with every tensor t at flatten-path p replaced by fn(t, p)."""
    def go(obj, p):
        if isinstance(obj, torch.Tensor):
            return fn(obj, p)
        if isinstance(obj, (list, tuple)):
            vals = [go(v, f"{p}[{i}]") for i, v in enumerate(obj)]
            return type(obj)(vals) if not hasattr(obj, "_fields") else type(obj)(*vals)
        if isinstance(obj, dict):
            return {k: go(v, f"{p}[{k!r}]") for k, v in obj.items()}
        return obj
    return go(batch, "")


def replace_at(batch, path: str, fn):
    """A copy of `batch` with the tensor at `path` (as produced by flatten) replaced by fn(tensor)."""
    return _map_tensors(batch, lambda t, p: fn(t) if p == path else t)


def map_inputs(batch, label_path, fn):
    """A copy of `batch` with every tensor except the labels replaced by fn(tensor)."""
    return _map_tensors(batch, lambda t, p: t if p == label_path else fn(t))


def random_like(t: torch.Tensor) -> torch.Tensor:
    """Random data with the same shape, dtype and rough scale: what the model would see if inputs carried nothing."""
    if t.is_floating_point():
        std = t.float().std() if t.numel() > 1 else torch.ones(())
        return (torch.randn(t.shape, device=t.device) * std + t.float().mean()).to(t.dtype)
    if t.dtype == torch.bool:
        return torch.rand(t.shape, device=t.device) < 0.5
    lo, hi = int(t.min()), int(t.max())
    return torch.randint(lo, hi + 1, t.shape, device=t.device, dtype=t.dtype)


def get(batch, path):
    for p, t in flatten(batch):
        if p == path:
            return t
    return None
