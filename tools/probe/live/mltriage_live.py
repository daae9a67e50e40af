"""The always-on live instrument inside the user's unmodified training process (stdlib + torch).

Started by our sitecustomize when MLTRIAGE_LIVE_DIR is set. What it costs per optimizer step:
one post-hook (step counter, clock, RSS from /proc, the loss and the global grad norm) and one
pre-hook (one `_foreach_norm` over the gradients). The loss is the scalar that `.backward()` was
called on (we wrap `torch.autograd.backward`, which `Tensor.backward` calls): a global forward hook
would push every module call off PyTorch's fast path for the whole run. Everything costly
(per-module timing, stacks, per-layer gradient norms as a list) happens only when asked.

The control channel is a Unix socket `<run dir>/ctl-<rank>.sock` (mode 0600) served by a daemon
thread: one JSON request line in, one JSON reply out, commands from a fixed table, no code
evaluation. Actions (scale_lr, set_grad_clip, save_checkpoint, stop) are queued and applied by the
optimizer hook at a step boundary; each result goes to `actions-<rank>.jsonl` and to the log.
"""

import atexit
import collections
import functools
import json
import linecache
import math
import os
import socket
import stat
import sys
import threading
import time

HISTORY = 4096          # steps kept in memory (ring buffer)
STATUS_EVERY_S = 1.0    # the status file the server's list_runs reads
MAX_REQUEST = 65536

S = None  # the one _Live of this process, once started


def _rank_info() -> tuple[int, int]:
    """torchrun sets RANK/WORLD_SIZE; a task started by `srun` has Slurm's SLURM_PROCID/SLURM_NTASKS."""
    env = os.environ
    rank = env.get("RANK") or env.get("SLURM_PROCID") or "0"
    world = env.get("WORLD_SIZE") or (env.get("SLURM_NTASKS") if "SLURM_PROCID" in env else None) or "1"
    return int(rank), int(world)


def _is_torchrun_launcher() -> bool:
    argv = list(getattr(sys, "orig_argv", sys.argv))
    if any(os.path.basename(a) == "torchrun" for a in argv[:2]):  # the console script, or python <it>
        return True
    return any(a in ("torch.distributed.run", "torch.distributed.launch") for a in argv)


def start() -> None:
    """Claim this process's rank socket, start the control thread, hook torch when it is imported.

    Only the launched process (or each torchrun rank) is instrumented: its descendants (DataLoader
    workers started with spawn, compile workers, tools it runs) see MLTRIAGE_LIVE_CLAIMED and stay
    quiet, and the torchrun launcher itself is skipped so that its workers can claim their ranks.
    """
    global S
    if S is not None or os.environ.get("MLTRIAGE_LIVE_CLAIMED") or _is_torchrun_launcher():
        return
    run_dir = os.environ["MLTRIAGE_LIVE_DIR"]
    rank, world = _rank_info()
    live = _Live(run_dir, rank, world)
    if not live.bind():
        return
    os.environ["MLTRIAGE_LIVE_CLAIMED"] = str(os.getpid())
    S = live
    live.start_thread()
    if "torch" in sys.modules:
        live.install_torch(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _AfterTorchImport())


