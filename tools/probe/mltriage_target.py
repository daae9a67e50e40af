"""Load a target factory ("path/file.py:make_target" or "pkg.module:make_target") in the user's Python.

The factory returns a mapping or an object with: model (required), batch or data, loss_fn(model, batch)
(unless the model returns a loss), optimizer or make_optimizer(params), num_classes, task.
"""

import contextlib
import importlib
import importlib.util
import itertools
import os
import sys
import threading
import time
from pathlib import Path

from mltriage_io import UserCodeError


class TargetSpecError(ValueError):
    pass


def import_callable(spec: str, workspace: str, what: str = "target"):
    """The callable named by 'file.py:name' (relative to the workspace) or 'pkg.module:name'."""
    if ":" not in spec:
        raise TargetSpecError(f"{what} {spec!r} must look like 'file.py:name' or 'pkg.module:name'")
    where, name = spec.rsplit(":", 1)
    if workspace and workspace not in sys.path:
        sys.path.insert(0, workspace)
    try:
        if where.endswith(".py"):
            path = Path(where)
            path = path if path.is_absolute() else Path(workspace) / path
            if not path.is_file():
                raise TargetSpecError(f"{what} file {where!r} does not exist")
            sys.path.insert(0, str(path.parent))
            mod_name = f"mltriage_{what}_" + path.stem
            module_spec = importlib.util.spec_from_file_location(mod_name, path)
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[mod_name] = module
            module_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(where)
    except TargetSpecError:
        raise
    except BaseException as e:  # their module raised while importing
        raise UserCodeError("import", e) from e
    fn = getattr(module, name, None)
    if fn is None or not callable(fn):
        raise TargetSpecError(f"{where!r} has no callable {name!r}")
    return fn


class Target:
    def __init__(self, raw):
        get = raw.get if isinstance(raw, dict) else (lambda k, d=None: getattr(raw, k, d))
        self.model = get("model")
        if self.model is None:
            raise TargetSpecError("the factory returned no 'model'")
        self.batch = get("batch")
        self.data = get("data")
        if self.batch is None and self.data is None:
            raise TargetSpecError("the factory returned neither 'batch' nor 'data'")
        self.loss_fn = get("loss_fn")
        self.optimizer = get("optimizer")
        self.make_optimizer_fn = get("make_optimizer")
        self.num_classes = get("num_classes")
        self.task = get("task")
        self.weight_loads: list[dict] = []  # load_target fills it: what each load_state_dict filled
        self.loaders: list = []  # and this: (DataLoader, where it was built) for each loader the factory built

    def first_batch(self):
        if self.batch is not None:
            return self.batch
        return next(iter(self.data))

    def batches(self, n: int):
        """n batches: cycling through `data`, or the one `batch` repeated."""
        if self.data is None:
            return [self.batch] * n
        out = list(itertools.islice(iter(self.data), n))
        while out and len(out) < n:
            out += out[: n - len(out)]
        return out

    def make_optimizer(self, params):
        """A fresh optimizer of the user's kind over `params` (their make_optimizer, else AdamW 3e-4)."""
        import torch
        if self.make_optimizer_fn is not None:
            return self.make_optimizer_fn(params)
        return torch.optim.AdamW(params, lr=3e-4)

    def get_optimizer(self):
        """The user's optimizer as configured (their param groups and lr), else a default one."""
        if self.optimizer is not None:
            return self.optimizer
        if self.make_optimizer_fn is not None:
            try:
                return self.make_optimizer_fn(self.model.parameters())
            except Exception as e:  # noqa: BLE001 - their factory raised: data, not a probe failure
                raise UserCodeError("make_optimizer", e) from e
        import torch
        return torch.optim.AdamW(self.model.parameters(), lr=3e-4)

    def loss(self, model, batch):
        if self.loss_fn is not None:
            return self.loss_fn(model, batch)
        out = model(**batch) if isinstance(batch, dict) else model(batch)
        loss = getattr(out, "loss", None)
        if loss is None and isinstance(out, dict):
            loss = out.get("loss")
        if loss is None:
            raise TargetSpecError("no loss_fn given and the model output has no 'loss'")
        return loss


def load_target(spec: str, workspace: str) -> Target:
    loads: list[dict] = []
    loaders: list = []
    with _loading_clock(), _watching_loads(loads), _watching_loaders(loaders):
        factory = import_callable(spec, workspace)  # the import counts: a module may build its data at import
        try:
            raw = factory()
        except BaseException as e:
            raise UserCodeError("make_target", e) from e
    target = Target(raw)
    target.weight_loads = [_overwritten(l, target.model) for l in loads]
    target.loaders = loaders
    return target


