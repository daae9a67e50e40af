"""Reconstruction-based anomaly scoring for centrifugal pump telemetry.

One record = one 10-minute aggregate from a pump's PLC: temperatures,
pressures, flow, motor current, vibration RMS in three axes, etc. The
autoencoder is trained on records from normal operation only; at test time
the per-record reconstruction error is the anomaly score and we report AUROC
against a labelled set that contains bearing wear, cavitation and a drifting
pressure transmitter.
"""
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

SEED = 7
N_TRAIN = 12000
N_VAL = 2000
N_TEST_NORMAL = 1800
N_TEST_FAULT = 200
BATCH_SIZE = 128
EPOCHS = 30
LR = 2e-3
WEIGHT_DECAY = 1e-4
INPUT_NOISE = 0.2
DROPOUT = 0.1
BOTTLENECK = 6
PUMP_MODELS = ["KSB-Etanorm", "Grundfos-NK", "Sulzer-AHLSTAR"]


# ----------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------
def simulate_records(n, rng, fault=None):
    """Normal operating regime driven by a few physical factors."""
    model_idx = rng.integers(0, len(PUMP_MODELS), n)
    model_gain = np.array([1.0, 1.12, 0.9])[model_idx]
    speed = rng.uniform(0.55, 1.0, n)              # fraction of rated rpm (VFD)
    valve = rng.uniform(0.3, 1.0, n)               # discharge valve opening
    ambient = rng.normal(22.0, 6.0, n)             # deg C
    viscosity = rng.lognormal(0.0, 0.15, n)        # relative to water
    wear = rng.beta(2.0, 8.0, n)                   # impeller/seal wear 0..1

    flow = model_gain * speed * np.sqrt(valve) * 120.0 * (1.0 - 0.15 * wear)
    head = model_gain * (speed ** 2) * (55.0 - 18.0 * (flow / 120.0) ** 2)
    suction_p = 1.8 + 0.02 * (ambient - 22.0) + rng.normal(0, 0.05, n)
    discharge_p = suction_p + head / 10.2
    hydraulic_kw = flow / 3600.0 * head * 9.81
    eff = 0.78 - 0.12 * wear - 0.05 * (viscosity - 1.0)
    shaft_kw = hydraulic_kw / eff
    current = shaft_kw / (0.4 * 1.732 * 0.88)
    motor_temp = ambient + 2.2 * shaft_kw + rng.normal(0, 1.0, n)
    bearing_de = ambient + 14.0 * speed + 10.0 * wear + rng.normal(0, 0.8, n)
    bearing_nde = ambient + 11.0 * speed + 6.0 * wear + rng.normal(0, 0.8, n)
    fluid_temp = ambient + 3.0 + 1.5 * (1 - eff) * 10 + rng.normal(0, 0.5, n)
    vib_base = 0.8 + 2.2 * speed ** 2 + 3.0 * wear
    vib_x = vib_base * rng.lognormal(0, 0.08, n)
    vib_y = 0.85 * vib_base * rng.lognormal(0, 0.08, n)
    vib_z = 0.55 * vib_base * rng.lognormal(0, 0.10, n)
    vib_peak_freq = speed * 49.5 + rng.normal(0, 0.3, n)
    power_factor = 0.86 - 0.1 * (1 - speed) + rng.normal(0, 0.01, n)
    seal_leak = 0.05 + 0.4 * wear ** 2 + np.abs(rng.normal(0, 0.02, n))

    df = pd.DataFrame({
        "pump_model": [PUMP_MODELS[i] for i in model_idx],
        "speed_frac": speed + rng.normal(0, 0.005, n),
        "flow_m3h": flow + rng.normal(0, 1.5, n),
        "suction_bar": suction_p,
        "discharge_bar": discharge_p + rng.normal(0, 0.05, n),
        "motor_current_a": current + rng.normal(0, 0.6, n),
        "power_factor": power_factor,
        "motor_temp_c": motor_temp,
        "bearing_de_c": bearing_de,
        "bearing_nde_c": bearing_nde,
        "fluid_temp_c": fluid_temp,
        "ambient_c": ambient + rng.normal(0, 0.3, n),
        "vib_x_mms": vib_x,
        "vib_y_mms": vib_y,
        "vib_z_mms": vib_z,
        "vib_peak_hz": vib_peak_freq,
        "seal_leak_lph": seal_leak,
    })

    if fault is not None:
        kinds = rng.choice(["bearing", "cavitation", "pt_drift"], n)
        b = kinds == "bearing"
        df.loc[b, ["vib_x_mms", "vib_y_mms", "vib_z_mms"]] *= rng.uniform(1.4, 2.2, (b.sum(), 1))
        df.loc[b, "bearing_de_c"] += rng.uniform(4, 10, b.sum())
        c = kinds == "cavitation"
        df.loc[c, "suction_bar"] -= rng.uniform(0.6, 1.0, c.sum())
        df.loc[c, "flow_m3h"] *= rng.uniform(0.8, 0.92, c.sum())
        df.loc[c, "vib_z_mms"] *= rng.uniform(1.3, 1.8, c.sum())
        d = kinds == "pt_drift"
        df.loc[d, "discharge_bar"] += rng.uniform(0.5, 1.2, d.sum())
    return df


