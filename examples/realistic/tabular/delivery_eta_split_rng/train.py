"""Delivery-time (ETA) regression for the food-delivery dispatch service.

Reads the completed-orders export `deliveries.csv` (order attributes at
dispatch time plus the actual delivery time in minutes), one-hot encodes the
categoricals, imputes missing courier ratings, standardises the inputs and the
target, and trains an MLP regressor with SGD + momentum and a step LR
schedule. Keras-style epoch logs; val MAE is reported in minutes.
"""
import argparse
import os
import tempfile
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn

CONFIG = dict(
    seed=2024,
    n_orders=6000,
    batch_size=64,
    epochs=30,
    lr=0.01,
    momentum=0.9,
    step_size=10,
    gamma=0.5,
    hidden=(128, 64),
    val_frac=0.2,
)

VEHICLES = ["bike", "scooter", "car"]
WEATHER = ["clear", "cloudy", "rain", "storm"]
CUISINES = ["pizza", "burger", "asian", "indian", "salad", "dessert", "mexican"]
ZONES = [f"Z{i:02d}" for i in range(1, 13)]


def write_export(out_dir, n, seed):
    rng = np.random.default_rng(seed)
    hour = rng.choice(np.arange(10, 24), size=n, p=np.array([2, 5, 9, 8, 4, 3, 3, 5, 10, 11, 8, 5, 3, 2]) / 78)
    weekday = rng.integers(0, 7, n)
    zone = rng.integers(0, len(ZONES), n)
    zone_congestion = rng.uniform(0.8, 1.4, len(ZONES))
    vehicle = rng.choice(3, size=n, p=[0.35, 0.45, 0.2])
    weather = rng.choice(4, size=n, p=[0.5, 0.3, 0.15, 0.05])
    cuisine = rng.integers(0, len(CUISINES), n)
    distance = np.clip(rng.gamma(2.2, 1.5, n), 0.3, 15).round(2)
    n_items = 1 + rng.poisson(2.0, n)
    rest_load = rng.poisson(4 + 4 * ((hour >= 18) & (hour <= 21)), n)
    peak = ((hour >= 12) & (hour <= 13)) | ((hour >= 18) & (hour <= 21))
    traffic = np.clip(rng.normal(1.0 + 0.35 * peak + 0.1 * (weekday < 5), 0.15), 0.6, 2.0).round(2)
    courier_rating = np.clip(rng.normal(4.6, 0.25, n), 3.0, 5.0).round(2)
    prep_est = np.clip(8 + 1.5 * n_items + np.array([4, 2, 6, 8, 1, 0, 5])[cuisine] + rng.normal(0, 2, n), 3, 45).round()

    speed = np.array([14.0, 22.0, 25.0])[vehicle] / (traffic * zone_congestion[zone])  # km/h
    speed = speed * np.array([1.0, 0.97, 0.85, 0.7])[weather]
    minutes = (prep_est * rng.normal(1.0, 0.15, n) + 0.6 * rest_load + 60 * distance / speed
               + 4 + 2.0 * (5 - courier_rating) + rng.gamma(2.0, 3.5, n))
    courier_rating = courier_rating.astype(object)
    courier_rating[rng.random(n) < 0.08] = np.nan  # new couriers have no rating yet

    df = pd.DataFrame({
        "order_id": np.arange(n) + 881_000, "hour": hour, "weekday": weekday, "zone": np.array(ZONES)[zone],
        "vehicle": np.array(VEHICLES)[vehicle], "weather": np.array(WEATHER)[weather],
        "cuisine": np.array(CUISINES)[cuisine], "distance_km": distance, "n_items": n_items,
        "restaurant_open_orders": rest_load, "traffic_index": traffic, "courier_rating": courier_rating,
        "prep_time_est_min": prep_est, "delivery_minutes": minutes.round(1),
    })
    path = os.path.join(out_dir, "deliveries.csv")
    df.to_csv(path, index=False)
    return path


NUMERIC = ["distance_km", "n_items", "restaurant_open_orders", "traffic_index", "courier_rating",
           "prep_time_est_min", "hour_sin", "hour_cos", "is_weekend", "rating_missing"]
CATEGORICAL = ["zone", "vehicle", "weather", "cuisine"]


def preprocess(df):
    out = pd.DataFrame(index=df.index)
    for c in ["distance_km", "n_items", "restaurant_open_orders", "traffic_index", "prep_time_est_min"]:
        out[c] = df[c].astype(float)
    out["rating_missing"] = df["courier_rating"].isna().astype(float)
    out["courier_rating"] = df["courier_rating"].fillna(df["courier_rating"].median())
    out["hour_sin"] = np.sin(2 * np.pi * df["hour"] / 24)
    out["hour_cos"] = np.cos(2 * np.pi * df["hour"] / 24)
    out["is_weekend"] = (df["weekday"] >= 5).astype(float)
    out = out[NUMERIC]
    return pd.concat([out, pd.get_dummies(df[CATEGORICAL], dtype=float)], axis=1)


