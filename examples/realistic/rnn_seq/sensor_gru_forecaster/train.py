"""Next-6-step forecaster for variable-length sensor traces (packed 2-layer GRU).

Each trace is a daily-cycle signal plus a slow trend and noise, observed for a
variable number of steps (some sensors came online later). Every trace is
standardised with its own history statistics (computed over the observed
steps only) and the forecast target is expressed in the same units.
"""
import json
import os
import time

import numpy as np
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_sequence

SEED = 2024
HORIZON = 6
MIN_LEN, MAX_LEN = 24, 80
N_SERIES = 1280
VAL_FRAC = 0.2
DATA_FILE = "sensor_traces.json"

HIDDEN = 48
DROPOUT = 0.3
BATCH_SIZE = 64
EPOCHS = 12
LR = 4e-3
CLIP = 1.0


# ----------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------
def generate_traces(path, n=N_SERIES, seed=SEED):
    rng = np.random.default_rng(seed)
    traces = []
    for i in range(n):
        total = int(rng.integers(MIN_LEN, MAX_LEN + 1)) + HORIZON
        t = np.arange(total)
        period = rng.choice([12, 24])
        amp = rng.uniform(0.5, 3.0)
        phase = rng.uniform(0, 2 * np.pi)
        level = rng.uniform(-5, 20)
        trend = rng.normal(0, 0.03)
        ar = np.zeros(total)
        eps = rng.normal(0, 0.25 * amp, size=total)
        for k in range(1, total):
            ar[k] = 0.6 * ar[k - 1] + eps[k]
        y = level + trend * t + amp * np.sin(2 * np.pi * t / period + phase) + ar
        traces.append({"sensor_id": f"s{i:04d}", "values": np.round(y, 4).tolist()})
    with open(path, "w") as f:
        json.dump(traces, f)


def load_traces(path=DATA_FILE):
    if not os.path.exists(path):
        generate_traces(path)
    with open(path) as f:
        return json.load(f)


def make_examples(traces):
    """history -> (standardised history, standardised next HORIZON values)."""
    examples = []
    for tr in traces:
        v = np.asarray(tr["values"], dtype=np.float32)
        hist, fut = v[:-HORIZON], v[-HORIZON:]
        mu, sd = hist.mean(), hist.std() + 1e-3
        x = torch.from_numpy((hist - mu) / sd).unsqueeze(-1)
        y = torch.from_numpy((fut - mu) / sd)
        examples.append((x, y))
    return examples


def split(examples, seed=SEED):
    rng = np.random.default_rng(seed + 1)
    idx = rng.permutation(len(examples))
    n_val = int(len(examples) * VAL_FRAC)
    return [examples[i] for i in idx[n_val:]], [examples[i] for i in idx[:n_val]]


def iterate(examples, batch_size, shuffle, rng=None):
    order = rng.permutation(len(examples)) if shuffle else np.arange(len(examples))
    for i in range(0, len(order), batch_size):
        chunk = [examples[j] for j in order[i:i + batch_size]]
        xs, ys = zip(*chunk)
        lengths = torch.tensor([x.size(0) for x in xs])
        yield pad_sequence(xs, batch_first=True), lengths, torch.stack(ys)


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class GRUForecaster(nn.Module):
    def __init__(self, hidden=HIDDEN, horizon=HORIZON, dropout=DROPOUT):
        super().__init__()
        self.inp = nn.Linear(1, hidden)
        self.gru = nn.GRU(hidden, hidden, num_layers=2, batch_first=True, dropout=dropout)
        self.drop = nn.Dropout(dropout)
        self.head = nn.Sequential(nn.Linear(hidden, hidden), nn.GELU(), nn.Dropout(dropout),
                                  nn.Linear(hidden, horizon))

    def forward(self, x, lengths):
        z = self.drop(torch.relu(self.inp(x)))
        packed = pack_padded_sequence(z, lengths, batch_first=True, enforce_sorted=False)
        _, h_n = self.gru(packed)
        return self.head(h_n[-1])


def loss_fn(model, batch):
    x, lengths, y = batch
    return nn.functional.mse_loss(model(x, lengths), y)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=LR, weight_decay=1e-4)


def get_data():
    return split(make_examples(load_traces()))


@torch.no_grad()
def evaluate(model, examples):
    model.eval()
    se, ae, n = 0.0, 0.0, 0
    for x, lengths, y in iterate(examples, 256, shuffle=False):
        pred = model(x, lengths)
        se += ((pred - y) ** 2).sum().item()
        ae += (pred - y).abs().sum().item()
        n += y.numel()
    model.train()
    return se / n, ae / n


def make_target():
    torch.manual_seed(SEED)
    train_ex, _ = get_data()
    rng = np.random.default_rng(SEED)
    data = []
    for i, b in enumerate(iterate(train_ex, BATCH_SIZE, shuffle=True, rng=rng)):
        data.append(b)
        if i == 4:
            break
    return {
        "model": GRUForecaster(),
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "task": "regression",
    }


def main():
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    train_ex, val_ex = get_data()
    # naive baseline: repeat the last observed value over the horizon
    naive = np.mean([((y - x[-1, 0]) ** 2).mean().item() for x, y in val_ex])
    print(f"train series: {len(train_ex)}  val series: {len(val_ex)}  horizon: {HORIZON}")
    print(f"val MSE of last-value baseline: {naive:.4f}")

    model = GRUForecaster()
    optimizer = make_optimizer(model.parameters())
    steps_per_epoch = (len(train_ex) + BATCH_SIZE - 1) // BATCH_SIZE
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=LR, total_steps=EPOCHS * steps_per_epoch,
                                                    pct_start=0.2)
    rng = np.random.default_rng(SEED)
    t0 = time.time()
    for epoch in range(1, EPOCHS + 1):
        model.train()
        tot, nb, gn_sum = 0.0, 0, 0.0
        for batch in iterate(train_ex, BATCH_SIZE, shuffle=True, rng=rng):
            optimizer.zero_grad()
            loss = loss_fn(model, batch)
            loss.backward()
            gn_sum += nn.utils.clip_grad_norm_(model.parameters(), CLIP).item()
            optimizer.step()
            scheduler.step()
            tot += loss.item()
            nb += 1
        val_mse, val_mae = evaluate(model, val_ex)
        print(f"Epoch {epoch}/{EPOCHS} - {time.time()-t0:.1f}s - loss: {tot/nb:.4f} - grad_norm: {gn_sum/nb:.2f} "
              f"- val_loss: {val_mse:.4f} - val_mae: {val_mae:.4f} - lr: {scheduler.get_last_lr()[0]:.2e}")


if __name__ == "__main__":
    main()
