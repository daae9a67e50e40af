"""Probe: profile a few training steps with torch.profiler. Stdlib + torch; runs in the user's interpreter.

Two ways in: `run(job)` drives a target factory's model for warmup + N steps (target mode), and
`install_script_mode()` is called by profile_inject/sitecustomize.py inside the user's own training
script, where torch's global optimizer-step hooks open and close the profiling window.

Besides the profiler's operator table it measures two things the profiler cannot name on its own:
- host-device synchronisations (.item(), .tolist(), .cpu(), .numpy(), print(tensor), f"{t}", float(t),
  bool(t), torch.cuda.synchronize) with the user's file:line that made each, by wrapping those methods;
- forward self time per module, by global module hooks (eager models have no module scopes in the profiler).
"""

import atexit
import linecache
import os
import statistics
import sys
import sysconfig
import threading
import time

from mltriage_io import Job, UserCodeError, error_payload, main

_PROBE_DIR = os.path.dirname(os.path.abspath(__file__))
_STDLIB = os.path.realpath(sysconfig.get_paths()["stdlib"])
WARMUP = 2
TOP = 15

# Tensor methods that make the host wait for the device (on a GPU); label -> attribute.
SYNC_METHODS = {
    "item": ".item()", "tolist": ".tolist()", "cpu": ".cpu()", "numpy": ".numpy()",
    "__repr__": "print/repr(tensor)", "__format__": "f-string/format(tensor)",
    "__float__": "float(tensor)", "__int__": "int(tensor)", "__bool__": "bool(tensor) / if tensor",
}
PROFILER_SYNC_OPS = ("aten::item", "aten::_local_scalar_dense", "cudaStreamSynchronize", "cudaDeviceSynchronize",
                     "cudaEventSynchronize", "cudaMemcpy", "cudaMemcpyAsync")


class SyncWatch:
    """Counts synchronising calls per (kind, user file:line) while installed."""

    def __init__(self, torch):
        self.torch = torch
        self.skip = tuple(os.path.realpath(d) + os.sep for d in (os.path.dirname(torch.__file__), _PROBE_DIR, _STDLIB))
        self.local = threading.local()
        self.points: dict = {}
        self.total_s = 0.0
        self.saved: list = []

    def _where(self):
        """(file, line, direct): the innermost caller outside torch, the standard library and mltriage,
        and whether the user's code made the call itself (not torch or a library on its behalf)."""
        f, fallback, direct = sys._getframe(2), None, None
        while f is not None:
            fn = f.f_code.co_filename
            mine = fn.startswith("<") or (os.path.realpath(fn) + os.sep).startswith(self.skip)
            if direct is None and not (os.path.realpath(fn) + os.sep).startswith(self.skip[1]):
                direct = not mine  # the first frame that is not mltriage's own
            if fn.startswith("<"):
                fallback = fallback or (fn, f.f_lineno)
            elif not mine:
                return fn, f.f_lineno, bool(direct)
            f = f.f_back
        return (*(fallback or ("<unknown>", 0)), bool(direct))

    def _wrap(self, name, label, original):
        watch = self
        torch = self.torch

        def wrapper(*args, **kwargs):
            if getattr(watch.local, "busy", False):  # nested inside another watched call (repr -> item)
                return original(*args, **kwargs)
            watch.local.busy = True
            t0 = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                dt = time.perf_counter() - t0
                watch.local.busy = False
                try:
                    fn, line, direct = watch._where()
                    on_device = not args or not isinstance(args[0], torch.Tensor) or args[0].device.type != "cpu"
                    # a CPU tensor read by torch itself (Adam's step counter) is no sync; one the user's line
                    # reads is, once the model runs on a GPU
                    if on_device or direct:
                        p = watch.points.setdefault((label, fn, line), [0, 0.0, on_device])
                        p[0] += 1
                        p[1] += dt
                        watch.total_s += dt
                except Exception:  # noqa: BLE001 - never break the user's call
                    pass

        wrapper.__name__ = getattr(original, "__name__", name)
        wrapper.__doc__ = getattr(original, "__doc__", None)
        wrapper._mltriage_original = original
        return wrapper

    def install(self):
        T = self.torch.Tensor
        for name, label in SYNC_METHODS.items():
            original = getattr(T, name, None)
            if original is None:
                continue
            had = name in T.__dict__
            self.saved.append((T, name, T.__dict__.get(name) if had else None, had))
            setattr(T, name, self._wrap(name, label, original))
        cuda = self.torch.cuda
        self.saved.append((cuda, "synchronize", cuda.synchronize, True))
        cuda.synchronize = self._wrap("synchronize", "torch.cuda.synchronize()", cuda.synchronize)

    def uninstall(self):
        for owner, name, original, had in reversed(self.saved):
            if had:
                setattr(owner, name, original)
            else:
                try:
                    delattr(owner, name)
                except AttributeError:
                    pass
        self.saved.clear()

    def result(self):
        out = []
        for (label, fn, line), (count, secs, on_device) in sorted(self.points.items(), key=lambda kv: -kv[1][0]):
            out.append({"kind": label, "file": fn, "line": line, "count": count, "time_ms": secs * 1e3,
                        "on_device": on_device,
                        "code": linecache.getline(fn, line).strip()[:200] if line else ""})
        return out


