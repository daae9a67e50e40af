"""Claim severity model.

MLP on the motor policy table joined with the regional reference table.
Target is log(claim_amount), standardised on the training split; we use a
log-cosh loss because the tail of large claims makes plain MSE too jumpy.
"""
import math
import os
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

HERE = os.path.dirname(os.path.abspath(__file__))
DATA_DIR = os.path.join(HERE, "data")
SEED = 7

CFG = dict(
    batch_size=256,
    epochs=20,
    lr=2e-3,
    weight_decay=1e-5,
    hidden=128,
    dropout=0.1,
    val_frac=0.2,
)

NUM_COLS = ["driver_age", "vehicle_age", "bonus_malus", "log_mileage",
            "urban_density", "median_income", "repair_cost_index"]
CAT_COLS = ["vehicle_group", "fuel", "region"]
TARGET = "claim_amount"


# ----------------------------------------------------------------------------
# synthetic extract (stands in for the warehouse dump)
# ----------------------------------------------------------------------------
def generate_data(data_dir=DATA_DIR, n_policies=18000, seed=SEED):
    pol_path = os.path.join(data_dir, "policies.csv")
    reg_path = os.path.join(data_dir, "regions.csv")
    if os.path.exists(pol_path) and os.path.exists(reg_path):
        return
    os.makedirs(data_dir, exist_ok=True)
    rng = np.random.default_rng(seed)

    regions = pd.DataFrame({
        "region": [f"R{i:02d}" for i in range(14)],
        "urban_density": rng.uniform(30, 4000, 14).round(1),
        "median_income": rng.normal(32000, 6000, 14).round(0),
        "repair_cost_index": rng.normal(1.0, 0.15, 14).round(3),
    })

    veh_groups = np.array(list("ABCDEF"))
    veh_effect = dict(zip(veh_groups, [-0.45, -0.2, 0.0, 0.2, 0.45, 0.8]))
    fuels = np.array(["petrol", "diesel", "hybrid", "ev"])
    fuel_effect = dict(zip(fuels, [0.0, 0.08, 0.15, 0.35]))

    n = n_policies
    pol = pd.DataFrame({
        "policy_id": np.arange(100000, 100000 + n),
        "region": rng.choice(regions["region"], n),
        "driver_age": rng.integers(18, 86, n),
        "vehicle_age": rng.integers(0, 21, n),
        "vehicle_group": rng.choice(veh_groups, n, p=[.22, .25, .2, .15, .12, .06]),
        "fuel": rng.choice(fuels, n, p=[.5, .3, .12, .08]),
        "bonus_malus": np.clip(rng.normal(95, 22, n), 50, 230).round(0),
        "annual_mileage": np.exp(rng.normal(np.log(11000), 0.5, n)).round(0),
    })
    r = pol.merge(regions, on="region", how="left")
    log_amt = (
        7.2
        + 1.6 * (r["repair_cost_index"] - 1.0)
        + 0.10 * np.log(r["urban_density"] / 500.0)
        + r["vehicle_group"].map(veh_effect)
        + r["fuel"].map(fuel_effect)
        - 0.035 * r["vehicle_age"]
        + 0.25 * np.log(r["annual_mileage"] / 11000.0)
        + 0.9 * ((r["driver_age"] - 48) / 30.0) ** 2
        + 0.006 * (r["bonus_malus"] - 100)
        + rng.normal(0, 0.3, n)
    )
    pol["claim_amount"] = np.exp(log_amt).round(2)
    # a few missing mileages, as in the real extract
    miss = rng.random(n) < 0.03
    pol.loc[miss, "annual_mileage"] = np.nan

    pol.to_csv(pol_path, index=False)
    regions.to_csv(reg_path, index=False)


# ----------------------------------------------------------------------------
# preprocessing
# ----------------------------------------------------------------------------
def load_frame(data_dir=DATA_DIR):
    generate_data(data_dir)
    pol = pd.read_csv(os.path.join(data_dir, "policies.csv"))
    reg = pd.read_csv(os.path.join(data_dir, "regions.csv"))
    df = pol.merge(reg, on="region", how="left", validate="many_to_one")
    return df


def split_frame(df, val_frac=CFG["val_frac"], seed=SEED):
    rng = np.random.default_rng(seed)
    idx = rng.permutation(len(df))
    n_val = int(len(df) * val_frac)
    return df.iloc[idx[n_val:]].reset_index(drop=True), df.iloc[idx[:n_val]].reset_index(drop=True)


def fit_preprocessor(train_df):
    prep = {}
    prep["mileage_median"] = train_df["annual_mileage"].median()
    feats = add_features(train_df, prep)
    prep["num_mean"] = feats[NUM_COLS].mean()
    prep["num_std"] = feats[NUM_COLS].std().replace(0, 1.0)
    prep["categories"] = {c: sorted(train_df[c].dropna().unique()) for c in CAT_COLS}
    log_y = np.log(train_df[TARGET])
    prep["y_mean"], prep["y_std"] = float(log_y.mean()), float(log_y.std())
    return prep


