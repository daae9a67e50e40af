"""Next-day unit demand forecaster for store/item series (LSTM over variable-length histories).

Each training example is a random crop of one store/item history. At every step the
LSTM reads the current (scaled) demand plus the calendar/promo covariates, and predicts
the scaled demand of the following day. Validation is one-step-ahead on the last
VAL_DAYS of every series (temporal hold-out).
"""
import math
import os
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, Dataset

SEED = 1234
DATA_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "demand.csv")

N_SERIES = 140
VAL_DAYS = 56
MIN_CROP, MAX_CROP = 35, 100
SAMPLES_PER_EPOCH = 2048
BATCH_SIZE = 64
EPOCHS = 8
LR = 3e-3
WEIGHT_DECAY = 1e-4
WARMUP_STEPS = 20
HIDDEN = 64
LOG_EVERY = 16
EVAL_EVERY = 64

KNOWN_AHEAD = ["promo", "holiday"] + [f"dow_{k}" for k in range(7)]
N_FEATURES = 1 + len(KNOWN_AHEAD)

torch.set_num_threads(1)


# --------------------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------------------
def generate_csv(path, seed=SEED):
    """Simulated POS export: one row per (series, date)."""
    rng = np.random.default_rng(seed)
    calendar = pd.date_range("2022-01-01", "2023-12-31", freq="D")
    holidays = set(rng.choice(len(calendar), size=22, replace=False).tolist())
    weekly = np.array([0.92, 0.85, 0.88, 0.97, 1.12, 1.38, 1.18])
    rows = []
    for sid in range(N_SERIES):
        length = int(rng.integers(200, 420))
        start = int(rng.integers(0, len(calendar) - length))
        dates = calendar[start:start + length]
        base = float(np.exp(rng.normal(3.9, 0.45)))
        dow_mult = weekly * np.exp(rng.normal(0, 0.05, 7))
        lift = rng.uniform(0.7, 1.5)
        trend = rng.normal(0, 0.0008)
        promo = np.zeros(length, dtype=np.int64)
        d = 0
        while d < length:
            if rng.random() < 0.07:
                dur = int(rng.integers(1, 3))
                promo[d:d + dur] = 1
                d += dur + 3
            else:
                d += 1
        hol = np.array([1 if (start + i) in holidays else 0 for i in range(length)])
        dow = dates.day_of_week.to_numpy()
        level = base * (1 + trend * np.arange(length))
        mu = level * dow_mult[dow] * (1 + lift * promo) * (1 + 0.9 * hol)
        units = rng.poisson(mu)
        rows.append(pd.DataFrame({
            "series_id": sid, "date": dates, "units": units,
            "promo": promo, "holiday": hol,
        }))
    df = pd.concat(rows, ignore_index=True)
    df.to_csv(path, index=False)


def load_frame(path):
    df = pd.read_csv(path, parse_dates=["date"])
    df = df.sort_values(["series_id", "date"]).reset_index(drop=True)
    dow = df["date"].dt.day_of_week
    for k in range(7):
        df[f"dow_{k}"] = (dow == k).astype(np.float32)
    return df


def series_to_arrays(g, scale):
    y = g["units"].to_numpy(np.float32) / scale
    cov = g[KNOWN_AHEAD].to_numpy(np.float32)
    x = np.concatenate([y[:-1, None], cov[:-1]], axis=1)
    target = y[1:]
    return x, target


def build_series(df):
    train_series, val_series = [], []
    for sid, g in df.groupby("series_id"):
        scale = float(g["units"].iloc[:-VAL_DAYS].mean()) + 1.0
        x, t = series_to_arrays(g, scale)
        n_train = len(t) - VAL_DAYS
        train_series.append((x[:n_train], t[:n_train]))
        eval_mask = np.zeros(len(t), dtype=np.float32)
        eval_mask[n_train:] = 1.0
        val_series.append((x, t, eval_mask))
    return train_series, val_series


class CropDataset(Dataset):
    """Random variable-length crops of the training part of each series."""

    def __init__(self, series, n_samples, seed):
        self.series = series
        rng = np.random.default_rng(seed)
        self.index = []
        for _ in range(n_samples):
            sid = int(rng.integers(len(series)))
            n = len(series[sid][1])
            length = int(rng.integers(MIN_CROP, min(MAX_CROP, n) + 1))
            start = int(rng.integers(0, n - length + 1))
            self.index.append((sid, start, length))

    def __len__(self):
        return len(self.index)

    def __getitem__(self, i):
        sid, start, length = self.index[i]
        x, t = self.series[sid]
        sl = slice(start, start + length)
        return torch.from_numpy(x[sl]), torch.from_numpy(t[sl]), torch.ones(length)


