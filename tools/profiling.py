"""Where a training step spends its time: torch.profiler over a few steps, plus the host-device syncs by line.

Target mode runs probe `mltriage_profile.py` on a target factory; script mode runs the user's own
command with `tools/probe/profile_inject/` on PYTHONPATH, whose sitecustomize opens the profiling
window after a warmup of optimizer steps and stops the script when the window closes.
"""

import os
import shutil
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from tools.errors import TriageError
from tools.probe_runner import PROBE_DIR, ProgressFn, choose_python, run_probe
from tools.failure_modes import crash_mode
from tools.report import Evidence, Finding, Num, Report

INJECT_DIR = PROBE_DIR / "profile_inject"
SYNC_SHARE_HIGH = 0.10     # syncs costing >10% of the step are a cause even on CPU
DATA_SHARE_HIGH = 0.30     # waiting for data >30% of the step: data-bound
OPTIMIZER_SHARE_HIGH = 0.50
GPU_IDLE_HIGH = 0.50


class OpTime(BaseModel):
    name: str
    calls: int
    self_ms: float
    share: float = Field(description="share of all profiled self CPU time")
    device_ms: float | None = None


class ModuleTime(BaseModel):
    name: str
    type: str
    calls: int
    self_ms: float = Field(description="forward host time minus child modules")
    total_ms: float


class SyncPoint(BaseModel):
    model_config = ConfigDict(validate_assignment=True)  # a NaN set later still becomes "nan"
    kind: str = Field(description="what synchronised: .item(), print/repr(tensor), .cpu(), float(tensor), ...")
    location: str = Field(description="the user's file:line that made the call")
    code: str = ""
    count: int
    per_step: float
    time_ms: float = Field(description="host time inside the call (on a GPU this includes waiting for the device)")


class ProfileReport(Report):
    model_config = ConfigDict(validate_assignment=True)  # a NaN set later still becomes "nan"
    mode: str = Field(description="'target' or 'script'")
    device: str | None = None
    steps: int = Field(0, description="optimizer steps inside the profiling window")
    warmup: int = 0
    wall_ms: Num = None
    step_ms_mean: Num = None
    step_ms_median: Num = None
    optimizer_share: Num = Field(None, description="share of the window inside optimizer.step (and zero_grad)")
    data_share: Num = Field(None, description="share of the window waiting for the next batch")
    sync_share: Num = Field(None, description="share of the window inside synchronising calls")
    top_ops: list[OpTime] = Field(default_factory=list)
    top_modules: list[ModuleTime] = Field(default_factory=list)
    syncs: list[SyncPoint] = Field(default_factory=list)
    sync_ops: dict[str, int] = Field(default_factory=dict, description="profiler counts of sync-like ops (aten::_local_scalar_dense, cudaStreamSynchronize, ...)")
    device_kernel_ms: Num = None
    device_idle_share: Num = None
    notes: list[str] = Field(default_factory=list)

    def headline(self) -> str:
        if not self.steps:
            return f"profile ({self.mode}): no step was profiled" + "".join(f"\nnote: {n}" for n in self.notes)
        pct = lambda v: f"{v:.0%}" if isinstance(v, float) else str(v)  # noqa: E731
        lines = [f"profile ({self.mode}, {self.device}): {self.steps} steps after {self.warmup} warmup, "
                 f"{self.step_ms_median:.2f} ms/step median; optimizer {pct(self.optimizer_share)}, "
                 f"data wait {pct(self.data_share)}, syncs {pct(self.sync_share)}"]
        if self.device_idle_share is not None:
            lines.append(f"device kernels {self.device_kernel_ms:.1f} ms, idle {pct(self.device_idle_share)}")
        lines.append("top ops (self CPU): " + ", ".join(f"{o.name} {o.self_ms:.2f} ms ({o.share:.0%})" for o in self.top_ops[:5]))
        if self.top_modules:
            lines.append("top modules (forward self): " + ", ".join(f"{m.name} {m.self_ms:.2f} ms" for m in self.top_modules[:5]))
        for s in self.syncs[:8]:
            lines.append(f"sync {s.kind} x{s.count} ({s.per_step:.1f}/step, {s.time_ms:.2f} ms) at {s.location}: {s.code}")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def _share(part, whole):
    return part / whole if isinstance(part, (int, float)) and whole else None