def add_features(df, prep):
    out = df.copy()
    out["log_mileage"] = np.log(out["annual_mileage"].fillna(prep["mileage_median"]))
    out["urban_density"] = np.log(out["urban_density"])
    return out


def transform(df, prep):
    feats = add_features(df, prep)
    num = (feats[NUM_COLS] - prep["num_mean"]) / prep["num_std"]
    dummies = [pd.get_dummies(pd.Categorical(feats[c], categories=prep["categories"][c]),
                              prefix=c, dtype=np.float32) for c in CAT_COLS]
    X = pd.concat([num.astype(np.float32)] + dummies, axis=1).to_numpy(np.float32)
    y = ((np.log(feats[TARGET]) - prep["y_mean"]) / prep["y_std"]).to_numpy(np.float32)
    return torch.from_numpy(X), torch.from_numpy(y)


def build_datasets():
    df = load_frame()
    train_df, val_df = split_frame(df)
    prep = fit_preprocessor(train_df)
    Xtr, ytr = transform(train_df, prep)
    Xva, yva = transform(val_df, prep)
    return TensorDataset(Xtr, ytr), TensorDataset(Xva, yva), prep


def make_loaders(train_ds, val_ds, batch_size=CFG["batch_size"], seed=SEED):
    g = torch.Generator().manual_seed(seed)
    train_dl = DataLoader(train_ds, batch_size=batch_size, shuffle=True, generator=g)
    val_dl = DataLoader(val_ds, batch_size=1024, shuffle=False)
    return train_dl, val_dl


# ----------------------------------------------------------------------------
# model / loss
# ----------------------------------------------------------------------------
class SeverityMLP(nn.Module):
    def __init__(self, n_in, hidden=CFG["hidden"], dropout=CFG["dropout"]):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(n_in, hidden), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden, hidden), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden, 1),
        )

    def forward(self, x):
        return self.net(x)


def log_cosh(pred, target):
    # log(cosh(d)) = d + softplus(-2d) - log 2, stable for large |d|
    d = pred - target
    return (d + F.softplus(-2.0 * d) - math.log(2.0)).mean()


def compute_loss(model, batch):
    x, y = batch
    pred = model(x).squeeze(-1)
    return log_cosh(pred, y)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=CFG["lr"], weight_decay=CFG["weight_decay"])


@torch.no_grad()
def evaluate(model, val_dl):
    model.eval()
    losses, sq_err, n = [], 0.0, 0
    for x, y in val_dl:
        losses.append(compute_loss(model, (x, y)).item() * len(y))
        pred = model(x).squeeze(-1)
        sq_err += ((pred - y) ** 2).sum().item()
        n += len(y)
    model.train()
    return sum(losses) / n, math.sqrt(sq_err / n)


def make_target():
    torch.manual_seed(SEED)
    train_ds, val_ds, _ = build_datasets()
    train_dl, _ = make_loaders(train_ds, val_ds)
    it = iter(train_dl)
    data = [next(it) for _ in range(4)]
    model = SeverityMLP(train_ds.tensors[0].shape[1])
    return {"model": model, "data": data, "loss_fn": compute_loss,
            "make_optimizer": make_optimizer, "task": "regression"}


def main():
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    np.random.seed(SEED)
    train_ds, val_ds, prep = build_datasets()
    train_dl, val_dl = make_loaders(train_ds, val_ds)
    n_in = train_ds.tensors[0].shape[1]
    print(f"train rows: {len(train_ds)}  val rows: {len(val_ds)}  features: {n_in}")
    print(f"target: log({TARGET}) mean={prep['y_mean']:.3f} std={prep['y_std']:.3f}")

    model = SeverityMLP(n_in)
    opt = make_optimizer(model.parameters())
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=CFG["epochs"])
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model params: {n_params}")

    steps = len(train_dl)
    for epoch in range(1, CFG["epochs"] + 1):
        t0 = time.time()
        running = 0.0
        for x, y in train_dl:
            loss = compute_loss(model, (x, y))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            running += loss.item()
        sched.step()
        val_loss, val_rmse = evaluate(model, val_dl)
        dt = time.time() - t0
        print(f"Epoch {epoch}/{CFG['epochs']}")
        print(f"{steps}/{steps} - {dt:.0f}s - loss: {running / steps:.4f} - val_loss: {val_loss:.4f}"
              f" - val_rmse: {val_rmse:.4f} - lr: {sched.get_last_lr()[0]:.2e}")


if __name__ == "__main__":
    main()
