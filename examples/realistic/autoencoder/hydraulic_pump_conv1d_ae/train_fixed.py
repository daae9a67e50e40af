"""Conv1d autoencoder for unsupervised fault detection on hydraulic pump skid telemetry.

Trains on windows from normal operation only; the anomaly score of a window is its
reconstruction MSE. Evaluated on a held-out stream with labelled fault events.
"""
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

SEED = 7
RUN_DIR = Path(__file__).resolve().parent
DATA_DIR = RUN_DIR / "data"
CHANNELS = ["discharge_bar", "motor_amp", "shaft_rpm", "casing_temp_c", "vib_rms_g", "flow_lpm"]

WINDOW = 64
STRIDE = 16
BATCH_SIZE = 64
EPOCHS = 16
LR = 2e-3
WEIGHT_DECAY = 1e-4
LATENT_DIM = 16

torch.set_num_threads(1)


# ----------------------------------------------------------------------------- data

def simulate_pump(n, rng):
    """Synthetic 10 Hz skid telemetry: one load setpoint drives all process variables."""
    setpoint = np.empty(n)
    i = 0
    while i < n:
        seg = int(rng.integers(300, 1200))
        setpoint[i:i + seg] = rng.uniform(0.55, 1.0)
        i += seg
    load = pd.Series(setpoint).ewm(alpha=0.02).mean().to_numpy()
    slow_load = pd.Series(setpoint).ewm(alpha=0.002).mean().to_numpy()
    t = np.arange(n)
    df = pd.DataFrame({
        "discharge_bar": 115 + 75 * load + 2.5 * np.sin(2 * np.pi * t / 48) + rng.normal(0, 0.8, n),
        "motor_amp": 24 + 21 * load + rng.normal(0, 0.35, n),
        "shaft_rpm": 1440 + 45 * load + rng.normal(0, 2.0, n),
        "casing_temp_c": 52 + 14 * slow_load + rng.normal(0, 0.08, n),
        "vib_rms_g": 0.035 + 0.02 * load + 0.008 * np.sin(2 * np.pi * t / 6.3) + rng.normal(0, 0.002, n),
        "flow_lpm": 145 + 95 * load + rng.normal(0, 1.5, n),
    })
    return df


def inject_faults(df, rng, n_events):
    df = df.copy()
    n = len(df)
    fault = np.zeros(n, dtype=np.int64)
    kinds = rng.choice(["bearing", "bearing", "thermal", "winding", "cavitation"], size=n_events)
    starts = np.sort(rng.choice(np.arange(200, n - 400), size=n_events, replace=False))
    for kind, s in zip(kinds, starts):
        length = int(rng.integers(80, 220))
        sl = slice(s, s + length)
        k = np.arange(length)
        if kind == "bearing":
            impulses = (k % 9 == 0) * rng.uniform(0.015, 0.03) * np.exp(-(k % 9) / 2.0)
            df.loc[df.index[sl], "vib_rms_g"] += impulses + rng.normal(0, 0.004, length)
        elif kind == "thermal":
            df.loc[df.index[sl], "casing_temp_c"] += np.linspace(1.0, rng.uniform(3.0, 5.0), length)
        elif kind == "winding":
            df.loc[df.index[sl], "motor_amp"] += rng.uniform(2.5, 4.0)
        else:
            df.loc[df.index[sl], "flow_lpm"] -= rng.uniform(6.0, 10.0)
            df.loc[df.index[sl], "discharge_bar"] += rng.normal(0, 3.0, length)
        fault[sl] = 1
    df["fault"] = fault
    return df


def ensure_data():
    DATA_DIR.mkdir(exist_ok=True)
    train_csv, test_csv = DATA_DIR / "skid_normal.csv", DATA_DIR / "skid_holdout.csv"
    if not (train_csv.exists() and test_csv.exists()):
        rng = np.random.default_rng(SEED)
        simulate_pump(48_000, rng).to_csv(train_csv, index_label="sample")
        inject_faults(simulate_pump(24_000, rng), rng, n_events=36).to_csv(test_csv, index_label="sample")
    return pd.read_csv(train_csv, index_col="sample"), pd.read_csv(test_csv, index_col="sample")


def make_windows(values, window=WINDOW, stride=STRIDE):
    starts = np.arange(0, len(values) - window + 1, stride)
    w = np.stack([values[s:s + window] for s in starts]).astype(np.float32)
    return np.ascontiguousarray(w.transpose(0, 2, 1))  # (N, C, W) for Conv1d


def window_labels(flags, window=WINDOW, stride=STRIDE):
    starts = np.arange(0, len(flags) - window + 1, stride)
    return np.array([flags[s:s + window].max() for s in starts], dtype=np.int64)


class WindowScaler:
    def fit(self, x):
        self.mean = x.mean(axis=(0, 2), keepdims=True)
        self.std = x.std(axis=(0, 2), keepdims=True) + 1e-6
        return self

    def transform(self, x):
        return ((x - self.mean) / self.std).astype(np.float32)


def build_data():
    normal_df, holdout_df = ensure_data()
    values = normal_df[CHANNELS].to_numpy()
    cut = int(0.85 * len(values))
    train_w = make_windows(values[:cut])
    val_w = make_windows(values[cut:])
    test_w = make_windows(holdout_df[CHANNELS].to_numpy())
    test_y = window_labels(holdout_df["fault"].to_numpy())

    scaler = WindowScaler().fit(train_w)
    train_w, val_w, test_w = (scaler.transform(a) for a in (train_w, val_w, test_w))

    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(TensorDataset(torch.from_numpy(train_w)), batch_size=BATCH_SIZE,
                              shuffle=True, drop_last=True, generator=g)
    val_loader = DataLoader(TensorDataset(torch.from_numpy(val_w)), batch_size=256)
    test_loader = DataLoader(TensorDataset(torch.from_numpy(test_w), torch.from_numpy(test_y)),
                             batch_size=256)
    return train_loader, val_loader, test_loader


