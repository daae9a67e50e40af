"""Hourly electricity-load regression for a commercial building.

Tabular residual MLP on calendar / weather / lag features.
Micro-batch 64, gradient accumulation 4 (effective 256), bf16 autocast on CPU,
linear-decay schedule with warmup, HF-Trainer-style logging.
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

SEED = 7
DATA_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "building_load.csv")
N_HOURS = 24 * 365
VAL_FRACTION = 0.2

DEVICE = torch.device("cpu")
PTDTYPE = torch.bfloat16

HIDDEN = 128
N_BLOCKS = 3
DROPOUT = 0.0

PER_DEVICE_TRAIN_BATCH_SIZE = 64
GRADIENT_ACCUMULATION_STEPS = 4
EVAL_BATCH_SIZE = 512
NUM_TRAIN_EPOCHS = 10
LEARNING_RATE = 2e-4
WEIGHT_DECAY = 0.01
WARMUP_RATIO = 0.05
MAX_GRAD_NORM = 1.0
LOGGING_STEPS = 10

torch.set_num_threads(1)

FEATURES = [
    "hour_sin", "hour_cos", "dow_sin", "dow_cos", "doy_sin", "doy_cos",
    "is_weekend", "is_holiday", "temp_c", "humidity", "solar_wm2", "wind_ms",
    "occupancy", "load_lag_24h", "load_lag_168h", "temp_lag_3h",
]
TARGET = "load_kwh"


# ----------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------
def write_synthetic_csv(path):
    rng = np.random.default_rng(SEED)
    idx = pd.date_range("2022-01-01", periods=N_HOURS + 168, freq="h")
    hour = idx.hour.values
    dow = idx.day_of_week.values
    doy = idx.day_of_year.values
    is_weekend = (dow >= 5).astype(np.float64)
    holiday_days = set(rng.choice(np.arange(1, 366), size=10, replace=False).tolist())
    is_holiday = np.array([d in holiday_days for d in doy], dtype=np.float64)

    seasonal = 11.0 - 13.0 * np.cos(2 * np.pi * (doy - 15) / 365.0)
    diurnal = 5.0 * np.sin(2 * np.pi * (hour - 9) / 24.0)
    weather_noise = np.convolve(rng.normal(0, 1.6, len(idx)), np.ones(12) / np.sqrt(12), mode="same")
    temp = seasonal + diurnal + weather_noise
    humidity = np.clip(65 - 1.2 * diurnal + rng.normal(0, 8, len(idx)), 15, 100)
    daylight = np.clip(np.sin(np.pi * (hour - 6) / 13.0), 0, None)
    cloud = np.clip(np.convolve(rng.random(len(idx)), np.ones(6) / 6, mode="same"), 0, 1)
    solar = 850 * daylight * (0.35 + 0.65 * (1 - cloud)) * (0.6 + 0.4 * np.sin(np.pi * doy / 365.0))
    wind = np.abs(rng.normal(3.5, 2.0, len(idx)))

    workday = (1 - is_weekend) * (1 - is_holiday)
    occ_shape = np.clip(np.sin(np.pi * (hour - 7) / 11.0), 0, None) ** 0.7
    occupancy = np.clip(workday * occ_shape * (0.85 + 0.1 * rng.random(len(idx))), 0, 1)

    heating = 2.8 * np.clip(16.0 - temp, 0, None) ** 1.15
    cooling = 4.2 * np.clip(temp - 22.0, 0, None) ** 1.3 * (0.5 + 0.5 * occupancy)
    base = 120 + 140 * occupancy + 0.04 * solar * occupancy
    interaction = 18 * occupancy * np.tanh((humidity - 60) / 15) * (temp > 20)
    load = base + heating + cooling + interaction - 0.02 * solar * (1 - occupancy) + 1.5 * wind
    load = load + rng.normal(0, 6.0, len(idx))

    df = pd.DataFrame({
        "timestamp": idx,
        "hour_sin": np.sin(2 * np.pi * hour / 24), "hour_cos": np.cos(2 * np.pi * hour / 24),
        "dow_sin": np.sin(2 * np.pi * dow / 7), "dow_cos": np.cos(2 * np.pi * dow / 7),
        "doy_sin": np.sin(2 * np.pi * doy / 365), "doy_cos": np.cos(2 * np.pi * doy / 365),
        "is_weekend": is_weekend, "is_holiday": is_holiday,
        "temp_c": temp, "humidity": humidity, "solar_wm2": solar, "wind_ms": wind,
        "occupancy": occupancy, TARGET: load,
    })
    df["load_lag_24h"] = df[TARGET].shift(24)
    df["load_lag_168h"] = df[TARGET].shift(168)
    df["temp_lag_3h"] = df["temp_c"].shift(3)
    df = df.iloc[168:].reset_index(drop=True)
    df.to_csv(path, index=False)


def load_splits():
    if not os.path.exists(DATA_PATH):
        write_synthetic_csv(DATA_PATH)
    df = pd.read_csv(DATA_PATH, parse_dates=["timestamp"])
    n_val = int(len(df) * VAL_FRACTION)
    train_df, val_df = df.iloc[:-n_val], df.iloc[-n_val:]

    x_mean = train_df[FEATURES].mean()
    x_std = train_df[FEATURES].std().replace(0, 1.0)
    y_mean, y_std = train_df[TARGET].mean(), train_df[TARGET].std()

    def to_tensors(part):
        x = ((part[FEATURES] - x_mean) / x_std).to_numpy(np.float32)
        y = ((part[TARGET] - y_mean) / y_std).to_numpy(np.float32)
        return torch.from_numpy(x), torch.from_numpy(y)

    return to_tensors(train_df), to_tensors(val_df), float(y_std)


def build_dataloaders():
    (x_tr, y_tr), (x_va, y_va), y_std = load_splits()
    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(TensorDataset(x_tr, y_tr), batch_size=PER_DEVICE_TRAIN_BATCH_SIZE,
                              shuffle=True, drop_last=True, generator=g)
    eval_loader = DataLoader(TensorDataset(x_va, y_va), batch_size=EVAL_BATCH_SIZE, shuffle=False)
    return train_loader, eval_loader, y_std


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class ResidualBlock(nn.Module):
    def __init__(self, dim, dropout):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, dim * 2)
        self.fc2 = nn.Linear(dim * 2, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        return x + self.drop(self.fc2(F.gelu(self.fc1(self.norm(x)))))


class LoadResMLP(nn.Module):
    def __init__(self, n_features, hidden, n_blocks, dropout):
        super().__init__()
        self.stem = nn.Linear(n_features, hidden)
        self.blocks = nn.Sequential(*[ResidualBlock(hidden, dropout) for _ in range(n_blocks)])
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, 1)

    def forward(self, x):
        h = self.blocks(self.stem(x))
        return self.head(self.norm(h)).squeeze(-1)


def build_model():
    torch.manual_seed(SEED)
    model = LoadResMLP(len(FEATURES), HIDDEN, N_BLOCKS, DROPOUT)
    return model.to(DEVICE)


def build_optimizer(params):
    return torch.optim.AdamW(params, lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY)


def get_linear_schedule_with_warmup(optimizer, num_warmup_steps, num_training_steps):
    def lr_lambda(step):
        if step < num_warmup_steps:
            return float(step) / float(max(1, num_warmup_steps))
        return max(0.0, float(num_training_steps - step) / float(max(1, num_training_steps - num_warmup_steps)))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)


def compute_loss(model, batch):
    x, y = batch
    with torch.autocast("cpu", dtype=PTDTYPE):
        pred = model(x.to(DEVICE))
    return F.mse_loss(pred.float(), y.to(DEVICE))


@torch.no_grad()
def evaluate(model, loader, y_std):
    model.eval()
    t0 = time.time()
    sq_err, abs_err, n = 0.0, 0.0, 0
    for x, y in loader:
        with torch.autocast("cpu", dtype=PTDTYPE):
            pred = model(x)
        diff = pred.float() - y
        sq_err += (diff ** 2).sum().item()
        abs_err += diff.abs().sum().item()
        n += y.numel()
    model.train()
    runtime = time.time() - t0
    mse = sq_err / n
    return {
        "eval_loss": round(mse, 4),
        "eval_rmse_kwh": round(math.sqrt(mse) * y_std, 3),
        "eval_mae_kwh": round(abs_err / n * y_std, 3),
        "eval_runtime": round(runtime, 4),
        "eval_samples_per_second": round(n / runtime, 3),
    }


def make_target():
    train_loader, eval_loader, y_std = build_dataloaders()
    model = build_model()
    optimizer = build_optimizer(model.parameters())
    return {
        "model": model,
        "data": train_loader,
        "val_data": eval_loader,
        "loss_fn": compute_loss,
        "optimizer": optimizer,
        "make_optimizer": build_optimizer,
        "task": "regression",
        "grad_accum_steps": GRADIENT_ACCUMULATION_STEPS,
    }


def main():
    train_loader, eval_loader, y_std = build_dataloaders()
    model = build_model()
    optimizer = build_optimizer(model.parameters())

    steps_per_epoch = len(train_loader) // GRADIENT_ACCUMULATION_STEPS
    max_steps = steps_per_epoch * NUM_TRAIN_EPOCHS
    scheduler = get_linear_schedule_with_warmup(optimizer, math.ceil(WARMUP_RATIO * max_steps), max_steps)

    n_params = sum(p.numel() for p in model.parameters())
    print("***** Running training *****")
    print(f"  Num examples = {len(train_loader.dataset):,}")
    print(f"  Num Epochs = {NUM_TRAIN_EPOCHS}")
    print(f"  Instantaneous batch size per device = {PER_DEVICE_TRAIN_BATCH_SIZE}")
    print(f"  Total train batch size (w. parallel, distributed & accumulation) = "
          f"{PER_DEVICE_TRAIN_BATCH_SIZE * GRADIENT_ACCUMULATION_STEPS}")
    print(f"  Gradient Accumulation steps = {GRADIENT_ACCUMULATION_STEPS}")
    print(f"  Total optimization steps = {max_steps:,}")
    print(f"  Number of trainable parameters = {n_params:,}")

    model.train()
    global_step = 0
    tr_loss_sum, tr_loss_count = 0.0, 0
    total_loss_sum, total_loss_count = 0.0, 0
    t_start = time.time()
    for epoch in range(NUM_TRAIN_EPOCHS):
        optimizer.zero_grad(set_to_none=True)
        for micro_step, batch in enumerate(train_loader):
            loss = compute_loss(model, batch)
            (loss / GRADIENT_ACCUMULATION_STEPS).backward()
            tr_loss_sum += loss.item()
            tr_loss_count += 1

            if (micro_step + 1) % GRADIENT_ACCUMULATION_STEPS != 0:
                continue
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            global_step += 1

            if global_step % LOGGING_STEPS == 0:
                logs = {
                    "loss": round(tr_loss_sum / tr_loss_count, 4),
                    "grad_norm": round(float(grad_norm), 4),
                    "learning_rate": scheduler.get_last_lr()[0],
                    "epoch": round(global_step / steps_per_epoch, 2),
                }
                print(logs)
                total_loss_sum += tr_loss_sum
                total_loss_count += tr_loss_count
                tr_loss_sum, tr_loss_count = 0.0, 0

        metrics = evaluate(model, eval_loader, y_std)
        metrics["epoch"] = round(global_step / steps_per_epoch, 2)
        print(metrics)

    total_loss_sum += tr_loss_sum
    total_loss_count += tr_loss_count
    runtime = time.time() - t_start
    print({
        "train_runtime": round(runtime, 4),
        "train_samples_per_second": round(NUM_TRAIN_EPOCHS * len(train_loader.dataset) / runtime, 3),
        "train_steps_per_second": round(max_steps / runtime, 3),
        "train_loss": total_loss_sum / max(1, total_loss_count),
        "epoch": float(NUM_TRAIN_EPOCHS),
    })


if __name__ == "__main__":
    main()
