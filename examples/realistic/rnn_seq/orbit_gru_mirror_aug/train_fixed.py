"""Rotation-direction classifier for 2-D pen / IMU traces.

Each sample is a (T, 2) trace of a point moving on a noisy ellipse; the label
says whether the motion is clockwise (0) or counter-clockwise (1).
Model: small Conv1d front-end + GRU + linear head.
"""
import argparse
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

CFG = dict(
    seed=1337,
    seq_len=64,
    n_train=2048,
    n_val=512,
    batch_size=64,
    epochs=6,
    lr=2e-3,
    weight_decay=1e-4,
    hidden=64,
    conv_channels=32,
    dropout=0.1,
    aug_p=0.5,
    noise_std=0.05,
    grad_clip=1.0,
)


def parse_args():
    p = argparse.ArgumentParser()
    for k, v in CFG.items():
        p.add_argument(f"--{k}", type=type(v), default=v)
    return p.parse_args()


# ---------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------
def synth_traces(n, seq_len, noise_std, rng):
    """Points on a randomly-oriented ellipse, clockwise or counter-clockwise."""
    labels = rng.integers(0, 2, size=n)
    t = np.linspace(0.0, 1.0, seq_len)[None, :]
    turns = rng.uniform(0.6, 1.4, size=(n, 1))
    phase0 = rng.uniform(0, 2 * math.pi, size=(n, 1))
    direction = np.where(labels[:, None] == 1, 1.0, -1.0)
    theta = phase0 + direction * 2 * math.pi * turns * t
    a = rng.uniform(0.6, 1.4, size=(n, 1))
    b = rng.uniform(0.6, 1.4, size=(n, 1))
    rot = rng.uniform(0, 2 * math.pi, size=(n, 1))
    x0, y0 = a * np.cos(theta), b * np.sin(theta)
    x = x0 * np.cos(rot) - y0 * np.sin(rot)
    y = x0 * np.sin(rot) + y0 * np.cos(rot)
    x += rng.uniform(-0.5, 0.5, size=(n, 1))
    y += rng.uniform(-0.5, 0.5, size=(n, 1))
    traces = np.stack([x, y], axis=-1)
    traces += rng.normal(0, noise_std, size=traces.shape)
    return traces.astype(np.float32), labels.astype(np.int64)


class TraceDataset(Dataset):
    def __init__(self, traces, labels, train=False, aug_p=0.5, seed=0):
        self.x = torch.from_numpy(traces)
        self.y = torch.from_numpy(labels)
        self.train = train
        self.aug_p = aug_p
        self.g = torch.Generator().manual_seed(seed)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        x = self.x[i].clone()
        y = self.y[i]
        if self.train:
            # light jitter + amplitude scaling
            x = x * (1.0 + 0.1 * torch.randn(1, generator=self.g))
            x = x + 0.02 * torch.randn(x.shape, generator=self.g)
        return x, y


def build_loaders(cfg):
    rng = np.random.default_rng(cfg["seed"])
    xtr, ytr = synth_traces(cfg["n_train"], cfg["seq_len"], cfg["noise_std"], rng)
    xva, yva = synth_traces(cfg["n_val"], cfg["seq_len"], cfg["noise_std"], rng)
    # per-channel standardisation from the training split
    mu = xtr.reshape(-1, 2).mean(0)
    sd = xtr.reshape(-1, 2).std(0) + 1e-6
    xtr = (xtr - mu) / sd
    xva = (xva - mu) / sd
    train_ds = TraceDataset(xtr, ytr, train=True, aug_p=cfg["aug_p"], seed=cfg["seed"])
    val_ds = TraceDataset(xva, yva, train=False)
    g = torch.Generator().manual_seed(cfg["seed"])
    train_dl = DataLoader(train_ds, batch_size=cfg["batch_size"], shuffle=True, generator=g, drop_last=True)
    val_dl = DataLoader(val_ds, batch_size=256, shuffle=False)
    return train_dl, val_dl


# ---------------------------------------------------------------------------
# model
# ---------------------------------------------------------------------------
class ConvGRUClassifier(nn.Module):
    def __init__(self, in_ch=2, conv_channels=32, hidden=64, n_classes=2, dropout=0.1):
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv1d(in_ch, conv_channels, kernel_size=5, padding=2),
            nn.BatchNorm1d(conv_channels),
            nn.ReLU(),
            nn.Conv1d(conv_channels, conv_channels, kernel_size=5, padding=2),
            nn.BatchNorm1d(conv_channels),
            nn.ReLU(),
        )
        self.gru = nn.GRU(conv_channels, hidden, batch_first=True)
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(hidden, n_classes)

    def forward(self, x):  # x: (B, T, C)
        h = self.conv(x.transpose(1, 2)).transpose(1, 2)
        _, h_n = self.gru(h)
        return self.head(self.drop(h_n[-1]))


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def make_optimizer(params, cfg=CFG):
    return torch.optim.AdamW(params, lr=cfg["lr"], weight_decay=cfg["weight_decay"])


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    tot, correct, loss_sum = 0, 0, 0.0
    for x, y in loader:
        logits = model(x)
        loss_sum += F.cross_entropy(logits, y, reduction="sum").item()
        correct += (logits.argmax(-1) == y).sum().item()
        tot += y.numel()
    model.train()
    return loss_sum / tot, correct / tot


def make_target():
    torch.manual_seed(CFG["seed"])
    train_dl, _ = build_loaders(CFG)
    model = ConvGRUClassifier(conv_channels=CFG["conv_channels"], hidden=CFG["hidden"],
                              dropout=CFG["dropout"])
    it = iter(train_dl)
    data = [next(it) for _ in range(4)]
    return {
        "model": model,
        "batch": data[0],
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "num_classes": 2,
        "task": "classification",
    }


def main():
    args = parse_args()
    cfg = vars(args)
    torch.manual_seed(cfg["seed"])
    train_dl, val_dl = build_loaders(cfg)
    model = ConvGRUClassifier(conv_channels=cfg["conv_channels"], hidden=cfg["hidden"],
                              dropout=cfg["dropout"])
    opt = make_optimizer(model.parameters(), cfg)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=cfg["epochs"] * len(train_dl))
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model params: {n_params/1e3:.1f}K | train {len(train_dl.dataset)} | val {len(val_dl.dataset)}")

    best_acc = 0.0
    step = 0
    for epoch in range(cfg["epochs"]):
        t0 = time.time()
        run_loss, run_correct, run_n = 0.0, 0, 0
        for x, y in train_dl:
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["grad_clip"])
            opt.step()
            sched.step()
            run_loss += loss.item() * y.size(0)
            run_correct += (logits.argmax(-1) == y).sum().item()
            run_n += y.size(0)
            if step % 50 == 0:
                print(f"  step {step:5d} | loss {loss.item():.4f} | grad_norm {gnorm:.3f} | "
                      f"lr {sched.get_last_lr()[0]:.2e}")
            step += 1
        val_loss, val_acc = evaluate(model, val_dl)
        best_acc = max(best_acc, val_acc)
        print(f"epoch {epoch+1:2d}/{cfg['epochs']} | train_loss {run_loss/run_n:.4f} "
              f"train_acc {run_correct/run_n:.3f} | val_loss {val_loss:.4f} val_acc {val_acc:.3f} | "
              f"{time.time()-t0:.1f}s")
    print(f"done. best val_acc {best_acc:.3f}")


if __name__ == "__main__":
    main()
