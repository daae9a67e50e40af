"""Wind-farm SCADA power regression (expected active power from 10-minute sensor data).

Input is the farm historian export `scada_10min.csv`: one row per turbine per
10-minute interval, sorted by turbine then timestamp. Sensor dropouts leave
gaps that are removed before feature engineering. The target is active power
normalised by rated power; a small MLP regressor is trained with AdamW and a
cosine schedule. Logs follow the Hugging Face Trainer dict format.
"""
import argparse
import math
import os
import tempfile
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn

CONFIG = dict(
    seed=3,
    n_turbines=6,
    steps_per_turbine=3600,
    rated_kw=2050.0,
    batch_size=256,
    epochs=16,
    lr=2e-3,
    weight_decay=1e-4,
    hidden=96,
    val_frac=0.2,
    logging_steps=50,
)

SENSOR_COLS = ["wind_speed", "wind_dir", "yaw_error", "pitch_angle", "rotor_rpm", "ambient_temp",
               "nacelle_temp", "gearbox_oil_temp"]
TARGET = "active_power_kw"


def power_curve(ws, rated_kw):
    # cut-in 3 m/s, rated at 12.5 m/s, cut-out 25 m/s
    frac = np.clip((ws - 3.0) / (12.5 - 3.0), 0.0, 1.0) ** 3
    return np.where(ws > 25.0, 0.0, rated_kw * frac)


def write_scada_export(out_dir, cfg):
    rng = np.random.default_rng(cfg["seed"])
    T, n_t = cfg["steps_per_turbine"], cfg["n_turbines"]
    ts = pd.date_range("2023-03-01", periods=T, freq="10min")
    # farm-level wind: slowly varying AR(1) around a diurnal cycle
    farm_ws = np.empty(T)
    farm_ws[0] = 8.0
    for t in range(1, T):
        farm_ws[t] = 0.985 * farm_ws[t - 1] + 0.015 * 8.0 + 0.45 * rng.normal()
    diurnal = 1.2 * np.sin(2 * np.pi * (ts.hour.to_numpy() + ts.minute.to_numpy() / 60 - 9) / 24)
    farm_dir = (230 + np.cumsum(rng.normal(0, 2.0, T))) % 360
    temp = 8 + 5 * np.sin(2 * np.pi * (ts.hour.to_numpy() - 14) / 24) + np.cumsum(rng.normal(0, 0.05, T))

    frames = []
    for k in range(n_t):
        wake = 0.92 if k in (2, 5) else 1.0
        local = np.empty(T)
        local[0] = 0.0
        for t in range(1, T):
            local[t] = 0.9 * local[t - 1] + 0.35 * rng.normal()
        ws = np.clip((farm_ws + diurnal) * wake + local, 0.0, None)
        yaw_err = rng.normal(0, 6, T) + 4 * (k == 4)
        eff_ws = ws * np.cos(np.deg2rad(yaw_err)) ** (1 / 3)
        derate = np.where(rng.random(T) < 0.02, rng.uniform(0.4, 0.8, T), 1.0)
        power = power_curve(eff_ws, cfg["rated_kw"]) * derate * rng.normal(1.0, 0.07, T)
        power = np.clip(power + rng.normal(0, 15, T), -20, cfg["rated_kw"] * 1.02)
        pitch = np.where(eff_ws > 12.5, 2.2 * (eff_ws - 12.5), 0.0) + rng.normal(0, 1.5, T)
        rpm = np.clip(6 + 0.9 * eff_ws, 0, 16.8) * (ws > 3.0) + rng.normal(0, 1.5, T)
        df = pd.DataFrame({
            "timestamp": ts, "turbine_id": f"WTG{k + 1:02d}",
            "wind_speed": (ws + rng.normal(0, 1.0, T)).round(2),  # nacelle anemometer
            "wind_dir": ((farm_dir + rng.normal(0, 8, T)) % 360).round(1),
            "yaw_error": yaw_err.round(1), "pitch_angle": pitch.round(2), "rotor_rpm": rpm.round(2),
            "ambient_temp": (temp + rng.normal(0, 0.3, T)).round(1),
            "nacelle_temp": (temp + 12 + 0.004 * power + rng.normal(0, 1.0, T)).round(1),
            "gearbox_oil_temp": (temp + 30 + 0.009 * power + rng.normal(0, 2.0, T)).round(1),
            TARGET: power.round(1),
        })
        # comms dropouts: isolated rows plus a few longer outages
        gaps = rng.random(T) < 0.003
        for start in rng.integers(0, T - 40, size=2):
            gaps[start:start + rng.integers(6, 20)] = True
        for col in SENSOR_COLS:
            df.loc[gaps | (rng.random(T) < 0.0004), col] = np.nan
        frames.append(df)
    path = os.path.join(out_dir, "scada_10min.csv")
    pd.concat(frames, ignore_index=True).to_csv(path, index=False)
    return path


