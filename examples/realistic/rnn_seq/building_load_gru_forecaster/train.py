"""Next-hour electrical load forecasting for an office building with a GRU.

One year of synthetic hourly data (written to data/building_hourly.csv on first
run): outdoor temperature, humidity, occupancy, calendar features and metered
load in kW with daily/weekly seasonality and temperature-driven HVAC load.
Chronological split: first 270 days for training, the rest for validation.
Input: the previous 24 hours of all features; target: next-hour load
(standardised). 2-layer GRU + linear head, MSE loss, Adam with step decay.
"""
import os
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

SEED = 11
SEQ_LEN = 24
TRAIN_DAYS = 270
BATCH_SIZE = 64
EPOCHS = 8
LR = 2e-3
HIDDEN = 64
LOG_EVERY = 25
FEATURES = ["load_kw", "temp_c", "humidity", "occupancy", "hour_sin", "hour_cos", "is_workday"]

HERE = os.path.dirname(os.path.abspath(__file__))
CSV_PATH = os.path.join(HERE, "data", "building_hourly.csv")

torch.set_num_threads(2)


def simulate_building(seed=SEED, days=365):
    rng = np.random.default_rng(seed)
    ts = pd.date_range("2023-01-01", periods=days * 24, freq="h")
    hour = ts.hour.values
    doy = ts.day_of_year.values
    workday = (ts.day_of_week.values < 5).astype(float)
    holidays = rng.choice(np.arange(days), size=9, replace=False)
    workday[np.isin((doy - 1), holidays)] = 0.0

    seasonal = 11 - 10 * np.cos(2 * np.pi * (doy - 15) / 365)
    diurnal = 5 * np.sin(2 * np.pi * (hour - 9) / 24)
    weather = np.zeros(len(ts))
    for t in range(1, len(ts)):
        weather[t] = 0.97 * weather[t - 1] + rng.normal(0, 0.6)
    temp = seasonal + diurnal + weather
    humidity = np.clip(65 - 1.2 * diurnal + rng.normal(0, 6, len(ts)), 15, 100)

    office_hours = ((hour >= 8) & (hour < 18)).astype(float)
    ramp = ((hour == 7) | (hour == 18)).astype(float) * 0.4
    occupancy = workday * (office_hours + ramp) * np.clip(rng.normal(0.85, 0.08, len(ts)), 0.4, 1.0)

    base = 42 + rng.normal(0, 1.2, len(ts))
    lighting = 55 * occupancy
    plug = 30 * occupancy + 6 * workday
    cooling = 4.2 * np.maximum(temp - 18, 0) * (0.35 + 0.65 * occupancy)
    heating = 3.1 * np.maximum(12 - temp, 0) * (0.5 + 0.5 * occupancy)
    load = base + lighting + plug + cooling + heating + rng.normal(0, 3.0, len(ts))
    return pd.DataFrame({
        "timestamp": ts,
        "load_kw": load.round(2),
        "temp_c": temp.round(2),
        "humidity": humidity.round(1),
        "occupancy": occupancy.round(3),
        "is_workday": workday.astype(int),
    })


def load_frame():
    if not os.path.exists(CSV_PATH):
        os.makedirs(os.path.dirname(CSV_PATH), exist_ok=True)
        simulate_building().to_csv(CSV_PATH, index=False)
    df = pd.read_csv(CSV_PATH, parse_dates=["timestamp"])
    hour = df["timestamp"].dt.hour
    df["hour_sin"] = np.sin(2 * np.pi * hour / 24)
    df["hour_cos"] = np.cos(2 * np.pi * hour / 24)
    return df


class WindowDataset(Dataset):
    def __init__(self, feats, target, seq_len=SEQ_LEN):
        self.feats = torch.tensor(feats, dtype=torch.float32)
        self.target = torch.tensor(target, dtype=torch.float32)
        self.seq_len = seq_len

    def __len__(self):
        return len(self.feats) - self.seq_len

    def __getitem__(self, i):
        return self.feats[i:i + self.seq_len], self.target[i + self.seq_len]


