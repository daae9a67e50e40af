"""Vibration tone-band classifier (LSTM) for a rotating-machine test bench.

Each window holds a decaying/growing tone from one of four shaft-speed bands
plus harmonics and noise; the task is to name the band. Training uses gain
jitter, additive noise and random time reversal.
"""
import logging
import math
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

SEED = 3
SEQ_LEN = 80
N_TRAIN = 2000
N_VAL = 500
BATCH_SIZE = 64
EPOCHS = 14
LR = 4e-3
HIDDEN = 40
BANDS = [0.04, 0.07, 0.11, 0.16]  # cycles / sample

logging.basicConfig(format="%(asctime)s %(levelname)s %(message)s", level=logging.INFO,
                    stream=sys.stdout)
log = logging.getLogger("toneband")


def synth_tones(n, rng):
    t = np.arange(SEQ_LEN, dtype=np.float64)
    xs = np.empty((n, SEQ_LEN), dtype=np.float32)
    ys = rng.integers(0, len(BANDS), size=n)
    for i in range(n):
        f = BANDS[ys[i]] * rng.uniform(0.92, 1.08)
        env = np.exp(rng.uniform(-2.0, 2.0) * t / SEQ_LEN)
        env = env / env.max()
        ph = rng.uniform(0, 2 * math.pi)
        sig = np.sin(2 * math.pi * f * t + ph) + rng.uniform(0, 0.4) * np.sin(4 * math.pi * f * t + 2 * ph)
        xs[i] = rng.uniform(0.5, 1.5) * env * sig + rng.normal(0, 0.2, SEQ_LEN)
    return torch.from_numpy(xs), torch.from_numpy(ys).long()


class ToneDataset(Dataset):
    def __init__(self, x, y, train):
        self.x, self.y, self.train = x, y, train

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        x = self.x[i]
        if self.train:
            x = x * torch.empty(1).uniform_(0.8, 1.25)
            x = x + 0.1 * torch.randn_like(x)
            if torch.rand(1).item() < 0.5:
                x = x.flip(0)
        return x.unsqueeze(-1), self.y[i]


class ToneLSTM(nn.Module):
    def __init__(self, hidden=HIDDEN, n_classes=len(BANDS)):
        super().__init__()
        self.lstm = nn.LSTM(1, hidden, batch_first=True)
        self.drop = nn.Dropout(0.1)
        self.fc = nn.Linear(hidden, n_classes)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.fc(self.drop(out.mean(1)))


def compute_loss(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y, label_smoothing=0.05)


def build_data():
    rng = np.random.default_rng(SEED)
    x_tr, y_tr = synth_tones(N_TRAIN, rng)
    x_va, y_va = synth_tones(N_VAL, rng)
    g = torch.Generator().manual_seed(SEED)
    train_dl = DataLoader(ToneDataset(x_tr, y_tr, True), batch_size=BATCH_SIZE, shuffle=True, drop_last=True, generator=g)
    val_dl = DataLoader(ToneDataset(x_va, y_va, False), batch_size=250)
    return train_dl, val_dl


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=LR, weight_decay=1e-3)


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
    model = ToneLSTM()
    it = iter(train_dl)
    data = [next(it) for _ in range(3)]
    return {
        "model": model,
        "batch": data[0],
        "data": data,
        "loss_fn": compute_loss,
        "optimizer": make_optimizer(model.parameters()),
        "make_optimizer": make_optimizer,
        "num_classes": len(BANDS),
        "task": "classification",
    }


def main():
    torch.manual_seed(SEED)
    train_dl, val_dl = build_data()
    model = ToneLSTM()
    opt = make_optimizer(model.parameters())
    total = EPOCHS * len(train_dl)
    warmup = 20
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, total) / total)))
    log.info("bands=%s train=%d val=%d params=%d", BANDS, N_TRAIN, N_VAL,
             sum(p.numel() for p in model.parameters()))
    step = 0
    for epoch in range(1, EPOCHS + 1):
        model.train()
        tot, seen = 0.0, 0
        for batch in train_dl:
            loss = compute_loss(model, batch)
            opt.zero_grad()
            loss.backward()
            gnorm = nn.utils.clip_grad_norm_(model.parameters(), 2.0)
            opt.step()
            sched.step()
            step += 1
            tot += loss.item() * len(batch[1])
            seen += len(batch[1])
        val_loss, val_acc = evaluate(model, val_dl)
        log.info("epoch %d step %d loss=%.4f val_loss=%.4f val_acc=%.3f grad_norm=%.3f lr=%.2e",
                 epoch, step, tot / seen, val_loss, val_acc, gnorm.item(), sched.get_last_lr()[0])
    log.info("final val_acc=%.3f", val_acc)


if __name__ == "__main__":
    main()
