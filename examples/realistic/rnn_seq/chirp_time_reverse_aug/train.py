"""Classify sonar-style chirps as up-sweeps or down-sweeps with a small GRU.

Synthetic data: linear chirps between two frequencies (random endpoints, phase,
amplitude, additive noise and a slow baseline wander). Label 0 = up-sweep,
label 1 = down-sweep.
"""
import logging
import math
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

SEED = 7
SEQ_LEN = 64
N_TRAIN = 1600
N_VAL = 400
BATCH_SIZE = 64
EPOCHS = 10
LR = 3e-3
WEIGHT_DECAY = 1e-4
HIDDEN = 32
CLASSES = ["up_sweep", "down_sweep"]

logging.basicConfig(format="%(asctime)s %(levelname)s %(message)s", level=logging.INFO,
                    stream=sys.stdout)
log = logging.getLogger("chirp")


def synth_chirps(n, rng):
    t = np.arange(SEQ_LEN, dtype=np.float64)
    xs = np.empty((n, SEQ_LEN), dtype=np.float32)
    ys = rng.integers(0, 2, size=n)
    for i in range(n):
        f_lo = rng.uniform(0.02, 0.05)
        f_hi = rng.uniform(0.12, 0.20)
        f0, f1 = (f_lo, f_hi) if ys[i] == 0 else (f_hi, f_lo)
        inst_f = f0 + (f1 - f0) * t / (SEQ_LEN - 1)
        phase = 2 * math.pi * np.cumsum(inst_f) + rng.uniform(0, 2 * math.pi)
        amp = rng.uniform(0.6, 1.4)
        wander = 0.3 * np.sin(2 * math.pi * rng.uniform(0.002, 0.01) * t + rng.uniform(0, 2 * math.pi))
        xs[i] = amp * np.sin(phase) + wander + rng.normal(0, 0.25, SEQ_LEN)
    return torch.from_numpy(xs), torch.from_numpy(ys).long()


class ChirpDataset(Dataset):
    def __init__(self, x, y, train):
        self.x, self.y, self.train = x, y, train

    def __len__(self):
        return len(self.y)

    def augment(self, x):
        x = x * torch.empty(1).uniform_(0.8, 1.2)
        x = x + 0.05 * torch.randn_like(x)
        if torch.rand(1).item() < 0.5:
            x = torch.flip(x, dims=[0])
        return x

    def __getitem__(self, i):
        x = self.x[i]
        if self.train:
            x = self.augment(x)
        return x.unsqueeze(-1), self.y[i]


class ChirpGRU(nn.Module):
    def __init__(self, hidden=HIDDEN, n_classes=2):
        super().__init__()
        self.gru = nn.GRU(1, hidden, batch_first=True)
        self.head = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, n_classes))

    def forward(self, x):
        _, h = self.gru(x)
        return self.head(h[-1])


def compute_loss(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def build_data():
    rng = np.random.default_rng(SEED)
    x_tr, y_tr = synth_chirps(N_TRAIN, rng)
    x_va, y_va = synth_chirps(N_VAL, rng)
    mu, sd = x_tr.mean(), x_tr.std()
    x_tr, x_va = (x_tr - mu) / sd, (x_va - mu) / sd
    g = torch.Generator().manual_seed(SEED)
    train_dl = DataLoader(ChirpDataset(x_tr, y_tr, train=True), batch_size=BATCH_SIZE, shuffle=True, generator=g)
    val_dl = DataLoader(ChirpDataset(x_va, y_va, train=False), batch_size=256)
    return train_dl, val_dl


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    tot_loss, correct, n = 0.0, 0, 0
    for x, y in loader:
        logits = model(x)
        tot_loss += F.cross_entropy(logits, y, reduction="sum").item()
        correct += (logits.argmax(1) == y).sum().item()
        n += len(y)
    model.train()
    return tot_loss / n, correct / n


def make_target():
    torch.manual_seed(SEED)
    train_dl, _ = build_data()
    model = ChirpGRU()
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
    model = ChirpGRU()
    opt = make_optimizer(model.parameters())
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=EPOCHS * len(train_dl))
    log.info("train=%d val=%d seq_len=%d params=%d", N_TRAIN, N_VAL, SEQ_LEN,
             sum(p.numel() for p in model.parameters()))
    step = 0
    for epoch in range(1, EPOCHS + 1):
        model.train()
        run_loss, seen = 0.0, 0
        for batch in train_dl:
            loss = compute_loss(model, batch)
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            step += 1
            run_loss += loss.item() * len(batch[1])
            seen += len(batch[1])
        val_loss, val_acc = evaluate(model, val_dl)
        log.info("epoch %d step %d train_loss=%.4f val_loss=%.4f val_acc=%.3f lr=%.2e",
                 epoch, step, run_loss / seen, val_loss, val_acc, sched.get_last_lr()[0])
    log.info("final val_acc=%.3f", val_acc)


if __name__ == "__main__":
    main()
