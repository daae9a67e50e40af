"""Frame-level burst detector for a 2-channel acoustic-emission sensor.

Every window contains 1-3 short high-frequency bursts on top of a drifting,
noisy background; the target marks each timestep that lies inside a burst.
Model: conv front-end + bidirectional GRU + per-step logit, BCE loss.
"""
import logging
import math
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

SEED = 5
SEQ_LEN = 128
N_TRAIN = 1000
N_VAL = 300
BATCH_SIZE = 50
EPOCHS = 6
LR = 3e-3
HIDDEN = 32
THRESH = 0.5

logging.basicConfig(format="%(asctime)s %(levelname)s %(message)s", level=logging.INFO,
                    stream=sys.stdout)
log = logging.getLogger("burst")


def synth_windows(n, rng):
    t = np.arange(SEQ_LEN, dtype=np.float64)
    xs = np.zeros((n, 2, SEQ_LEN), dtype=np.float32)
    ys = np.zeros((n, SEQ_LEN), dtype=np.float32)
    for i in range(n):
        bg = rng.normal(0, 0.3, (2, SEQ_LEN)) + 0.5 * np.sin(2 * math.pi * rng.uniform(0.003, 0.01) * t)
        bg += rng.normal(0, 0.03, (2, SEQ_LEN)).cumsum(1)
        for _ in range(rng.integers(1, 4)):
            dur = rng.integers(8, 20)
            start = rng.integers(0, SEQ_LEN - dur)
            tt = np.arange(dur)
            burst = np.hanning(dur + 2)[1:-1] * np.sin(2 * math.pi * rng.uniform(0.25, 0.4) * tt)
            amp = rng.uniform(0.8, 1.8)
            bg[0, start:start + dur] += amp * burst
            bg[1, start:start + dur] += 0.6 * amp * np.roll(burst, 1)
            ys[i, start:start + dur] = 1.0
        xs[i] = bg
    return torch.from_numpy(xs), torch.from_numpy(ys)


class BurstDataset(Dataset):
    def __init__(self, x, y, train):
        self.x, self.y, self.train = x, y, train

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        x, y = self.x[i], self.y[i]
        if self.train:
            shift = int(torch.randint(0, SEQ_LEN, (1,)))
            x = torch.roll(x, shifts=shift, dims=-1)
            y = torch.roll(y, shifts=shift, dims=-1)
            x = x * torch.empty(1).uniform_(0.8, 1.2)
        return x, y


class BurstTagger(nn.Module):
    def __init__(self, hidden=HIDDEN):
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv1d(2, 24, 5, padding=2), nn.ReLU(),
            nn.Conv1d(24, 24, 5, padding=2), nn.ReLU(),
        )
        self.gru = nn.GRU(24, hidden, batch_first=True, bidirectional=True)
        self.out = nn.Linear(2 * hidden, 1)

    def forward(self, x):
        h = self.conv(x).transpose(1, 2)
        h, _ = self.gru(h)
        return self.out(h).squeeze(-1)


def compute_loss(model, batch):
    x, y = batch
    return F.binary_cross_entropy_with_logits(model(x), y)


def build_data():
    rng = np.random.default_rng(SEED)
    x_tr, y_tr = synth_windows(N_TRAIN, rng)
    x_va, y_va = synth_windows(N_VAL, rng)
    g = torch.Generator().manual_seed(SEED)
    train_dl = DataLoader(BurstDataset(x_tr, y_tr, True), batch_size=BATCH_SIZE, shuffle=True, generator=g)
    val_dl = DataLoader(BurstDataset(x_va, y_va, False), batch_size=100)
    return train_dl, val_dl


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    tot, n, tp, fp, fn = 0.0, 0, 0.0, 0.0, 0.0
    for x, y in loader:
        logits = model(x)
        tot += F.binary_cross_entropy_with_logits(logits, y, reduction="sum").item()
        n += y.numel()
        pred = (torch.sigmoid(logits) > THRESH).float()
        tp += (pred * y).sum().item()
        fp += (pred * (1 - y)).sum().item()
        fn += ((1 - pred) * y).sum().item()
    model.train()
    prec = tp / max(tp + fp, 1.0)
    rec = tp / max(tp + fn, 1.0)
    f1 = 2 * prec * rec / max(prec + rec, 1e-8)
    return tot / n, prec, rec, f1


def make_target():
    torch.manual_seed(SEED)
    train_dl, _ = build_data()
    model = BurstTagger()
    it = iter(train_dl)
    data = [next(it) for _ in range(3)]
    return {
        "model": model,
        "batch": data[0],
        "data": data,
        "loss_fn": compute_loss,
        "optimizer": make_optimizer(model.parameters()),
        "make_optimizer": make_optimizer,
        "num_classes": 2,
        "task": "classification",
    }


def main():
    torch.manual_seed(SEED)
    train_dl, val_dl = build_data()
    model = BurstTagger()
    opt = make_optimizer(model.parameters())
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    pos_frac = train_dl.dataset.y.mean().item()
    log.info("train=%d val=%d len=%d burst_frac=%.3f params=%d", N_TRAIN, N_VAL, SEQ_LEN, pos_frac,
             sum(p.numel() for p in model.parameters()))
    step = 0
    for epoch in range(1, EPOCHS + 1):
        tot, nb = 0.0, 0
        for batch in train_dl:
            loss = compute_loss(model, batch)
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            step += 1
            tot += loss.item()
            nb += 1
            if step % 10 == 0:
                log.info("epoch %d step %d loss=%.4f", epoch, step, loss.item())
        sched.step()
        val_loss, prec, rec, f1 = evaluate(model, val_dl)
        log.info("epoch %d train_loss=%.4f val_loss=%.4f val_prec=%.3f val_rec=%.3f val_f1=%.3f lr=%.2e",
                 epoch, tot / nb, val_loss, prec, rec, f1, opt.param_groups[0]["lr"])
    log.info("final val_f1=%.3f", f1)


if __name__ == "__main__":
    main()