# ----------------------------------------------------------------------------- model

class ConvAutoencoder(nn.Module):
    def __init__(self, in_ch=len(CHANNELS), latent_dim=LATENT_DIM, window=WINDOW):
        super().__init__()
        self.t_red = window // 8
        self.encoder = nn.Sequential(
            nn.Conv1d(in_ch, 32, 5, stride=2, padding=2), nn.GELU(),
            nn.Conv1d(32, 64, 5, stride=2, padding=2), nn.GELU(),
            nn.Conv1d(64, 64, 5, stride=2, padding=2), nn.GELU(),
            nn.Flatten(),
            nn.Linear(64 * self.t_red, latent_dim),
        )
        self.decoder_fc = nn.Sequential(nn.Linear(latent_dim, 64 * self.t_red), nn.GELU())
        self.decoder = nn.Sequential(
            nn.ConvTranspose1d(64, 64, 4, stride=2, padding=1), nn.GELU(),
            nn.ConvTranspose1d(64, 32, 4, stride=2, padding=1), nn.GELU(),
            nn.ConvTranspose1d(32, in_ch, 4, stride=2, padding=1),
        )

    def forward(self, x):
        z = self.encoder(x)
        h = self.decoder_fc(z).view(x.size(0), 64, self.t_red)
        return self.decoder(h)


def reconstruction_loss(model, batch):
    x = batch[0]
    return nn.functional.mse_loss(model(x), x)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY)


def roc_auc(scores, labels):
    order = np.argsort(scores)
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    pos = labels == 1
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return (ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


@torch.no_grad()
def evaluate(model, val_loader, test_loader):
    model.eval()
    val_sum, val_n = 0.0, 0
    for (x,) in val_loader:
        val_sum += nn.functional.mse_loss(model(x), x, reduction="sum").item() / x[0].numel()
        val_n += x.size(0)
    scores, labels = [], []
    for x, y in test_loader:
        scores.append(((model(x) - x) ** 2).mean(dim=(1, 2)).numpy())
        labels.append(y.numpy())
    model.train()
    return val_sum / val_n, roc_auc(np.concatenate(scores), np.concatenate(labels))


def make_target():
    torch.manual_seed(SEED)
    train_loader, val_loader, test_loader = build_data()
    model = ConvAutoencoder()
    return {
        "model": model,
        "data": train_loader,
        "loss_fn": reconstruction_loss,
        "optimizer": make_optimizer(model.parameters()),
        "make_optimizer": make_optimizer,
        "task": "reconstruction",
        "val_data": val_loader,
        "test_data": test_loader,
    }


def print_summary(model):
    print("GPU available: False, used: False")
    print("TPU available: False, using: 0 TPU cores")
    print("HPU available: False, using: 0 HPUs")
    print()
    rows = [(name, type(mod).__name__, sum(p.numel() for p in mod.parameters()))
            for name, mod in model.named_children()]
    print("  | Name       | Type       | Params | Mode ")
    print("--------------------------------------------------")
    for i, (name, typ, n) in enumerate(rows):
        print(f"{i} | {name:<10} | {typ:<10} | {n / 1e3:>5.1f} K | train")
    print("--------------------------------------------------")
    total = sum(p.numel() for p in model.parameters())
    print(f"{total / 1e3:.1f} K    Trainable params")
    print("0         Non-trainable params")
    print(f"{total / 1e3:.1f} K    Total params")
    print(f"{total * 4 / 1e6:.3f}     Total estimated model params size (MB)")


if __name__ == "__main__":
    t0 = time.time()
    target = make_target()
    model, train_loader, loss_fn = target["model"], target["data"], target["loss_fn"]
    val_loader, test_loader = target["val_data"], target["test_data"]
    optimizer = target["optimizer"]
    steps_per_epoch = len(train_loader)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=LR, total_steps=EPOCHS * steps_per_epoch,
                                                    pct_start=0.15)
    print_summary(model)
    val_loss, val_auc = evaluate(model, val_loader, test_loader)
    print(f"Sanity Checking DataLoader 0: 100%|██████████| 2/2 [00:00<00:00] val_loss={val_loss:.4g}")
    for epoch in range(EPOCHS):
        ep_start = time.time()
        running = 0.0
        for step, batch in enumerate(train_loader):
            loss = loss_fn(model, batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            running += loss.item()
        val_loss, val_auc = evaluate(model, val_loader, test_loader)
        dt = time.time() - ep_start
        print(f"Epoch {epoch}: 100%|██████████| {steps_per_epoch}/{steps_per_epoch} "
              f"[00:{int(dt):02d}<00:00, {steps_per_epoch / dt:.2f}it/s, v_num=0, "
              f"train_loss_step={loss.item():.4g}, val_loss={val_loss:.4g}, val_auroc={val_auc:.3f}, "
              f"train_loss_epoch={running / steps_per_epoch:.4g}]")
    print(f"`Trainer.fit` stopped: `max_epochs={EPOCHS}` reached.")
    print("─" * 60)
    print(f"       Test metric             DataLoader 0")
    print("─" * 60)
    print(f"        test_auroc          {val_auc:.6f}")
    print(f"      val_recon_mse         {val_loss:.6g}")
    print("─" * 60)
    print(f"wall time: {time.time() - t0:.1f}s")
