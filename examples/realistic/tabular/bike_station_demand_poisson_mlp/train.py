"""Hourly rentals per dock station -> Poisson MLP with station embeddings.

data/rentals_hourly.csv  station_id, ts, rentals
data/stations.csv        station_id, capacity, zone, elevation_m
data/weather.csv         ts, temp_c, precip_mm, wind_kmh
"""
import os
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

SEED = 11
DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
N_STATIONS = 32
N_DAYS = 84
VAL_DAYS = 14
BATCH_SIZE = 512
EPOCHS = 6
LR = 3e-3
EVAL_EVERY = 50

ZONES = ["downtown", "university", "residential", "waterfront", "business_park"]
NUM_COLS = ["temp_c", "precip_mm", "wind_kmh", "capacity", "elevation_m", "hour_sin", "hour_cos",
            "doy_sin", "doy_cos", "is_weekend", "is_holiday"]


def write_raw_data(data_dir=DATA_DIR, seed=SEED):
    os.makedirs(data_dir, exist_ok=True)
    paths = [os.path.join(data_dir, f) for f in ("rentals_hourly.csv", "stations.csv", "weather.csv")]
    if all(os.path.exists(p) for p in paths):
        return paths
    rng = np.random.default_rng(seed)
    stations = pd.DataFrame({
        "station_id": np.arange(N_STATIONS) + 300,
        "capacity": rng.choice([15, 19, 23, 27, 31, 39], N_STATIONS),
        "zone": rng.choice(ZONES, N_STATIONS, p=[0.3, 0.15, 0.3, 0.1, 0.15]),
        "elevation_m": rng.uniform(2, 90, N_STATIONS).round(1),
    })
    ts = pd.date_range("2023-04-01", periods=N_DAYS * 24, freq="h")
    doy = ts.day_of_year.to_numpy()
    hour = ts.hour.to_numpy()
    temp = 8 + 12 * np.sin(2 * np.pi * (doy - 105) / 365) + 4 * np.sin(2 * np.pi * (hour - 9) / 24)
    temp = temp + np.repeat(rng.normal(0, 3, N_DAYS), 24) + rng.normal(0, 1, len(ts))
    wet_day = np.repeat(rng.random(N_DAYS) < 0.3, 24)
    precip = np.where(wet_day & (rng.random(len(ts)) < 0.45), rng.exponential(1.5, len(ts)), 0.0)
    weather = pd.DataFrame({"ts": ts, "temp_c": temp.round(1), "precip_mm": precip.round(1),
                            "wind_kmh": np.abs(rng.normal(12, 6, len(ts))).round(1)})

    zone_peak = {"downtown": (8, 17), "university": (10, 15), "residential": (7, 18),
                 "waterfront": (13, 15), "business_park": (8, 17)}
    weekend = ts.day_of_week.to_numpy() >= 5
    holiday = np.isin(ts.normalize(), pd.to_datetime(["2023-04-07", "2023-04-10", "2023-05-01",
                                                      "2023-05-18", "2023-05-29"]))
    off = weekend | holiday
    rows = []
    st_level = rng.normal(0, 0.35, N_STATIONS)
    for s in range(N_STATIONS):
        z = stations.loc[s, "zone"]
        a, b = zone_peak[z]
        commute = np.exp(-0.5 * ((hour - a) / 1.3) ** 2) + np.exp(-0.5 * ((hour - b) / 1.6) ** 2)
        leisure = np.exp(-0.5 * ((hour - 14) / 3.0) ** 2)
        shape = np.where(off, 0.3 * commute + 1.3 * leisure, 1.2 * commute + 0.35 * leisure)
        if z == "waterfront":
            shape = shape * np.where(off, 1.8, 0.8)
        log_rate = (1.2 + st_level[s] + 0.03 * stations.loc[s, "capacity"] - 0.006 * stations.loc[s, "elevation_m"]
                    + np.log(0.05 + shape) + 0.045 * (temp - 12) - 0.35 * np.minimum(precip, 4)
                    - 0.015 * weather["wind_kmh"].to_numpy())
        counts = rng.poisson(np.exp(log_rate))
        rows.append(pd.DataFrame({"station_id": s + 300, "ts": ts, "rentals": counts}))
    rentals = pd.concat(rows, ignore_index=True)
    rentals = rentals.sample(frac=1.0, random_state=seed).reset_index(drop=True)
    rentals.to_csv(paths[0], index=False)
    stations.to_csv(paths[1], index=False)
    weather.to_csv(paths[2], index=False)
    return paths


def load_frame():
    r_path, s_path, w_path = write_raw_data()
    rentals = pd.read_csv(r_path, parse_dates=["ts"])
    stations = pd.read_csv(s_path)
    weather = pd.read_csv(w_path, parse_dates=["ts"])
    df = (rentals.merge(stations, on="station_id", how="left", validate="many_to_one")
                 .merge(weather, on="ts", how="left", validate="many_to_one"))
    df = df.sort_values(["ts", "station_id"]).reset_index(drop=True)
    df["hour_sin"] = np.sin(2 * np.pi * df["ts"].dt.hour / 24)
    df["hour_cos"] = np.cos(2 * np.pi * df["ts"].dt.hour / 24)
    df["doy_sin"] = np.sin(2 * np.pi * df["ts"].dt.day_of_year / 365)
    df["doy_cos"] = np.cos(2 * np.pi * df["ts"].dt.day_of_year / 365)
    df["is_weekend"] = (df["ts"].dt.day_of_week >= 5).astype(float)
    hol = pd.to_datetime(["2023-04-07", "2023-04-10", "2023-05-01", "2023-05-18", "2023-05-29"])
    df["is_holiday"] = df["ts"].dt.normalize().isin(hol).astype(float)
    df["precip_mm"] = df["precip_mm"].fillna(0.0)
    return df