class _AfterTorchImport:
    """A meta-path finder that lets torch import normally, then installs our hooks."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        import importlib.util
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_install(module):
            exec_module(module)
            if S is not None:
                S.install_torch(module)

        spec.loader.exec_module = exec_then_install
        return spec


def _socket_path(path: str) -> tuple[str, int | None]:
    """sun_path holds ~107 bytes; deep workspaces go through /proc/self/fd/<dir fd> (Linux)."""
    if len(os.fsencode(path)) < 100 or not os.path.isdir("/proc/self/fd"):
        return path, None
    fd = os.open(os.path.dirname(path), os.O_RDONLY)
    return f"/proc/self/fd/{fd}/{os.path.basename(path)}", fd


class _Live:
    def __init__(self, run_dir: str, rank: int, world: int):
        self.run_dir, self.rank, self.world = run_dir, rank, world
        self.pid = os.getpid()
        self.workspace = os.path.realpath(os.environ.get("MLTRIAGE_WORKSPACE") or os.getcwd())
        self.sock_path = os.path.join(run_dir, f"ctl-{rank}.sock")
        self.status_path = os.path.join(run_dir, f"status-{rank}.json")
        self.actions_path = os.path.join(run_dir, f"actions-{rank}.jsonl")
        self.started = time.time()
        self.lock = threading.Lock()
        self.torch = None
        self.errors: dict[str, str] = {}
        # per-step record: [step, wall time, seconds since previous step, loss, grad norm, rss, cuda alloc, cuda reserved,
        #                   data wait s, collective wait s, backward s, s from the previous step to the first backward]
        self.hist = collections.deque(maxlen=HISTORY)
        self.data_s = 0.0             # since the last step: inside DataLoader.__next__
        self.comm_s = 0.0             # inside blocking torch.distributed collectives called from Python
        self.bwd_s = 0.0
        self.first_bwd = None         # perf_counter of the first backward since the last step
        self.collectives = 0          # collectives issued from Python (a rank that skipped one has fewer)
        self.last_collective = None
        self.step = 0
        self.t_last = None
        self.t_prev = None            # perf_counter at the end of the previous step's hooks
        self.wall_last = None
        self.losses = []
        self.backward_since = None
        self.optimizers = []          # weakrefs, in order of first step
        self.primary = None           # weakref to the first optimizer that stepped
        self.schedulers = None        # WeakSet of LR schedulers, filled by a wrapped __init__
        self.gvec = None              # per-parameter grad norms of the last step (one tensor)
        self.gparams = []
        self.gnorm = None
        self.clip = None
        self.roots = []               # weakrefs to outermost modules seen in the first step
        self._root_hooks = []
        self._depth = 0
        self.pending = []             # queued actions, applied at a step boundary
        self.timing = None
        self.timing_request = None
        self.timing_results = {}
        self._statm = None
        self._status_written = 0.0
        self._cuda_dev = None

    # ---- control socket -------------------------------------------------------------------------
    def bind(self) -> bool:
        path, fd = _socket_path(self.sock_path)
        try:
            if os.path.lexists(self.sock_path):
                if not stat.S_ISSOCK(os.lstat(self.sock_path).st_mode):
                    return False
                probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                probe.settimeout(0.5)
                try:
                    probe.connect(path)
                    return False  # a live process already owns this rank's socket
                except OSError:
                    os.unlink(self.sock_path)  # stale: left by a process that died
                finally:
                    probe.close()
            self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            old = os.umask(0o177)  # the socket file is created 0600, no window where it is wider
            try:
                self.listener.bind(path)
            finally:
                os.umask(old)
            os.chmod(self.sock_path, 0o600)
            self.listener.listen(8)
            self.listener.settimeout(STATUS_EVERY_S)
        finally:
            if fd is not None:
                os.close(fd)
        atexit.register(self.at_exit)
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._forget_in_child)
        return True

    def start_thread(self) -> None:
        threading.Thread(target=self._serve, name="mltriage-live", daemon=True).start()

    def _forget_in_child(self) -> None:
        # a forked DataLoader worker must not answer for, or unlink, its parent's socket
        global S
        try:
            self.listener.close()
        except OSError:
            pass
        S = None

    def at_exit(self) -> None:
        if os.getpid() != self.pid:
            return
        self.write_status(final=True)
        try:
            os.unlink(self.sock_path)
        except OSError:
            pass

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except socket.timeout:
                self.write_status()
                continue
            except OSError:
                return
            try:
                with conn:
                    conn.settimeout(2.0)
                    self._answer(conn)
            except Exception:  # noqa: BLE001 - one bad request never stops the channel
                pass
            if time.time() - self._status_written > STATUS_EVERY_S:
                self.write_status()

    def _answer(self, conn) -> None:
        data = b""
        while b"\n" not in data and len(data) < MAX_REQUEST:
            chunk = conn.recv(4096)
            if not chunk:
                break
            data += chunk
        try:
            req = json.loads(data.split(b"\n", 1)[0] or b"{}")
            handler = COMMANDS.get(req.get("cmd")) if isinstance(req, dict) else None
            if handler is None:
                reply = {"ok": False, "error": f"unknown command {req.get('cmd') if isinstance(req, dict) else req!r}"}
            else:
                reply = {"ok": True, **handler(self, req)}
        except Exception as e:  # noqa: BLE001
            reply = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        conn.sendall((json.dumps(reply, default=str) + "\n").encode())

    def write_status(self, final: bool = False) -> None:
        try:
            status = {**self.progress({"recent": 0}), "final": final}
            tmp = f"{self.status_path}.{self.pid}.tmp"
            with open(tmp, "w") as f:
                json.dump(status, f, default=str)
            os.replace(tmp, self.status_path)
            self._status_written = time.time()
        except Exception:  # noqa: BLE001 - best effort
            pass

    # ---- torch hooks ----------------------------------------------------------------------------
    def install_torch(self, torch) -> None:
        if self.torch is not None:
            return
        self.torch = torch
        from torch.nn.modules import module as nn_module
        from torch.optim import optimizer as optim

        optim.register_optimizer_step_pre_hook(self._guard("pre_step", self.pre_step))
        optim.register_optimizer_step_post_hook(self._guard("post_step", self.post_step))
        self._wrap_backward(torch)
        self._guard("data_wait", self._wrap_dataloader)(torch)
        if self.world > 1:
            self._guard("collectives", self._wrap_collectives)(torch)
        self._root_hooks = [
            nn_module.register_module_forward_pre_hook(self._root_pre),
            nn_module.register_module_forward_hook(self._root_post, always_call=True),
        ]
        self._track_schedulers(torch)

    def _guard(self, what, fn):
        """A hook that fails switches itself off and says why; it never breaks the user's step."""

        def hook(*args):
            if what in self.errors:
                return None
            try:
                return fn(*args)
            except SystemExit:
                raise
            except Exception as e:  # noqa: BLE001
                self.errors[what] = f"{type(e).__name__}: {e}"
                self.log(f"instrument {what} disabled: {self.errors[what]}")
                return None

        return hook

    def _wrap_backward(self, torch) -> None:
        original = torch.autograd.backward
        live = self

        @functools.wraps(original)
        def backward(tensors, *args, **kwargs):
            if isinstance(tensors, torch.Tensor) and tensors.numel() == 1 and len(live.losses) < 64:
                live.losses.append(tensors.detach())
            live.backward_since = time.time()
            t0 = time.perf_counter()
            if live.first_bwd is None:
                live.first_bwd = t0
            try:
                return original(tensors, *args, **kwargs)
            finally:
                live.bwd_s += time.perf_counter() - t0
                live.backward_since = None
                timing = live.timing
                if timing is not None:
                    timing.backward_done()

        torch.autograd.backward = backward

    def _wrap_dataloader(self, torch) -> None:
        """Time inside DataLoader iteration: the step's data wait (a straggler's excess often lives here)."""
        from torch.utils.data import dataloader
        original = dataloader._BaseDataLoaderIter.__next__
        live = self

        @functools.wraps(original)
        def __next__(it):
            t0 = time.perf_counter()
            try:
                return original(it)
            finally:
                live.data_s += time.perf_counter() - t0

        dataloader._BaseDataLoaderIter.__next__ = __next__

    def _wrap_collectives(self, torch) -> None:
        """Count and time the collectives called from Python: a fast rank waits in them for the slow one, and a
        rank that skipped one has issued fewer. (DDP's gradient all-reduce runs in C++ inside backward.)"""
        import torch.distributed as dist
        if not dist.is_available():
            return
        for name in COLLECTIVE_NAMES:
            original = getattr(dist, name, None)
            if original is not None and not getattr(original, "_mltriage", False):
                setattr(dist, name, self._timed_collective(original, name))

    def _timed_collective(self, original, name):
        live = self

        @functools.wraps(original)
        def wrapped(*args, **kwargs):
            live.collectives += 1
            live.last_collective = name
            t0 = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                if not kwargs.get("async_op"):
                    live.comm_s += time.perf_counter() - t0

        wrapped._mltriage = True
        return wrapped

    def _track_schedulers(self, torch) -> None:
        import weakref
        try:
            from torch.optim import lr_scheduler
            base = getattr(lr_scheduler, "LRScheduler", None) or lr_scheduler._LRScheduler
        except Exception:  # noqa: BLE001
            return
        self.schedulers = weakref.WeakSet()
        init = base.__init__
        live = self

        @functools.wraps(init)
        def __init__(sched, *args, **kwargs):
            init(sched, *args, **kwargs)
            live.schedulers.add(sched)

        base.__init__ = __init__

    def _root_pre(self, module, args):
        if self._depth == 0 and not any(r() is module for r in self.roots):
            import weakref
            self.roots.append(weakref.ref(module))
        self._depth += 1

    def _root_post(self, module, args, output):
        self._depth = max(0, self._depth - 1)

    def pre_step(self, opt, args, kwargs):
        torch = self.torch
        if self.primary is None or self.primary() is None:
            self._register(opt)
        if opt is not self.primary() and self.clip is None:
            return
        params = [p for g in opt.param_groups for p in g["params"] if p.grad is not None and not p.grad.is_sparse]
        if not params:
            return
        grads = [p.grad for p in params]
        norms = torch._foreach_norm(grads)
        vec = torch.stack([n.to(norms[0].device, torch.float32) for n in norms])
        total = torch.linalg.vector_norm(vec)
        if self.clip is not None:
            # same rule as clip_grad_norm_, reusing the norm we already have
            coef = torch.clamp(self.clip / (total + 1e-6), max=1.0)
            torch._foreach_mul_(grads, coef.to(grads[0].device))
        if opt is self.primary():
            self.gvec, self.gparams, self.gnorm = vec, params, total

    def post_step(self, opt, args, kwargs):
        if self.primary is None or self.primary() is None:
            self._register(opt)
        if opt is not self.primary():
            if not any(r() is opt for r in self.optimizers):
                self._register(opt)
            return
        now = time.perf_counter()
        self.step += 1
        dt = None if self.t_last is None else now - self.t_last
        self.t_last, self.wall_last = now, time.time()
        loss = self._take_loss()
        gnorm = self.gnorm
        if gnorm is not None and self._cuda_dev is None:
            gnorm = gnorm.item()  # CPU: cheap; on CUDA the control thread converts later (no sync here)
        rss, alloc, reserved = self._memory()
        pre_bwd = None if self.first_bwd is None or self.t_prev is None else self.first_bwd - self.t_prev
        with self.lock:
            self.hist.append([self.step, self.wall_last, dt, loss, gnorm, rss, alloc, reserved,
                              self.data_s, self.comm_s, self.bwd_s, pre_bwd])
        self.data_s = self.comm_s = self.bwd_s = 0.0
        self.first_bwd, self.t_prev = None, time.perf_counter()
        self.gnorm = None
        if self.step == 1:
            for h in self._root_hooks:  # the outermost modules are known; back to the fast path
                h.remove()
            self._root_hooks = []
        if self.timing is not None or self.timing_request is not None:
            self._timing_boundary()
        if self.pending:
            self._apply_actions()

    def _register(self, opt) -> None:
        import weakref
        ref = weakref.ref(opt)
        self.optimizers = [r for r in self.optimizers if r() is not None and r() is not opt] + [ref]
        if self.primary is None or self.primary() is None:
            self.primary = ref
            p = next((p for g in opt.param_groups for p in g["params"]), None)
            if p is not None and p.device.type == "cuda":
                self._cuda_dev = p.device

    def _take_loss(self):
        losses, self.losses = self.losses, []
        if not losses:
            return None
        t = losses[0] if len(losses) == 1 else self.torch.stack([x.float() for x in losses]).mean()
        return t.item() if self._cuda_dev is None else t.float()

    def _memory(self):
        rss = None
        try:
            if self._statm is None:
                self._statm = os.open("/proc/self/statm", os.O_RDONLY)
                self._page = os.sysconf("SC_PAGE_SIZE")
            rss = int(os.pread(self._statm, 128, 0).split()[1]) * self._page
        except (OSError, ValueError, IndexError):
            import resource
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)
        if self._cuda_dev is None:
            return rss, None, None
        cuda = self.torch.cuda
        return rss, cuda.memory_allocated(self._cuda_dev), cuda.memory_reserved(self._cuda_dev)

    # ---- reading state (control thread) --------------------------------------------------------
    def snapshot(self, last: int | None = None) -> list[list]:
        with self.lock:
            rows = list(self.hist) if last is None else list(self.hist)[-last:] if last else []
        for row in rows:  # CUDA scalars are converted here, off the training thread
            for i in (3, 4):
                if row[i] is not None and not isinstance(row[i], float):
                    row[i] = float(row[i])
        return rows

    def progress(self, req) -> dict:
        rows = self.snapshot(int(req.get("recent", 20)))
        last = self.snapshot(1)
        recent_dt = [r[2] for r in self.snapshot(20) if r[2]]
        now = time.time()
        return {
            "pid": self.pid, "rank": self.rank, "world_size": self.world, "argv": sys.argv,
            "started": self.started, "torch": self.torch is not None, "step": self.step,
            "last_step_wall": self.wall_last,
            "since_last_step_s": None if self.wall_last is None else now - self.wall_last,
            "since_start_s": now - self.started,
            "steps_per_s": (len(recent_dt) / sum(recent_dt)) if recent_dt and sum(recent_dt) > 0 else None,
            "last_loss": last[0][3] if last else None, "last_grad_norm": last[0][4] if last else None,
            "in_backward_s": None if self.backward_since is None else now - self.backward_since,
            "grad_clip": self.clip, "device": str(self._cuda_dev or "cpu"),
            "recent": [{"step": r[0], "seconds": r[2], "loss": r[3], "grad_norm": r[4], "rss": r[5],
                        "data_s": r[8], "collective_s": r[9], "backward_s": r[10], "before_backward_s": r[11]} for r in rows],
            "collectives": self.collectives, "last_collective": self.last_collective,
            "rss": last[0][5] if last else None,
            "pending_actions": [a["id"] for a in self.pending], "instrument_errors": self.errors,
        }

    def fr_dump(self, req) -> dict:
        """torch's collective flight recorder buffer, written to <run dir>/fr/rank_<rank> for torch's analyser.

        NCCL writes this dump itself on a watchdog timeout; gloo records the same buffer but never writes it,
        so a hung gloo job is dumped from here (the control thread runs while the main thread waits)."""
        if not any(os.environ.get(v, "0").isdigit() and int(os.environ.get(v, "0")) > 0
                   for v in ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")):
            return {"enabled": False}
        from torch._C._distributed_c10d import _dump_fr_trace
        data = _dump_fr_trace(includeStackTraces=bool(req.get("stacks", True)))
        folder = os.path.join(self.run_dir, "fr")
        os.makedirs(folder, mode=0o700, exist_ok=True)
        path = os.path.join(folder, f"rank_{self.rank}")
        fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(path + ".tmp", path)
        return {"enabled": True, "path": path, "bytes": len(data), "python": sys.executable}

    def memory(self, req) -> dict:
        rows = self.snapshot()
        return {"device": str(self._cuda_dev or "cpu"), "steps": [r[0] for r in rows],
                "rss": [r[5] for r in rows], "allocated": [r[6] for r in rows], "reserved": [r[7] for r in rows]}

    def stack(self, req) -> dict:
        names = {t.ident: (t.name, t.daemon) for t in threading.enumerate()}
        me = threading.get_ident()
        threads = []
        for ident, frame in sys._current_frames().items():
            if ident == me:
                continue
            frames = []
            while frame is not None and len(frames) < 60:
                code = frame.f_code
                frames.append({"file": code.co_filename, "line": frame.f_lineno, "func": code.co_name,
                               "code": linecache.getline(code.co_filename, frame.f_lineno).strip()})
                frame = frame.f_back
            name, daemon = names.get(ident, (f"thread-{ident}", None))
            threads.append({"name": name, "ident": ident, "daemon": daemon,
                            "main": ident == threading.main_thread().ident, "frames": frames})
        threads.sort(key=lambda t: not t["main"])
        return {"threads": threads, "step": self.step}

    def named_modules(self):
        mods = []
        for ref in self.roots:
            m = ref()
            if m is None or not any(True for _ in m.parameters()):
                continue
            inner = getattr(m, "module", None)  # DistributedDataParallel / DataParallel wrap the model
            if type(m).__name__ in ("DistributedDataParallel", "DataParallel") and inner is not None:
                m = inner
            mods.append(m)
        return mods

    def param_names(self) -> dict:
        names = {}
        roots = self.named_modules()
        for i, m in enumerate(roots):
            prefix = f"{type(m).__name__}{i}." if len(roots) > 1 else ""
            for n, p in m.named_parameters():
                names.setdefault(id(p), prefix + n)
        return names

    def grads(self, req) -> dict:
        vec, params = self.gvec, self.gparams
        names = self.param_names()
        out = []
        if vec is not None:
            for p, norm in zip(params, vec.tolist()):
                out.append({"name": names.get(id(p), f"param{len(out)}"), "shape": list(p.shape),
                            "norm": norm, "weight_norm": float(p.detach().norm())})
        opt = self.primary() if self.primary else None
        have = {id(p) for p in params}
        no_grad = [names.get(id(p), "?") for g in (opt.param_groups if opt else []) for p in g["params"]
                   if id(p) not in have]
        return {"step": self.step, "params": out, "no_grad": no_grad[:200]}

    def optimizer(self, req) -> dict:
        opts = []
        for ref in self.optimizers:
            opt = ref()
            if opt is None:
                continue
            groups = []
            for g in opt.param_groups:
                entry = {"n_params": sum(p.numel() for p in g["params"]), "n_tensors": len(g["params"])}
                for k in ("lr", "weight_decay", "momentum", "betas", "eps", "nesterov", "dampening", "initial_lr"):
                    if k in g:
                        v = g[k]
                        entry[k] = [float(x) for x in v] if isinstance(v, (tuple, list)) else (
                            v if isinstance(v, bool) else float(v))
                groups.append(entry)
            steps = [s.get("step") for s in list(opt.state.values())[:1] if isinstance(s, dict)]
            opts.append({"type": type(opt).__name__, "groups": groups,
                         "state_step": float(steps[0]) if steps and steps[0] is not None else None})
        scheds = [{"type": type(s).__name__, "last_epoch": getattr(s, "last_epoch", None),
                   "base_lrs": [float(x) for x in getattr(s, "base_lrs", [])]} for s in list(self.schedulers or [])]
        return {"step": self.step, "optimizers": opts, "schedulers": scheds, "grad_clip": self.clip}

    # ---- per-module timing (on only while asked) -----------------------------------------------
    def modules_start(self, req) -> dict:
        steps = max(1, min(int(req.get("steps", 5)), 200))
        token = f"t{int(time.time() * 1000)}-{len(self.timing_results)}"
        self.timing_results[token] = {"state": "waiting", "steps": steps, "requested_at_step": self.step}
        self.timing_request = (token, steps)
        return {"token": token, "step": self.step}

    def modules_result(self, req) -> dict:
        r = self.timing_results.get(req.get("token"))
        if r is None:
            return {"state": "unknown"}
        if r["state"] == "collecting" and self.timing is not None:
            r = {**r, "steps_done": self.timing.steps_done}
        return r

    def modules_cancel(self, req) -> dict:
        token = req.get("token")
        if self.timing_request and self.timing_request[0] == token:
            self.timing_request = None
        r = self.timing_results.get(token)
        if r is not None and r["state"] == "waiting":
            r["state"] = "cancelled"
        return {"state": r["state"] if r else "unknown"}

    def _timing_boundary(self) -> None:
        # hooks are added and removed here, on the training thread, between steps
        if self.timing is not None:
            self.timing.step_done()
            if self.timing.steps_done >= self.timing.steps:
                result = self.timing.stop()
                self.timing_results[self.timing.token].update(state="done", **result)
                self.timing = None
        if self.timing is None and self.timing_request is not None:
            token, steps = self.timing_request
            self.timing_request = None
            if self.timing_results.get(token, {}).get("state") == "waiting":
                self.timing = _ModuleTiming(self, token, steps)
                self.timing_results[token]["state"] = "collecting"

    # ---- actions ---------------------------------------------------------------------------------
    def action(self, req) -> dict:
        name = req.get("action")
        a = {"id": str(req.get("id") or f"a{time.time_ns()}"), "action": name,
             "at_step": req.get("at_step"), "requested_at_step": self.step, "requested_at": time.time()}
        if name == "scale_lr":
            factor = float(req["factor"])
            if not (math.isfinite(factor) and 0 < factor <= 100):
                raise ValueError("factor must be a finite number in (0, 100]")
            a["factor"] = factor
        elif name == "set_grad_clip":
            mn = req.get("max_norm")
            mn = None if mn is None else float(mn)
            if mn is not None and not (math.isfinite(mn) and mn > 0):
                raise ValueError("max_norm must be a positive finite number (or null to switch clipping off)")
            a["max_norm"] = mn
        elif name == "save_checkpoint":
            path = os.path.realpath(str(req["path"]))
            if not (path + os.sep).startswith(self.workspace + os.sep):
                raise ValueError(f"checkpoint path {path} is outside the workspace {self.workspace}")
            a["path"] = path
        elif name != "stop":
            raise ValueError(f"unknown action {name!r}; allowed: scale_lr, set_grad_clip, save_checkpoint, stop")
        with self.lock:
            self.pending.append(a)
        return {"queued": a["id"], "step": self.step}

    def _apply_actions(self) -> None:
        with self.lock:
            due = [a for a in self.pending if a.get("at_step") is None or self.step >= int(a["at_step"])]
            self.pending = [a for a in self.pending if a not in due]
        stop = None
        for a in sorted(due, key=lambda a: a["action"] == "stop"):
            if a["action"] == "stop":
                stop = a
                continue
            try:
                before, after = getattr(self, "_do_" + a["action"])(a)
                self._record(a, True, before, after)
            except Exception as e:  # noqa: BLE001 - reported back, the run goes on
                self._record(a, False, None, None, f"{type(e).__name__}: {e}")
        if stop is not None:
            self._record(stop, True, {"step": self.step}, {"stopping": True})
            self.write_status(final=True)
            raise SystemExit(0)

    def _do_scale_lr(self, a):
        torch, f = self.torch, a["factor"]
        before, after = [], []
        for ref in self.optimizers:
            opt = ref()
            if opt is None:
                continue
            lrs0, lrs1 = [], []
            for g in opt.param_groups:
                lrs0.append(float(g["lr"]))
                if isinstance(g["lr"], torch.Tensor):
                    g["lr"].mul_(f)
                else:
                    g["lr"] = g["lr"] * f
                if "initial_lr" in g:
                    g["initial_lr"] = g["initial_lr"] * f
                lrs1.append(float(g["lr"]))
            for s in list(self.schedulers or []):  # so that the next scheduler.step() keeps the new scale
                if getattr(s, "optimizer", None) is opt and hasattr(s, "base_lrs"):
                    s.base_lrs = [b * f for b in s.base_lrs]
            before.append(lrs0)
            after.append(lrs1)
        return {"lr": before}, {"lr": after}

    def _do_set_grad_clip(self, a):
        before = {"max_norm": self.clip, "last_grad_norm": self.snapshot(1)[0][4] if self.hist else None}
        self.clip = a["max_norm"]
        return before, {"max_norm": self.clip}

    def _do_save_checkpoint(self, a):
        torch = self.torch
        models = self.named_modules()
        opts = [r() for r in self.optimizers if r() is not None]
        if not models:
            raise RuntimeError("no model seen yet (no forward pass since the instrument started)")
        ckpt = {"step": self.step}
        if len(models) == 1:
            ckpt["model"] = models[0].state_dict()
        else:
            ckpt["models"] = {f"{type(m).__name__}{i}": m.state_dict() for i, m in enumerate(models)}
        if opts:
            ckpt["optimizer"] = opts[0].state_dict()
        if len(opts) > 1:
            ckpt["optimizers"] = [o.state_dict() for o in opts[1:]]
        ckpt["saved_by"] = "mltriage live save_checkpoint"
        os.makedirs(os.path.dirname(a["path"]), exist_ok=True)
        tmp = a["path"] + f".{self.pid}.tmp"
        torch.save(ckpt, tmp)
        os.replace(tmp, a["path"])
        return {"path_existed": False}, {"path": a["path"], "bytes": os.path.getsize(a["path"]),
                                         "step": self.step, "keys": sorted(ckpt)}

    def _record(self, a, ok, before, after, error=None) -> None:
        result = {**a, "ok": ok, "applied_at_step": self.step, "applied_at": time.time(),
                  "before": before, "after": after, "error": error, "rank": self.rank}
        try:
            with open(self.actions_path, "a") as f:
                f.write(json.dumps(result, default=str) + "\n")
        except OSError:
            pass
        what = {k: a[k] for k in ("factor", "max_norm", "path") if k in a}
        self.log(f"step {self.step}: {a['action']}{what or ''} " + (
            f"applied: {before} -> {after}" if ok else f"FAILED: {error}"))

    def log(self, msg: str) -> None:
        # fd 2 is the run's log file even if the script swapped sys.stderr
        try:
            os.write(2, f"[mltriage rank {self.rank}] {msg}\n".encode())
        except OSError:
            pass


class _ModuleTiming:
    """Forward self-time per module from global module hooks; backward time attributed by when each
    module's output gradient arrives (a tensor hook: never wraps outputs, so in-place ops stay legal)."""

    def __init__(self, live: _Live, token: str, steps: int):
        from torch.nn.modules import module as nn_module
        self.live, self.token, self.steps = live, token, steps
        self.steps_done = 0
        self.t0 = time.perf_counter()
        self.names = {}
        for m in live.named_modules():
            for n, sub in m.named_modules():
                self.names.setdefault(id(sub), n or type(m).__name__)
        self.fwd_self = collections.defaultdict(float)
        self.fwd_incl = collections.defaultdict(float)
        self.bwd = collections.defaultdict(float)
        self.calls = collections.defaultdict(int)
        self.kind = {}
        self.stack = []
        self.marks = []
        self.marked = set()
        self.sync = live._cuda_dev is not None
        self.handles = [nn_module.register_module_forward_pre_hook(self.pre),
                        nn_module.register_module_forward_hook(self.post, always_call=True)]

    def name(self, module) -> str:
        n = self.names.get(id(module))
        if n is None:
            n = self.names[id(module)] = f"{type(module).__name__}@{id(module):x}"
        self.kind.setdefault(n, type(module).__name__)
        return n

    def now(self) -> float:
        if self.sync:
            self.live.torch.cuda.synchronize()
        return time.perf_counter()

    def pre(self, module, args):
        self.stack.append([self.name(module), self.now(), 0.0])

    def post(self, module, args, output):
        if not self.stack:
            return
        name, t0, child = self.stack.pop()
        incl = self.now() - t0
        self.fwd_incl[name] += incl
        self.fwd_self[name] += incl - child
        self.calls[name] += 1
        if self.stack:
            self.stack[-1][2] += incl
        out = output
        if isinstance(out, (tuple, list)) and out:
            out = out[0]
        # a container that returns its last child's output unchanged adds no backward work of its own
        if getattr(out, "requires_grad", False) and out.grad_fn is not None and id(out) not in self.marked:
            self.marked.add(id(out))
            out.register_hook(functools.partial(self.mark, name))

    def mark(self, name, grad):
        self.marks.append((self.now(), name))

    def backward_done(self):
        end = self.now()
        marks, self.marks = sorted(self.marks), []
        for (t, name), nxt in zip(marks, [m[0] for m in marks[1:]] + [end]):
            self.bwd[name] += nxt - t

    def step_done(self):
        self.steps_done += 1
        self.stack, self.marks, self.marked = [], [], set()

    def stop(self) -> dict:
        for h in self.handles:
            h.remove()
        wall = time.perf_counter() - self.t0
        n = max(1, self.steps_done)
        rows = [{"module": k, "type": self.kind.get(k, ""), "calls_per_step": self.calls[k] / n,
                 "forward_ms": 1000 * self.fwd_self[k] / n, "forward_incl_ms": 1000 * self.fwd_incl[k] / n,
                 "backward_ms": 1000 * self.bwd.get(k, 0.0) / n}
                for k in set(self.calls) | set(self.bwd)]
        rows.sort(key=lambda r: -(r["forward_ms"] + r["backward_ms"]))
        return {"steps_timed": self.steps_done, "step_ms": 1000 * wall / n, "modules": rows[:100],
                "until_step": self.live.step}


COLLECTIVE_NAMES = ("all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "reduce_scatter_tensor",
                    "broadcast", "broadcast_object_list", "barrier", "reduce", "all_to_all_single", "gather", "scatter")

COMMANDS = {
    "progress": _Live.progress,
    "stack": _Live.stack,
    "memory": _Live.memory,
    "grads": _Live.grads,
    "optimizer": _Live.optimizer,
    "modules_start": _Live.modules_start,
    "modules_result": _Live.modules_result,
    "modules_cancel": _Live.modules_cancel,
    "action": _Live.action,
    "fr_dump": _Live.fr_dump,
}
