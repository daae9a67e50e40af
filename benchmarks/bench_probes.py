"""Probe overheads, measured in one run, printed as markdown tables with ratios.

1. NaN-hook overhead per training step (4-layer TransformerEncoder d_model 128 on 16x64 tokens; a small CNN):
   plain step, ours (nan_hook_run's StepGuard: one host sync per step), torch.autograd.detect_anomaly(check_nan=True),
   and the script-mode instruments (global module/backward/optimizer hooks). Target: ours <= 1.15x plain.
2. Gradient snapshot: ours (torch._foreach_norm + stack + ONE .tolist()) vs the per-parameter
   p.grad.norm().item() loop, vs one training step. Target: <= 0.25 of a training step.
3. overfit_test wall time on the examples gallery (through tools.probes, a subprocess per example).

    .venv/bin/python benchmarks/bench_probes.py [--quick]
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tools" / "probe")]

import torch  # noqa: E402
from torch import nn  # noqa: E402

import mltriage_torch as T  # noqa: E402


def transformer():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=512, batch_first=True, dropout=0.1)
    model = nn.Sequential(nn.Embedding(1000, 128), nn.TransformerEncoder(layer, num_layers=4, enable_nested_tensor=False),
                          nn.Linear(128, 1000))
    x = torch.randint(0, 1000, (16, 64))
    y = torch.randint(0, 1000, (16, 64))
    loss_fn = lambda m: nn.functional.cross_entropy(m(x).reshape(-1, 1000), y.reshape(-1))  # noqa: E731
    return model, loss_fn


def cnn():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(64 * 8 * 8, 128), nn.ReLU(), nn.Linear(128, 10))
    x, y = torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,))
    return model, lambda m: nn.functional.cross_entropy(m(x), y)


def step_plain(model, opt, loss_fn, guard=None):
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model)
    loss.backward()
    opt.step()


def step_ours(model, opt, loss_fn, guard):
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model)
    loss.backward()
    guard.check(loss)  # one host sync: loss, global grad norm, params after the last step
    opt.step()
    guard.after_step()


def step_anomaly(model, opt, loss_fn, guard=None):
    opt.zero_grad(set_to_none=True)
    with torch.autograd.detect_anomaly(check_nan=True):
        loss = loss_fn(model)
        loss.backward()
    opt.step()


def time_steps(fn, model, opt, loss_fn, guard, n):
    t0 = time.perf_counter()
    for _ in range(n):
        fn(model, opt, loss_fn, guard)
    return (time.perf_counter() - t0) / n


def measure(variants, build, n, rounds):
    """Interleaved rounds (this box is shared): the median per-step time of each variant."""
    model, loss_fn = build()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    guard = T.StepGuard(model.parameters())
    for fn in variants.values():
        time_steps(fn, model, opt, loss_fn, guard, 2)
    times = {k: [] for k in variants}
    for _ in range(rounds):
        for k, fn in variants.items():
            times[k].append(time_steps(fn, model, opt, loss_fn, guard, n))
    return {k: statistics.median(v) for k, v in times.items()}, model, opt, loss_fn


def snapshot_ours(params):
    g = T.norms([p.grad for p in params])
    w = T.norms(params)
    return T.to_floats(g, w)  # ONE host synchronisation


def snapshot_loop(params):
    return [p.grad.norm().item() for p in params] + [p.norm().item() for p in params]


def snapshot_full(params, opt):
    """What grad_norm_snapshot adds around the step: norms, a copy of the weights, the update norms, one sync."""
    g = T.norms([p.grad for p in params])
    w = T.norms(params)
    before = [p.detach().clone() for p in params]
    u = T.norms(torch._foreach_sub([p.detach() for p in params], before))
    return T.to_floats(g, w, u)


def bench_snapshot(build, n, rounds):
    model, loss_fn = build()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    params = [p for p in model.parameters()]
    step_plain(model, opt, loss_fn)
    loss_fn(model).backward()
    fns = {"ours": lambda: snapshot_ours(params), "loop": lambda: snapshot_loop(params),
           "ours_full": lambda: snapshot_full(params, opt)}
    times = {k: [] for k in fns}
    step_times = []
    for _ in range(rounds):
        for k, f in fns.items():
            t0 = time.perf_counter()
            for _ in range(n):
                f()
            times[k].append((time.perf_counter() - t0) / n)
        step_times.append(time_steps(step_plain, model, opt, loss_fn, None, max(2, n // 10)))
        loss_fn(model).backward()
    return {k: statistics.median(v) for k, v in times.items()}, statistics.median(step_times), len(params)


def script_mode_overhead(build, n, rounds, plain):
    """The script-mode instruments installed in this process (global hooks stay installed: measured last)."""
    job = tempfile.mkdtemp(prefix="mltriage-bench-")
    os.makedirs(os.path.join(job, "reports"))
    Path(job, "args.json").write_text('{"max_steps": 100000000}')
    os.environ.update(MLTRIAGE_JOB=job, MLTRIAGE_MODE="nan")
    import mltriage_instrument
    mltriage_instrument._install()
    st = mltriage_instrument._state
    out = {}
    for name, b in build.items():
        model, loss_fn = b()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        time_steps(step_plain, model, opt, loss_fn, None, 2)
        out[name] = statistics.median(time_steps(step_plain, model, opt, loss_fn, None, n) for _ in range(rounds))
    st.done = True  # stop watching; nothing is written
    return out


def overfit_walltimes(names):
    import anyio
    from tools import probes as P
    rows = []
    for n in names:
        spec = f"{ROOT / 'examples' / n / 'train.py'}:make_target"
        try:
            rep = anyio.run(lambda: P.overfit_test(ROOT, spec, timeout_s=300))
            verdict = "passed" if rep.passed else (rep.outcome if not rep.error else f"error ({rep.error.type})")
            rows.append((n, verdict, rep.steps_run, rep.wall_time_s, rep.duration_s))
        except Exception as e:  # noqa: BLE001
            rows.append((n, f"tool error: {str(e)[:40]}", 0, float("nan"), float("nan")))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer steps and rounds")
    ap.add_argument("--skip-overfit", action="store_true")
    a = ap.parse_args()
    n, rounds = (5, 3) if a.quick else (8, 7)
    # one intra-op thread: on a shared 2-core box, OpenMP spin-waits under contention swamp the differences measured
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, load average {os.getloadavg()[0]:.1f}\n")

    builds = {"transformer (4 layers, d_model 128, 16x64 tokens)": transformer, "small CNN (32x3x32x32)": cnn}
    variants = {"plain": step_plain, "ours": step_ours, "detect_anomaly": step_anomaly}
    results = {name: measure(variants, b, n, rounds)[0] for name, b in builds.items()}
    script = script_mode_overhead(builds, n, rounds, results) if True else {}

    print("## NaN-hook overhead per training step\n")
    print("| model | plain ms/step | ours (nan_hook_run) | ratio | script-mode hooks | ratio | detect_anomaly(check_nan) | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        p = r["plain"]
        s = script.get(name, float("nan"))
        print(f"| {name} | {p * 1e3:.1f} | {r['ours'] * 1e3:.1f} | {r['ours'] / p:.2f}x | {s * 1e3:.1f} | {s / p:.2f}x "
              f"| {r['detect_anomaly'] * 1e3:.1f} | {r['detect_anomaly'] / p:.2f}x |")
    print("\nTarget: ours <= 1.15x plain.\n")

    print("## Gradient snapshot\n")
    print("| model | params | ours: foreach_norm + 1 sync (ms) | per-param .norm().item() loop (ms) | loop / ours "
          "| ours incl. update norms (ms) | one training step (ms) | ours / step | full / step |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, b in builds.items():
        t, step, k = bench_snapshot(b, n * 5, rounds)
        print(f"| {name} | {k} | {t['ours'] * 1e3:.2f} | {t['loop'] * 1e3:.2f} | {t['loop'] / t['ours']:.1f}x "
              f"| {t['ours_full'] * 1e3:.2f} | {step * 1e3:.1f} | {t['ours'] / step:.3f} | {t['ours_full'] / step:.3f} |")
    print("\nTarget: <= 0.25 of a training step. On CPU a .item() is cheap; on a GPU each one is a host-device sync.\n")

    if not a.skip_overfit:
        names = sorted(p.name for p in (ROOT / "examples").iterdir()
                       if (p / "train.py").exists() and p.name != "hang_loader")
        print("## overfit_test wall time on the examples\n")
        print("| example | verdict | steps | training s | tool call s (incl. process start, torch import) |")
        print("|---|---|---|---|---|")
        for row in overfit_walltimes(names):
            print(f"| {row[0]} | {row[1]} | {row[2]} | {row[3]:.2f} | {row[4]:.2f} |")


if __name__ == "__main__":
    main()