class ModuleClock:
    """Forward self time per module (host time: on a GPU this is launch time, not kernel time)."""

    def __init__(self, torch, names=None):
        self.torch = torch
        self.names = dict(names or {})
        self.stack: list = []
        self.stats: dict = {}
        self.handles: list = []

    def _name(self, m):
        key = id(m)
        if key not in self.names:
            parent = self.stack[-1][0] if self.stack else None
            attr = None
            if parent is not None:
                for k, child in parent._modules.items():
                    if child is m:
                        attr = k
                        break
            base = self.names.get(id(parent)) if parent is not None else None
            self.names[key] = f"{base}.{attr}" if base and attr else type(m).__name__
        return self.names[key]

    def _pre(self, m, args):
        self.stack.append([m, time.perf_counter(), 0.0])

    def _post(self, m, args, out):
        if not self.stack or self.stack[-1][0] is not m:
            self.stack = [e for e in self.stack if e[0] is not m]  # forward raised somewhere below
            return
        mod, t0, child = self.stack[-1]
        name = self._name(m)
        self.stack.pop()
        dur = time.perf_counter() - t0
        if self.stack:
            self.stack[-1][2] += dur
        s = self.stats.setdefault(name, [0, 0.0, 0.0, type(m).__name__])
        s[0] += 1
        s[1] += dur
        s[2] += dur - child

    def install(self):
        from torch.nn.modules import module as M

        # name the module before timing so a parent is known when a child first runs
        def pre(m, args):
            self._name_on_entry(m)
            self._pre(m, args)

        self.handles.append(M.register_module_forward_pre_hook(pre))
        try:
            self.handles.append(M.register_module_forward_hook(self._post, always_call=True))
        except TypeError:
            self.handles.append(M.register_module_forward_hook(self._post))

    def _name_on_entry(self, m):
        if id(m) not in self.names:
            self._name(m)

    def uninstall(self):
        for h in self.handles:
            h.remove()
        self.handles.clear()

    def result(self):
        rows = [{"name": n, "type": s[3], "calls": s[0], "total_ms": s[1] * 1e3, "self_ms": s[2] * 1e3}
                for n, s in self.stats.items()]
        return sorted(rows, key=lambda r: -r["self_ms"])[:TOP]