def build_report(res: dict, workspace_root: Path) -> ProfileReport:
    """The report and its findings from the probe's raw numbers."""
    steps = int(res.get("steps") or 0)
    r = ProfileReport(mode=res.get("mode", "?"), device=res.get("device"), steps=steps, warmup=int(res.get("warmup") or 0))
    if res.get("script_ended_early"):
        r.notes.append(f"the script ended after {res.get('optimizer_steps_seen', 0)} optimizer steps, before "
                       f"{r.warmup} warmup + {res.get('requested_steps')} profiled steps"
                       + ("; raise its --steps (or equivalent)" if steps < int(res.get("requested_steps") or 0) else ""))
    if not steps:
        if res.get("optimizer_steps_seen") == 0:
            r.notes.append("no optimizer.step() was seen: is this a training script, and does it reach the loop?")
        return r
    wall = res["wall_ms"]
    r.wall_ms, r.step_ms_mean, r.step_ms_median = wall, res.get("step_ms_mean"), res.get("step_ms_median")
    r.optimizer_share = _share(res.get("optimizer_ms", 0.0) + res.get("zero_grad_ms", 0.0), wall)
    r.data_share = _share(res.get("data_ms", 0.0), wall)
    r.sync_share = _share(res.get("sync_ms", 0.0), wall)
    r.top_ops = [OpTime(**o) for o in res.get("top_ops", [])]
    r.top_modules = [ModuleTime(**m) for m in res.get("modules", [])]
    r.sync_ops = res.get("sync_ops") or {}
    for s in res.get("syncs", []):
        r.syncs.append(SyncPoint(kind=s["kind"], location=f"{_rel(s['file'], workspace_root)}:{s['line']}", code=s.get("code", ""),
                                 count=s["count"], per_step=s["count"] / steps, time_ms=s["time_ms"]))
    if res.get("device_kernel_ms") is not None:
        r.device_kernel_ms = res["device_kernel_ms"]
        r.device_idle_share = max(0.0, 1.0 - res["device_kernel_ms"] / wall) if wall else None
    if r.mode == "target":
        r.notes.append("target mode runs mltriage's own loop (zero_grad, loss, backward, step); syncs in it come from "
                       "your model and loss_fn. Profile your script with command=[...] to see its logging lines too")
    r.notes.append("module times are forward host time only; backward time is in the operator table (…Backward0 ops)")
    r.findings = _findings(r)
    return r


def _rel(path: str, root: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(root))
    except (ValueError, OSError):
        return path


def _findings(r: ProfileReport) -> list[Finding]:
    out = []
    every_step = [s for s in r.syncs if s.per_step >= 1.0]
    if every_step:
        gpu = r.device == "cuda"
        share = r.sync_share or 0.0
        conf = (0.85 if share >= SYNC_SHARE_HIGH else 0.7) if gpu else (0.6 if share >= SYNC_SHARE_HIGH else 0.4)
        where = ", ".join(f"{s.location} ({s.kind})" for s in every_step[:4])
        out.append(Finding(
            failure_mode="slow_throughput", confidence=conf,
            summary=f"{len(every_step)} line(s) synchronise the host with the device every step: {where}; they take "
                    f"{share:.0%} of the step here" + ("" if gpu else " on CPU, and on a GPU each one also stalls the "
                                                                    "launch queue until the device catches up"),
            evidence=[Evidence(what=f"{s.kind} calls per step", value=round(s.per_step, 2), source=f"{s.location}: {s.code}")
                      for s in every_step[:5]] + [Evidence(what="share of the step in sync calls", value=share, source="profile_steps")],
            fix="Keep per-step values on the device: accumulate losses in a tensor (running += loss.detach()) and call "
                ".item() / print only every N steps (e.g. at the log interval); never print a tensor inside the loop",
            location=every_step[0].location))
    if isinstance(r.data_share, float) and r.data_share >= DATA_SHARE_HIGH:
        out.append(Finding(
            failure_mode="slow_throughput", confidence=min(0.9, 0.4 + r.data_share),
            summary=f"data-bound: {r.data_share:.0%} of each step waits for the next batch",
            evidence=[Evidence(what="share of the step waiting for data", value=r.data_share, source="profile_steps (DataLoader __next__)")],
            fix="Give the DataLoader workers (num_workers > 0, persistent_workers=True, pin_memory=True on GPU), move "
                "decoding/augmentation off the critical path or cache preprocessed tensors"))
    if isinstance(r.device_idle_share, float) and r.device_idle_share >= GPU_IDLE_HIGH:
        out.append(Finding(
            failure_mode="slow_throughput", confidence=0.7,
            summary=f"the GPU is idle {r.device_idle_share:.0%} of the profiled window (kernels {r.device_kernel_ms:.1f} ms "
                    f"of {r.wall_ms:.1f} ms)",
            evidence=[Evidence(what="device idle share", value=r.device_idle_share, source="profile_steps")],
            fix="Remove per-step host syncs, feed data faster, raise the work per launch (batch size, torch.compile, CUDA graphs)"))
    if isinstance(r.optimizer_share, float) and r.optimizer_share >= OPTIMIZER_SHARE_HIGH:
        out.append(Finding(
            failure_mode="slow_throughput", confidence=0.45,
            summary=f"the optimizer takes {r.optimizer_share:.0%} of the step",
            evidence=[Evidence(what="share of the step in optimizer.step/zero_grad", value=r.optimizer_share, source="profile_steps")],
            fix="Use the foreach/fused implementation (e.g. AdamW(..., fused=True) on GPU) and zero_grad(set_to_none=True); "
                "check that tiny parameters are not stepped one by one"))
    if not out:
        top = r.top_ops[0] if r.top_ops else None
        out.append(Finding(
            failure_mode="healthy", confidence=0.5,
            summary="no per-step sync, data wait or optimizer overhead dominates; the time is in compute"
                    + (f" (top op {top.name}, {top.share:.0%} of self time)" if top else ""),
            evidence=[Evidence(what="median step time (ms)", value=r.step_ms_median, source="profile_steps")],
            fix="If it is still too slow, shrink the top operators (precision, fused kernels, torch.compile) rather than the syncs"))
    return out