def train_val_split(arr, val_frac, rng):
    idx = rng.permutation(len(arr))
    n_val = int(len(arr) * val_frac)
    return arr[idx[n_val:]], arr[idx[:n_val]]


def build_tensors(cfg, data_dir):
    df = pd.read_csv(write_export(data_dir, cfg["n_orders"], cfg["seed"]))
    X = preprocess(df).to_numpy(dtype=np.float32)
    y = df["delivery_minutes"].to_numpy(dtype=np.float32)

    rng = np.random.default_rng(cfg["seed"])
    X_tr, X_va = train_val_split(X, cfg["val_frac"], rng)
    y_tr, y_va = train_val_split(y, cfg["val_frac"], rng)

    n_num = len(NUMERIC)
    mu, sd = X_tr[:, :n_num].mean(0), X_tr[:, :n_num].std(0) + 1e-6
    X_tr[:, :n_num] = (X_tr[:, :n_num] - mu) / sd
    X_va[:, :n_num] = (X_va[:, :n_num] - mu) / sd
    y_stats = (float(y_tr.mean()), float(y_tr.std()))
    y_tr = (y_tr - y_stats[0]) / y_stats[1]
    y_va = (y_va - y_stats[0]) / y_stats[1]
    return (torch.from_numpy(X_tr), torch.from_numpy(y_tr)), (torch.from_numpy(X_va), torch.from_numpy(y_va)), y_stats


class EtaMLP(nn.Module):
    def __init__(self, d_in, hidden):
        super().__init__()
        layers, d = [], d_in
        for h in hidden:
            layers += [nn.Linear(d, h), nn.BatchNorm1d(h), nn.ReLU()]
            d = h
        layers.append(nn.Linear(d, 1))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x).squeeze(-1)


mse = nn.MSELoss()


def loss_fn(model, batch):
    x, y = batch
    return mse(model(x), y)


def make_target():
    cfg = dict(CONFIG)
    torch.manual_seed(cfg["seed"])
    with tempfile.TemporaryDirectory() as tmp:
        (X_tr, y_tr), _, _ = build_tensors(cfg, tmp)
    model = EtaMLP(X_tr.shape[1], cfg["hidden"])
    bs = cfg["batch_size"]
    data = [(X_tr[i * bs:(i + 1) * bs], y_tr[i * bs:(i + 1) * bs]) for i in range(4)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=cfg["momentum"]),
            "task": "regression"}


@torch.no_grad()
def evaluate(model, X, y, y_sd):
    model.eval()
    pred = model(X)
    model.train()
    return mse(pred, y).item(), (pred - y).abs().mean().item() * y_sd


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=CONFIG["epochs"])
    p.add_argument("--lr", type=float, default=CONFIG["lr"])
    cli = p.parse_args()
    cfg = dict(CONFIG, epochs=cli.epochs, lr=cli.lr)

    np.random.seed(cfg["seed"])
    torch.manual_seed(cfg["seed"])
    with tempfile.TemporaryDirectory() as tmp:
        (X_tr, y_tr), (X_va, y_va), (y_mu, y_sd) = build_tensors(cfg, tmp)
    print(f"Train on {len(y_tr)} samples, validate on {len(y_va)} samples "
          f"({X_tr.shape[1]} features, mean delivery {y_mu:.1f} min, sd {y_sd:.1f} min)")

    train_dl = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(X_tr, y_tr), batch_size=cfg["batch_size"], shuffle=True, drop_last=True,
        generator=torch.Generator().manual_seed(cfg["seed"]))
    model = EtaMLP(X_tr.shape[1], cfg["hidden"])
    opt = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=cfg["momentum"])
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=cfg["step_size"], gamma=cfg["gamma"])
    steps = len(train_dl)

    for epoch in range(cfg["epochs"]):
        t0 = time.time()
        tot, abs_err, n = 0.0, 0.0, 0
        for xb, yb in train_dl:
            pred = model(xb)
            loss = mse(pred, yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += loss.item() * len(yb)
            abs_err += (pred.detach() - yb).abs().sum().item()
            n += len(yb)
        sched.step()
        val_loss, val_mae = evaluate(model, X_va, y_va, y_sd)
        dt = time.time() - t0
        print(f"Epoch {epoch + 1}/{cfg['epochs']}")
        print(f"{steps}/{steps} [==============================] - {dt:.0f}s {1000 * dt / steps:.0f}ms/step"
              f" - loss: {tot / n:.4f} - mae_min: {abs_err / n * y_sd:.2f}"
              f" - val_loss: {val_loss:.4f} - val_mae_min: {val_mae:.2f} - lr: {opt.param_groups[0]['lr']:.4g}")


if __name__ == "__main__":
    main()
