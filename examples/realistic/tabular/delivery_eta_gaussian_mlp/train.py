"""Delivery-time (ETA) model with predictive uncertainty.

MLP with a zone embedding and two heads (mean, log-variance) trained with the
Gaussian negative log-likelihood, so dispatch gets an ETA *and* a spread.
Orders are joined to the restaurant master table; numeric features are
standardised with training-split statistics, target is standardised minutes.
"""
import os
import sys
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
DATA_DIR = os.path.join(HERE, "data")
SEED = 3
N_ORDERS = 18000
N_REST = 400
N_ZONES = 24
EPOCHS = 16
BATCH_SIZE = 128
LR = 1e-3

NUMERIC = ["distance_km", "items", "rain_mm", "avg_prep_min", "hour_sin", "hour_cos",
           "courier_load", "is_weekend"]
ONE_HOT = ["vehicle", "cuisine"]


def write_tables(data_dir=DATA_DIR, seed=SEED):
    rng = np.random.default_rng(seed)
    rest = pd.DataFrame({
        "restaurant_id": np.arange(5000, 5000 + N_REST),
        "cuisine": rng.choice(["pizza", "burger", "asian", "indian", "salad", "bakery"], N_REST),
        "zone_id": rng.integers(0, N_ZONES, N_REST),
        "avg_prep_min": np.clip(rng.normal(14, 4, N_REST), 4, 35).round(1),
    })
    zone_delay = rng.normal(0, 3.0, N_ZONES)
    n = N_ORDERS
    r_idx = rng.integers(0, N_REST, n)
    hour = rng.choice(np.arange(10, 24), n, p=np.array([2, 5, 9, 8, 4, 3, 4, 7, 10, 10, 8, 5, 3, 2]) / 80)
    weekday = rng.integers(0, 7, n)
    distance = np.clip(rng.gamma(2.2, 1.4, n), 0.2, 15).round(2)
    items = 1 + rng.poisson(1.6, n)
    rain = np.where(rng.random(n) < 0.2, rng.exponential(2.5, n), 0.0).round(1)
    vehicle = rng.choice(["bike", "scooter", "car"], n, p=[0.35, 0.45, 0.2])
    load = rng.poisson(2 + 2 * ((hour >= 18) & (hour <= 21)), n)
    speed = np.select([vehicle == "bike", vehicle == "scooter"], [14.0, 22.0], 26.0)
    peak = ((hour >= 12) & (hour <= 13)) | ((hour >= 18) & (hour <= 21))
    prep = rest["avg_prep_min"].values[r_idx] * (1 + 0.06 * (items - 1))
    mean = (4 + prep + 60 * distance / speed * (1 + 0.05 * rain) + 1.2 * load
            + zone_delay[rest["zone_id"].values[r_idx]] + 3 * peak)
    sd = 0.6 + 0.45 * distance + 0.9 * rain + 1.5 * peak + 0.35 * load
    minutes = np.clip(mean + sd * rng.standard_normal(n), 5, None).round(1)
    orders = pd.DataFrame({
        "order_id": np.arange(n), "restaurant_id": rest["restaurant_id"].values[r_idx],
        "hour": hour, "weekday": weekday, "distance_km": distance, "items": items,
        "rain_mm": rain, "vehicle": vehicle, "courier_load": load, "delivery_min": minutes,
    })
    os.makedirs(data_dir, exist_ok=True)
    rest.to_csv(os.path.join(data_dir, "restaurants.csv"), index=False)
    orders.to_csv(os.path.join(data_dir, "orders.csv"), index=False)


def load_frame(data_dir=DATA_DIR):
    if not os.path.exists(os.path.join(data_dir, "orders.csv")):
        write_tables(data_dir)
    orders = pd.read_csv(os.path.join(data_dir, "orders.csv"))
    rest = pd.read_csv(os.path.join(data_dir, "restaurants.csv"))
    df = orders.merge(rest, on="restaurant_id", how="inner", validate="many_to_one")
    df["hour_sin"] = np.sin(2 * np.pi * df["hour"] / 24)
    df["hour_cos"] = np.cos(2 * np.pi * df["hour"] / 24)
    df["is_weekend"] = (df["weekday"] >= 5).astype(float)
    return df


def split(df, frac_val=0.15, seed=SEED):
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(df))
    n_val = int(len(df) * frac_val)
    return df.iloc[perm[n_val:]].reset_index(drop=True), df.iloc[perm[:n_val]].reset_index(drop=True)


