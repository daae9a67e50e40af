"""Dense autoencoder for chiller-plant fault detection.

Trains on fault-free BMS trend data (1-min samples), scores held-out
commissioning data (with labelled refrigerant-leak / condenser-fouling
episodes) by per-row reconstruction error.
"""
import os
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

SEED = 7
DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
TRAIN_CSV = os.path.join(DATA_DIR, "chiller_trend_normal.csv")
TEST_CSV = os.path.join(DATA_DIR, "chiller_trend_labelled.csv")

FEATURES = [
    "oat_c", "chw_supply_c", "chw_return_c", "cw_supply_c", "cw_return_c",
    "evap_press_kpa", "cond_press_kpa", "comp_kw", "chw_flow_ls",
    "cw_flow_ls", "suction_superheat_k", "load_pct",
]

CFG = dict(
    batch_size=256,
    epochs=30,
    lr=2e-3,
    weight_decay=1e-5,
    latent_dim=4,
    val_frac=0.15,
)


# ---------------------------------------------------------------------------
# synthetic BMS export (stands in for the trend-log dump from the site)
# ---------------------------------------------------------------------------
def _simulate_plant(n_minutes, rng, fault_episodes=()):
    t = np.arange(n_minutes)
    day = (t % 1440) / 1440.0
    dow = (t // 1440) % 7
    oat = 24 + 6 * np.sin(2 * np.pi * (day - 0.35)) + rng.normal(0, 0.4, n_minutes).cumsum() * 0.02
    oat = oat - np.convolve(oat - oat.mean(), np.ones(720) / 720, mode="same") * 0.5
    occupied = ((day > 0.28) & (day < 0.8) & (dow < 5)).astype(float)
    load = 25 + 55 * occupied * (0.7 + 0.3 * np.sin(np.pi * (day - 0.28) / 0.52).clip(0)) + 0.8 * (oat - 24)
    load = np.clip(load + rng.normal(0, 2.0, n_minutes), 10, 100)

    chw_flow = 38 + 0.25 * load + rng.normal(0, 0.4, n_minutes)
    chw_sup = 6.7 + 0.01 * (load - 50) + rng.normal(0, 0.04, n_minutes)
    delta_t = load * 2.2 / chw_flow
    chw_ret = chw_sup + delta_t + rng.normal(0, 0.08, n_minutes)
    cw_flow = 55 + 0.1 * load + rng.normal(0, 0.35, n_minutes)
    cw_sup = 0.55 * oat + 14.5 + rng.normal(0, 0.15, n_minutes)
    cw_ret = cw_sup + load * 3.0 / cw_flow + rng.normal(0, 0.1, n_minutes)
    evap_p = 340 + 11.5 * (chw_sup - 6.7) - 0.25 * (load - 50) + rng.normal(0, 1.5, n_minutes)
    cond_p = 820 + 24.0 * (cw_ret - 30) + 0.6 * (load - 50) + rng.normal(0, 3.0, n_minutes)
    superheat = 4.5 + 0.01 * (load - 50) + rng.normal(0, 0.12, n_minutes)
    kw = 40 + 2.1 * load * (1 + 0.0012 * (cond_p - evap_p - 480)) + rng.normal(0, 1.5, n_minutes)

    fault = np.zeros(n_minutes, dtype=int)
    for start, length, kind in fault_episodes:
        sl = slice(start, start + length)
        ramp = np.minimum(1.0, np.arange(length) / 30.0)
        if kind == "leak":
            evap_p[sl] -= 18.0 * ramp
            superheat[sl] += 0.9 * ramp
            kw[sl] += 1.5 * ramp
        elif kind == "fouling":
            cond_p[sl] += 40.0 * ramp
            kw[sl] += 2.5 * ramp
        fault[sl] = 1

    df = pd.DataFrame({
        "timestamp": pd.date_range("2023-06-01", periods=n_minutes, freq="min"),
        "oat_c": oat, "chw_supply_c": chw_sup, "chw_return_c": chw_ret,
        "cw_supply_c": cw_sup, "cw_return_c": cw_ret,
        "evap_press_kpa": evap_p, "cond_press_kpa": cond_p,
        "comp_kw": kw, "chw_flow_ls": chw_flow, "cw_flow_ls": cw_flow,
        "suction_superheat_k": superheat, "load_pct": load,
    })

    # pressure transducers on this site drop out for a few minutes at a time
    for col in ("evap_press_kpa", "cond_press_kpa"):
        n_drop = int(n_minutes * 0.0025)
        starts = rng.integers(0, n_minutes - 10, n_drop)
        for s in starts:
            df.loc[s:s + rng.integers(1, 6), col] = -9999.0
    # occasional blank cells from the flow meters' comms
    for col in ("chw_flow_ls", "cw_flow_ls"):
        df.loc[rng.random(n_minutes) < 0.004, col] = np.nan
    df[FEATURES] = df[FEATURES].round(3)
    return df, fault


def write_synthetic_exports():
    os.makedirs(DATA_DIR, exist_ok=True)
    rng = np.random.default_rng(SEED)
    train_df, _ = _simulate_plant(24 * 60 * 14, rng)
    train_df.to_csv(TRAIN_CSV, index=False)

    n_test = 24 * 60 * 4
    episodes, cursor = [], 600
    kinds = ["leak", "fouling"]
    while cursor < n_test - 400:
        length = int(rng.integers(120, 300))
        episodes.append((cursor, length, kinds[len(episodes) % 2]))
        cursor += length + int(rng.integers(400, 900))
    test_df, fault = _simulate_plant(n_test, rng, episodes)
    test_df["fault"] = fault
    test_df.to_csv(TEST_CSV, index=False)


# ---------------------------------------------------------------------------
# data pipeline
# ---------------------------------------------------------------------------
def load_trend(path):
    df = pd.read_csv(path, parse_dates=["timestamp"], na_values=[-9999])
    df = df.sort_values("timestamp").reset_index(drop=True)
    df[FEATURES] = df[FEATURES].interpolate(limit_direction="both")
    return df


class Standardizer:
    def fit(self, x):
        self.mean = x.mean(axis=0)
        self.std = x.std(axis=0) + 1e-6
        return self

    def transform(self, x):
        return ((x - self.mean) / self.std).astype(np.float32)


def build_data(cfg):
    if not (os.path.exists(TRAIN_CSV) and os.path.exists(TEST_CSV)):
        write_synthetic_exports()
    train_df = load_trend(TRAIN_CSV)
    test_df = load_trend(TEST_CSV)

    # chronological hold-out: last 15% of the normal period for validation
    n_val = int(len(train_df) * cfg["val_frac"])
    fit_part = train_df.iloc[:-n_val]
    val_part = train_df.iloc[-n_val:]

    scaler = Standardizer().fit(fit_part[FEATURES].to_numpy())
    x_train = scaler.transform(fit_part[FEATURES].to_numpy())
    x_val = scaler.transform(val_part[FEATURES].to_numpy())
    x_test = scaler.transform(test_df[FEATURES].to_numpy())
    y_test = test_df["fault"].to_numpy()

    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(TensorDataset(torch.from_numpy(x_train)),
                              batch_size=cfg["batch_size"], shuffle=True, generator=g)
    val_loader = DataLoader(TensorDataset(torch.from_numpy(x_val)), batch_size=1024)
    return train_loader, val_loader, torch.from_numpy(x_test), y_test


# ---------------------------------------------------------------------------
# model
# ---------------------------------------------------------------------------
class DenseAE(nn.Module):
    def __init__(self, n_in, latent_dim):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Linear(n_in, 64), nn.GELU(),
            nn.Linear(64, 32), nn.GELU(),
            nn.Linear(32, latent_dim),
        )
        self.decoder = nn.Sequential(
            nn.Linear(latent_dim, 32), nn.GELU(),
            nn.Linear(32, 64), nn.GELU(),
            nn.Linear(64, n_in),
        )

    def forward(self, x):
        return self.decoder(self.encoder(x))