def engineer_features(raw):
    df = raw.dropna(subset=SENSOR_COLS)
    ts = pd.to_datetime(df["timestamp"])
    feats = pd.DataFrame(index=df.index)
    for col in ["wind_speed", "yaw_error", "pitch_angle", "rotor_rpm", "ambient_temp", "nacelle_temp",
                "gearbox_oil_temp"]:
        feats[col] = df[col]
    feats["wind_speed_cubed"] = df["wind_speed"].clip(0, 25) ** 3 / 1000.0
    feats["wind_dir_sin"] = np.sin(np.deg2rad(df["wind_dir"]))
    feats["wind_dir_cos"] = np.cos(np.deg2rad(df["wind_dir"]))
    feats["hour_sin"] = np.sin(2 * np.pi * ts.dt.hour / 24)
    feats["hour_cos"] = np.cos(2 * np.pi * ts.dt.hour / 24)
    feats = feats.join(pd.get_dummies(df["turbine_id"], prefix="wtg", dtype=float))
    return feats


def build_tensors(cfg, data_dir):
    path = write_scada_export(data_dir, cfg)
    raw = pd.read_csv(path)
    feats = engineer_features(raw)
    data = feats.join(raw[TARGET] / cfg["rated_kw"])

    rng = np.random.default_rng(cfg["seed"])
    idx = rng.permutation(len(data))
    n_val = int(len(data) * cfg["val_frac"])
    val_idx, train_idx = idx[:n_val], idx[n_val:]
    X = data.drop(columns=[TARGET])
    mu, sd = X.iloc[train_idx].mean(), X.iloc[train_idx].std() + 1e-6
    X = ((X - mu) / sd).to_numpy(dtype=np.float32)
    y = data[TARGET].to_numpy(dtype=np.float32)
    X_t, y_t = torch.from_numpy(X), torch.from_numpy(y)
    return (X_t[train_idx], y_t[train_idx]), (X_t[val_idx], y_t[val_idx])


class PowerMLP(nn.Module):
    def __init__(self, d_in, hidden):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, hidden), nn.SiLU(),
                                 nn.Linear(hidden, hidden), nn.SiLU(),
                                 nn.Linear(hidden, 1))

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
        (X_tr, y_tr), _ = build_tensors(cfg, tmp)
    model = PowerMLP(X_tr.shape[1], cfg["hidden"])
    bs = cfg["batch_size"]
    data = [(X_tr[i * bs:(i + 1) * bs], y_tr[i * bs:(i + 1) * bs]) for i in range(4)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=cfg["weight_decay"]),
            "task": "regression"}


@torch.no_grad()
def evaluate(model, X, y):
    model.eval()
    pred = model(X)
    model.train()
    loss = mse(pred, y).item()
    mae = (pred - y).abs().mean().item()
    r2 = 1.0 - loss / y.var(unbiased=False).item()
    return loss, mae, r2


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=CONFIG["epochs"])
    p.add_argument("--lr", type=float, default=CONFIG["lr"])
    cli = p.parse_args()
    cfg = dict(CONFIG, epochs=cli.epochs, lr=cli.lr)

    np.random.seed(cfg["seed"])
    torch.manual_seed(cfg["seed"])
    with tempfile.TemporaryDirectory() as tmp:
        (X_tr, y_tr), (X_va, y_va) = build_tensors(cfg, tmp)
    print(f"***** Running training *****\n  Num examples = {len(y_tr)}\n  Num eval examples = {len(y_va)}\n"
          f"  Num features = {X_tr.shape[1]}\n  Num Epochs = {cfg['epochs']}\n"
          f"  Train batch size = {cfg['batch_size']}")

    train_dl = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(X_tr, y_tr), batch_size=cfg["batch_size"], shuffle=True,
        generator=torch.Generator().manual_seed(cfg["seed"]))
    model = PowerMLP(X_tr.shape[1], cfg["hidden"])
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=cfg["weight_decay"])
    total_steps = cfg["epochs"] * len(train_dl)
    warmup = int(0.05 * total_steps)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / warmup if s < warmup else 0.5 * (1 + math.cos(math.pi * (s - warmup) / (total_steps - warmup))))

    t0 = time.time()
    step, running, n_run = 0, 0.0, 0
    for epoch in range(cfg["epochs"]):
        for xb, yb in train_dl:
            loss = loss_fn(model, (xb, yb))
            opt.zero_grad()
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            step += 1
            running += loss.item()
            n_run += 1
            if step % cfg["logging_steps"] == 0:
                print({"loss": round(running / n_run, 4), "grad_norm": round(grad_norm.item(), 4),
                       "learning_rate": float(f"{sched.get_last_lr()[0]:.4e}"),
                       "epoch": round(step / len(train_dl), 2)})
                running, n_run = 0.0, 0
        val_loss, val_mae, val_r2 = evaluate(model, X_va, y_va)
        print({"eval_loss": round(val_loss, 4), "eval_mae": round(val_mae, 4), "eval_r2": round(val_r2, 4),
               "epoch": float(epoch + 1)})
    rt = time.time() - t0
    print({"train_runtime": round(rt, 2), "train_samples_per_second": round(cfg["epochs"] * len(y_tr) / rt, 1),
           "epoch": float(cfg["epochs"])})


if __name__ == "__main__":
    main()
