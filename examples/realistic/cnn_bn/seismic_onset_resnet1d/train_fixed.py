"""P-wave onset picking on 3-component seismograms with a small 1-D ResNet.

Synthetic station data: coloured background noise, a P arrival (damped
oscillation with impulsive first motion) and a later, stronger S arrival.
The network regresses the onset position inside a 256-sample window.
"""
import math
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

CFG = dict(
    seed=7,
    n_traces=2400,
    n_val=400,
    trace_len=320,
    win=256,
    batch_size=64,
    epochs=10,
    lr=3e-3,
    weight_decay=1e-2,
    warmup_steps=40,
    fs=100.0,
)

# ----------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------
def synth_traces(n, length, seed):
    rng = np.random.default_rng(seed)
    t = np.arange(length, dtype=np.float32)[None, :]
    # coloured noise: white noise through a short smoothing filter
    white = rng.standard_normal((n, 3, length + 8)).astype(np.float32)
    kern = np.hanning(7).astype(np.float32)
    kern /= kern.sum()
    noise = sum(kern[k] * white[..., k:k + length] for k in range(len(kern)))
    noise = noise * rng.uniform(0.5, 1.5, (n, 1, 1)).astype(np.float32)

    onset = rng.integers(90, 221, n)
    s_delay = rng.integers(30, 80, n)
    f_p = rng.uniform(0.06, 0.14, n)[:, None]
    f_s = f_p * rng.uniform(0.4, 0.7, n)[:, None]
    snr = rng.uniform(3.0, 9.0, n)[:, None, None]
    pol = (rng.choice([-1.0, 1.0], (n, 3)) * rng.uniform(0.4, 1.0, (n, 3)))[:, :, None]

    dt = np.maximum(t - onset[:, None], 0)
    p_wave = np.sin(2 * np.pi * f_p * dt) * np.exp(-dt / 25.0) * (1 - np.exp(-dt / 1.5))
    ds = np.maximum(t - (onset + s_delay)[:, None], 0)
    s_wave = 1.8 * np.sin(2 * np.pi * f_s * ds) * np.exp(-ds / 40.0) * (1 - np.exp(-ds / 4.0))
    s_gain = np.array([0.6, 0.6, 0.3], np.float32)[None, :, None]
    x = noise + snr * 0.35 * (pol * p_wave[:, None, :] + s_gain * s_wave[:, None, :])
    return x.astype(np.float32), onset.astype(np.float32)


def load_data(cfg):
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "traces.npz")
    if os.path.exists(path):
        d = np.load(path)
        return d["x"], d["onset"]
    x, onset = synth_traces(cfg["n_traces"], cfg["trace_len"], cfg["seed"])
    np.savez(path, x=x, onset=onset)
    return x, onset


class TraceWindows(Dataset):
    def __init__(self, traces, onsets, win, train):
        self.traces = traces
        self.onsets = onsets
        self.win = win
        self.train = train

    def __len__(self):
        return len(self.traces)

    def __getitem__(self, i):
        x = self.traces[i]
        start = 0
        if self.train:
            start = np.random.randint(0, x.shape[-1] - self.win + 1)
        x = x[:, start:start + self.win]
        y = (self.onsets[i] - start) / self.win
        if self.train:
            x = x * np.random.uniform(0.7, 1.4)
            if np.random.rand() < 0.5:
                x = -x
        x = x / (np.abs(x).max() + 1e-6)
        return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)), torch.tensor(y, dtype=torch.float32)


def build_loaders(cfg):
    x, onset = load_data(cfg)
    rng = np.random.default_rng(cfg["seed"] + 1)
    perm = rng.permutation(len(x))
    va, tr = perm[: cfg["n_val"]], perm[cfg["n_val"]:]
    train_ds = TraceWindows(x[tr], onset[tr], cfg["win"], train=True)
    val_ds = TraceWindows(x[va], onset[va], cfg["win"], train=False)
    train_dl = DataLoader(train_ds, batch_size=cfg["batch_size"], shuffle=True, drop_last=True)
    val_dl = DataLoader(val_ds, batch_size=256, shuffle=False)
    return train_dl, val_dl


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class BasicBlock1d(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv1d(cin, cout, 5, stride, 2, bias=False)
        self.bn1 = nn.BatchNorm1d(cout)
        self.conv2 = nn.Conv1d(cout, cout, 5, 1, 2, bias=False)
        self.bn2 = nn.BatchNorm1d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv1d(cin, cout, 1, stride, bias=False), nn.BatchNorm1d(cout))

    def forward(self, x):
        idt = x if self.down is None else self.down(x)
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + idt)


