"""Delivery-time regression for the parcel network.

shipments.csv  (one row per parcel, exported from the TMS)
depots.csv     (depot master data)
Target: hours from pickup scan to delivery scan.
"""
import math
import os
import sys
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

SEED = 1234
DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
N_SHIPMENTS = 16000
N_DEPOTS = 40
BATCH_SIZE = 128
EPOCHS = 20
LR = 2e-3
CLIP = 5.0

NUM_COLS = ["distance_km", "weight_kg", "n_items", "declared_value", "pickup_hour",
            "depot_daily_volume", "dest_is_rural"]
CAT_COLS = ["carrier", "service_level", "pickup_weekday", "depot_region"]
TARGET = "transit_hours"


def write_raw_data(data_dir=DATA_DIR, seed=SEED):
    os.makedirs(data_dir, exist_ok=True)
    ship_path = os.path.join(data_dir, "shipments.csv")
    depot_path = os.path.join(data_dir, "depots.csv")
    if os.path.exists(ship_path) and os.path.exists(depot_path):
        return ship_path, depot_path
    rng = np.random.default_rng(seed)
    depots = pd.DataFrame({
        "depot_id": [f"D{i:03d}" for i in range(N_DEPOTS)],
        "lat": rng.uniform(43.0, 54.0, N_DEPOTS).round(4),
        "lon": rng.uniform(-4.0, 15.0, N_DEPOTS).round(4),
        "region": rng.choice(["north", "south", "east", "west", "central"], N_DEPOTS),
        "daily_volume": rng.integers(300, 6000, N_DEPOTS),
    })
    n = N_SHIPMENTS
    d_idx = rng.integers(0, N_DEPOTS, n)
    dest_lat = np.clip(depots["lat"].to_numpy()[d_idx] + rng.normal(0, 2.5, n), 41, 56)
    dest_lon = np.clip(depots["lon"].to_numpy()[d_idx] + rng.normal(0, 3.5, n), -6, 18)
    carrier = rng.choice(["ParcelOne", "Swiftline", "EuroPost", "GreenFreight"], n, p=[0.35, 0.3, 0.2, 0.15])
    service = rng.choice(["economy", "standard", "express"], n, p=[0.3, 0.5, 0.2])
    weight = np.round(np.exp(rng.normal(0.8, 1.0, n)), 2)
    n_items = 1 + rng.poisson(0.8, n)
    value = np.round(np.exp(rng.normal(4.0, 1.1, n)), 2)
    hour = rng.integers(6, 22, n)
    weekday = rng.integers(0, 7, n)
    rural = (rng.random(n) < 0.25).astype(int)
    ships = pd.DataFrame({
        "shipment_id": np.arange(5_000_000, 5_000_000 + n),
        "depot_id": depots["depot_id"].to_numpy()[d_idx],
        "dest_lat": dest_lat.round(4), "dest_lon": dest_lon.round(4),
        "carrier": carrier, "service_level": service, "weight_kg": weight,
        "n_items": n_items, "declared_value": value, "pickup_hour": hour,
        "pickup_weekday": weekday, "dest_is_rural": rural,
    })
    dist = haversine_km(depots["lat"].to_numpy()[d_idx], depots["lon"].to_numpy()[d_idx], dest_lat, dest_lon)
    speed = pd.Series(carrier).map({"ParcelOne": 38.0, "Swiftline": 45.0, "EuroPost": 30.0, "GreenFreight": 26.0}).to_numpy()
    svc = pd.Series(service).map({"economy": 1.35, "standard": 1.0, "express": 0.6}).to_numpy()
    line_haul = 6.0 + svc * dist / speed * 1.8
    cutoff_wait = np.where(hour >= 17, 24 - hour + 6, 0.0)
    weekend = np.where(weekday == 4, 30.0 * (hour >= 15), 0.0) + np.where(weekday == 5, 34.0, 0.0) + np.where(weekday == 6, 14.0, 0.0)
    congestion = 4.0 * (depots["daily_volume"].to_numpy()[d_idx] / 6000.0) ** 2
    heavy = 3.0 * np.log1p(weight) + 0.8 * (n_items - 1)
    hours = (line_haul + cutoff_wait + weekend + congestion + heavy + 9.0 * rural) * np.exp(rng.normal(0, 0.12, n))
    ships[TARGET] = hours.round(2)
    ships = ships.sample(frac=1.0, random_state=seed).reset_index(drop=True)
    ships.to_csv(ship_path, index=False)
    depots.to_csv(depot_path, index=False)
    return ship_path, depot_path


def haversine_km(lat1, lon1, lat2, lon2):
    lat1, lon1, lat2, lon2 = (np.radians(a) for a in (lat1, lon1, lat2, lon2))
    a = np.sin((lat2 - lat1) / 2) ** 2 + np.cos(lat1) * np.cos(lat2) * np.sin((lon2 - lon1) / 2) ** 2
    return 2 * 6371.0 * np.arcsin(np.sqrt(a))


def load_frame():
    ship_path, depot_path = write_raw_data()
    ships = pd.read_csv(ship_path)
    depots = pd.read_csv(depot_path).rename(columns={"region": "depot_region", "daily_volume": "depot_daily_volume",
                                                     "lat": "depot_lat", "lon": "depot_lon"})
    df = ships.merge(depots, on="depot_id", how="left", validate="many_to_one")
    df["distance_km"] = haversine_km(df["depot_lat"], df["depot_lon"], df["dest_lat"], df["dest_lon"])
    df = df[df[TARGET] > 0].reset_index(drop=True)
    return df


