"""Script-mode instruments: torch's GLOBAL module and optimizer hooks watch an unmodified training script.

Loaded by inject/sitecustomize.py. Installs itself when the script imports torch (a meta-path watcher
wraps torch's loader; a script that never imports torch pays nothing). Every rank (RANK env, torchrun)
writes its own report to $MLTRIAGE_JOB/reports/rank<R>.json; the server merges them.

MLTRIAGE_MODE=nan  : each module output (forward hook) and module gradient (full backward hook, when the
                     model has no in-place modules that such hooks break) leaves a device-side finite flag;
                     the optimizer step pre-hook checks them all in ONE synchronisation per step, and only
                     when something tripped walks the recorded events to name the first module.
MLTRIAGE_MODE=grad : at optimizer step N (args "step"), a fused gradient/weight/update snapshot with
                     parameter names recovered from the modules the forward hooks saw.
"""

import atexit
import importlib.util
import json
import os
import sys
import time

_state = None


class _TorchWatcher:
    """A meta-path finder that runs `_install` right after `import torch` finishes."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        loader_exec = spec.loader.exec_module

        def exec_module(module):
            loader_exec(module)
            _install()

        spec.loader.exec_module = exec_module
        return spec


def install_when_torch_imports():
    if "torch" in sys.modules:
        _install()
    else:
        sys.meta_path.insert(0, _TorchWatcher())


def _install():
    global _state
    if _state is not None:
        return
    try:
        _state = _State()
    except Exception as e:  # noqa: BLE001 - never break the user's script
        print(f"mltriage: instruments not installed: {type(e).__name__}: {e}", file=sys.stderr)


def _finite_sum(tensors):
    """A device-side 'all finite' flag from ONE reduction per tensor (a sum is NaN/Inf if any element is).

    isfinite().all() allocates a bool tensor as large as the activation and costs ~50x more on CPU; a finite
    sum that overflows is a false alarm, which the exact re-check on a trip clears.
    """
    import torch
    if len(tensors) == 1:
        return torch.isfinite(tensors[0].detach().sum())
    return torch.isfinite(torch.stack([t.detach().sum().float() for t in tensors]).sum())


def _exact_finite(tensors) -> bool:
    import torch
    return all(bool(torch.isfinite(t.detach()).all()) for t in tensors)


def _loss_watch_class(T, torch):
    from torch.overrides import TorchFunctionMode

    class LossWatch(TorchFunctionMode):
        """Between the model's forward and the optimizer step: a finite flag for every op of the user's loss code."""

        def __init__(self, state):
            super().__init__()
            self.state = state

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            st = self.state
            if len(st.events) < 2000 and isinstance(out, torch.Tensor) and out.is_floating_point() \
                    and getattr(func, "__name__", "") not in T._SKIP:
                st.events.append(("op", T._fn_name(func), T.user_frame(), _finite_sum([out]), (args, kwargs), out))
            return out

    return LossWatch


class _State:
    def __init__(self):
        import warnings

        import torch
        from torch.nn.modules import module as mm
        from torch.optim import optimizer as om

        import mltriage_torch as T
        # the global backward hook also fires on the first layer, whose input needs no grad: expected, not news
        warnings.filterwarnings("ignore", message="Full backward hook is firing when gradients are computed")
        self.torch, self.T = torch, T
        self.job = os.environ["MLTRIAGE_JOB"]
        self.mode = os.environ.get("MLTRIAGE_MODE", "nan")
        try:
            with open(os.path.join(self.job, "args.json")) as f:
                self.args = json.load(f)
        except OSError:
            self.args = {}
        if self.args.get("_stack_dump_after_s"):
            import faulthandler
            faulthandler.dump_traceback_later(float(self.args["_stack_dump_after_s"]), exit=False, file=sys.stderr)
        self.rank = int(os.environ["RANK"]) if os.environ.get("RANK", "").isdigit() else None
        self.max_steps = int(self.args.get("max_steps", 200))
        self.snap_step = int(self.args.get("step", 1))
        self.steps = 0
        self.depth = 0
        self.roots: list = []
        self.events: list = []          # (kind, module, detail, device flag(s), inputs)
        self.param_flag = None          # device flag: params finite after the last optimizer step
        self.last_grads = None
        self.grad_hist: list = []
        self.loss_hist: list = []  # nan mode: the loss of each step, read with its grad norm
        self.zero_grad_calls = 0
        # order of the last backward() and zero_grad() calls: zero_grad between backward and step wipes the step
        self.seq, self.last_zero_seq, self.last_backward_seq = 0, -1, -1
        self.last_loss = None
        self.first_loss = None
        self.zeroed_before_step = 0
        self.dead_at_first = None
        self.eval_at_step, self.eval_modules = None, []
        self.clipped = False
        self.bwd_hook = None
        self.recorder = None
        self.snap = None
        self.watch = None
        self.LossWatch = _loss_watch_class(T, torch)
        self.done = False
        self.wrote = False
        self._last_progress = 0.0
        mm.register_module_forward_pre_hook(self._pre)
        mm.register_module_forward_hook(self._post)
        om.register_optimizer_step_pre_hook(self._step_pre)
        om.register_optimizer_step_post_hook(self._step_post)
        self._count_zero_grad(torch)
        self.preclip = None             # (param ids, norms before clipping, total) of the current step
        self._wrap_clip(torch)
        atexit.register(self.finish)

    # ------------------------------------------------------------ bookkeeping

    def _count_zero_grad(self, torch):
        for cls in (torch.optim.Optimizer, torch.nn.Module):
            orig = cls.zero_grad

            def zero_grad(obj, *a, _orig=orig, **k):
                self.zero_grad_calls += 1
                self.seq += 1
                self.last_zero_seq = self.seq
                return _orig(obj, *a, **k)

            cls.zero_grad = zero_grad
        orig_bwd = torch.Tensor.backward

        def backward(t, *a, _orig=orig_bwd, **k):
            self.seq += 1
            self.last_backward_seq = self.seq
            if t.dim() == 0:  # the loss; kept on device, read once with the report (a norm is judged per unit of it)
                self.last_loss = t.detach()
                if self.first_loss is None:  # and the first: a loss that blew up makes any ratio to it look calm
                    self.first_loss = self.last_loss
            return _orig(t, *a, **k)

        torch.Tensor.backward = backward

    def _wrap_clip(self, torch):
        """Record gradient norms BEFORE clip_grad_norm_ rescales them: clipping hides an explosion."""
        from torch.nn.utils import clip_grad as cg
        orig = cg.clip_grad_norm_

        def clip_grad_norm_(parameters, *a, _orig=orig, **k):
            if self.done:
                return _orig(parameters, *a, **k)
            if self.mode != "grad":
                # its max_norm / total_norm is inf for max_norm=inf (then clamped to 1): not the run's NaN
                self._stop_watch()
                return _orig(parameters, *a, **k)
            params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
            with_grad = [p for p in params if p.grad is not None]
            norms = self.T.norms([p.grad for p in with_grad]) if with_grad else None
            total = _orig(params, *a, **k)
            self.preclip = ([id(p) for p in with_grad], norms, total)
            return total

        cg.clip_grad_norm_ = clip_grad_norm_
        torch.nn.utils.clip_grad_norm_ = clip_grad_norm_

    def _names(self):
        """Qualified names of modules and parameters, from the root modules the forward hooks saw."""
        mods, params = {}, {}
        for root in sorted(self.roots, key=lambda r: -sum(1 for _ in r.parameters())):
            strip = "module." if type(root).__name__ in ("DistributedDataParallel", "DataParallel") else ""
            for n, m in root.named_modules():
                n = n[len(strip):] if strip and n.startswith(strip) else n
                mods.setdefault(id(m), n or type(root).__name__)
            for n, p in root.named_parameters():
                params.setdefault(id(p), n[len(strip):] if strip and n.startswith(strip) else n)
        return mods, params

    def _progress(self, msg):
        if self.rank not in (None, 0):
            return
        now = time.monotonic()
        if now - self._last_progress < 0.2:
            return
        self._last_progress = now
        total = self.max_steps if self.mode == "nan" else self.snap_step
        try:
            with open(os.path.join(self.job, "progress.jsonl"), "a") as f:
                f.write(json.dumps({"progress": self.steps, "total": total, "message": msg}) + "\n")
        except OSError:
            pass

    # ------------------------------------------------------------ module hooks

    def _stop_watch(self):
        if self.watch is not None:
            w, self.watch = self.watch, None
            try:
                w.__exit__(None, None, None)
            except Exception:  # noqa: BLE001 - the mode stack changed under us
                pass

    def _pre(self, m, args):
        if self.done:
            return
        if self.depth == 0:
            self._stop_watch()
            if m not in self.roots and len(self.roots) < 50:
                self.roots.append(m)
                if self.mode == "nan":
                    self._maybe_backward_hook(m)
            if self.mode == "grad" and self.recorder is None and self.steps == self.snap_step - 1 \
                    and self.torch.is_grad_enabled():
                self.recorder = self.T.ActivationRecorder(m)
                self.recorder.__enter__()
        self.depth += 1

    def _maybe_backward_hook(self, root):
        """The global full backward hook breaks modules that modify their input in place (ReLU(inplace=True))."""
        inplace = any(getattr(x, "inplace", False) for x in root.modules())
        if inplace:  # once seen, never again: a later root (the loss module) must not bring the hook back
            self.no_bwd = True
        if inplace and self.bwd_hook is not None:
            self.bwd_hook.remove()
            self.bwd_hook = None
        if not inplace and self.bwd_hook is None and not getattr(self, "no_bwd", False):
            from torch.nn.modules import module as mm
            self.bwd_hook = mm.register_module_full_backward_hook(self._bwd)

    def _post(self, m, args, out):
        self.depth = max(0, self.depth - 1)
        if self.done or self.mode != "nan":
            return
        torch = self.torch
        if not torch.is_grad_enabled():  # an evaluation forward: no optimizer step will check it
            return
        if self.depth == 0 and self.watch is None:
            self.watch = self.LossWatch(self)
            self.watch.__enter__()
        ts = [(p, t) for p, t in self.T.flatten(out) if t.is_floating_point()]
        if not ts:
            return
        self.events.append(("fwd", m, ts, _finite_sum([t for _, t in ts]), args, None))

    def _bwd(self, m, grad_input, grad_output):
        if self.done:
            return None
        torch = self.torch
        gi = [g for g in grad_input if g is not None]
        go = [g for g in grad_output if g is not None]
        ok = torch.ones((), dtype=torch.bool)
        self.events.append(("bwd", m, None, torch.stack([_finite_sum(go) if go else ok, _finite_sum(gi) if gi else ok]),
                            None, (go, gi)))
        return None

    # ------------------------------------------------------------ optimizer hooks

    def _opt_params(self, opt):
        return [p for g in opt.param_groups for p in g["params"]]

    def _step_pre(self, opt, args, kwargs):
        if self.done:
            return
        self.steps += 1
        self._stop_watch()
        self._check_mode()
        if self.mode == "grad":
            return self._grad_pre(opt)
        torch, T = self.torch, self.T
        params = self._opt_params(opt)
        grads = [p.grad for p in params if p.grad is not None]
        gn = T.global_norm(grads) if grads else torch.zeros(())
        flags = [e[3].reshape(-1).float() for e in self.events]
        pf = self.param_flag.reshape(1).float() if self.param_flag is not None else torch.ones(1)
        # the loss rides along: how it moved before a NaN tells a divergence (rising) from a loss unbounded below
        loss = self.last_loss.reshape(()).float() if self.last_loss is not None else torch.full((), float("nan"))
        vals = T.to_floats(gn, pf, loss, *flags)  # the one host synchronisation of this step
        gn_v, pf_v, fl = vals[0], vals[1], vals[3:]
        self.grad_hist.append(gn_v)
        if self.last_loss is not None:
            self.loss_hist.append(vals[2])
        finite = gn_v == gn_v and abs(gn_v) != float("inf")
        if pf_v < 0.5:
            self._report_params(opt, params)
        elif not finite or any(v < 0.5 for v in fl):
            self._localise(opt, params, fl)
        else:
            self.events = []
            self._progress(f"step {self.steps}: grad norm {gn_v:.4g}")
            if self.steps >= self.max_steps:
                self._write({"found": False})
                self._exit()

    def _step_post(self, opt, args, kwargs):
        if self.done:
            return
        if self.mode == "grad":
            return self._grad_post(opt)
        params = self._opt_params(opt)
        self.param_flag = self.torch.isfinite(self.T.global_norm(params))

    # ------------------------------------------------------------ nan mode: localise on a trip

    def _report_params(self, opt, params):
        mods, pnames = self._names()
        bad = [(pnames.get(id(p), "?"), p) for p in params if not bool(self.torch.isfinite(p.detach()).all())]
        g = opt.param_groups[0]
        self._write({"found": True, "step": self.steps - 2, "phase": "optimizer_step",
                     "bad_params": self.T.tensor_stats(bad[:8]), "bad_param_names": [n for n, _ in bad][:30],
                     "optimizer": {"type": type(opt).__name__, "lr": float(g.get("lr", float("nan"))),
                                   "eps": g.get("eps") if isinstance(g.get("eps"), (int, float)) else None}})
        self._exit()

    def _localise(self, opt, params, fl):
        T = self.T
        mods, pnames = self._names()
        out = {"found": True, "step": self.steps - 1}
        pos, first_fwd, first_bwd = 0, None, None
        for e in self.events:
            n = 2 if e[0] == "bwd" else 1
            v = fl[pos:pos + n]
            pos += n
            if e[0] in ("fwd", "op") and first_fwd is None and v[0] < 0.5 \
                    and not _exact_finite([t for _, t in e[2]] if e[0] == "fwd" else [e[5]]):
                first_fwd = e
            if e[0] == "bwd" and first_bwd is None and (v[0] < 0.5 or v[1] < 0.5):
                v = [float(_exact_finite(e[5][0])), float(_exact_finite(e[5][1]))]
                if min(v) < 0.5:
                    first_bwd = (e, v)
        grads_ok = all(_exact_finite([p.grad]) for p in params if p.grad is not None)
        if first_fwd is None and first_bwd is None and grads_ok:
            self.events = []  # a sum overflowed on finite values: a false alarm, keep training
            return
        if first_fwd is not None and first_fwd[0] == "op":
            _, name, where, _, (a, k), _o = first_fwd
            ins = [t for _, t in T.flatten((a, k))]
            out.update(phase="loss", op={"op": name, "where": where, "module": None,
                                         "inputs": T.tensor_stats([(f"arg{i}", t) for i, t in enumerate(ins)][:4])})
        elif first_fwd is not None:
            _, m, outs, flag, margs, _ = first_fwd
            bad = [p for p, t in outs if not bool(self.torch.isfinite(t.detach()).all())] or [outs[0][0]]
            loss_module = type(m).__name__.endswith("Loss")
            out.update(phase="loss" if loss_module else "forward", module={
                "module": mods.get(id(m), type(m).__name__), "type": type(m).__name__, "output": bad[0] if bad else None,
                "inputs": T.tensor_stats([(f"input{p}", t) for p, t in T.flatten(margs)][:6]),
                "params": T.tensor_stats(list(m.named_parameters(recurse=False))[:8])})
        elif first_bwd is not None:
            (_, m, _, _, _, _), v = first_bwd
            name = mods.get(id(m), type(m).__name__)
            if v[0] < 0.5:
                out.update(phase="loss", op=None, module={"module": name, "type": type(m).__name__,
                                                          "output": "grad_output"})
            else:
                out.update(phase="backward", backward={"op": None, "module": name, "where": None, "inputs": []},
                           module={"module": name, "type": type(m).__name__, "output": "grad_input"})
        else:
            bad = [pnames.get(id(p), "?") for p in params if p.grad is not None
                   and not bool(self.torch.isfinite(p.grad).all())]
            out.update(phase="backward", bad_grad_params=bad[:30],
                       backward={"op": None, "module": bad[-1].rsplit(".", 1)[0] if bad else None, "where": None,
                                 "inputs": []})
        self._write(out)
        self._exit()

    # ------------------------------------------------------------ grad mode

    def _grad_pre(self, opt):
        T, torch = self.T, self.torch
        params = self._opt_params(opt)
        grads = [p.grad for p in params if p.grad is not None]
        if self.last_backward_seq >= 0 and self.last_zero_seq > self.last_backward_seq:
            self.zeroed_before_step += 1
        pre, self.preclip = self.preclip, None
        if pre is not None and isinstance(pre[2], torch.Tensor):
            self.grad_hist.append(pre[2].detach().reshape(()).float())
            self.clipped = True
        else:
            self.grad_hist.append(T.global_norm(grads) if grads else torch.zeros(()))
        if self.steps == 1 and self.snap_step > 1:
            from mltriage_grad_norm import first_step_dead
            self.dead_at_first = first_step_dead(params)
        if self.steps != self.snap_step:
            self._progress(f"step {self.steps}")
            return
        if self.recorder is not None:
            try:
                self.recorder.__exit__(None, None, None)
            except Exception:  # noqa: BLE001 - the mode stack was changed under us; stats may be partial
                pass
        mods, pnames = self._names()
        owner = {}
        for root in self.roots:
            for mname, mm_ in root.named_modules():
                for _, p in mm_.named_parameters(recurse=False):
                    owner.setdefault(id(p), (mods.get(id(mm_), mname), type(mm_).__name__))
        seen, named = set(), []
        for root in self.roots:
            for _, p in root.named_parameters():
                if id(p) not in seen:
                    seen.add(id(p))
                    named.append((pnames.get(id(p), "?"), p))
        for p in params:
            if id(p) not in seen:
                seen.add(id(p))
                named.append((pnames.get(id(p), f"param{len(named)}"), p))
        idx = [i for i, (_, p) in enumerate(named) if p.grad is not None and p.requires_grad]
        g = T.norms([named[i][1].grad for i in idx])
        if pre is not None and pre[1] is not None and idx:
            pos = {pid: j for j, pid in enumerate(pre[0])}
            g = torch.stack([pre[1][pos[id(named[i][1])]] if id(named[i][1]) in pos else g[k]
                             for k, i in enumerate(idx)])
        self.snap = {"named": named, "owner": owner, "idx": idx, "opt": opt,
                     "g": g, "w": T.norms([p for _, p in named]),
                     "before": [p.detach().clone() for _, p in named]}

    def _grad_post(self, opt):
        if self.snap is None or self.snap["opt"] is not opt:
            return
        T, torch = self.T, self.torch
        s, self.snap = self.snap, None
        from mltriage_grad_norm import assemble, mark_died, optimizer_groups
        named = s["named"]
        u = T.norms(torch._foreach_sub([p.detach() for _, p in named], s["before"]))
        recs = self.recorder.records if self.recorder is not None else []
        vals = T.to_floats(torch.stack([g.reshape(()) for g in self.grad_hist]), s["g"], s["w"], u,
                           *[r[4] for r in recs])  # one synchronisation
        k, ng, n = len(self.grad_hist), len(s["idx"]), len(named)
        hist, o = vals[:k], k
        gv, wv, uv = vals[o:o + ng], vals[o + ng:o + ng + n], vals[o + ng + n:o + ng + 2 * n]
        acts = T.decode_acts(recs, vals[o + ng + 2 * n:])
        rows = mark_died(assemble(named, s["idx"], gv, wv, uv, optimizer_groups(opt), s["owner"]), named,
                         self.dead_at_first)
        from mltriage_init_loss import eval_mode_modules
        main = max(self.roots, key=lambda r: sum(p.numel() for p in r.parameters()), default=None)
        rep = {"found": True, "step": self.steps, "global_grad_norm": hist[-1], "params": rows,
               "model_training": main.training if main is not None else None,
               "eval_mode_modules": eval_mode_modules(main) if main is not None else [],
               "depth_order": self.recorder.module_order if self.recorder is not None else [],
               "activations": acts, "grad_norm_history": hist, "zero_grad_calls": self.zero_grad_calls,
               "optimizer": type(opt).__name__, "clipped": self.clipped,
               "loss_history": [float(x) for x in ((self.first_loss, self.last_loss) if self.first_loss is not
                                                   self.last_loss else (self.last_loss,)) if x is not None],
               "zeroed_before_step": self.zeroed_before_step}
        if self.zero_grad_calls == 0 and k >= 3:
            rep["missing_zero_grad"] = {"steps": k, "grad_norms": hist, "growing": hist[-1] > 1.5 * hist[0]}
        self._write(rep)
        self._exit()

    # ------------------------------------------------------------ output

    def _check_mode(self):
        """The first optimizer step taken with the model in eval mode (dropout/batch-norm frozen): a loop bug."""
        if self.eval_at_step is not None or not self.roots:
            return
        main = max(self.roots, key=lambda r: sum(p.numel() for p in r.parameters()))
        if not main.training:
            from mltriage_init_loss import eval_mode_modules
            mods = eval_mode_modules(main)
            if mods:
                self.eval_at_step, self.eval_modules = self.steps, mods

    def _write(self, payload):
        payload = {"rank": self.rank, "steps_run": self.steps, "steps_seen": self.steps, "mode": self.mode,
                   "pid": os.getpid(), "eval_mode_step": self.eval_at_step,
                   "eval_mode_step_modules": self.eval_modules, **payload}
        if self.mode == "nan":
            payload["grad_norm_history"] = self.grad_hist[-20:]
            payload.setdefault("loss_history", self.loss_hist[-20:])
        name = f"rank{self.rank}" if self.rank is not None else f"pid{os.getpid()}"
        folder = os.path.join(self.job, "reports")
        os.makedirs(folder, exist_ok=True)
        tmp = os.path.join(folder, name + ".json.tmp")
        with open(tmp, "w") as f:
            json.dump(payload, f, default=str)
        os.replace(tmp, os.path.join(folder, name + ".json"))
        self.wrote = True

    def _exit(self):
        """Stop the script once the answer is written: nothing after it would change the report."""
        self.done = True
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:  # noqa: BLE001
            pass
        os._exit(0)

    def finish(self):
        """The script ended on its own: say how far it got."""
        if self.wrote or self.steps == 0:
            return
        try:
            self._write({"found": False})
        except Exception:  # noqa: BLE001
            pass
