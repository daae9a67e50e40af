"""Fabric-pattern classifier (5 weave patterns, 32x32 RGB) with a small BN CNN.

fastai-style: a results table with one row per epoch.

    python train.py [--epochs 5] [--bs 64] [--lr 3e-3]
"""
import argparse
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

PATTERNS = ("plain", "twill", "herringbone", "houndstooth", "polka")
SIZE = 32


def weave(kind, rng):
    """Draw one fabric swatch as an HxWx3 uint8 array (like a decoded JPEG)."""
    yy, xx = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32)
    period = rng.uniform(4.0, 7.0)
    phase = rng.uniform(0, 2 * np.pi, size=2)
    ang = rng.uniform(-0.25, 0.25)
    u = xx * np.cos(ang) + yy * np.sin(ang)
    v = -xx * np.sin(ang) + yy * np.cos(ang)
    if kind == "plain":
        t = 0.5 + 0.25 * np.sin(2 * np.pi * u / period + phase[0]) * np.sin(2 * np.pi * v / period + phase[1])
    elif kind == "twill":
        t = 0.5 + 0.5 * np.sin(2 * np.pi * (u + v) / period + phase[0])
    elif kind == "herringbone":
        zig = np.where((v // period) % 2 == 0, u + v, u - v)
        t = 0.5 + 0.5 * np.sin(2 * np.pi * zig / period + phase[0])
    elif kind == "houndstooth":
        t = (((u // period) + (v // period)) % 2).astype(np.float32)
        t = 0.7 * t + 0.3 * (0.5 + 0.5 * np.sin(2 * np.pi * (u - v) / (period / 2)))
    else:
        cu, cv = (u % period) - period / 2, (v % period) - period / 2
        t = (cu ** 2 + cv ** 2 < (period / 3.2) ** 2).astype(np.float32)
    base = rng.uniform(0.1, 0.9, size=3)
    accent = rng.uniform(0.1, 0.9, size=3)
    img = base[None, None, :] * (1 - t[..., None]) + accent[None, None, :] * t[..., None]
    img = img * rng.uniform(0.6, 1.0) + rng.normal(0, 0.06, size=img.shape)
    return (np.clip(img, 0, 1) * 255).astype(np.uint8)


def make_split(n, seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, len(PATTERNS), size=n)
    images = np.stack([weave(PATTERNS[k], rng) for k in labels])  # N,H,W,3 uint8
    return images, labels


class FabricDataset(Dataset):
    def __init__(self, images, labels, mean, std, train):
        self.images, self.labels = images, labels
        self.mean = torch.tensor(mean, dtype=torch.float32).view(3, 1, 1)
        self.std = torch.tensor(std, dtype=torch.float32).view(3, 1, 1)
        self.train = train

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        x = torch.from_numpy(self.images[i]).permute(2, 0, 1).float() / 255.0  # ToTensor()
        if self.train and torch.rand(1).item() < 0.5:
            x = x.flip(2)
        x = (x - self.mean) / self.std  # Normalize(mean, std)
        return x, int(self.labels[i])


def channel_stats(images):
    """Per-channel mean/std of the training set, to feed transforms.Normalize."""
    pix = images.reshape(-1, 3).astype(np.float64)
    return pix.mean(0).tolist(), pix.std(0).tolist()


def build_data(bs):
    tr_x, tr_y = make_split(2000, seed=3)
    va_x, va_y = make_split(500, seed=4)
    mean, std = channel_stats(tr_x)
    train_dl = DataLoader(FabricDataset(tr_x, tr_y, mean, std, True), batch_size=bs, shuffle=True, drop_last=True)
    valid_dl = DataLoader(FabricDataset(va_x, va_y, mean, std, False), batch_size=200)
    return train_dl, valid_dl, (mean, std)


def conv_block(cin, cout, stride=1):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


def fabric_net(n_classes=len(PATTERNS)):
    return nn.Sequential(
        conv_block(3, 16), conv_block(16, 32, stride=2),
        conv_block(32, 64, stride=2),
        conv_block(64, 64, stride=2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, n_classes))


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def make_optimizer(params, lr=3e-3):
    return torch.optim.Adam(params, lr=lr, betas=(0.9, 0.99), weight_decay=1e-2)


def parse_args(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--bs", type=int, default=64)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=42)
    return p.parse_args(argv)


def make_target():
    args = parse_args([])
    torch.manual_seed(args.seed)
    train_dl, _, _ = build_data(args.bs)
    model = fabric_net()
    it = iter(train_dl)
    data = [next(it) for _ in range(4)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model.parameters(), args.lr),
            "make_optimizer": lambda params: make_optimizer(params, args.lr),
            "num_classes": len(PATTERNS), "task": "classification"}


def fit_one_cycle(model, train_dl, valid_dl, epochs, lr_max):
    opt = make_optimizer(model.parameters(), lr_max)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr_max, total_steps=epochs * len(train_dl),
                                                pct_start=0.25)
    print(f"{'epoch':<7}{'train_loss':<12}{'valid_loss':<12}{'accuracy':<10}{'error_rate':<12}time")
    for epoch in range(epochs):
        t0 = time.time()
        model.train()
        smooth = None
        for x, y in train_dl:
            loss = loss_fn(model, (x, y))
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            smooth = loss.item() if smooth is None else 0.98 * smooth + 0.02 * loss.item()
        model.eval()
        vl, correct, n = 0.0, 0, 0
        with torch.no_grad():
            for x, y in valid_dl:
                out = model(x)
                vl += F.cross_entropy(out, y, reduction="sum").item()
                correct += (out.argmax(1) == y).sum().item()
                n += len(y)
        el = int(time.time() - t0)
        print(f"{epoch:<7}{smooth:<12.6f}{vl / n:<12.6f}{correct / n:<10.6f}{1 - correct / n:<12.6f}"
              f"{el // 60:02d}:{el % 60:02d}", flush=True)


def main():
    torch.set_num_threads(1)  # CPU box is shared; keep to one core
    args = parse_args()
    torch.manual_seed(args.seed)
    train_dl, valid_dl, (mean, std) = build_data(args.bs)
    print(f"Normalize(mean={[round(m, 4) for m in mean]}, std={[round(s, 4) for s in std]})")
    print(f"train: {len(train_dl.dataset)} items, valid: {len(valid_dl.dataset)} items, classes: {list(PATTERNS)}")
    model = fabric_net()
    fit_one_cycle(model, train_dl, valid_dl, args.epochs, args.lr)


if __name__ == "__main__":
    main()