class Preprocessor:
    """log1p for skewed columns, standardise numerics, one-hot pump model."""

    skewed = ["vib_x_mms", "vib_y_mms", "vib_z_mms", "seal_leak_lph"]

    def fit(self, df):
        num = self._numeric(df)
        self.cols = list(num.columns)
        self.mean = num.mean()
        self.std = num.std() + 1e-6
        return self

    def _numeric(self, df):
        num = df.drop(columns=["pump_model"]).copy()
        for c in self.skewed:
            num[c] = np.log1p(num[c])
        return num

    def transform(self, df):
        num = (self._numeric(df)[self.cols] - self.mean) / self.std
        onehot = pd.get_dummies(pd.Categorical(df["pump_model"], categories=PUMP_MODELS)).astype(np.float32)
        x = np.concatenate([num.values.astype(np.float32), onehot.values], axis=1)
        return torch.from_numpy(x)


def build_data(seed=SEED):
    rng = np.random.default_rng(seed)
    train_df = simulate_records(N_TRAIN, rng)
    val_df = simulate_records(N_VAL, rng)
    test_df = pd.concat([
        simulate_records(N_TEST_NORMAL, rng).assign(label=0),
        simulate_records(N_TEST_FAULT, rng, fault=True).assign(label=1),
    ], ignore_index=True)
    prep = Preprocessor().fit(train_df)
    x_train = prep.transform(train_df)
    x_val = prep.transform(val_df)
    x_test = prep.transform(test_df.drop(columns=["label"]))
    y_test = torch.tensor(test_df["label"].values)
    return x_train, x_val, x_test, y_test


def build_loaders(seed=SEED):
    x_train, x_val, x_test, y_test = build_data(seed)
    g = torch.Generator().manual_seed(seed)
    train_loader = DataLoader(TensorDataset(x_train), batch_size=BATCH_SIZE, shuffle=True, generator=g)
    val_loader = DataLoader(TensorDataset(x_val), batch_size=1024)
    test_loader = DataLoader(TensorDataset(x_test, y_test), batch_size=1024)
    return train_loader, val_loader, test_loader


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class TabularAE(nn.Module):
    def __init__(self, n_in, bottleneck=BOTTLENECK, hidden=(64, 32), dropout=DROPOUT):
        super().__init__()
        h1, h2 = hidden
        self.encoder = nn.Sequential(
            nn.Linear(n_in, h1), nn.GELU(), nn.Dropout(dropout),
            nn.Linear(h1, h2), nn.GELU(),
            nn.Linear(h2, bottleneck),
        )
        self.decoder = nn.Sequential(
            nn.Linear(bottleneck, h2), nn.GELU(),
            nn.Linear(h2, h1), nn.GELU(), nn.Dropout(dropout),
            nn.Linear(h1, n_in),
        )

    def forward(self, x):
        return self.decoder(self.encoder(x))


def corrupt(x, sigma=INPUT_NOISE):
    return x + sigma * torch.randn_like(x)


def loss_fn(model, batch):
    (x,) = batch
    recon = model(corrupt(x))
    return F.mse_loss(recon, x)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY)


def make_target():
    torch.manual_seed(SEED)
    train_loader, _, _ = build_loaders()
    batches = []
    for i, batch in enumerate(train_loader):
        batches.append(batch)
        if i == 5:
            break
    return {
        "model": TabularAE(batches[0][0].shape[1]),
        "data": batches,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "task": "regression",
    }


def auroc(scores, labels):
    """Mann-Whitney U formulation, no sklearn on the box."""
    scores = np.asarray(scores)
    labels = np.asarray(labels)
    order = scores.argsort()
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    n_pos = labels.sum()
    n_neg = len(labels) - n_pos
    return (ranks[labels == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


@torch.no_grad()
def evaluate(model, val_loader, test_loader):
    model.eval()
    val_tot, val_n = 0.0, 0
    for (x,) in val_loader:
        val_tot += F.mse_loss(model(x), x, reduction="sum").item()
        val_n += x.numel()
    scores, labels = [], []
    for x, y in test_loader:
        err = (model(x) - x).pow(2).mean(dim=1)
        scores.append(err)
        labels.append(y)
    model.train()
    scores = torch.cat(scores).numpy()
    labels = torch.cat(labels).numpy()
    return val_tot / val_n, auroc(scores, labels)


def main():
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    t0 = time.time()
    train_loader, val_loader, test_loader = build_loaders()
    n_in = train_loader.dataset.tensors[0].shape[1]
    model = TabularAE(n_in)
    optimizer = make_optimizer(model.parameters())
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=EPOCHS, eta_min=1e-5)
    print(f"[data] train={N_TRAIN} val={N_VAL} test={N_TEST_NORMAL}+{N_TEST_FAULT} features={n_in} "
          f"({time.time() - t0:.1f}s)")
    print(f"[model] TabularAE {n_in}-64-32-{BOTTLENECK}-32-64-{n_in} "
          f"params={sum(p.numel() for p in model.parameters()):,}")

    for epoch in range(1, EPOCHS + 1):
        t_ep = time.time()
        model.train()
        tot, n = 0.0, 0
        for batch in train_loader:
            loss = loss_fn(model, batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            tot += loss.item() * batch[0].shape[0]
            n += batch[0].shape[0]
        lr = optimizer.param_groups[0]["lr"]
        scheduler.step()
        val_loss, val_auc = evaluate(model, val_loader, test_loader)
        print(f"epoch {epoch:02d}/{EPOCHS} | train_loss {tot / n:.4f} | val_loss {val_loss:.4f} "
              f"| test_auroc {val_auc:.4f} | lr {lr:.2e} | {time.time() - t_ep:.1f}s")


if __name__ == "__main__":
    main()
