"""Fault classification on 2-axis accelerometer windows by fine-tuning a 1D CNN
that was pretrained on shaft-speed recognition from a test-rig recording campaign."""
import math
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

SEED = 1234
FS = 2048.0
WIN = 256
RUN_DIR = os.path.dirname(os.path.abspath(__file__))
CKPT = os.path.join(RUN_DIR, "rig_speed_cnn.pt")
DATA = os.path.join(RUN_DIR, "pump_station_windows.npz")
FAULTS = ["normal", "imbalance", "misalignment", "looseness", "outer_race", "inner_race"]

torch.set_num_threads(1)

cfg = {
    "pretrain_windows": 2400,
    "pretrain_epochs": 3,
    "n_windows": 2400,
    "val_frac": 0.25,
    "batch_size": 64,
    "epochs": 12,
    "lr_head": 3e-3,
    "lr_backbone": 1e-3,
    "weight_decay": 1e-2,
    "warmup_epochs": 1,
    "freeze": ["block1"],
}


# ----------------------------------------------------------------------------- synthetic recordings
def _tone(t, f, amp, phase):
    return amp[:, None] * np.sin(2 * np.pi * f[:, None] * t[None, :] + phase[:, None])


def _impulses(t, rate, amp, res_hz, rng):
    n = len(rate)
    out = np.zeros((n, len(t)))
    for i in range(n):
        period = 1.0 / rate[i]
        t0 = rng.uniform(0, period)
        times = np.arange(t0, t[-1], period)
        for ti in times:
            dt = t - ti
            m = dt >= 0
            out[i, m] += amp[i] * np.exp(-dt[m] * 400.0) * np.sin(2 * np.pi * res_hz[i] * dt[m])
    return out


def synth_windows(labels, rng, gain_range=(0.8, 1.25)):
    n = len(labels)
    t = np.arange(WIN) / FS
    f1 = rng.uniform(24.0, 32.0, n)                 # shaft frequency (Hz)
    noise = rng.uniform(0.05, 0.6, n)               # site-dependent broadband floor
    gain = rng.uniform(*gain_range, n)              # mounting / load
    ph = rng.uniform(0, 2 * np.pi, (n, 4))
    base_amp = rng.uniform(0.25, 0.45, n)
    x = _tone(t, f1, base_amp, ph[:, 0])
    y = _tone(t, f1, base_amp * 0.8, ph[:, 0] + np.pi / 2)
    lab = np.asarray(labels)
    # imbalance: strong 1x, radial
    m = lab == 1
    a = base_amp * rng.uniform(2.0, 4.0, n)
    x[m] += _tone(t, f1, a, ph[:, 0])[m]
    y[m] += _tone(t, f1, a * 0.8, ph[:, 0] + np.pi / 2)[m]
    # misalignment: 2x dominates
    m = lab == 2
    a = rng.uniform(0.4, 0.8, n)
    x[m] += _tone(t, 2 * f1, a, ph[:, 2])[m]
    y[m] += _tone(t, 2 * f1, a * 1.2, ph[:, 2])[m]
    # mechanical looseness: a comb of harmonics
    m = lab == 3
    for k in range(2, 7):
        a = rng.uniform(0.1, 0.3, n)
        x[m] += _tone(t, k * f1, a, ph[:, 3] * k)[m]
        y[m] += _tone(t, k * f1, a * 0.7, ph[:, 3] * k + 1.0)[m]
    # bearing defects: ringing impulses at the characteristic rates
    for cls, mult in ((4, 3.58), (5, 5.42)):
        m = np.where(lab == cls)[0]
        if len(m):
            imp = _impulses(t, f1[m] * mult, rng.uniform(1.0, 2.0, len(m)), rng.uniform(350, 600, len(m)), rng)
            if cls == 5:
                imp *= 1.0 + 0.5 * np.sin(2 * np.pi * f1[m, None] * t[None, :])
            x[m] += imp
            y[m] += 0.6 * imp
    x = gain[:, None] * x + noise[:, None] * rng.standard_normal((n, WIN))
    y = gain[:, None] * y + noise[:, None] * rng.standard_normal((n, WIN))
    y += 1.0  # gravity on the vertical axis
    return np.stack([x, y], axis=1).astype(np.float32), f1


def write_station_dataset(path, n, seed):
    rng = np.random.default_rng(seed)
    labels = rng.choice(len(FAULTS), size=n, p=[0.3, 0.3, 0.1, 0.1, 0.1, 0.1])
    xs, _ = synth_windows(labels, rng)
    pump_id = rng.integers(0, 40, size=n)
    np.savez_compressed(path, x=xs, y=labels.astype(np.int64), pump_id=pump_id)


# ----------------------------------------------------------------------------- data
def load_windows(path):
    d = np.load(path)
    return d["x"], d["y"]


def standardize(x):
    mu = x.mean(axis=2, keepdims=True)
    sd = x.std(axis=2, keepdims=True) + 1e-6
    return (x - mu) / sd


def build_loaders(cfg):
    if not os.path.exists(DATA):
        write_station_dataset(DATA, cfg["n_windows"], SEED)
    x, y = load_windows(DATA)
    rng = np.random.default_rng(SEED)
    idx = rng.permutation(len(y))
    n_val = int(len(y) * cfg["val_frac"])
    va, tr = idx[:n_val], idx[n_val:]
    x = standardize(x)
    train_ds = TensorDataset(torch.from_numpy(x[tr]), torch.from_numpy(y[tr]))
    val_ds = TensorDataset(torch.from_numpy(x[va]), torch.from_numpy(y[va]))
    train_dl = DataLoader(train_ds, batch_size=cfg["batch_size"], shuffle=True,
                          generator=torch.Generator().manual_seed(SEED))
    val_dl = DataLoader(val_ds, batch_size=256)
    return train_dl, val_dl