class FeatureSpace:
    def fit(self, tr):
        self.mu = tr[NUMERIC].mean()
        self.sd = tr[NUMERIC].std().replace(0, 1.0)
        self.levels = {c: sorted(tr[c].unique()) for c in ONE_HOT}
        self.y_mu = tr["delivery_min"].mean()
        self.y_sd = tr["delivery_min"].std()
        return self

    def transform(self, df):
        num = ((df[NUMERIC] - self.mu) / self.sd).to_numpy(np.float32)
        oh = [np.stack([(df[c] == lvl).to_numpy(np.float32) for lvl in self.levels[c]], 1) for c in ONE_HOT]
        x = np.concatenate([num] + oh, axis=1)
        zone = df["zone_id"].to_numpy(np.int64)
        y = ((df["delivery_min"] - self.y_mu) / self.y_sd).to_numpy(np.float32)
        return torch.tensor(x), torch.tensor(zone), torch.tensor(y)


class GaussianETA(nn.Module):
    def __init__(self, n_in, n_zones, zone_dim=6, hidden=128, dropout=0.1):
        super().__init__()
        self.zone = nn.Embedding(n_zones, zone_dim)
        self.body = nn.Sequential(
            nn.Linear(n_in + zone_dim, hidden), nn.SiLU(), nn.Dropout(dropout),
            nn.Linear(hidden, hidden), nn.SiLU(), nn.Dropout(dropout),
        )
        self.mean = nn.Linear(hidden, 1)
        self.log_var = nn.Linear(hidden, 1)

    def forward(self, x, zone):
        h = self.body(torch.cat([x, self.zone(zone)], dim=1))
        return self.mean(h).squeeze(-1), self.log_var(h).squeeze(-1).clamp(-10, 6)


nll = nn.GaussianNLLLoss(reduction="mean")


def loss_fn(model, batch):
    x, zone, y = batch
    mu, log_var = model(x, zone)
    return nll(mu, y, log_var.exp())


class Batches:
    def __init__(self, tensors, batch_size, shuffle, seed=SEED):
        self.tensors, self.batch_size, self.shuffle = tensors, batch_size, shuffle
        self.gen = torch.Generator().manual_seed(seed)

    def __len__(self):
        return (len(self.tensors[0]) + self.batch_size - 1) // self.batch_size

    def __iter__(self):
        n = len(self.tensors[0])
        idx = torch.randperm(n, generator=self.gen) if self.shuffle else torch.arange(n)
        for s in range(0, n, self.batch_size):
            b = idx[s:s + self.batch_size]
            yield tuple(t[b] for t in self.tensors)


def build_everything():
    df = load_frame()
    tr, va = split(df)
    fs = FeatureSpace().fit(tr)
    train_t, val_t = fs.transform(tr), fs.transform(va)
    model = GaussianETA(train_t[0].shape[1], N_ZONES)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    return model, opt, fs, Batches(train_t, BATCH_SIZE, True), Batches(val_t, 2048, False)


def make_target():
    torch.manual_seed(SEED)
    model, opt, fs, train_dl, val_dl = build_everything()
    return {"model": model, "data": train_dl, "val_data": val_dl, "loss_fn": loss_fn,
            "optimizer": opt, "task": "regression"}


@torch.no_grad()
def evaluate(model, dl, fs):
    model.eval()
    tot, abs_err, cover, n = 0.0, 0.0, 0.0, 0
    for x, zone, y in dl:
        mu, log_var = model(x, zone)
        tot += nll(mu, y, log_var.exp()).item() * len(y)
        abs_err += ((mu - y).abs() * fs.y_sd).sum().item()
        cover += ((y - mu).abs() <= 1.2816 * (0.5 * log_var).exp()).float().sum().item()
        n += len(y)
    model.train()
    return tot / n, abs_err / n, cover / n


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    model, opt, fs, train_dl, val_dl = build_everything()
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=3)
    steps = len(train_dl)
    print(f"Train on {len(train_dl.tensors[0])} samples, validate on {len(val_dl.tensors[0])} samples")
    for epoch in range(1, EPOCHS + 1):
        print(f"Epoch {epoch}/{EPOCHS}")
        t0 = time.time()
        tot, n = 0.0, 0
        for batch in train_dl:
            loss = loss_fn(model, batch)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += loss.item() * len(batch[2])
            n += len(batch[2])
        val_loss, val_mae, val_cov = evaluate(model, val_dl, fs)
        sched.step(val_loss)
        dt = time.time() - t0
        print(f"{steps}/{steps} [==============================] - {dt:.0f}s {1000 * dt / steps:.0f}ms/step"
              f" - loss: {tot / n:.4f} - val_loss: {val_loss:.4f} - val_mae_min: {val_mae:.4f}"
              f" - val_cov80: {val_cov:.4f} - lr: {opt.param_groups[0]['lr']:.1e}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