class PickerNet(nn.Module):
    """Fully convolutional picker: per-position logits at 1/4 resolution, soft-argmax readout."""

    def __init__(self, in_ch=3, widths=(16, 32, 48, 48), strides=(2, 2, 1, 1)):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv1d(in_ch, widths[0], 9, 1, 4, bias=False), nn.BatchNorm1d(widths[0]), nn.ReLU())
        layers, c = [], widths[0]
        for w, st in zip(widths, strides):
            layers.append(BasicBlock1d(c, w, st))
            c = w
        self.body = nn.Sequential(*layers)
        self.logits = nn.Conv1d(c, 1, 3, 1, 1)

    def forward(self, x):
        z = self.logits(self.body(self.stem(x))).squeeze(1)
        pos = (torch.arange(z.shape[-1], device=z.device, dtype=z.dtype) + 0.5) / z.shape[-1]
        return (z.softmax(-1) * pos).sum(-1)


def loss_fn(model, batch):
    x, y = batch
    return F.smooth_l1_loss(model(x), y, beta=0.02)


def make_optimizer(model, cfg):
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (no_decay if p.ndim == 1 else decay).append(p)
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg["lr"],
    )


def make_target():
    torch.manual_seed(CFG["seed"])
    np.random.seed(CFG["seed"])
    train_dl, val_dl = build_loaders(CFG)
    model = PickerNet()
    opt = make_optimizer(model, CFG)
    return {
        "model": model,
        "data": train_dl,
        "val_data": val_dl,
        "loss_fn": loss_fn,
        "optimizer": opt,
        "task": "regression",
    }


@torch.no_grad()
def evaluate(model, dl, win):
    model.eval()
    errs, losses = [], []
    for x, y in dl:
        pred = model(x)
        losses.append(F.smooth_l1_loss(pred, y, beta=0.02, reduction="sum").item())
        errs.append(((pred - y) * win).abs().numpy())
    model.train()
    errs = np.concatenate(errs)
    return sum(losses) / len(errs), errs.mean(), (errs <= 5).mean()


def main():
    cfg = CFG
    torch.set_num_threads(1)
    torch.manual_seed(cfg["seed"])
    np.random.seed(cfg["seed"])
    train_dl, val_dl = build_loaders(cfg)
    model = PickerNet()
    opt = make_optimizer(model, cfg)
    total = cfg["epochs"] * len(train_dl)

    def lr_at(step):
        if step < cfg["warmup_steps"]:
            return (step + 1) / cfg["warmup_steps"]
        prog = (step - cfg["warmup_steps"]) / max(1, total - cfg["warmup_steps"])
        return 0.5 * (1 + math.cos(math.pi * prog))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"train windows: {len(train_dl.dataset)} | val windows: {len(val_dl.dataset)} | params: {n_params/1e3:.1f}k")
    print(f"steps/epoch: {len(train_dl)} | total steps: {total}")

    step = 0
    t_start = time.time()
    for epoch in range(cfg["epochs"]):
        model.train()
        run_loss, n = 0.0, 0
        t0 = time.time()
        for batch in train_dl:
            loss = loss_fn(model, batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 2.0)
            opt.step()
            sched.step()
            run_loss += loss.item()
            n += 1
            if step % 40 == 0:
                print(f"step {step:4d} | loss {loss.item():.5f} | lr {sched.get_last_lr()[0]:.2e}")
            step += 1
        val_loss, mae, hit5 = evaluate(model, val_dl, cfg["win"])
        dt = time.time() - t0
        print(
            f"epoch {epoch+1:2d}/{cfg['epochs']} | train_loss {run_loss/n:.5f} | val_loss {val_loss:.5f} | "
            f"val_mae {mae:6.2f} smp ({mae/cfg['fs']*1000:5.0f} ms) | pick<=5smp {hit5:.3f} | {dt:.1f}s"
        )
    print(f"done in {time.time()-t_start:.1f}s")


if __name__ == "__main__":
    main()