def _script_env() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": str(INJECT_DIR) + (os.pathsep + path if path else ""), "MLTRIAGE_PROFILE": "1"}


def resolve_command(command: list[str], workspace_root: Path, python: str | None) -> list[str]:
    """The command with a leading 'python' replaced by the user's interpreter (the python argument, MLTRIAGE_PYTHON, .venv)."""
    if not isinstance(command, list) or not command or not all(isinstance(c, str) and c for c in command):
        raise TriageError(f"command must be a non-empty list of strings, got {command!r}",
                          "e.g. command=['python', 'train.py', '--steps', '50']")
    head = command[0]
    if head in ("python", "python3"):
        return [choose_python(python, workspace_root), *command[1:]]
    found = shutil.which(head) or (str(workspace_root / head) if (workspace_root / head).is_file() else None)
    if not found:
        raise TriageError(f"{head!r} is not an executable on PATH or in the workspace",
                          "Start the command with 'python' (replaced by your interpreter) or a full path")
    return [found, *command[1:]]


async def profile_steps(target: str | None = None, command: list[str] | None = None, steps: int = 20, *,
                        workspace_root: Path, python: str | None = None, timeout_s: float = 300.0,
                        on_progress: ProgressFn | None = None) -> ProfileReport:
    if (target is None) == (command is None):
        raise TriageError("pass exactly one of target or command",
                          "target='train.py:make_target' for a factory, or command=['python', 'train.py'] for your script")
    if not 1 <= int(steps) <= 1000:
        raise TriageError(f"steps={steps} is out of range", "Use 1 <= steps <= 1000; 10-30 steps is plenty")
    args = {"steps": int(steps)}
    if target is not None:
        args["target"] = target
        outcome = await run_probe("mltriage_profile.py", args, workspace_root=workspace_root, python=python,
                                  timeout_s=timeout_s, on_progress=on_progress)
    else:
        argv = resolve_command(command, workspace_root, python)
        outcome = await run_probe("mltriage_profile.py", args, workspace_root=workspace_root, python=python,
                                  timeout_s=timeout_s, on_progress=on_progress, env=_script_env(), command=argv)
    what = target or " ".join(command)
    if outcome.result is None:
        raise TriageError(f"profile_steps on {what!r}: {outcome.failure()}",
                          ("Raise timeout_s or lower steps" if outcome.timed_out else "Run it by hand to see why")
                          + "; stderr tail:\n" + outcome.stderr_tail[-2000:])
    if not outcome.result.get("ok"):
        err = outcome.result["error"]
        if err["kind"] != "user_code":
            raise TriageError(f"profile_steps could not load {what!r}: {err['type']}: {err['message']}",
                              "Pass target='file.py:make_target' (relative to the workspace) or command=['python', 'train.py', ...]")
        where = f"{_rel(err['file'], workspace_root)}:{err['line']}" if err.get("file") else what
        msg = err["message"]
        mode = crash_mode(msg)
        r = ProfileReport(mode="target" if target else "script")
        r.findings = [Finding(failure_mode=mode, confidence=0.9,
                              summary=f"the training step raised {err['type']} during {err['phase']} before it could be profiled: {msg[:300]}",
                              evidence=[Evidence(what="exception", value=f"{err['type']}: {msg[:200]}", source=where)],
                              fix="Fix the crash first (see the traceback), then profile", location=where)]
        r.notes.append(err.get("traceback", "")[-1500:])
        return r
    return build_report(outcome.result["report"], workspace_root)
