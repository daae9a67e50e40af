#!/usr/bin/env python
"""Human-activity recognition from wrist IMU windows with a bidirectional GRU.

Activities: walking, upstairs, downstairs, sitting, standing, cycling.
Windows are 2.56 s at 25 Hz (64 samples x 6 channels: acc xyz + gyro xyz),
synthesised deterministically below.
"""
import argparse
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

ACTIVITIES = ["walking", "upstairs", "downstairs", "sitting", "standing", "cycling"]
# (cadence Hz, vertical acc amplitude, forward tilt, gyro amplitude)
PROFILE = {
    "walking":    (1.9, 0.45, 0.00, 0.60),
    "upstairs":   (1.6, 0.40, 0.10, 0.55),
    "downstairs": (2.1, 0.55, -0.10, 0.70),
    "sitting":    (0.0, 0.02, 0.50, 0.03),
    "standing":   (0.0, 0.03, 0.00, 0.04),
    "cycling":    (1.3, 0.20, 0.35, 0.45),
}


def synth_imu(n, seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, len(ACTIVITIES), n)
    t = np.arange(64) / 25.0
    X = np.empty((n, 64, 6), dtype=np.float32)
    for i, k in enumerate(y):
        f, amp, tilt, gyr = PROFILE[ACTIVITIES[k]]
        f *= rng.uniform(0.8, 1.2)
        amp *= rng.uniform(0.6, 1.4)
        tilt += rng.normal(0, 0.15)
        ph = rng.uniform(0, 2 * np.pi)
        acc_z = 1.0 + amp * np.sin(2 * np.pi * f * t + ph)
        acc_x = tilt + 0.5 * amp * np.sin(2 * np.pi * f * t + ph + 1.2)
        acc_y = 0.3 * amp * np.sin(np.pi * f * t + ph)
        g = gyr * np.stack([np.sin(2 * np.pi * f * t + ph + j) for j in range(3)], 1)
        X[i] = np.concatenate([np.stack([acc_x, acc_y, acc_z], 1), g], 1)
        X[i] += rng.normal(0, 0.12, (64, 6))
    return X, y


class IMUWindows(Dataset):
    def __init__(self, X, y):
        self.X, self.y = torch.from_numpy(X), torch.from_numpy(y).long()

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.X[i], self.y[i]


class HARNet(nn.Module):
    def __init__(self, n_in=6, hidden=48, n_classes=len(ACTIVITIES)):
        super().__init__()
        self.inp = nn.Linear(n_in, hidden)
        self.gru = nn.GRU(hidden, hidden, batch_first=True, bidirectional=True)
        self.cls = nn.Linear(2 * hidden, n_classes)

    def forward(self, x):
        h, _ = self.gru(torch.tanh(self.inp(x)))
        return self.cls(h.mean(1))


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y, label_smoothing=0.05)


def get_args(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=12)
    ap.add_argument("--bs", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--lr-step", type=int, default=4, help="halve the LR every N epochs")
    ap.add_argument("--seed", type=int, default=5)
    return ap.parse_args(argv)


def build(args):
    torch.manual_seed(args.seed)
    Xtr, ytr = synth_imu(2400, args.seed)
    Xva, yva = synth_imu(600, args.seed + 100)
    g = torch.Generator().manual_seed(args.seed)
    train_loader = DataLoader(IMUWindows(Xtr, ytr), batch_size=args.bs, shuffle=True, generator=g)
    val_loader = DataLoader(IMUWindows(Xva, yva), batch_size=300)
    model = HARNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=args.lr_step, gamma=0.5)
    return model, optimizer, scheduler, train_loader, val_loader


def run_epoch(model, loader, optimizer=None, scheduler=None):
    train = optimizer is not None
    model.train(train)
    tot, correct, n = 0.0, 0, 0
    with torch.set_grad_enabled(train):
        for x, y in loader:
            logits = model(x)
            loss = F.cross_entropy(logits, y, label_smoothing=0.05)
            if train:
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            tot += loss.item() * len(y)
            correct += (logits.argmax(1) == y).sum().item()
            n += len(y)
    if train:
        scheduler.step()
    return tot / n, correct / n


def main():
    args = get_args()
    model, optimizer, scheduler, train_loader, val_loader = build(args)
    print(f"HARNet params={sum(p.numel() for p in model.parameters())}  "
          f"train={len(train_loader.dataset)} val={len(val_loader.dataset)}  steps/epoch={len(train_loader)}")
    for epoch in range(args.epochs):
        t0 = time.time()
        lr = optimizer.param_groups[0]["lr"]
        tr_loss, tr_acc = run_epoch(model, train_loader, optimizer, scheduler)
        va_loss, va_acc = run_epoch(model, val_loader)
        print(f"[{epoch + 1:02d}/{args.epochs}] lr {lr:.2e} | train loss {tr_loss:.4f} acc {tr_acc:.3f} | "
              f"val loss {va_loss:.4f} acc {va_acc:.3f} | {time.time() - t0:.1f}s")


def make_target():
    model, optimizer, _, train_loader, _ = build(get_args([]))
    return {"model": model, "batch": next(iter(train_loader)), "loss_fn": loss_fn,
            "optimizer": optimizer, "num_classes": len(ACTIVITIES)}


if __name__ == "__main__":
    main()
