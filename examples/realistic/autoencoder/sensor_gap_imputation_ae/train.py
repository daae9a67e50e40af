"""Masked autoencoder for imputing missing plant-sensor readings.

Rows with telemetry dropouts are zero-filled (after standardisation) and the
encoder also gets the availability mask. During training we hide an extra
random subset of the observed readings so the model learns to fill gaps, and
the reconstruction loss is computed on observed readings only.
"""
import math
import os
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn

from make_data import generate

torch.set_num_threads(1)

DATA_PATH = "sensors.csv"
SEED = 0
BATCH_SIZE = 128
EPOCHS = 25
LR = 2e-3
WEIGHT_DECAY = 1e-5
HIDE_FRAC = 0.2  # fraction of observed readings hidden from the encoder each step
LATENT_DIM = 8
VAL_FRAC = 0.2


def load_table(path=DATA_PATH):
    if not os.path.exists(path):
        generate(path)
    df = pd.read_csv(path)
    return df.drop(columns=["row_id"])


def split_rows(df, val_frac=VAL_FRAC, seed=SEED):
    rng = np.random.default_rng(seed)
    idx = rng.permutation(len(df))
    n_val = int(len(df) * val_frac)
    return df.iloc[idx[n_val:]].reset_index(drop=True), df.iloc[idx[:n_val]].reset_index(drop=True)


def fit_scaler(train_df):
    # per-sensor stats from the observed training readings only
    mean = train_df.mean(skipna=True).to_numpy(dtype=np.float32)
    std = train_df.std(skipna=True).to_numpy(dtype=np.float32)
    return mean, np.maximum(std, 1e-6)


def to_tensors(df, mean, std):
    x = torch.tensor(df.to_numpy(dtype=np.float32))
    x = (x - torch.from_numpy(mean)) / torch.from_numpy(std)
    x = torch.nan_to_num(x, nan=0.0)  # missing -> sensor mean
    observed = ~torch.isnan(x)
    return x, observed


class SensorDataset(torch.utils.data.Dataset):
    def __init__(self, x, observed):
        self.x = x
        self.observed = observed

    def __len__(self):
        return self.x.shape[0]

    def __getitem__(self, i):
        return self.x[i], self.observed[i]


def build_loaders(batch_size=BATCH_SIZE):
    df = load_table()
    train_df, val_df = split_rows(df)
    mean, std = fit_scaler(train_df)
    x_tr, m_tr = to_tensors(train_df, mean, std)
    x_va, m_va = to_tensors(val_df, mean, std)
    g = torch.Generator().manual_seed(SEED)
    train_loader = torch.utils.data.DataLoader(
        SensorDataset(x_tr, m_tr), batch_size=batch_size, shuffle=True, generator=g, drop_last=True
    )
    val_loader = torch.utils.data.DataLoader(SensorDataset(x_va, m_va), batch_size=512, shuffle=False)
    return train_loader, val_loader, x_tr.shape[1]


class MaskedAutoencoder(nn.Module):
    def __init__(self, n_features, latent_dim=LATENT_DIM, hidden=128):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Linear(2 * n_features, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden // 2),
            nn.ReLU(),
            nn.Linear(hidden // 2, latent_dim),
        )
        self.decoder = nn.Sequential(
            nn.Linear(latent_dim, hidden // 2),
            nn.ReLU(),
            nn.Linear(hidden // 2, hidden),
            nn.ReLU(),
            nn.Linear(hidden, n_features),
        )

    def forward(self, x, visible):
        visible = visible.float()
        z = self.encoder(torch.cat([x * visible, visible], dim=1))
        return self.decoder(z)


def hide_readings(observed, frac=HIDE_FRAC, generator=None):
    drop = torch.rand(observed.shape, generator=generator) < frac
    return observed & ~drop


def masked_mse(recon, target, observed):
    w = observed.float()
    return ((recon - target) ** 2 * w).sum() / w.sum().clamp_min(1.0)


def loss_fn(model, batch, generator=None):
    x, observed = batch
    visible = hide_readings(observed, generator=generator)
    recon = model(x, visible)
    return masked_mse(recon, x, observed)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    g = torch.Generator().manual_seed(1234)  # same hidden pattern every epoch
    total, n = 0.0, 0
    for batch in loader:
        total += loss_fn(model, batch, generator=g).item() * batch[0].shape[0]
        n += batch[0].shape[0]
    model.train()
    return total / n


def make_target():
    torch.manual_seed(SEED)
    train_loader, _, n_features = build_loaders()
    batches = []
    for i, batch in enumerate(train_loader):
        batches.append(batch)
        if i == 4:
            break
    return {
        "model": MaskedAutoencoder(n_features),
        "data": batches,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "task": "regression",
    }


def main():
    torch.manual_seed(SEED)
    train_loader, val_loader, n_features = build_loaders()
    model = MaskedAutoencoder(n_features)
    optimizer = make_optimizer(model.parameters())
    steps_per_epoch = len(train_loader)
    total_steps = EPOCHS * steps_per_epoch
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, total_steps) / total_steps))
    )
    n_params = sum(p.numel() for p in model.parameters())
    print(f"train rows: {len(train_loader.dataset)}  val rows: {len(val_loader.dataset)}  sensors: {n_features}")
    print(f"model params: {n_params}")

    for epoch in range(1, EPOCHS + 1):
        t0 = time.time()
        running, seen = 0.0, 0
        for batch in train_loader:
            loss = loss_fn(model, batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            running += loss.item() * batch[0].shape[0]
            seen += batch[0].shape[0]
        val_loss = evaluate(model, val_loader)
        dt = time.time() - t0
        print(
            f"Epoch {epoch}/{EPOCHS} - {steps_per_epoch} steps - {dt:.1f}s - loss: {running / seen:.4f} "
            f"- val_loss: {val_loss:.4f} - lr: {scheduler.get_last_lr()[0]:.2e}"
        )

    torch.save(model.state_dict(), "sensor_mae.pt")
    print("saved sensor_mae.pt")


if __name__ == "__main__":
    main()
