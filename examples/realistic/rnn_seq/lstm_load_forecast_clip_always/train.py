"""Seq2one LSTM forecaster for feeder-level electricity load (next 12 half-hours).

Synthetic load: daily + weekly seasonality, temperature-driven heating load,
random outages/holidays and meter noise. Gradient norm clipping is part of the
recipe (max_norm=0.05), logged before clipping.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn

SEED = 11
LOOKBACK = 96          # two days of half-hourly readings
HORIZON = 12
BATCH = 64
EPOCHS = 8
LR = 3e-3
CLIP = 0.05
HIDDEN = 64


def synth_load(n_days=240, seed=SEED):
    rng = np.random.default_rng(seed)
    t = np.arange(n_days * 48)
    day = 2 * np.pi * (t % 48) / 48
    dow = (t // 48) % 7
    temp = 8 + 5 * np.sin(2 * np.pi * t / (48 * 9.5)) + 4 * np.sin(day - 2.0) + rng.normal(0, 1.5, t.size)
    base = 310 + 90 * np.sin(day - 1.8) + 55 * np.sin(2 * day - 0.6)
    base *= np.where(dow >= 5, 0.82, 1.0)
    heat = 6.5 * np.clip(14 - temp, 0, None)
    load = base + heat + rng.normal(0, 18, t.size)
    holidays = rng.choice(n_days, 8, replace=False)
    for h in holidays:
        load[h * 48:(h + 1) * 48] *= 0.75
    return np.stack([load, temp], 1).astype(np.float32)


class Windows(torch.utils.data.Dataset):
    def __init__(self, series, mean, std):
        self.s = torch.from_numpy((series - mean) / std)

    def __len__(self):
        return len(self.s) - LOOKBACK - HORIZON

    def __getitem__(self, i):
        x = self.s[i:i + LOOKBACK]
        y = self.s[i + LOOKBACK:i + LOOKBACK + HORIZON, 0]
        return x, y


class LoadForecaster(nn.Module):
    def __init__(self, n_feat=2, hidden=HIDDEN):
        super().__init__()
        self.lstm = nn.LSTM(n_feat, hidden, num_layers=2, batch_first=True, dropout=0.1)
        self.proj = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, HORIZON))

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.proj(out[:, -1])


mse = nn.MSELoss()


def loss_fn(model, batch):
    x, y = batch
    return mse(model(x), y)


def build():
    torch.manual_seed(SEED)
    series = synth_load()
    cut = int(len(series) * 0.8)
    mean, std = series[:cut].mean(0), series[:cut].std(0)
    train_ds, val_ds = Windows(series[:cut], mean, std), Windows(series[cut:], mean, std)
    # stride the training windows so an epoch stays short
    train_ds = torch.utils.data.Subset(train_ds, range(0, len(train_ds), 3))
    g = torch.Generator().manual_seed(SEED)
    train_dl = torch.utils.data.DataLoader(train_ds, batch_size=BATCH, shuffle=True, generator=g, drop_last=True)
    val_dl = torch.utils.data.DataLoader(torch.utils.data.Subset(val_ds, range(0, len(val_ds), 4)), batch_size=256)
    model = LoadForecaster()
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    return model, opt, train_dl, val_dl, std[0]


def main():
    model, opt, train_dl, val_dl, kw_scale = build()
    print(f"train windows {len(train_dl.dataset)}  val windows {len(val_dl.dataset)}  "
          f"batches/epoch {len(train_dl)}  clip={CLIP}")
    n_clipped = n_steps = 0
    for epoch in range(1, EPOCHS + 1):
        model.train()
        t0, tr_loss = time.time(), 0.0
        for b, (x, y) in enumerate(train_dl, 1):
            opt.zero_grad()
            loss = mse(model(x), y)
            loss.backward()
            norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm=CLIP)
            opt.step()
            tr_loss += loss.item()
            n_steps += 1
            n_clipped += int(norm > CLIP)
            if b % 10 == 0:
                print(f"  [ep {epoch} {b:3d}/{len(train_dl)}] mse={loss.item():.4f} "
                      f"grad_norm={norm:.3f} (clip {CLIP})")
        model.eval()
        with torch.no_grad():
            vl = [mse(model(x), y).item() * len(y) for x, y in val_dl]
        val = sum(vl) / len(val_dl.dataset)
        print(f"epoch {epoch}: train_mse={tr_loss / len(train_dl):.4f} val_mse={val:.4f} "
              f"val_rmse_kW={math.sqrt(val) * kw_scale:.1f} clipped_steps={n_clipped}/{n_steps} "
              f"({time.time() - t0:.1f}s)")


def make_target():
    model, opt, train_dl, _, _ = build()
    return {"model": model, "batch": next(iter(train_dl)), "loss_fn": loss_fn, "optimizer": opt}


if __name__ == "__main__":
    main()