def loss_fn(model, batch):
    (x,) = batch
    return ((model(x) - x) ** 2).mean()


@torch.no_grad()
def anomaly_scores(model, x):
    model.eval()
    return ((model(x) - x) ** 2).mean(dim=1).numpy()


def roc_auc(y, s):
    ranks = pd.Series(s).rank().to_numpy()
    n_pos = int(y.sum())
    n_neg = len(y) - n_pos
    return (ranks[y == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def make_target():
    torch.manual_seed(SEED)
    train_loader, val_loader, _, _ = build_data(CFG)
    model = DenseAE(len(FEATURES), CFG["latent_dim"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=CFG["lr"], weight_decay=CFG["weight_decay"])
    return dict(model=model, data=train_loader, val_data=val_loader, loss_fn=loss_fn,
                optimizer=optimizer, task="reconstruction")


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    train_loader, val_loader, x_test, y_test = build_data(CFG)
    model = DenseAE(len(FEATURES), CFG["latent_dim"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=CFG["lr"], weight_decay=CFG["weight_decay"])
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=CFG["epochs"], eta_min=1e-5)
    steps = len(train_loader)
    print(f"train rows: {len(train_loader.dataset)}  val rows: {len(val_loader.dataset)}  "
          f"test rows: {len(y_test)} ({y_test.mean():.1%} fault)")

    for epoch in range(1, CFG["epochs"] + 1):
        t0 = time.time()
        model.train()
        running = 0.0
        for batch in train_loader:
            loss = loss_fn(model, batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            running += loss.item()
        model.eval()
        with torch.no_grad():
            val = sum(loss_fn(model, b).item() * len(b[0]) for b in val_loader) / len(val_loader.dataset)
        lr = optimizer.param_groups[0]["lr"]
        scheduler.step()
        dt = time.time() - t0
        print(f"Epoch {epoch}/{CFG['epochs']}")
        print(f"{steps}/{steps} [==============================] - {dt:.0f}s {1000 * dt / steps:.0f}ms/step"
              f" - loss: {running / steps:.4f} - val_loss: {val:.4f} - lr: {lr:.4e}")

    scores = anomaly_scores(model, x_test)
    auc = roc_auc(y_test, scores)
    thr = np.quantile(anomaly_scores(model, val_loader.dataset.tensors[0]), 0.99)
    pred = scores > thr
    recall = pred[y_test == 1].mean()
    fpr = pred[y_test == 0].mean()
    print(f"test ROC-AUC: {auc:.4f}  recall@p99(val): {recall:.3f}  false-alarm rate: {fpr:.3f}")


if __name__ == "__main__":
    main()