class Session:
    """One profiling window: torch.profiler + sync watch + module clock, and the summary of all three."""

    def __init__(self, torch, module_names=None):
        self.torch = torch
        self.sync = SyncWatch(torch)
        self.modules = ModuleClock(torch, module_names)
        self.step_ends: list = []
        self.prof = None
        self.t0 = None
        self.cuda = torch.cuda.is_available()

    def start(self):
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        self.prof = profile(activities=acts, record_shapes=False, with_stack=False)
        self.prof.start()
        self.sync.install()
        self.modules.install()
        self.t0 = time.perf_counter()

    def step_done(self):
        if self.t0 is not None:
            self.step_ends.append(time.perf_counter())

    def stop(self) -> dict:
        if self.cuda:
            try:
                self.torch.cuda.synchronize()
            except Exception:  # noqa: BLE001
                pass
        wall = time.perf_counter() - self.t0
        self.modules.uninstall()
        self.sync.uninstall()
        self.prof.stop()
        return self.summary(wall)

    def summary(self, wall_s: float) -> dict:
        ka = self.prof.key_averages()
        us = 1e-3  # profiler times are microseconds
        ops = [e for e in ka if not e.key.startswith(("mltriage.", "ProfilerStep"))]
        total_self = sum(e.self_cpu_time_total for e in ops) or 1.0
        top = sorted(ops, key=lambda e: -e.self_cpu_time_total)[:TOP]

        def inclusive(prefixes):
            return sum(e.cpu_time_total for e in ka if e.key.startswith(prefixes)) * us

        device_ms = sum(getattr(e, "self_device_time_total", 0.0) or 0.0 for e in ka) * us if self.cuda else None
        ends = [self.t0] + self.step_ends
        step_ms = [(b - a) * 1e3 for a, b in zip(ends, ends[1:])]
        wall_ms = wall_s * 1e3
        return {
            "device": "cuda" if self.cuda else "cpu",
            "steps": len(self.step_ends),
            "wall_ms": wall_ms,
            "step_ms_mean": statistics.fmean(step_ms) if step_ms else None,
            "step_ms_median": statistics.median(step_ms) if step_ms else None,
            "top_ops": [{"name": e.key, "calls": e.count, "self_ms": e.self_cpu_time_total * us,
                         "share": e.self_cpu_time_total / total_self,
                         "device_ms": (getattr(e, "self_device_time_total", 0.0) or 0.0) * us if self.cuda else None}
                        for e in top],
            "optimizer_ms": inclusive(("Optimizer.step#",)),
            "zero_grad_ms": inclusive(("Optimizer.zero_grad#",)),
            "data_ms": inclusive(("enumerate(DataLoader)", "mltriage.data")),
            "sync_ops": {e.key: e.count for e in ka if e.key in PROFILER_SYNC_OPS},
            "syncs": self.sync.result(),
            "sync_ms": self.sync.total_s * 1e3,
            "modules": self.modules.result(),
            "device_kernel_ms": device_ms,
        }


# ---------------------------------------------------------------- target mode

def _batches(target):
    if target.data is None:
        while True:
            yield target.batch
    while True:
        empty = True
        for b in target.data:
            empty = False
            yield b
        if empty:
            raise ValueError("the target's data iterable is empty")


def run(job):
    import torch

    from mltriage_target import load_target

    steps, warmup = int(job.args["steps"]), int(job.args.get("warmup", WARMUP))
    target = load_target(job.args["target"], job.args["workspace"])
    model = target.model
    root = type(model).__name__
    names = {id(m): root + ("." + n if n else "") for n, m in model.named_modules()}
    try:
        model.train()
        optimizer = target.get_optimizer()
    except BaseException as e:
        raise UserCodeError("make_optimizer", e) from e
    batches = _batches(target)
    session = Session(torch, names)
    for i in range(warmup + steps):
        if i == warmup:
            session.start()
        job.progress(i, warmup + steps, "warmup" if i < warmup else "profiling")
        try:
            with torch.profiler.record_function("mltriage.data"):
                batch = next(batches)
            optimizer.zero_grad(set_to_none=True)
            loss = target.loss(model, batch)
            loss.backward()
            optimizer.step()
        except BaseException as e:
            if session.t0 is not None:
                session.stop()
            raise UserCodeError("train_step", e) from e
        session.step_done()
    result = session.stop()
    result.update(mode="target", warmup=warmup, requested_steps=steps)
    return result


