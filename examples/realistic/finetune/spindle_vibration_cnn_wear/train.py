"""Bearing wear regression from spindle vibration, fine-tuned from a fault classifier.

Stage 1: a 1D-CNN is pretrained to classify bearing fault type (healthy / outer
race / inner race / ball) on a large simulated test-rig dataset and saved to
./checkpoints/fault_cnn.pt.
Stage 2: the stem of that network is frozen, the last conv block is fine-tuned
at a reduced learning rate and a new regression head predicts measured
outer-race wear depth (mm) on a small set of labelled windows from the
production spindle.
"""
import argparse
import math
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

RUN_DIR = os.path.dirname(os.path.abspath(__file__))
DATA_DIR = os.path.join(RUN_DIR, "data")
CKPT_PATH = os.path.join(RUN_DIR, "checkpoints", "fault_cnn.pt")
torch.set_num_threads(1)

FS = 2048          # Hz
WIN = 512          # samples per window (0.25 s)
FAULT_ORDERS = {1: 3.58, 2: 5.42, 3: 2.36}   # outer race, inner race, ball (x shaft freq)


def get_args(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--pretrain_windows", type=int, default=3200)
    p.add_argument("--pretrain_epochs", type=int, default=4)
    p.add_argument("--pretrain_lr", type=float, default=2e-3)
    p.add_argument("--n_train", type=int, default=480)
    p.add_argument("--n_val", type=int, default=320)
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--epochs", type=int, default=25)
    p.add_argument("--head_lr", type=float, default=2e-3)
    p.add_argument("--block_lr", type=float, default=2e-4)
    p.add_argument("--weight_decay", type=float, default=1e-4)
    p.add_argument("--severity_weight", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


# ----------------------------------------------------------------------------
# simulated vibration
# ----------------------------------------------------------------------------
def simulate(n, rng, fault, severity, noise_std, res_hz):
    """Shaft harmonics + exponentially decaying resonance bursts at the fault
    characteristic frequency, amplitude growing with severity."""
    t = np.arange(WIN) / FS
    shaft = rng.uniform(18, 42, size=n)                    # Hz
    x = np.zeros((n, WIN))
    for h, a in ((1, 1.0), (2, 0.45), (3, 0.2)):
        x += a * np.sin(2 * np.pi * h * shaft[:, None] * t + rng.uniform(0, 2 * np.pi, (n, 1)))
    order = np.array([FAULT_ORDERS.get(int(f), 0.0) for f in fault])
    f_def = order * shaft
    has = f_def > 0
    phase = (f_def[:, None] * t + rng.uniform(0, 1, (n, 1))) % 1.0
    tau = phase / np.where(has, f_def, 1.0)[:, None]        # time since last impact
    burst = np.exp(-tau * 260.0) * np.sin(2 * np.pi * res_hz[:, None] * tau)
    if np.any(fault == 2):   # inner race defect is amplitude-modulated by shaft rotation
        mod = 0.6 + 0.4 * np.cos(2 * np.pi * shaft[:, None] * t)
        burst = np.where((fault == 2)[:, None], burst * mod, burst)
    amp = 3.0 * severity * has
    x += amp[:, None] * burst
    x += noise_std[:, None] * rng.standard_normal((n, WIN))
    return x.astype(np.float32)


def make_pretrain_set(n, seed):
    rng = np.random.default_rng(seed)
    fault = rng.integers(0, 4, size=n)
    severity = rng.uniform(0.25, 1.0, size=n)
    noise = rng.uniform(0.3, 0.8, size=n)
    res = rng.uniform(550, 700, size=n)
    return simulate(n, rng, fault, severity, noise, res), fault.astype(np.int64)


def make_wear_set(n, seed):
    """Production spindle: outer-race wear only; wear depth measured offline."""
    rng = np.random.default_rng(seed)
    wear_mm = rng.gamma(2.0, 0.06, size=n).clip(0.005, 0.45)
    severity = (wear_mm / 0.45) ** 0.8
    fault = np.ones(n, dtype=np.int64)
    noise = rng.uniform(0.4, 0.9, size=n)
    res = rng.uniform(600, 680, size=n)
    x = simulate(n, rng, fault, severity, noise, res)
    return x, wear_mm.astype(np.float32)


def prepare_data(args):
    os.makedirs(DATA_DIR, exist_ok=True)
    path = os.path.join(DATA_DIR, "vibration.npz")
    if not os.path.exists(path):
        xp, yp = make_pretrain_set(args.pretrain_windows, args.seed)
        xw, yw = make_wear_set(args.n_train + args.n_val, args.seed + 1)
        np.savez_compressed(path, x_rig=xp, fault_rig=yp, x_spindle=xw, wear_mm=yw)
    return np.load(path)


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
def conv_block(c_in, c_out, k, stride):
    return nn.Sequential(
        nn.Conv1d(c_in, c_out, k, stride=stride, padding=k // 2, bias=False),
        nn.BatchNorm1d(c_out),
        nn.ReLU(inplace=True),
    )


class VibrationEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(conv_block(1, 16, 9, 2), conv_block(16, 32, 7, 2))
        self.block = nn.Sequential(conv_block(32, 48, 5, 2), conv_block(48, 64, 5, 2))
        self.pool = nn.AdaptiveAvgPool1d(1)
        self.out_dim = 64

    def forward(self, x):
        return self.pool(self.block(self.stem(x.unsqueeze(1)))).flatten(1)


class FaultClassifier(nn.Module):
    def __init__(self, n_classes=4):
        super().__init__()
        self.encoder = VibrationEncoder()
        self.fc = nn.Linear(self.encoder.out_dim, n_classes)

    def forward(self, x):
        return self.fc(self.encoder(x))


class WearRegressor(nn.Module):
    def __init__(self, encoder):
        super().__init__()
        self.encoder = encoder
        self.head = nn.Sequential(
            nn.Linear(encoder.out_dim, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 1)
        )

    def train(self, mode=True):
        super().train(mode)
        self.encoder.stem.eval()      # frozen stem keeps its rig BN statistics
        return self

    def forward(self, x):
        return self.head(self.encoder(x))


class Standardizer:
    def __init__(self, x):
        self.mean = float(x.mean())
        self.std = float(x.std())

    def __call__(self, x):
        return (x - self.mean) / self.std

    def inverse(self, z):
        return z * self.std + self.mean


# ----------------------------------------------------------------------------
# stage 1
# ----------------------------------------------------------------------------
def pretrain(args, data):
    torch.manual_seed(args.seed)
    x = torch.from_numpy(data["x_rig"])
    y = torch.from_numpy(data["fault_rig"])
    n_val = len(x) // 8
    loader = DataLoader(TensorDataset(x[n_val:], y[n_val:]), batch_size=64, shuffle=True)
    model = FaultClassifier()
    opt = torch.optim.Adam(model.parameters(), lr=args.pretrain_lr)
    for epoch in range(args.pretrain_epochs):
        model.train()
        tot, n = 0.0, 0
        for xb, yb in loader:
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += loss.item() * len(yb)
            n += len(yb)
        model.eval()
        with torch.no_grad():
            acc = (model(x[:n_val]).argmax(-1) == y[:n_val]).float().mean().item()
        print(f"[pretrain] epoch {epoch + 1}/{args.pretrain_epochs} loss {tot / n:.4f} "
              f"rig_val_acc {acc:.4f}")
    os.makedirs(os.path.dirname(CKPT_PATH), exist_ok=True)
    torch.save(model.state_dict(), CKPT_PATH)


def load_encoder(args, data):
    if not os.path.exists(CKPT_PATH):
        pretrain(args, data)
    clf = FaultClassifier()
    clf.load_state_dict(torch.load(CKPT_PATH, map_location="cpu"))
    return clf.encoder


# ----------------------------------------------------------------------------
# stage 2
# ----------------------------------------------------------------------------
def build_loaders(args, data):
    x = data["x_spindle"]
    y = data["wear_mm"]
    x_tr, y_tr = x[: args.n_train], y[: args.n_train]
    x_va, y_va = x[args.n_train:], y[args.n_train:]
    x_scale = float(np.abs(x_tr).max())
    y_norm = Standardizer(y_tr)
    train_ds = TensorDataset(torch.from_numpy(x_tr / x_scale), torch.from_numpy(y_norm(y_tr)))
    val_ds = TensorDataset(torch.from_numpy(x_va / x_scale), torch.from_numpy(y_norm(y_va)))
    g = torch.Generator().manual_seed(args.seed)
    train_loader = DataLoader(train_ds, batch_size=args.batch_size, shuffle=True, generator=g)
    val_loader = DataLoader(val_ds, batch_size=128)
    return train_loader, val_loader, y_norm


def build_model(args, encoder):
    model = WearRegressor(encoder)
    for p in model.encoder.stem.parameters():
        p.requires_grad = False
    return model


def build_optimizer(args, model):
    return torch.optim.AdamW(
        [
            {"params": model.encoder.block.parameters(), "lr": args.block_lr},
            {"params": model.head.parameters(), "lr": args.head_lr},
        ],
        weight_decay=args.weight_decay,
    )


def make_loss_fn(args):
    def loss_fn(model, batch):
        x, target = batch
        pred = model(x)
        # worn bearings are the expensive mistakes: weight errors by wear level
        weight = 1.0 + args.severity_weight * target.clamp(min=0.0)
        return (weight * (pred - target) ** 2).mean()
    return loss_fn


@torch.no_grad()
def evaluate(model, loader, loss_fn, y_norm):
    model.eval()
    losses, preds, targets = [], [], []
    for batch in loader:
        losses.append(loss_fn(model, batch).item() * len(batch[1]))
        preds.append(model(batch[0]).view(-1))
        targets.append(batch[1])
    model.train()
    pred_mm = y_norm.inverse(torch.cat(preds)).numpy()
    true_mm = y_norm.inverse(torch.cat(targets)).numpy()
    err = pred_mm - true_mm
    r2 = 1.0 - np.sum(err ** 2) / np.sum((true_mm - true_mm.mean()) ** 2)
    return {
        "val_loss": sum(losses) / len(true_mm),
        "val_mae_mm": float(np.mean(np.abs(err))),
        "val_rmse_mm": float(np.sqrt(np.mean(err ** 2))),
        "val_r2": float(r2),
    }


def make_target():
    args = get_args([])
    torch.manual_seed(args.seed)
    data = prepare_data(args)
    encoder = load_encoder(args, data)
    train_loader, val_loader, _ = build_loaders(args, data)
    torch.manual_seed(args.seed)
    model = build_model(args, encoder)
    return {
        "model": model,
        "data": train_loader,
        "val_data": val_loader,
        "loss_fn": make_loss_fn(args),
        "optimizer": build_optimizer(args, model),
        "task": "regression",
    }


def main():
    args = get_args()
    t_start = time.time()
    torch.manual_seed(args.seed)
    data = prepare_data(args)
    pretrain(args, data)
    encoder = load_encoder(args, data)

    train_loader, val_loader, y_norm = build_loaders(args, data)
    torch.manual_seed(args.seed)
    model = build_model(args, encoder)
    optimizer = build_optimizer(args, model)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs)
    loss_fn = make_loss_fn(args)

    n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print(f"fine-tuning: {len(train_loader.dataset)} train / {len(val_loader.dataset)} val windows, "
          f"{n_train} trainable params, wear mean {y_norm.mean:.4f} mm std {y_norm.std:.4f} mm")

    best_mae = float("inf")
    model.train()
    for epoch in range(1, args.epochs + 1):
        t0 = time.time()
        tot, n = 0.0, 0
        for batch in train_loader:
            loss = loss_fn(model, batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            tot += loss.item() * len(batch[1])
            n += len(batch[1])
        scheduler.step()
        m = evaluate(model, val_loader, loss_fn, y_norm)
        flag = ""
        if m["val_mae_mm"] < best_mae:
            best_mae = m["val_mae_mm"]
            flag = " *"
        print(f"epoch {epoch:02d} | train_loss {tot / n:.4f} | val_loss {m['val_loss']:.4f} | "
              f"val_mae {m['val_mae_mm']:.4f} mm | val_rmse {m['val_rmse_mm']:.4f} mm | "
              f"val_r2 {m['val_r2']:.3f} | lr {scheduler.get_last_lr()[1]:.2e} | "
              f"{time.time() - t0:.1f}s{flag}")
    print(f"best val_mae {best_mae:.4f} mm | total time {time.time() - t_start:.1f}s")


if __name__ == "__main__":
    main()