class ValDataset(Dataset):
    def __init__(self, series):
        self.series = series

    def __len__(self):
        return len(self.series)

    def __getitem__(self, i):
        x, t, m = self.series[i]
        return torch.from_numpy(x), torch.from_numpy(t), torch.from_numpy(m)


def collate(batch):
    xs, ts, ms = zip(*batch)
    lengths = torch.tensor([len(x) for x in xs])
    return {
        "x": pad_sequence(xs, batch_first=True),
        "y": pad_sequence(ts, batch_first=True),
        "mask": pad_sequence(ms, batch_first=True),
        "lengths": lengths,
    }


# --------------------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------------------
class DemandLSTM(nn.Module):
    def __init__(self, n_features, hidden=HIDDEN, layers=1, dropout=0.0):
        super().__init__()
        self.inp = nn.Linear(n_features, hidden)
        self.lstm = nn.LSTM(hidden, hidden, num_layers=layers, batch_first=True, dropout=dropout)
        self.head = nn.Sequential(nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, 1))

    def forward(self, x, lengths):
        # causal model + right padding: padded steps never reach real outputs, the mask drops them
        h = torch.relu(self.inp(x))
        out, _ = self.lstm(h)
        return self.head(out).squeeze(-1)


def masked_mse(pred, y, mask):
    return ((pred - y) ** 2 * mask).sum() / mask.sum().clamp_min(1.0)


def loss_fn(model, batch):
    pred = model(batch["x"], batch["lengths"])
    return masked_mse(pred, batch["y"], batch["mask"])


def lr_at(step, total):
    if step < WARMUP_STEPS:
        return LR * (step + 1) / WARMUP_STEPS
    p = (step - WARMUP_STEPS) / max(1, total - WARMUP_STEPS)
    return LR * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * p)))


def build(seed=SEED):
    torch.manual_seed(seed)
    np.random.seed(seed)
    if not os.path.exists(DATA_PATH):
        generate_csv(DATA_PATH, seed)
    df = load_frame(DATA_PATH)
    train_series, val_series = build_series(df)
    train_ds = CropDataset(train_series, SAMPLES_PER_EPOCH, seed)
    val_ds = ValDataset(val_series)
    g = torch.Generator().manual_seed(seed)
    train_loader = DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True, collate_fn=collate, generator=g)
    val_loader = DataLoader(val_ds, batch_size=64, shuffle=False, collate_fn=collate)
    model = DemandLSTM(N_FEATURES)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    return model, optimizer, train_loader, val_loader


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    se, ae, n = 0.0, 0.0, 0.0
    for batch in loader:
        pred = model(batch["x"], batch["lengths"])
        m = batch["mask"]
        se += float(((pred - batch["y"]) ** 2 * m).sum())
        ae += float(((pred - batch["y"]).abs() * m).sum())
        n += float(m.sum())
    model.train()
    return se / n, ae / n


def make_target():
    model, optimizer, train_loader, val_loader = build()
    return {
        "model": model,
        "data": train_loader,
        "loss_fn": loss_fn,
        "optimizer": optimizer,
        "val_data": val_loader,
        "task": "regression",
    }


def main():
    t_start = time.time()
    model, optimizer, train_loader, val_loader = build()
    n_params = sum(p.numel() for p in model.parameters())
    total_steps = EPOCHS * len(train_loader)
    print(f"train crops: {len(train_loader.dataset)} | val series: {len(val_loader.dataset)} | "
          f"features: {N_FEATURES} | params: {n_params/1e3:.1f}K | steps: {total_steps}")
    step = 0
    running = 0.0
    t0 = time.time()
    for epoch in range(EPOCHS):
        for batch in train_loader:
            lr = lr_at(step, total_steps)
            for group in optimizer.param_groups:
                group["lr"] = lr
            loss = loss_fn(model, batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            running += loss.item()
            step += 1
            if step % LOG_EVERY == 0:
                dt = (time.time() - t0) * 1000 / LOG_EVERY
                print(f"step {step:5d}/{total_steps} | epoch {epoch + 1} | train_mse {running / LOG_EVERY:.4f} "
                      f"| grad_norm {gnorm:.3f} | lr {lr:.2e} | {dt:.1f}ms/step")
                running = 0.0
                t0 = time.time()
            if step % EVAL_EVERY == 0 or step == total_steps:
                val_mse, val_mae = evaluate(model, val_loader)
                print(f"  eval @ step {step}: val_mse {val_mse:.4f} | val_mae {val_mae:.4f} | val_rmse {math.sqrt(val_mse):.4f}")
    print(f"done in {time.time() - t_start:.1f}s")


if __name__ == "__main__":
    main()