def build_data():
    df = load_frame()
    split = TRAIN_DAYS * 24
    train_df, val_df = df.iloc[:split], df.iloc[split - SEQ_LEN:]
    mean, std = train_df[FEATURES].mean(), train_df[FEATURES].std()
    scale = {"mean": float(mean["load_kw"]), "std": float(std["load_kw"])}
    norm = lambda d: ((d[FEATURES] - mean) / std).values
    train_ds = WindowDataset(norm(train_df), norm(train_df)[:, 0])
    val_ds = WindowDataset(norm(val_df), norm(val_df)[:, 0])
    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True, drop_last=True, generator=g)
    val_loader = DataLoader(val_ds, batch_size=512, shuffle=False)
    return train_loader, val_loader, scale


class GRUForecaster(nn.Module):
    def __init__(self, n_features=len(FEATURES), hidden=HIDDEN, num_layers=2, dropout=0.1):
        super().__init__()
        self.gru = nn.GRU(n_features, hidden, num_layers=num_layers, batch_first=True, dropout=dropout)
        self.head = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, x):
        out, _ = self.gru(x)
        return self.head(out[:, -1]).squeeze(-1)


def compute_loss(model, batch):
    x, y = batch
    return F.mse_loss(model(x), y)


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR)


def make_target():
    torch.manual_seed(SEED)
    train_loader, val_loader, scale = build_data()
    model = GRUForecaster()
    return {
        "model": model,
        "data": train_loader,
        "val_data": val_loader,
        "loss_fn": compute_loss,
        "optimizer": make_optimizer(model.parameters()),
        "make_optimizer": make_optimizer,
        "task": "regression",
    }


class AverageMeter:
    def __init__(self):
        self.reset()

    def reset(self):
        self.sum = torch.zeros(())
        self.count = 0

    def update(self, val, n=1):
        self.sum += val.detach() * n
        self.count += n

    @property
    def avg(self):
        return (self.sum / self.count).item()


@torch.no_grad()
def evaluate(model, loader, scale):
    model.eval()
    sq, ab, n = 0.0, 0.0, 0
    for x, y in loader:
        pred = model(x)
        sq += F.mse_loss(pred, y, reduction="sum").item()
        ab += (pred - y).abs().sum().item() * scale["std"]
        n += y.numel()
    model.train()
    return sq / n, ab / n


def persistence_mae(loader, scale):
    ab, n = 0.0, 0
    for x, y in loader:
        ab += (x[:, -1, 0] - y).abs().sum().item() * scale["std"]
        n += y.numel()
    return ab / n


def main():
    torch.manual_seed(SEED)
    train_loader, val_loader, scale = build_data()
    model = GRUForecaster()
    optimizer = make_optimizer(model.parameters())
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
    print(f"train windows: {len(train_loader.dataset)}  val windows: {len(val_loader.dataset)}  "
          f"params: {sum(p.numel() for p in model.parameters())}")
    print(f"persistence baseline val MAE: {persistence_mae(val_loader, scale):.2f} kW")

    losses = AverageMeter()
    n_batches = len(train_loader)
    for epoch in range(1, EPOCHS + 1):
        t0 = time.time()
        for i, batch in enumerate(train_loader, 1):
            loss = compute_loss(model, batch)
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            losses.update(loss, batch[1].size(0))
            if i % LOG_EVERY == 0:
                print(f"Epoch: [{epoch}][{i:3d}/{n_batches}]  Loss {losses.avg:.4f}  LR {scheduler.get_last_lr()[0]:.2e}")
                losses.reset()
        scheduler.step()
        val_mse, val_mae = evaluate(model, val_loader, scale)
        print(f" * Epoch {epoch}  train_loss {losses.avg:.4f}  val_loss {val_mse:.4f}  val_MAE {val_mae:.2f} kW  "
              f"time {time.time() - t0:.1f}s")
        losses.reset()


if __name__ == "__main__":
    main()
