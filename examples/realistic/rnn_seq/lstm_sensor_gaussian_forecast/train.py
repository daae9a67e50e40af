"""Probabilistic one-step-ahead forecaster for machine sensor readings.

Each example is a variable-length history window (16-48 readings) of a
temperature-like sensor; the model predicts mean and variance of the next
reading and is trained with the Gaussian negative log-likelihood.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_sequence

SEED = 7
BATCH_SIZE = 64
MAX_STEPS = 500
EVAL_EVERY = 100
LR = 3e-3
MIN_LR = 3e-4
WARMUP = 30
HIDDEN = 48


def simulate_sensor(n_series, length, rng):
    """Daily cycle + slow drift + AR(1) noise, one row per machine."""
    t = np.arange(length)
    series = []
    for _ in range(n_series):
        period = rng.uniform(20, 40)
        amp = rng.uniform(0.5, 2.0)
        phase = rng.uniform(0, 2 * np.pi)
        base = rng.normal(60.0, 5.0)
        drift = rng.normal(0, 0.01)
        noise = np.zeros(length)
        for i in range(1, length):
            noise[i] = 0.7 * noise[i - 1] + rng.normal(0, 0.15)
        s = base + drift * t + amp * np.sin(2 * np.pi * t / period + phase) + noise
        series.append(s.astype(np.float32))
    return np.stack(series)


def make_windows(series, n_windows, rng, min_len=16, max_len=48):
    windows, targets = [], []
    n_series, length = series.shape
    for _ in range(n_windows):
        k = rng.integers(n_series)
        L = int(rng.integers(min_len, max_len + 1))
        start = int(rng.integers(0, length - L - 1))
        hist = series[k, start:start + L]
        nxt = series[k, start + L]
        # per-window scaling so machines with different baselines share a model
        mu, sd = hist.mean(), hist.std() + 1e-3
        windows.append((hist - mu) / sd)
        targets.append((nxt - mu) / sd)
    return windows, np.array(targets, dtype=np.float32)


def collate(windows, targets):
    lengths = torch.tensor([len(w) for w in windows], dtype=torch.long)
    x = pad_sequence([torch.from_numpy(w) for w in windows], batch_first=True).unsqueeze(-1)
    y = torch.from_numpy(targets)
    return x, lengths, y


def load_data():
    rng = np.random.default_rng(SEED)
    train_series = simulate_sensor(120, 400, rng)
    val_series = simulate_sensor(30, 400, rng)
    train = make_windows(train_series, 12000, rng)
    val = make_windows(val_series, 1500, rng)
    return train, val


def iterate_batches(windows, targets, batch_size, rng):
    idx = rng.permutation(len(windows))
    for start in range(0, len(idx) - batch_size + 1, batch_size):
        b = idx[start:start + batch_size]
        yield collate([windows[i] for i in b], targets[b])


class GaussianLSTM(nn.Module):
    def __init__(self, hidden=HIDDEN):
        super().__init__()
        self.lstm = nn.LSTM(1, hidden, batch_first=True)
        self.head = nn.Sequential(nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, 2))

    def forward(self, x, lengths):
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        _, (h_n, _) = self.lstm(packed)
        out = self.head(h_n[-1])
        mean, log_var = out.chunk(2, dim=-1)
        return mean, log_var.clamp(-8.0, 6.0)


def gaussian_nll(mean, log_var, y):
    return 0.5 * (log_var + (y - mean) ** 2 / log_var.exp() + math.log(2 * math.pi))


def loss_fn(model, batch):
    x, lengths, y = batch
    mean, log_var = model(x, lengths)
    return gaussian_nll(mean, log_var, y).mean()


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=LR, weight_decay=1e-4)


def get_lr(step):
    if step < WARMUP:
        return LR * (step + 1) / WARMUP
    progress = (step - WARMUP) / max(1, MAX_STEPS - WARMUP)
    return MIN_LR + 0.5 * (LR - MIN_LR) * (1 + math.cos(math.pi * progress))


def make_target():
    torch.manual_seed(SEED)
    (train_w, train_t), _ = load_data()
    rng = np.random.default_rng(SEED)
    batches = []
    for batch in iterate_batches(train_w, train_t, BATCH_SIZE, rng):
        batches.append(batch)
        if len(batches) == 5:
            break
    return {
        "model": GaussianLSTM(),
        "data": batches,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "task": "regression",
    }


@torch.no_grad()
def evaluate(model, val_batches):
    model.eval()
    nll, se, n = 0.0, 0.0, 0
    for x, lengths, y in val_batches:
        mean, log_var = model(x, lengths)
        mean, log_var = mean.squeeze(-1), log_var.squeeze(-1)
        nll += gaussian_nll(mean, log_var, y).sum().item()
        se += ((mean - y) ** 2).sum().item()
        n += y.numel()
    model.train()
    return nll / n, math.sqrt(se / n)


def main():
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    (train_w, train_t), (val_w, val_t) = load_data()
    val_rng = np.random.default_rng(0)
    val_batches = list(iterate_batches(val_w, val_t, 250, val_rng))
    print(f"train windows: {len(train_w)}, val windows: {len(val_w)}, "
          f"naive last-value rmse: {np.sqrt(np.mean((np.array([w[-1] for w in val_w]) - val_t) ** 2)):.4f}")

    model = GaussianLSTM()
    optimizer = make_optimizer(model.parameters())
    print(f"number of parameters: {sum(p.numel() for p in model.parameters()) / 1e3:.1f}K")

    rng = np.random.default_rng(SEED)
    step, t0 = 0, time.time()
    data_iter = iterate_batches(train_w, train_t, BATCH_SIZE, rng)
    while step < MAX_STEPS:
        try:
            batch = next(data_iter)
        except StopIteration:
            data_iter = iterate_batches(train_w, train_t, BATCH_SIZE, rng)
            batch = next(data_iter)
        lr = get_lr(step)
        for g in optimizer.param_groups:
            g["lr"] = lr
        loss = loss_fn(model, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

        if step % 25 == 0:
            dt = (time.time() - t0) * 1000
            t0 = time.time()
            print(f"iter {step}: loss {loss.item():.4f}, lr {lr:.2e}, time {dt:.2f}ms")
        if step > 0 and (step % EVAL_EVERY == 0 or step == MAX_STEPS - 1):
            val_nll, val_rmse = evaluate(model, val_batches)
            print(f"step {step}: val nll {val_nll:.4f}, val rmse {val_rmse:.4f}")
        step += 1


if __name__ == "__main__":
    main()