# ----------------------------------------------------------------------------- model
class ConvBackbone(nn.Module):
    def __init__(self, in_ch=2, width=32):
        super().__init__()

        def blk(ci, co, k, s):
            return nn.Sequential(nn.Conv1d(ci, co, k, stride=s, padding=k // 2, bias=False), nn.BatchNorm1d(co), nn.GELU())

        self.block1 = blk(in_ch, width, 15, 2)
        self.block2 = blk(width, width, 9, 2)
        self.block3 = blk(width, 2 * width, 9, 2)
        self.block4 = blk(2 * width, 2 * width, 5, 2)
        self.out_dim = 2 * width

    def forward(self, x):
        h = self.block4(self.block3(self.block2(self.block1(x))))
        return torch.cat([h.mean(-1), h.amax(-1)], dim=1)


class FaultNet(nn.Module):
    def __init__(self, n_out):
        super().__init__()
        self.backbone = ConvBackbone()
        self.head = nn.Sequential(nn.Linear(2 * self.backbone.out_dim, 64), nn.GELU(), nn.Dropout(0.1), nn.Linear(64, n_out))

    def forward(self, x):
        return self.head(self.backbone(x))


def pretrain(cfg):
    """Shaft-speed bin recognition on the rig campaign (globally standardised)."""
    rng = np.random.default_rng(SEED + 7)
    labels = rng.integers(0, len(FAULTS), size=cfg["pretrain_windows"])
    x, f1 = synth_windows(labels, rng, gain_range=(0.8, 1.2))
    speed_bin = np.clip(((f1 - 24.0) / 8.0 * 8).astype(np.int64), 0, 7)
    mu = x.mean(axis=(0, 2), keepdims=True)
    sd = x.std(axis=(0, 2), keepdims=True)
    x = (x - mu) / sd
    ds = TensorDataset(torch.from_numpy(x), torch.from_numpy(speed_bin))
    dl = DataLoader(ds, batch_size=64, shuffle=True, generator=torch.Generator().manual_seed(SEED))
    model = FaultNet(8)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    for ep in range(cfg["pretrain_epochs"]):
        model.train()
        tot, n = 0.0, 0
        for xb, yb in dl:
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += loss.item() * len(yb)
            n += len(yb)
        print(f"pretrain epoch {ep + 1}/{cfg['pretrain_epochs']}  speed_loss {tot / n:.4f}")
    torch.save(model.backbone.state_dict(), CKPT)


def build_model(cfg):
    model = FaultNet(len(FAULTS))
    if os.path.exists(CKPT):
        model.backbone.load_state_dict(torch.load(CKPT))
    for name in cfg["freeze"]:
        getattr(model.backbone, name).requires_grad_(False)
    return model


def build_optimizer(model, cfg):
    return torch.optim.AdamW([
        {"params": [p for p in model.backbone.parameters() if p.requires_grad], "lr": cfg["lr_backbone"]},
        {"params": model.head.parameters(), "lr": cfg["lr_head"]},
    ], weight_decay=cfg["weight_decay"])


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


@torch.no_grad()
def evaluate(model, dl):
    model.eval()
    tot, correct, n = 0.0, 0, 0
    for xb, yb in dl:
        out = model(xb)
        tot += F.cross_entropy(out, yb, reduction="sum").item()
        correct += (out.argmax(1) == yb).sum().item()
        n += len(yb)
    return tot / n, correct / n


def make_target():
    torch.manual_seed(SEED)
    train_dl, val_dl = build_loaders(cfg)
    model = build_model(cfg)
    return {
        "model": model,
        "data": train_dl,
        "val_data": val_dl,
        "loss_fn": loss_fn,
        "optimizer": build_optimizer(model, cfg),
        "num_classes": len(FAULTS),
        "task": "classification",
    }


def main():
    torch.manual_seed(SEED)
    t_start = time.time()
    pretrain(cfg)
    train_dl, val_dl = build_loaders(cfg)
    model = build_model(cfg)
    opt = build_optimizer(model, cfg)
    steps_per_epoch = len(train_dl)
    total = steps_per_epoch * cfg["epochs"]
    warm = steps_per_epoch * cfg["warmup_epochs"]
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / warm if s < warm else max(0.0, (total - s) / (total - warm)))
    print(f"train windows: {len(train_dl.dataset)}  val windows: {len(val_dl.dataset)}  classes: {len(FAULTS)}")
    step = 0
    for epoch in range(1, cfg["epochs"] + 1):
        model.train()
        t0 = time.time()
        run, n = 0.0, 0
        for xb, yb in train_dl:
            loss = loss_fn(model, (xb, yb))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            step += 1
            run += loss.item() * len(yb)
            n += len(yb)
        val_loss, val_acc = evaluate(model, val_dl)
        print(f"epoch {epoch:2d}/{cfg['epochs']}  step {step:4d}  train_loss {run / n:.4f}  val_loss {val_loss:.4f}  "
              f"val_acc {val_acc:.3f}  lr {opt.param_groups[1]['lr']:.2e}  ({time.time() - t0:.1f}s)")
    print(f"done in {time.time() - t_start:.1f}s")


if __name__ == "__main__":
    main()
