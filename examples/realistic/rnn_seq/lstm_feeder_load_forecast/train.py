"""Short-term feeder load forecasting.

Each sample is a variable-length window of hourly history (load, temperature,
hour-of-day encoding) for one feeder; the model predicts the next HORIZON hours
of load. Windows are padded per batch and run through a packed LSTM.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_sequence
from torch.utils.data import DataLoader, Dataset

SEED = 7
HORIZON = 12
MIN_HIST, MAX_HIST = 24, 48
N_TRAIN, N_VAL = 1920, 480
N_FEATURES = 4  # load, temperature, sin(hour), cos(hour)

HIDDEN = 48
BATCH_SIZE = 32
EPOCHS = 8
LR = 1e-3
CLIP = 1.0
LOG_EVERY = 20

torch.set_num_threads(1)


# ----------------------------------------------------------------------------
# synthetic feeder data
# ----------------------------------------------------------------------------
def simulate_feeder(rng, n_hours):
    base = rng.uniform(40, 120)
    daily_amp = rng.uniform(0.15, 0.45) * base
    peak_hour = rng.uniform(16, 20)
    temp_sens = rng.uniform(0.5, 2.0)
    start = int(rng.integers(24))
    hours = (start + np.arange(n_hours)) % 24
    temp = 18 + 7 * np.sin(2 * np.pi * (hours - 15) / 24) + np.cumsum(rng.normal(0, 0.3, n_hours))
    ar = np.zeros(n_hours)
    for t in range(1, n_hours):
        ar[t] = 0.85 * ar[t - 1] + rng.normal(0, 0.04 * base)
    load = (base
            + daily_amp * np.cos(2 * np.pi * (hours - peak_hour) / 24)
            + temp_sens * np.maximum(temp - 22, 0) ** 1.5
            + ar)
    return load.astype(np.float32), temp.astype(np.float32), hours


def generate_windows(n, seed):
    rng = np.random.default_rng(seed)
    xs, ys = [], []
    for _ in range(n):
        hist = int(rng.integers(MIN_HIST, MAX_HIST + 1))
        load, temp, hours = simulate_feeder(rng, hist + HORIZON)
        feats = np.stack([
            load[:hist],
            temp[:hist],
            np.sin(2 * np.pi * hours[:hist] / 24),
            np.cos(2 * np.pi * hours[:hist] / 24),
        ], axis=1).astype(np.float32)
        xs.append(feats)
        ys.append(load[hist:])
    return xs, np.stack(ys)


class WindowScaler:
    """Per-window scaling: divide load by the window's mean load (level-free
    forecasting), standardise temperature with global stats."""

    def fit(self, xs):
        temps = np.concatenate([x[:, 1] for x in xs])
        self.t_mean, self.t_std = float(temps.mean()), float(temps.std())
        return self

    def transform(self, x, y):
        level = x[:, 0].mean()
        x = x.copy()
        x[:, 0] = x[:, 0] / level - 1.0
        x[:, 1] = (x[:, 1] - self.t_mean) / self.t_std
        return x, y / level - 1.0, level


class LoadWindows(Dataset):
    def __init__(self, xs, ys, scaler):
        self.items = [scaler.transform(x, y) for x, y in zip(xs, ys)]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        x, y, level = self.items[i]
        return torch.from_numpy(x), torch.from_numpy(y), level


def collate_windows(items):
    xs, ys, levels = zip(*items)
    lengths = torch.tensor([len(x) for x in xs], dtype=torch.long)
    return {
        "x": pad_sequence(xs, batch_first=True),
        "lengths": lengths,
        "y": torch.stack(ys),
        "level": torch.tensor(levels, dtype=torch.float32),
    }


def build_loaders():
    tr_x, tr_y = generate_windows(N_TRAIN, SEED)
    va_x, va_y = generate_windows(N_VAL, SEED + 100)
    scaler = WindowScaler().fit(tr_x)
    g = torch.Generator().manual_seed(SEED)
    train_dl = DataLoader(LoadWindows(tr_x, tr_y, scaler), batch_size=BATCH_SIZE, shuffle=True,
                          collate_fn=collate_windows, generator=g, drop_last=True)
    val_dl = DataLoader(LoadWindows(va_x, va_y, scaler), batch_size=200, shuffle=False,
                        collate_fn=collate_windows)
    return train_dl, val_dl


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class LoadForecaster(nn.Module):
    def __init__(self, n_features, hidden, horizon, num_layers=2, dropout=0.1):
        super().__init__()
        self.input_proj = nn.Linear(n_features, hidden)
        self.lstm = nn.LSTM(hidden, hidden, num_layers=num_layers, batch_first=True, dropout=dropout)
        self.head = nn.Sequential(nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, horizon))

    def forward(self, x, lengths):
        z = torch.relu(self.input_proj(x))
        packed = pack_padded_sequence(z, lengths.cpu(), batch_first=True, enforce_sorted=False)
        _, (h_n, _) = self.lstm(packed)
        return self.head(h_n[-1])


mse = nn.MSELoss()


def compute_loss(model, batch):
    pred = model(batch["x"], batch["lengths"])
    return mse(pred, batch["y"])


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR)


def build_model():
    return LoadForecaster(N_FEATURES, HIDDEN, HORIZON)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    se, ae, n = 0.0, 0.0, 0
    ape = 0.0
    for batch in loader:
        pred = model(batch["x"], batch["lengths"])
        se += ((pred - batch["y"]) ** 2).sum().item()
        # back to kW for the MAPE
        lvl = batch["level"][:, None]
        pred_kw, true_kw = (pred + 1) * lvl, (batch["y"] + 1) * lvl
        ape += ((pred_kw - true_kw).abs() / true_kw.abs()).sum().item()
        n += pred.numel()
    model.train()
    return se / n, 100.0 * ape / n


def make_target():
    torch.manual_seed(SEED)
    train_dl, _ = build_loaders()
    it = iter(train_dl)
    data = [next(it) for _ in range(4)]
    return {
        "model": build_model(),
        "data": data,
        "loss_fn": compute_loss,
        "make_optimizer": make_optimizer,
        "task": "regression",
    }


def main():
    torch.manual_seed(SEED)
    np.random.seed(SEED)
    train_dl, val_dl = build_loaders()
    model = build_model()
    optimizer = make_optimizer(model.parameters())
    print(f"number of parameters: {sum(p.numel() for p in model.parameters()) / 1e3:.1f}K")
    print(f"train windows: {len(train_dl.dataset)}, val windows: {len(val_dl.dataset)}, horizon: {HORIZON}h")

    val_mse, val_mape = evaluate(model, val_dl)
    print(f"step 0: val mse {val_mse:.4f}, val mape {val_mape:.2f}%")
    step = 0
    t0 = time.time()
    for epoch in range(EPOCHS):
        model.train()
        optimizer.zero_grad(set_to_none=True)
        for batch in train_dl:
            loss = compute_loss(model, batch)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
            optimizer.step()
            step += 1
            if step % LOG_EVERY == 0:
                dt = (time.time() - t0) * 1000 / LOG_EVERY
                t0 = time.time()
                print(f"iter {step}: loss {loss.item():.4f}, time {dt:.1f}ms")
        val_mse, val_mape = evaluate(model, val_dl)
        print(f"step {step} (epoch {epoch + 1}): val mse {val_mse:.4f}, val mape {val_mape:.2f}%")


if __name__ == "__main__":
    main()