@contextlib.contextmanager
def _watching_loaders(loaders: list):
    """Each DataLoader the factory builds, with the line that built it: a factory that builds the validation
    loader beside the training one (through the same helper as train.py) lets data_check compare the two."""
    try:
        from torch.utils.data import DataLoader
    except ImportError:
        yield
        return
    orig = DataLoader.__init__

    def init(self, *a, **k):
        orig(self, *a, **k)
        try:
            from mltriage_torch import user_frame
            if len(loaders) < 8 and not any(l is self for l, _ in loaders):
                loaders.append((self, user_frame()))
        except Exception:  # noqa: BLE001 - watching must never change what their factory does
            pass

    DataLoader.__init__ = init
    try:
        yield
    finally:
        DataLoader.__init__ = orig


def _overwritten(load: dict, model) -> dict:
    """How many of the parameters a load filled no longer hold the checkpoint's values when the factory returns
    (an init, `apply(_init_weights)` or `post_init()` run after loading): the model trains from random weights."""
    module, snap = load.pop("_module", None), load.pop("_snapshot", None)
    if module is None or snap is None:
        return load
    try:
        import torch
        now = dict(module.named_parameters())
        changed = [k for k, v in snap.items() if k in now and not torch.equal(now[k].detach(), v)]
        in_model = any(m is module for m in model.modules()) if hasattr(model, "modules") else False
        load.update(compared=len(snap), overwritten=len(changed), overwritten_keys=changed[:3], in_model=in_model)
    except Exception:  # noqa: BLE001 - watching must never change what their factory does
        pass
    return load


@contextlib.contextmanager
def _watching_loads(loads: list[dict]):
    """Each Module.load_state_dict the factory makes: how many of the module's tensors it filled. With
    strict=False a checkpoint saved from a wrapper ('encoder.conv1.weight' for 'conv1.weight') loads nothing,
    silently, and the 'pretrained' model trains from its random init."""
    try:
        import torch
    except ImportError:
        yield
        return
    orig = torch.nn.Module.load_state_dict

    def load_state_dict(module, state_dict, *a, **k):
        result = orig(module, state_dict, *a, **k)
        try:
            from mltriage_torch import user_frame
            # BatchNorm fills a missing num_batches_tracked itself and never reports it: not a weight
            keys = [k for k in module.state_dict() if not k.endswith("num_batches_tracked")]
            missing = [k for k in getattr(result, "missing_keys", None) or [] if not k.endswith("num_batches_tracked")]
            unexpected = list(getattr(result, "unexpected_keys", None) or [])
            record = {"module": type(module).__name__, "strict": bool(k.get("strict", a[0] if a else True)),
                      "keys": len(keys), "missing": len(missing), "unexpected": len(unexpected),
                      "missing_keys": missing[:3], "unexpected_keys": unexpected[:3],
                      "renamed": _renamed(missing, unexpected), "where": user_frame()}
            # the parameters it filled, to compare when the factory returns (bounded: a big model is not copied)
            filled = {n: p.detach().clone() for n, p in module.named_parameters() if n not in missing}
            if 0 < sum(v.numel() for v in filled.values()) <= 20_000_000:
                record.update(_module=module, _snapshot=filled)
            loads.append(record)
        except Exception:  # noqa: BLE001 - watching must never change what their factory does
            pass
        return result

    torch.nn.Module.load_state_dict = load_state_dict
    try:
        yield
    finally:
        torch.nn.Module.load_state_dict = orig


def _renamed(missing: list[str], unexpected: list[str]) -> list[str] | None:
    """[checkpoint key, model key] when the checkpoint's keys are the model's with a prefix added or removed."""
    for m in missing:
        for u in unexpected:
            if u.endswith("." + m) or m.endswith("." + u):
                return [u, m]
    return None


_busy_total = [0.0]  # seconds this process spent working inside the user's factory, over all its loads


@contextlib.contextmanager
def _loading_clock(tick: float = 0.5, busy: float = 0.1):
    """Tell the runner how long the user's factory kept this process busy: a factory that loads a checkpoint or
    pretrains for 40 s must not eat the probe's own time (the runner adds it to the deadline, up to the timeout
    once more). Busy means the process used CPU (>= 10% of a core) in that tick: a factory deadlocked in a data
    loader sits at ~0% and gets no extra time, so a hang is still killed at the plain timeout."""
    job = os.environ.get("MLTRIAGE_JOB")
    if not job:
        yield
        return
    done = threading.Event()

    def watch():
        wall, cpu = time.monotonic(), time.process_time()
        while not done.wait(tick):
            w, c = time.monotonic(), time.process_time()
            if c - cpu >= busy * (w - wall):
                _busy_total[0] += w - wall
                try:
                    with open(os.path.join(job, "factory_seconds"), "a") as f:
                        f.write(f"{_busy_total[0]:.2f}\n")
                except OSError:
                    return
            wall, cpu = w, c

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        yield
    finally:
        done.set()
