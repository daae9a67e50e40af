"""Per-step overhead of run_training's always-on live instrument (target: <= 1.05x).

Model: the probes benchmark's 4-layer TransformerEncoder (d_model 128, 4 heads, ff 512) on 16 x 64 tokens,
AdamW, CPU, one intra-op thread (2 shared cores: steadier numbers). One process is started with the
instrument injected exactly as run_training does it (our sitecustomize on PYTHONPATH); it runs blocks
of steps with the instrument's hooks detached (plain), attached (always-on), and attached with
per-module timing switched on (what live_status what=['modules'] does, only while asked), interleaved
so that a shared machine's load hits every configuration alike. Ratio = median step time / plain's.
The idle control thread and its once-a-second status file are present in all three (their cost is
not in the ratio; it is one file write per second).

    python benchmarks/bench_live.py [--blocks 12] [--block 5]
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIVE_DIR = ROOT / "tools" / "probe" / "live"


def worker(blocks: int, block: int) -> None:
    import torch
    from torch import nn
    from torch.optim import optimizer as optim

    torch.set_num_threads(1)
    torch.manual_seed(0)
    vocab, d, seq, batch = 1000, 128, 64, 16
    model = nn.Sequential(nn.Embedding(vocab, d),
                          nn.TransformerEncoder(nn.TransformerEncoderLayer(d, 4, 512, dropout=0.1, batch_first=True), 4),
                          nn.Linear(d, vocab))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    x = torch.randint(0, vocab, (batch, seq))
    y = torch.randint(0, vocab, (batch, seq))

    def step():
        t = time.perf_counter()
        logits = model(x)
        loss = nn.functional.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return time.perf_counter() - t

    # the instrument was injected at startup exactly as run_training does it; to measure plain steps in
    # the same process we detach its hooks for a block and attach them again
    wrapped = torch.autograd.backward
    assert hasattr(wrapped, "__wrapped__"), "the live instrument is not installed"
    hooks = (dict(optim._global_optimizer_pre_hooks), dict(optim._global_optimizer_post_hooks))

    def attach(on: bool):
        for live, saved in zip((optim._global_optimizer_pre_hooks, optim._global_optimizer_post_hooks), hooks):
            live.clear()
            if on:
                live.update(saved)
        torch.autograd.backward = wrapped if on else wrapped.__wrapped__

    def ask(req):
        s = socket.socket(socket.AF_UNIX)
        s.connect(os.path.join(os.environ["MLTRIAGE_LIVE_DIR"], "ctl-0.sock"))
        s.sendall(json.dumps(req).encode() + b"\n")
        s.recv(1 << 20)
        s.close()

    for _ in range(5):
        step()
    times = {"plain": [], "instrumented": [], "modules": []}
    for _ in range(blocks):
        for kind in times:  # interleaved blocks: machine load hits every configuration alike
            attach(kind != "plain")
            if kind == "modules":
                ask({"cmd": "modules_start", "steps": block})
                step()  # the timing hooks go on at this step boundary
            times[kind] += [step() for _ in range(block)]
    attach(True)
    result = {k: 1000 * statistics.median(v) for k, v in times.items()}
    # the hooks' own time per step, measured directly (load-independent, unlike a difference of medians);
    # gradients are present, as at a real step boundary
    import mltriage_live
    live = mltriage_live.S
    model(x).sum().backward()
    t = time.perf_counter()
    for _ in range(50):
        live.pre_step(opt, (), {})
        live.losses.append(torch.zeros(()))
        live.post_step(opt, (), {})
    result["hooks_ms"] = 1000 * (time.perf_counter() - t) / 50
    print(json.dumps(result))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--blocks", type=int, default=12)
    p.add_argument("--block", type=int, default=5, help="steps per block")
    p.add_argument("--worker", action="store_true")
    a = p.parse_args()
    if a.worker:
        return worker(a.blocks, a.block)
    with tempfile.TemporaryDirectory(prefix="mlt-bench-") as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MLTRIAGE_LIVE")}
        env.update(MLTRIAGE_LIVE_DIR=tmp, MLTRIAGE_WORKSPACE=tmp,
                   PYTHONPATH=os.pathsep.join(p for p in (str(LIVE_DIR), env.get("PYTHONPATH")) if p))
        out = subprocess.run([sys.executable, __file__, "--worker", "--blocks", str(a.blocks), "--block", str(a.block)],
                             env=env, capture_output=True, text=True, timeout=1800, cwd=tmp)
    if out.returncode != 0:
        raise SystemExit(f"worker failed:\n{out.stderr[-3000:]}")
    med = json.loads(out.stdout.strip().splitlines()[-1])
    n = a.blocks * a.block
    print(f"4-layer TransformerEncoder d_model 128, 16x64 tokens, AdamW, CPU, 1 thread; {n} steps per configuration "
          f"in {a.blocks} interleaved blocks of {a.block}, one process, load average {os.getloadavg()[0]:.1f}\n")
    print("| configuration | median step (ms) | ratio vs plain | target |")
    print("| --- | --- | --- | --- |")
    labels = {"plain": "plain (instrument detached)", "instrumented": "always-on live instrument",
              "modules": "instrument + per-module timing (only while asked)"}
    targets = {"plain": "", "instrumented": "<= 1.05x", "modules": "on demand"}
    hooks = med.pop("hooks_ms")
    for kind, ms in med.items():
        print(f"| {labels[kind]} | {ms:.2f} | {ms / med['plain']:.3f}x | {targets[kind]} |")
    print(f"| instrument hooks alone, timed directly (pre + post hook per step) | {hooks:.3f} | "
          f"{1 + hooks / med['plain']:.4f}x | <= 1.05x |")


if __name__ == "__main__":
    main()
