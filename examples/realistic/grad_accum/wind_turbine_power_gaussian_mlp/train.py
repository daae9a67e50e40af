"""Probabilistic power-curve model for a wind turbine (SCADA 10-min records).

MLP predicting mean and variance of normalised active power, trained with
Gaussian negative log-likelihood. Micro-batch 64 x 4 accumulation steps,
bf16 autocast on CPU, cosine LR decay, Keras-style epoch logging.
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

SEED = 2024
DATA_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scada_10min.npz")
N_RECORDS = 16000
VAL_FRACTION = 0.2

HIDDEN = 96
MICRO_BATCH = 64
ACCUM_STEPS = 4
EPOCHS = 20
LR = 2e-3
WEIGHT_DECAY = 1e-4
MIN_VAR = 1e-6

torch.set_num_threads(1)

FEATURES = ["wind_speed", "wind_dir_sin", "wind_dir_cos", "air_density", "ambient_temp",
            "turbulence_int", "yaw_misalignment", "pitch_angle"]


# ----------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------
def power_curve(v, rho):
    cut_in, rated_v, cut_out = 3.0, 12.5, 25.0
    ramp = np.clip((v - cut_in) / (rated_v - cut_in), 0, 1) ** 2.6
    p = ramp * (rho / 1.225) ** 0.9
    p = np.where(v >= rated_v, 1.0, np.minimum(p, 1.0))
    return np.where((v < cut_in) | (v > cut_out), 0.0, p)


def write_synthetic_scada(path):
    rng = np.random.default_rng(SEED)
    n = N_RECORDS
    wind = rng.weibull(2.1, n) * 8.5
    wind_dir = rng.uniform(0, 2 * np.pi, n)
    temp = rng.normal(11, 7, n)
    rho = 1.225 * (288.15 / (temp + 273.15)) * rng.normal(1.0, 0.008, n)
    ti = np.clip(rng.lognormal(np.log(0.11), 0.35, n), 0.03, 0.4)
    yaw = rng.normal(0, 4.0, n) + 6.0 * (rng.random(n) < 0.05) * rng.choice([-1, 1], n)
    pitch = np.where(wind > 12.5, 2.0 + 1.4 * (wind - 12.5), 0.5) + rng.normal(0, 0.4, n)

    p = power_curve(wind, rho) * np.cos(np.deg2rad(yaw)) ** 2
    # wake losses from the neighbouring row for south-westerly wind
    p *= 1.0 - 0.12 * np.exp(-((wind_dir - 3.9) ** 2) / 0.15)
    # scatter is largest on the steep part of the curve and grows with turbulence
    slope = np.clip((wind - 3.0) / 9.5, 0, 1) * (wind < 13.5)
    sigma = 0.006 + (0.05 + 0.25 * ti) * slope * (1 - slope + 0.3)
    power = np.clip(p + rng.normal(0, 1, n) * sigma, -0.01, 1.02)
    # curtailment events
    curtailed = rng.random(n) < 0.02
    power[curtailed] = np.minimum(power[curtailed], rng.uniform(0.3, 0.6, curtailed.sum()))

    df = pd.DataFrame({
        "wind_speed": wind, "wind_dir_sin": np.sin(wind_dir), "wind_dir_cos": np.cos(wind_dir),
        "air_density": rho, "ambient_temp": temp, "turbulence_int": ti,
        "yaw_misalignment": yaw, "pitch_angle": pitch, "power_norm": power,
    })
    np.savez(path, X=df[FEATURES].to_numpy(np.float32), y=df["power_norm"].to_numpy(np.float32))


def build_dataloaders():
    if not os.path.exists(DATA_PATH):
        write_synthetic_scada(DATA_PATH)
    arr = np.load(DATA_PATH)
    X, y = arr["X"], arr["y"]
    rng = np.random.default_rng(SEED + 1)
    perm = rng.permutation(len(X))
    n_val = int(len(X) * VAL_FRACTION)
    val_idx, tr_idx = perm[:n_val], perm[n_val:]

    mu, sd = X[tr_idx].mean(0), X[tr_idx].std(0) + 1e-6
    Xn = (X - mu) / sd
    y_mu, y_sd = y[tr_idx].mean(), y[tr_idx].std()
    yn = (y - y_mu) / y_sd

    train_ds = TensorDataset(torch.from_numpy(Xn[tr_idx]), torch.from_numpy(yn[tr_idx]))
    val_ds = TensorDataset(torch.from_numpy(Xn[val_idx]), torch.from_numpy(yn[val_idx]))
    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(train_ds, batch_size=MICRO_BATCH, shuffle=True, drop_last=True, generator=g)
    val_loader = DataLoader(val_ds, batch_size=1000, shuffle=False)
    return train_loader, val_loader, float(y_sd)


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class PowerCurveNet(nn.Module):
    def __init__(self, n_in, hidden):
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(n_in, hidden), nn.SiLU(),
            nn.Linear(hidden, hidden), nn.SiLU(),
            nn.Linear(hidden, hidden), nn.SiLU(),
        )
        self.mean_head = nn.Linear(hidden, 1)
        self.var_head = nn.Linear(hidden, 1)

    def forward(self, x):
        h = self.body(x)
        mean = self.mean_head(h).squeeze(-1)
        var = F.softplus(self.var_head(h)).squeeze(-1) + MIN_VAR
        return mean, var


def build_model():
    torch.manual_seed(SEED)
    return PowerCurveNet(len(FEATURES), HIDDEN)


def build_optimizer(params):
    return torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY)


nll = nn.GaussianNLLLoss(eps=MIN_VAR)


def compute_loss(model, batch):
    x, y = batch
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mean, var = model(x)
    return nll(mean.float(), y, var.float())


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    tot_nll, tot_se, covered, n = 0.0, 0.0, 0, 0
    for x, y in loader:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            mean, var = model(x)
        mean, var = mean.float(), var.float()
        tot_nll += nn.functional.gaussian_nll_loss(mean, y, var, eps=MIN_VAR, reduction="sum").item()
        tot_se += ((mean - y) ** 2).sum().item()
        covered += ((y - mean).abs() <= 1.645 * var.sqrt()).sum().item()
        n += y.numel()
    model.train()
    return tot_nll / n, math.sqrt(tot_se / n), covered / n


def make_target():
    train_loader, val_loader, _ = build_dataloaders()
    model = build_model()
    optimizer = build_optimizer(model.parameters())
    return {
        "model": model,
        "data": train_loader,
        "val_data": val_loader,
        "loss_fn": compute_loss,
        "optimizer": optimizer,
        "make_optimizer": build_optimizer,
        "task": "regression",
        "grad_accum_steps": ACCUM_STEPS,
    }


def main():
    train_loader, val_loader, y_sd = build_dataloaders()
    model = build_model()
    optimizer = build_optimizer(model.parameters())
    steps_per_epoch = len(train_loader) // ACCUM_STEPS
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=EPOCHS * steps_per_epoch,
                                                           eta_min=LR * 0.02)
    print(f"Train on {len(train_loader.dataset)} samples, validate on {len(val_loader.dataset)} samples")
    print(f"micro_batch={MICRO_BATCH}, accumulation={ACCUM_STEPS}, effective batch={MICRO_BATCH * ACCUM_STEPS}, "
          f"target std (kW/kW_rated)={y_sd:.4f}")

    t_all = time.time()
    for epoch in range(1, EPOCHS + 1):
        t0 = time.time()
        model.train()
        optimizer.zero_grad(set_to_none=True)
        loss_sum, se_sum, n_seen = 0.0, 0.0, 0
        for i, batch in enumerate(train_loader):
            loss = compute_loss(model, batch)
            (loss / ACCUM_STEPS).backward()
            loss_sum += loss.item() * batch[1].numel()
            n_seen += batch[1].numel()
            if (i + 1) % ACCUM_STEPS == 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
        val_loss, val_rmse, val_cov = evaluate(model, val_loader)
        dt = time.time() - t0
        print(f"Epoch {epoch}/{EPOCHS}")
        print(f"{steps_per_epoch}/{steps_per_epoch} - {dt:.0f}s - loss: {loss_sum / n_seen:.4f} - "
              f"val_loss: {val_loss:.4f} - val_rmse: {val_rmse:.4f} - val_cov90: {val_cov:.4f} - "
              f"lr: {scheduler.get_last_lr()[0]:.4e} - {dt:.0f}s/epoch - {dt / steps_per_epoch * 1000:.0f}ms/step")
    print(f"Training finished in {time.time() - t_all:.1f}s")


if __name__ == "__main__":
    main()
