"""Denoising conv autoencoder for single-lead ECG beats.

The paired dataset (noisy recording segment, clean reference beat) is produced by the
signal-simulation step and cached as beats.npz next to this script.
"""
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

SEED = 7
FS = 250
WIN = 256
N_BEATS = 4000
VAL_FRAC = 0.2
BATCH_SIZE = 64
EPOCHS = 8
LR = 2e-3
DATA_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "beats.npz")

torch.set_num_threads(1)
torch.manual_seed(SEED)
rng = np.random.default_rng(SEED)


def _gauss(t, mu, sigma, amp):
    return amp * np.exp(-0.5 * ((t - mu) / sigma) ** 2)


def simulate_beats(n, seed=SEED):
    """Clean beats centred on the R peak plus realistic ambulatory noise."""
    g = np.random.default_rng(seed)
    t = (np.arange(WIN) - WIN // 2) / FS  # seconds, R peak at 0
    clean = np.zeros((n, WIN), dtype=np.float32)
    noisy = np.zeros((n, WIN), dtype=np.float32)
    n_patients = 60
    morph = g.normal(size=(n_patients, 10))
    for i in range(n):
        p = g.integers(n_patients)
        m = morph[p]
        rr = np.clip(0.8 + 0.12 * m[0] + 0.05 * g.normal(), 0.45, 1.3)
        beat = np.zeros(WIN)
        for shift in (-rr, 0.0, rr):
            tt = t - shift
            beat += _gauss(tt, -0.20 + 0.02 * m[1], 0.025, 0.15 + 0.05 * m[2])        # P
            beat += _gauss(tt, -0.035, 0.010, -0.12 + 0.04 * m[3])                      # Q
            beat += _gauss(tt, 0.0, 0.011 + 0.002 * m[4], 1.1 + 0.25 * m[5])            # R
            beat += _gauss(tt, 0.035, 0.012, -0.25 + 0.08 * m[6])                       # S
            beat += _gauss(tt, 0.26 + 0.03 * m[7], 0.045 + 0.008 * abs(m[8]), 0.3 + 0.1 * m[9])  # T
        beat *= np.exp(0.1 * g.normal())
        wander = g.uniform(0.1, 0.5) * np.sin(2 * np.pi * g.uniform(0.15, 0.5) * t + g.uniform(0, 2 * np.pi))
        emg = g.uniform(0.03, 0.15) * g.normal(size=WIN)
        mains = g.uniform(0.0, 0.15) * np.sin(2 * np.pi * 50 * t + g.uniform(0, 2 * np.pi))
        spike = np.zeros(WIN)
        if g.random() < 0.2:
            c = g.integers(WIN)
            spike = _gauss(np.arange(WIN), c, g.uniform(3, 12), g.normal(0, 0.6))
        clean[i] = beat
        noisy[i] = beat + wander + emg + mains + spike
    return noisy, clean


def load_pairs(path=DATA_PATH):
    if not os.path.exists(path):
        noisy, clean = simulate_beats(N_BEATS)
        np.savez(path, noisy=noisy, clean=clean)
    d = np.load(path)
    return d["noisy"], d["clean"]


def train_val_split(arr, val_frac=VAL_FRAC):
    idx = rng.permutation(len(arr))
    n_val = int(len(arr) * val_frac)
    return arr[idx[n_val:]], arr[idx[:n_val]]


def build_loaders():
    noisy, clean = load_pairs()
    noisy_tr, noisy_va = train_val_split(noisy)
    clean_tr, clean_va = train_val_split(clean)
    train_ds = TensorDataset(torch.from_numpy(noisy_tr).unsqueeze(1), torch.from_numpy(clean_tr).unsqueeze(1))
    val_ds = TensorDataset(torch.from_numpy(noisy_va).unsqueeze(1), torch.from_numpy(clean_va).unsqueeze(1))
    g = torch.Generator().manual_seed(SEED)
    train_dl = DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True, generator=g, drop_last=True)
    val_dl = DataLoader(val_ds, batch_size=256)
    return train_dl, val_dl


class DenoisingConvAE(nn.Module):
    def __init__(self, ch=(16, 32, 64)):
        super().__init__()
        c1, c2, c3 = ch
        self.encoder = nn.Sequential(
            nn.Conv1d(1, c1, 9, stride=2, padding=4), nn.GELU(),
            nn.Conv1d(c1, c2, 7, stride=2, padding=3), nn.GELU(),
            nn.Conv1d(c2, c3, 5, stride=2, padding=2), nn.GELU(),
        )
        self.decoder = nn.Sequential(
            nn.ConvTranspose1d(c3, c2, 4, stride=2, padding=1), nn.GELU(),
            nn.ConvTranspose1d(c2, c1, 4, stride=2, padding=1), nn.GELU(),
            nn.ConvTranspose1d(c1, c1, 4, stride=2, padding=1), nn.GELU(),
            nn.Conv1d(c1, 1, 9, padding=4),
        )

    def forward(self, x):
        return self.decoder(self.encoder(x))


def loss_fn(model, batch):
    noisy, clean = batch
    return F.mse_loss(model(noisy), clean)


def make_target():
    train_dl, val_dl = build_loaders()
    model = DenoisingConvAE()
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    return {
        "model": model,
        "data": train_dl,
        "val_data": val_dl,
        "loss_fn": loss_fn,
        "optimizer": optimizer,
        "task": "regression",
    }


@torch.no_grad()
def evaluate(model, dl):
    model.eval()
    tot, n, snr_out = 0.0, 0, []
    for noisy, clean in dl:
        out = model(noisy)
        tot += F.mse_loss(out, clean, reduction="sum").item()
        n += clean.numel()
        err = ((out - clean) ** 2).sum(dim=(1, 2))
        sig = (clean ** 2).sum(dim=(1, 2))
        snr_out.append(10 * torch.log10(sig / err))
    model.train()
    return tot / n, torch.cat(snr_out).mean().item()


def main():
    t0 = time.time()
    target = make_target()
    model, train_dl, val_dl = target["model"], target["data"], target["val_data"]
    optimizer = target["optimizer"]
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=EPOCHS * len(train_dl))
    steps = len(train_dl)
    print(f"Train on {len(train_dl.dataset)} samples, validate on {len(val_dl.dataset)} samples")
    for epoch in range(1, EPOCHS + 1):
        te = time.time()
        model.train()
        running = 0.0
        for batch in train_dl:
            loss = loss_fn(model, batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            running += loss.item()
        val_loss, val_snr = evaluate(model, val_dl)
        dt = time.time() - te
        print(f"Epoch {epoch}/{EPOCHS}")
        print(f"{steps}/{steps} - {dt:.0f}s - {1000 * dt / steps:.0f}ms/step - loss: {running / steps:.4f} "
              f"- val_loss: {val_loss:.4f} - val_snr_db: {val_snr:.2f}")
    print(f"Finished in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