# ---------------------------------------------------------------- script mode

class ScriptProfiler:
    """Opens the window after `warmup` optimizer steps, closes it `steps` later, writes the result, exits."""

    def __init__(self, job_dir: str):
        self.job = Job(job_dir)
        self.steps = int(self.job.args.get("steps", 20))
        self.warmup = int(self.job.args.get("warmup", WARMUP))
        self.done = 0
        self.optimizer_id = None
        self.session = None
        self.result = None
        self.error = None
        self.first_process = os.environ.get("MLTRIAGE_PROFILE_PID") in (None, str(os.getpid()))
        os.environ.setdefault("MLTRIAGE_PROFILE_PID", str(os.getpid()))
        self.rank = int(os.environ.get("RANK", "0") or 0)

    def install(self):
        import torch
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self.torch = torch
        register_optimizer_step_post_hook(self._after_step)
        previous = sys.excepthook

        def excepthook(tp, value, tb):
            self.error = value
            previous(tp, value, tb)

        sys.excepthook = excepthook
        atexit.register(self._at_exit)

    def _after_step(self, optimizer, args, kwargs):
        if self.optimizer_id is None:
            self.optimizer_id = id(optimizer)  # a GAN steps two optimizers; count the first one's steps
        if id(optimizer) != self.optimizer_id or self.result is not None:
            return
        self.done += 1
        if self.session is not None:
            self.session.step_done()
        if self.done == self.warmup:
            self.session = Session(self.torch)
            self.session.start()
        elif self.session is not None and len(self.session.step_ends) >= self.steps:
            self._finish(stopped_early=False)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)  # the profile is what was asked for; the rest of the run is not
        self.job.progress(self.done, self.warmup + self.steps, "warmup" if self.session is None else "profiling")

    def _finish(self, stopped_early: bool):
        self.result = self.session.stop()
        self.result.update(mode="script", warmup=self.warmup, requested_steps=self.steps,
                           script_ended_early=stopped_early, optimizer_steps_seen=self.done)
        if self.rank == 0:
            self.job.write({"ok": True, "report": self.result})

    def _at_exit(self):
        if self.result is not None:
            return
        if self.session is not None and self.session.step_ends:
            self._finish(stopped_early=True)
            return
        if self.session is not None:
            self.session.stop()
        if self.rank != 0 or (self.done == 0 and not self.first_process):
            return  # a helper process (data-loader worker, launcher child) that never trained
        if (self.job.dir / "result.json").exists():
            return
        if self.error is not None:
            self.job.write(error_payload("user_code", self.error, "script"))
        else:
            self.job.write({"ok": True, "report": {
                "mode": "script", "steps": 0, "optimizer_steps_seen": self.done, "warmup": self.warmup,
                "requested_steps": self.steps, "script_ended_early": True}})


class _AfterTorchImport:
    """A meta-path finder that runs `callback` right after `import torch` finishes (no torch import of our own)."""

    def __init__(self, callback):
        self.callback = callback
        self.busy = False

    def find_spec(self, fullname, path, target=None):
        if fullname != "torch" or self.busy:
            return None
        import importlib.util

        self.busy = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self.busy = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        original = spec.loader.exec_module
        finder = self

        def exec_module(module):
            original(module)
            if finder in sys.meta_path:
                sys.meta_path.remove(finder)
            finder.callback()

        spec.loader.exec_module = exec_module
        return spec


def install_script_mode() -> None:
    job_dir = os.environ.get("MLTRIAGE_JOB")
    if not job_dir:
        return
    profiler = ScriptProfiler(job_dir)

    def start():
        try:
            profiler.install()
        except Exception as e:  # noqa: BLE001 - the user's run matters more than our instrument
            print(f"[mltriage] profiler disabled: {e!r}", file=sys.stderr)

    if "torch" in sys.modules:
        start()
    else:
        sys.meta_path.insert(0, _AfterTorchImport(start))


if __name__ == "__main__":
    main(run)
