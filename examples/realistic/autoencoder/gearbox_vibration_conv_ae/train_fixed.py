"""Conv1d autoencoder for gearbox vibration windows.

Trained on healthy windows only; reconstruction error is later used as an
anomaly score for the condition-monitoring dashboard.
"""
import math
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)

SEED = 7
N_CHANNELS = 4          # accel x/y/z + tachometer-derived channel
WINDOW = 64
BATCH_SIZE = 64
EPOCHS = 12
LR = 2e-3
VAL_FRACTION = 0.2

# operating regimes of the test rig: (shaft frequency in cycles/window, load gain)
REGIMES = {
    "idle": (2.0, 0.4),
    "cruise": (5.0, 1.0),
    "full_load": (9.0, 2.2),
}


def simulate_export(n_per_regime=1200, seed=SEED):
    """Mimics the historian export: one row per window, grouped by regime."""
    rng = np.random.default_rng(seed)
    t = np.arange(WINDOW) / WINDOW
    rows = []
    for regime, (f0, gain) in REGIMES.items():
        for k in range(n_per_regime):
            f = f0 * rng.uniform(0.9, 1.1)
            phase = rng.uniform(0, 2 * math.pi, size=N_CHANNELS)
            mesh = 4.0 * f  # gear-mesh harmonic
            sig = np.empty((N_CHANNELS, WINDOW), dtype=np.float32)
            for c in range(N_CHANNELS):
                a1 = gain * (1.0 + 0.3 * c)
                a2 = 0.35 * gain * gain
                sig[c] = (a1 * np.sin(2 * math.pi * f * t + phase[c])
                          + a2 * np.sin(2 * math.pi * mesh * t + 2 * phase[c])
                          + 0.5 * gain * (c == 3) * np.sign(np.sin(2 * math.pi * f * t)))
            sig += rng.normal(0, 0.05 + 0.05 * gain, size=sig.shape)
            rows.append({"regime": regime, "window_id": k,
                         "timestamp": k * 10.0, "values": sig.reshape(-1)})
    df = pd.DataFrame(rows)
    return df.sort_values(["regime", "timestamp"]).reset_index(drop=True)


def split_and_normalise(df, val_fraction=VAL_FRACTION, seed=SEED):
    X = np.stack(df["values"].to_numpy()).reshape(-1, N_CHANNELS, WINDOW).astype(np.float32)
    rng = np.random.default_rng(seed + 1)
    is_val = rng.random(len(X)) < val_fraction
    X_train, X_val = X[~is_val], X[is_val]
    # per-channel statistics from the training windows only
    mean = X_train.mean(axis=(0, 2), keepdims=True)
    std = X_train.std(axis=(0, 2), keepdims=True) + 1e-6
    return (X_train - mean) / std, (X_val - mean) / std


def build_loaders(batch_size=BATCH_SIZE):
    df = simulate_export()
    X_train, X_val = split_and_normalise(df)
    train_ds = TensorDataset(torch.from_numpy(X_train))
    val_ds = TensorDataset(torch.from_numpy(X_val))
    train_loader = DataLoader(train_ds, batch_size=batch_size, shuffle=True)
    val_loader = DataLoader(val_ds, batch_size=256)
    return train_loader, val_loader


class ConvAutoencoder(nn.Module):
    def __init__(self, in_ch=N_CHANNELS, latent_ch=8):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv1d(in_ch, 32, 5, stride=2, padding=2), nn.GELU(),   # 64 -> 32
            nn.Conv1d(32, 32, 5, stride=2, padding=2), nn.GELU(),      # 32 -> 16
            nn.Conv1d(32, latent_ch, 3, stride=2, padding=1),          # 16 -> 8
        )
        self.decoder = nn.Sequential(
            nn.ConvTranspose1d(latent_ch, 32, 4, stride=2, padding=1), nn.GELU(),  # 8 -> 16
            nn.ConvTranspose1d(32, 32, 4, stride=2, padding=1), nn.GELU(),         # 16 -> 32
            nn.ConvTranspose1d(32, in_ch, 4, stride=2, padding=1),                 # 32 -> 64
        )

    def forward(self, x):
        return self.decoder(self.encoder(x))


def reconstruction_loss(model, batch):
    (x,) = batch
    return F.mse_loss(model(x), x)


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    total, n = 0.0, 0
    for (x,) in loader:
        total += F.mse_loss(model(x), x, reduction="sum").item() / x[0].numel()
        n += x.shape[0]
    model.train()
    return total / n


def make_target():
    torch.manual_seed(SEED)
    train_loader, _ = build_loaders()
    data = []
    for i, batch in enumerate(train_loader):
        if i == 6:
            break
        data.append(batch)
    return {
        "model": ConvAutoencoder(),
        "data": data,
        "loss_fn": reconstruction_loss,
        "make_optimizer": make_optimizer,
        "task": "regression",
    }


def main():
    torch.manual_seed(SEED)
    train_loader, val_loader = build_loaders()
    model = ConvAutoencoder()
    optimizer = make_optimizer(model.parameters())
    n_params = sum(p.numel() for p in model.parameters())
    print(f"ConvAutoencoder: {n_params:,} params | train windows {len(train_loader.dataset)} "
          f"| val windows {len(val_loader.dataset)}")
    steps = len(train_loader)
    for epoch in range(1, EPOCHS + 1):
        t0 = time.time()
        running = 0.0
        for batch in train_loader:
            loss = reconstruction_loss(model, batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            running += loss.item()
        val_loss = evaluate(model, val_loader)
        dt = time.time() - t0
        print(f"Epoch {epoch}/{EPOCHS}")
        print(f"{steps}/{steps} - {dt:.0f}s - loss: {running / steps:.4f} - val_loss: {val_loss:.4f}")
    torch.save(model.state_dict(), "conv_ae.pt")


if __name__ == "__main__":
    main()