def build_data():
    df = load_frame()
    cutoff = df["ts"].max().normalize() - pd.Timedelta(days=VAL_DAYS - 1)
    train_df, val_df = df[df["ts"] < cutoff], df[df["ts"] >= cutoff]
    mu, sd = train_df[NUM_COLS].mean(), train_df[NUM_COLS].std() + 1e-6
    station_idx = {s: i for i, s in enumerate(sorted(train_df["station_id"].unique()))}
    zone_idx = {z: i for i, z in enumerate(ZONES)}

    def encode(frame):
        x_num = torch.tensor(((frame[NUM_COLS] - mu) / sd).to_numpy(np.float32))
        hour = torch.tensor(frame["ts"].dt.hour.to_numpy() + 24 * frame["is_weekend"].to_numpy(np.int64))
        x_cat = torch.stack([torch.tensor(frame["station_id"].map(station_idx).to_numpy()),
                             torch.tensor(frame["zone"].map(zone_idx).to_numpy()), hour], dim=1)
        y = torch.tensor(frame["rentals"].to_numpy(np.float32))
        return TensorDataset(x_cat, x_num, y)

    return encode(train_df), encode(val_df), len(station_idx)


class DemandNet(nn.Module):
    def __init__(self, n_stations, n_num, width=128):
        super().__init__()
        self.station = nn.Embedding(n_stations, 16)
        self.zone = nn.Embedding(len(ZONES), 4)
        self.hour = nn.Embedding(48, 8)
        self.mlp = nn.Sequential(
            nn.Linear(16 + 4 + 8 + n_num, width), nn.GELU(),
            nn.Linear(width, width), nn.GELU(),
            nn.Linear(width, 1),
        )

    def forward(self, x_cat, x_num):
        h = torch.cat([self.station(x_cat[:, 0]), self.zone(x_cat[:, 1]), self.hour(x_cat[:, 2]), x_num], dim=1)
        return self.mlp(h).squeeze(-1)


criterion = nn.PoissonNLLLoss(log_input=True)


def loss_fn(model, batch):
    x_cat, x_num, y = batch
    return criterion(model(x_cat, x_num), y)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    nll, sq, dev, n = 0.0, 0.0, 0.0, 0
    for x_cat, x_num, y in loader:
        log_mu = model(x_cat, x_num)
        mu = log_mu.exp()
        nll += criterion(log_mu, y).item() * len(y)
        sq += ((mu - y) ** 2).sum().item()
        dev += (2 * (torch.xlogy(y, y / mu) - (y - mu))).sum().item()
        n += len(y)
    model.train()
    return nll / n, (sq / n) ** 0.5, dev / n


def make_loaders(train_ds, val_ds):
    g = torch.Generator().manual_seed(SEED)
    return (DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True, generator=g),
            DataLoader(val_ds, batch_size=8192))


def make_target():
    torch.manual_seed(SEED)
    train_ds, val_ds, n_st = build_data()
    tr, va = make_loaders(train_ds, val_ds)
    model = DemandNet(n_st, len(NUM_COLS))
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    return {"model": model, "data": tr, "val_data": va, "loss_fn": loss_fn, "optimizer": optimizer,
            "task": "regression"}


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    train_ds, val_ds, n_st = build_data()
    tr, va = make_loaders(train_ds, val_ds)
    y_tr = train_ds.tensors[2]
    print(f"train rows {len(train_ds)}, val rows {len(val_ds)} (last {VAL_DAYS} days), "
          f"mean rentals/h {y_tr.mean():.2f}")
    model = DemandNet(n_st, len(NUM_COLS))
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    total = EPOCHS * len(tr)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=LR, total_steps=total, pct_start=0.15)
    step, t0, window = 0, time.time(), []
    for epoch in range(EPOCHS):
        for batch in tr:
            optimizer.zero_grad()
            loss = loss_fn(model, batch)
            loss.backward()
            optimizer.step()
            scheduler.step()
            window.append(loss.item())
            step += 1
            if step % EVAL_EVERY == 0 or step == total:
                val_nll, val_rmse, val_dev = evaluate(model, va)
                print(f"epoch {epoch} | step {step:5d}/{total} | train_loss {np.mean(window):.4f} | "
                      f"val_loss {val_nll:.4f} | val_rmse {val_rmse:.3f} | val_deviance {val_dev:.3f} | "
                      f"lr {scheduler.get_last_lr()[0]:.2e} | {time.time() - t0:.1f}s")
                window = []
    const = torch.full_like(val_ds.tensors[2], y_tr.mean())
    y_va = val_ds.tensors[2]
    print(f"baseline (train mean) val_rmse {((const - y_va) ** 2).mean().sqrt():.3f}")


if __name__ == "__main__":
    main()
