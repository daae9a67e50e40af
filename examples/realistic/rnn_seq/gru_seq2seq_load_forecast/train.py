"""Multi-step load forecasting with a GRU encoder-decoder.

Each example is the recent history of one (synthetic) metered site: variable-length,
padded per batch and packed for the encoder. The decoder rolls out HORIZON steps
autoregressively from the last observed value. Everything is scaled per series with
the mean/std of its own observed history.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_sequence

SEED = 7
N_TRAIN, N_VAL = 3000, 600
MIN_HIST, MAX_HIST = 24, 64
HORIZON = 12
BATCH_SIZE = 64
HIDDEN = 48
EPOCHS = 12
LR = 3e-3
WEIGHT_DECAY = 1e-5


def synth_site(rng, total_len):
    """Daily-ish cycle with site-specific period, a slow trend, a second harmonic and noise."""
    t = np.arange(total_len, dtype=np.float64)
    period = rng.uniform(8.0, 20.0)
    phase = rng.uniform(0, 2 * np.pi)
    base = rng.uniform(20.0, 80.0)
    amp = base * rng.uniform(0.1, 0.4)
    trend = rng.normal(0.0, 0.05) * base / total_len
    y = (base + trend * t
         + amp * np.sin(2 * np.pi * t / period + phase)
         + 0.35 * amp * np.sin(4 * np.pi * t / period + 2 * phase)
         + rng.normal(0.0, 0.05 * amp, size=total_len))
    return y.astype(np.float32)


def generate_windows(n, rng):
    histories, futures = [], []
    for _ in range(n):
        hist_len = int(rng.integers(MIN_HIST, MAX_HIST + 1))
        series = synth_site(rng, hist_len + HORIZON)
        histories.append(series[:hist_len])
        futures.append(series[hist_len:])
    return histories, futures


def build_datasets(seed=SEED):
    rng = np.random.default_rng(seed)
    return generate_windows(N_TRAIN, rng), generate_windows(N_VAL, rng)


def collate(histories, futures):
    scaled_hist, scaled_fut = [], []
    for h, f in zip(histories, futures):
        mu, sd = float(h.mean()), float(h.std()) + 1e-6
        scaled_hist.append(torch.from_numpy((h - mu) / sd))
        scaled_fut.append(torch.from_numpy((f - mu) / sd))
    lengths = torch.tensor([len(h) for h in scaled_hist], dtype=torch.long)
    x = pad_sequence(scaled_hist, batch_first=True, padding_value=0.0).unsqueeze(-1)  # (B, T, 1)
    y = torch.stack(scaled_fut)                                                      # (B, HORIZON)
    return x, lengths, y


def iterate_batches(data, batch_size, shuffle, generator=None):
    histories, futures = data
    n = len(histories)
    order = torch.randperm(n, generator=generator).tolist() if shuffle else list(range(n))
    for start in range(0, n, batch_size):
        idx = order[start:start + batch_size]
        yield collate([histories[i] for i in idx], [futures[i] for i in idx])


class Seq2SeqForecaster(nn.Module):
    def __init__(self, hidden=HIDDEN, horizon=HORIZON):
        super().__init__()
        self.horizon = horizon
        self.encoder = nn.GRU(1, hidden, batch_first=True)
        self.decoder = nn.GRUCell(1, hidden)
        self.proj = nn.Linear(hidden, 1)

    def forward(self, x, lengths):
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        _, h_n = self.encoder(packed)
        hidden = h_n[-1].detach()
        # last observed value of every series (not the padded tail)
        step_in = x[torch.arange(x.size(0)), lengths - 1]  # (B, 1)
        preds = []
        for _ in range(self.horizon):
            hidden = self.decoder(step_in, hidden)
            step_out = self.proj(hidden)
            preds.append(step_out)
            step_in = step_out
        return torch.cat(preds, dim=1)  # (B, HORIZON)


def build_model():
    return Seq2SeqForecaster()


mse = nn.MSELoss()


def loss_fn(model, batch):
    x, lengths, y = batch
    return mse(model(x, lengths), y)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY)


def evaluate(model, data):
    model.eval()
    se, ae, n = 0.0, 0.0, 0
    with torch.no_grad():
        for x, lengths, y in iterate_batches(data, 300, shuffle=False):
            pred = model(x, lengths)
            se += ((pred - y) ** 2).sum().item()
            ae += (pred - y).abs().sum().item()
            n += y.numel()
    model.train()
    return se / n, ae / n


def make_target():
    torch.manual_seed(SEED)
    train, _ = build_datasets()
    g = torch.Generator().manual_seed(SEED)
    data = []
    for i, batch in enumerate(iterate_batches(train, BATCH_SIZE, shuffle=True, generator=g)):
        data.append(batch)
        if i == 4:
            break
    return {
        "model": build_model(),
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "task": "regression",
    }


def main():
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    train, val = build_datasets()
    print(f"sites: train={len(train[0])} val={len(val[0])} history={MIN_HIST}-{MAX_HIST} horizon={HORIZON}")
    model = build_model()
    optimizer = make_optimizer(model.parameters())
    steps_per_epoch = math.ceil(len(train[0]) / BATCH_SIZE)
    total_steps = EPOCHS * steps_per_epoch
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=LR, total_steps=total_steps,
                                                    pct_start=0.15)
    g = torch.Generator().manual_seed(SEED)
    step = 0
    t_start = time.time()
    for epoch in range(EPOCHS):
        running, nb = 0.0, 0
        for batch in iterate_batches(train, BATCH_SIZE, shuffle=True, generator=g):
            loss = loss_fn(model, batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            running += loss.item()
            nb += 1
            step += 1
            if step % 25 == 0:
                print(f"step {step:4d}/{total_steps} | train_mse {running / nb:.4f} | "
                      f"lr {scheduler.get_last_lr()[0]:.2e}")
        val_mse, val_mae = evaluate(model, val)
        print(f"[epoch {epoch + 1:02d}] train_mse {running / nb:.4f} | val_mse {val_mse:.4f} | "
              f"val_mae {val_mae:.4f} | elapsed {time.time() - t_start:.1f}s")


if __name__ == "__main__":
    main()