class RobustScaler:
    """Standardise and clip extreme values so a few odd parcels do not dominate."""

    def __init__(self, clip=CLIP):
        self.clip = clip

    def fit(self, X):
        self.mean_ = X.mean(axis=0)
        self.scale_ = X.std(axis=0) + 1e-8
        return self

    def transform(self, X):
        return (np.clip(X, -self.clip, self.clip) - self.mean_) / self.scale_


def one_hot(df, categories):
    blocks = []
    for c in CAT_COLS:
        cat = pd.Categorical(df[c].astype(str), categories=categories[c])
        blocks.append(pd.get_dummies(cat).to_numpy(np.float32))
    return np.concatenate(blocks, axis=1)


def build_data():
    df = load_frame()
    rng = np.random.default_rng(SEED)
    perm = rng.permutation(len(df))
    n_val = int(0.2 * len(df))
    val_df, train_df = df.iloc[perm[:n_val]], df.iloc[perm[n_val:]]

    scaler = RobustScaler().fit(train_df[NUM_COLS].to_numpy(np.float64))
    categories = {c: sorted(train_df[c].astype(str).unique()) for c in CAT_COLS}
    y_log_tr = np.log(train_df[TARGET].to_numpy())
    y_mu, y_sd = y_log_tr.mean(), y_log_tr.std()

    def encode(frame):
        num = scaler.transform(frame[NUM_COLS].to_numpy(np.float64)).astype(np.float32)
        X = np.concatenate([num, one_hot(frame, categories)], axis=1)
        y = ((np.log(frame[TARGET].to_numpy()) - y_mu) / y_sd).astype(np.float32)
        return X, y

    Xtr, ytr = encode(train_df)
    Xva, yva = encode(val_df)
    return Xtr, ytr, Xva, yva, (y_mu, y_sd)


class TransitMLP(nn.Module):
    def __init__(self, n_in, width=128, depth=3, dropout=0.05):
        super().__init__()
        layers, d = [], n_in
        for _ in range(depth):
            layers += [nn.Linear(d, width), nn.SiLU(), nn.Dropout(dropout)]
            d = width
        layers.append(nn.Linear(d, 1))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x).squeeze(-1)


mse = nn.MSELoss()


def loss_fn(model, batch):
    x, y = batch
    return mse(model(x), y)


def make_loaders(Xtr, ytr, Xva, yva):
    g = torch.Generator().manual_seed(SEED)
    tr = DataLoader(TensorDataset(torch.from_numpy(Xtr), torch.from_numpy(ytr)),
                    batch_size=BATCH_SIZE, shuffle=True, generator=g)
    va = DataLoader(TensorDataset(torch.from_numpy(Xva), torch.from_numpy(yva)), batch_size=2048)
    return tr, va


@torch.no_grad()
def evaluate(model, loader, y_stats):
    model.eval()
    y_mu, y_sd = y_stats
    preds, ys, loss_sum, n = [], [], 0.0, 0
    for x, y in loader:
        p = model(x)
        loss_sum += mse(p, y).item() * len(y)
        n += len(y)
        preds.append(p.numpy())
        ys.append(y.numpy())
    model.train()
    p_h = np.exp(np.concatenate(preds) * y_sd + y_mu)
    y_h = np.exp(np.concatenate(ys) * y_sd + y_mu)
    return loss_sum / n, np.abs(p_h - y_h).mean()


def make_target():
    torch.manual_seed(SEED)
    Xtr, ytr, Xva, yva, _ = build_data()
    tr, va = make_loaders(Xtr, ytr, Xva, yva)
    model = TransitMLP(Xtr.shape[1])
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    return {"model": model, "data": tr, "val_data": va, "loss_fn": loss_fn,
            "optimizer": optimizer, "task": "regression"}


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    Xtr, ytr, Xva, yva, y_stats = build_data()
    print(f"Train on {len(ytr)} samples, validate on {len(yva)} samples ({Xtr.shape[1]} features)")
    tr, va = make_loaders(Xtr, ytr, Xva, yva)
    model = TransitMLP(Xtr.shape[1])
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=2)
    steps = len(tr)
    for epoch in range(1, EPOCHS + 1):
        t0 = time.time()
        model.train()
        tot, n, abs_err = 0.0, 0, 0.0
        for batch in tr:
            optimizer.zero_grad()
            loss = loss_fn(model, batch)
            loss.backward()
            optimizer.step()
            tot += loss.item() * len(batch[1])
            n += len(batch[1])
        val_loss, val_mae_h = evaluate(model, va, y_stats)
        scheduler.step(val_loss)
        dt = time.time() - t0
        print(f"Epoch {epoch}/{EPOCHS}")
        print(f"{steps}/{steps} - {dt:.0f}s - {1000 * dt / steps:.0f}ms/step - loss: {tot / n:.4f} "
              f"- val_loss: {val_loss:.4f} - val_mae_hours: {val_mae_h:.3f} - lr: {optimizer.param_groups[0]['lr']:.4g}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
