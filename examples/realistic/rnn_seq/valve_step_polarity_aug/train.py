"""Pressure-transient classifier: was the valve opened or closed?

Each window is a line-pressure trace with a level shift somewhere in the middle:
opening the upstream valve raises the pressure (label 1 = "open"), closing it
drops the pressure (label 0 = "close"). A small 1-D CNN reads the raw trace.
"""
import logging
import math
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

SEED = 11
SEQ_LEN = 128
N_TRAIN = 2000
N_VAL = 500
BATCH_SIZE = 64
EPOCHS = 8
LR = 2e-3
WEIGHT_DECAY = 1e-4
CLASSES = ["close", "open"]

logging.basicConfig(format="%(asctime)s %(levelname)s %(message)s", level=logging.INFO,
                    stream=sys.stdout)
log = logging.getLogger("valve")


def synth_transients(n, rng):
    t = np.arange(SEQ_LEN, dtype=np.float64)
    xs = np.empty((n, SEQ_LEN), dtype=np.float32)
    ys = rng.integers(0, 2, size=n)
    for i in range(n):
        t0 = rng.integers(24, SEQ_LEN - 24)
        tau = rng.uniform(1.5, 6.0)
        size = rng.uniform(0.4, 1.5) * (1.0 if ys[i] == 1 else -1.0)
        step = size / (1.0 + np.exp(-(t - t0) / tau))
        ripple = 0.15 * np.sin(2 * math.pi * rng.uniform(0.05, 0.2) * t + rng.uniform(0, 2 * math.pi))
        drift = rng.normal(0, 0.02, SEQ_LEN).cumsum()
        xs[i] = step + ripple + drift + rng.normal(0, 0.12, SEQ_LEN)
    return torch.from_numpy(xs), torch.from_numpy(ys).long()


class TransientDataset(Dataset):
    def __init__(self, x, y, train):
        self.x, self.y, self.train = x, y, train

    def __len__(self):
        return len(self.y)

    def augment(self, x):
        gain = torch.empty(1).uniform_(0.75, 1.25)
        if torch.rand(1).item() < 0.5:
            gain = -gain
        x = x * gain
        x = x + 0.05 * torch.randn_like(x)
        return x

    def __getitem__(self, i):
        x = self.x[i]
        x = x - x[:8].mean()
        if self.train:
            x = self.augment(x)
        return x.unsqueeze(0), self.y[i]


class TransientCNN(nn.Module):
    def __init__(self, n_classes=2):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv1d(1, 16, 7, padding=3), nn.BatchNorm1d(16), nn.ReLU(),
            nn.Conv1d(16, 32, 5, padding=2, stride=2), nn.BatchNorm1d(32), nn.ReLU(),
            nn.Conv1d(32, 32, 5, padding=2, stride=2), nn.BatchNorm1d(32), nn.ReLU(),
        )
        self.head = nn.Linear(64, n_classes)

    def forward(self, x):
        h = self.features(x)
        pooled = torch.cat([h.mean(-1), h.amax(-1)], dim=1)
        return self.head(pooled)


def compute_loss(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def build_data():
    rng = np.random.default_rng(SEED)
    x_tr, y_tr = synth_transients(N_TRAIN, rng)
    x_va, y_va = synth_transients(N_VAL, rng)
    g = torch.Generator().manual_seed(SEED)
    train_dl = DataLoader(TransientDataset(x_tr, y_tr, train=True), batch_size=BATCH_SIZE,
                          shuffle=True, drop_last=True, generator=g)
    val_dl = DataLoader(TransientDataset(x_va, y_va, train=False), batch_size=250)
    return train_dl, val_dl


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR, weight_decay=WEIGHT_DECAY)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    tot, correct, n = 0.0, 0, 0
    for x, y in loader:
        logits = model(x)
        tot += F.cross_entropy(logits, y, reduction="sum").item()
        correct += (logits.argmax(1) == y).sum().item()
        n += len(y)
    model.train()
    return tot / n, correct / n


def make_target():
    torch.manual_seed(SEED)
    train_dl, _ = build_data()
    model = TransientCNN()
    it = iter(train_dl)
    data = [next(it) for _ in range(3)]
    return {
        "model": model,
        "batch": data[0],
        "data": data,
        "loss_fn": compute_loss,
        "optimizer": make_optimizer(model.parameters()),
        "make_optimizer": make_optimizer,
        "num_classes": len(CLASSES),
        "task": "classification",
    }


def main():
    torch.manual_seed(SEED)
    train_dl, val_dl = build_data()
    model = TransientCNN()
    opt = make_optimizer(model.parameters())
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=LR, total_steps=EPOCHS * len(train_dl))
    log.info("windows train=%d val=%d len=%d | params=%d", N_TRAIN, N_VAL, SEQ_LEN,
             sum(p.numel() for p in model.parameters()))
    step = 0
    for epoch in range(1, EPOCHS + 1):
        model.train()
        tot, seen = 0.0, 0
        for batch in train_dl:
            loss = compute_loss(model, batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            step += 1
            tot += loss.item() * len(batch[1])
            seen += len(batch[1])
            if step % 20 == 0:
                log.info("epoch %d step %d loss=%.4f lr=%.2e", epoch, step, loss.item(), sched.get_last_lr()[0])
        val_loss, val_acc = evaluate(model, val_dl)
        log.info("epoch %d done train_loss=%.4f val_loss=%.4f val_acc=%.3f", epoch, tot / seen, val_loss, val_acc)
    log.info("final: val_loss=%.4f val_acc=%.3f", val_loss, val_acc)


if __name__ == "__main__":
    main()
