"""Multi-step forecaster for variable-length sensor histories.

Each series is a noisy periodic signal (fundamental + first harmonic) plus a
slow drift, observed for a
random number of steps. The model reads the (per-series normalised) history
with a packed GRU and predicts the next HORIZON values from the final state.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence

SEED = 7
N_TRAIN, N_VAL = 3000, 600
MIN_LEN, MAX_LEN = 20, 60
HORIZON = 5
BATCH_SIZE = 50
EPOCHS = 20
LR = 3e-3
HIDDEN = 64
DROPOUT = 0.3

torch.set_num_threads(1)


def simulate_series(rng, n_steps):
    t = np.arange(n_steps, dtype=np.float64)
    f1 = rng.uniform(0.1, 0.4)
    f2 = 2.0 * f1
    a1, a2 = rng.uniform(0.5, 2.0), rng.uniform(0.05, 0.3)
    p1, p2 = rng.uniform(0, 2 * math.pi, size=2)
    level = rng.normal(20.0, 5.0)
    drift = rng.normal(0.0, 0.02)
    y = level + drift * t + a1 * np.sin(f1 * t + p1) + a2 * np.sin(f2 * t + p2)
    return y + rng.normal(0.0, 0.05, size=n_steps)


def build_dataset(n, seed):
    """List of (history, future) float32 arrays, history length varies."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        hist_len = int(rng.integers(MIN_LEN, MAX_LEN + 1))
        y = simulate_series(rng, hist_len + HORIZON)
        out.append((y[:hist_len].astype(np.float32), y[hist_len:].astype(np.float32)))
    return out


def collate(examples):
    """Pads histories, normalises each series by its own history statistics."""
    lengths = torch.tensor([len(h) for h, _ in examples], dtype=torch.long)
    B, T = len(examples), int(lengths.max())
    x = torch.zeros(B, T, 1)
    y = torch.zeros(B, HORIZON)
    for i, (h, f) in enumerate(examples):
        mu, sd = float(h.mean()), float(h.std()) + 1e-3
        x[i, : len(h), 0] = (torch.from_numpy(h) - mu) / sd
        y[i] = (torch.from_numpy(f) - mu) / sd
    return x, lengths, y


def iterate_batches(dataset, batch_size, shuffle, seed=0):
    idx = np.arange(len(dataset))
    if shuffle:
        np.random.default_rng(seed).shuffle(idx)
    for start in range(0, len(idx), batch_size):
        yield collate([dataset[i] for i in idx[start : start + batch_size]])


class GRUForecaster(nn.Module):
    def __init__(self, hidden=HIDDEN, horizon=HORIZON, dropout=DROPOUT):
        super().__init__()
        self.input_proj = nn.Linear(1, 16)
        self.gru = nn.GRU(16, hidden, num_layers=1, batch_first=True)
        self.dropout = dropout
        self.head = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, horizon))

    def forward(self, x, lengths):
        z = torch.tanh(self.input_proj(x))
        packed = pack_padded_sequence(z, lengths.cpu(), batch_first=True, enforce_sorted=False)
        _, h_n = self.gru(packed)
        h = h_n[-1]                                   # (B, H)
        h = F.dropout(h, p=self.dropout)
        return self.head(h)


def loss_fn(model, batch):
    x, lengths, y = batch
    return F.mse_loss(model(x, lengths), y)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=LR, weight_decay=1e-4)


@torch.no_grad()
def evaluate(model, dataset):
    model.eval()
    se, ae, n = 0.0, 0.0, 0
    for x, lengths, y in iterate_batches(dataset, 200, shuffle=False):
        pred = model(x, lengths)
        se += F.mse_loss(pred, y, reduction="sum").item()
        ae += (pred - y).abs().sum().item()
        n += y.numel()
    model.train()
    return se / n, ae / n


def make_target():
    torch.manual_seed(SEED)
    train_set = build_dataset(N_TRAIN, seed=SEED)
    batches = []
    for b, batch in enumerate(iterate_batches(train_set, BATCH_SIZE, shuffle=True, seed=SEED)):
        batches.append(batch)
        if b == 4:
            break
    return {
        "model": GRUForecaster(),
        "data": batches,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "task": "regression",
    }


def main():
    torch.manual_seed(SEED)
    train_set = build_dataset(N_TRAIN, seed=SEED)
    val_set = build_dataset(N_VAL, seed=SEED + 100)
    model = GRUForecaster()
    optimizer = make_optimizer(model.parameters())
    steps_per_epoch = math.ceil(N_TRAIN / BATCH_SIZE)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=EPOCHS * steps_per_epoch)
    print(f"train series: {len(train_set)}  val series: {len(val_set)}  horizon: {HORIZON}")
    print(f"params: {sum(p.numel() for p in model.parameters())}")

    step = 0
    t_start = time.time()
    for epoch in range(EPOCHS):
        model.train()
        for x, lengths, y in iterate_batches(train_set, BATCH_SIZE, shuffle=True, seed=SEED + epoch):
            t0 = time.time()
            loss = F.mse_loss(model(x, lengths), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            if step % 60 == 0:
                print(f"step {step:5d} | epoch {epoch} | train_mse {loss.item():.4f} | "
                      f"lr {scheduler.get_last_lr()[0]:.2e} | {1000 * (time.time() - t0):.1f}ms")
            step += 1
        val_mse, val_mae = evaluate(model, val_set)
        print(f"== epoch {epoch} done | val_mse {val_mse:.4f} | val_mae {val_mae:.4f} | "
              f"elapsed {time.time() - t_start:.1f}s")


if __name__ == "__main__":
    main()
