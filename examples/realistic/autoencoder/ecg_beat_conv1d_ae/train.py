"""1-D convolutional autoencoder on single-lead ECG beats.

Beats are 128-sample windows (250 Hz, ~0.5 s) centred on the R peak, taken from
a synthetic Holter export. The latent code is later used for beat clustering,
so we only care about reconstruction quality here.
"""
import os
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)

BEAT_LEN = 128
FS = 250.0
batch_size = 64
max_iters = 600
eval_interval = 100
log_interval = 50
learning_rate = 2e-3
min_lr = 2e-4
warmup_iters = 50
latent_dim = 16
seed = 1337
DATA_CSV = os.path.join(os.path.dirname(os.path.abspath(__file__)), "holter_beats.csv")


def gaussian(t, mu, sigma, amp):
    return amp * np.exp(-0.5 * ((t - mu) / sigma) ** 2)


def synth_beats(n, rng):
    t = (np.arange(BEAT_LEN) - BEAT_LEN // 2) / FS
    rows = []
    for i in range(n):
        patient = rng.integers(0, 40)
        rr = rng.uniform(0.6, 1.2)
        qrs_w = rng.uniform(0.008, 0.016)
        beat = (
            gaussian(t, -0.16 * rr, rng.uniform(0.015, 0.03), rng.uniform(0.08, 0.25))
            + gaussian(t, -0.025, qrs_w, -rng.uniform(0.05, 0.2))
            + gaussian(t, 0.0, qrs_w, rng.uniform(0.8, 1.6))
            + gaussian(t, 0.03, qrs_w * 1.2, -rng.uniform(0.1, 0.4))
            + gaussian(t, 0.18 * rr + 0.05, rng.uniform(0.03, 0.05), rng.uniform(0.15, 0.45))
        )
        wander = rng.uniform(-0.15, 0.15) + rng.uniform(-0.3, 0.3) * t
        beat = beat + wander + rng.normal(0, 0.02, BEAT_LEN)
        rows.append([patient, rr] + beat.tolist())
    cols = ["patient_id", "rr_s"] + [f"s{j:03d}" for j in range(BEAT_LEN)]
    return pd.DataFrame(rows, columns=cols)


def load_beats():
    if not os.path.exists(DATA_CSV):
        synth_beats(6000, np.random.default_rng(seed)).to_csv(DATA_CSV, index=False)
    df = pd.read_csv(DATA_CSV)
    sig_cols = [c for c in df.columns if c.startswith("s")]
    val_mask = df["patient_id"] >= 34
    train = df.loc[~val_mask, sig_cols].to_numpy(np.float32)
    val = df.loc[val_mask, sig_cols].to_numpy(np.float32)
    mu, sd = train.mean(), train.std()
    return (train - mu) / sd, (val - mu) / sd


class BeatAE(nn.Module):
    def __init__(self, latent_dim=16, ch=16):
        super().__init__()
        self.enc = nn.Sequential(
            nn.Conv1d(1, ch, 7, stride=2, padding=3), nn.GELU(),
            nn.Conv1d(ch, 2 * ch, 5, stride=2, padding=2), nn.GELU(),
            nn.Conv1d(2 * ch, 2 * ch, 5, stride=2, padding=2), nn.GELU(),
            nn.Flatten(),
            nn.Linear(2 * ch * BEAT_LEN // 8, latent_dim),
        )
        self.dec_fc = nn.Linear(latent_dim, 2 * ch * BEAT_LEN // 8)
        self.dec = nn.Sequential(
            nn.GELU(),
            nn.ConvTranspose1d(2 * ch, 2 * ch, 4, stride=2, padding=1), nn.GELU(),
            nn.ConvTranspose1d(2 * ch, ch, 4, stride=2, padding=1), nn.GELU(),
            nn.ConvTranspose1d(ch, 1, 4, stride=2, padding=1),
        )
        self.ch = ch

    def encode(self, x):
        return self.enc(x.unsqueeze(1))

    def decode(self, z):
        h = self.dec_fc(z).view(z.shape[0], 2 * self.ch, BEAT_LEN // 8)
        return self.dec(h)

    def forward(self, x):
        return self.decode(self.encode(x))


def loss_fn(model, batch):
    (x,) = batch
    recon = model(x)
    return torch.mean((recon - x) ** 2)


def get_lr(it):
    if it < warmup_iters:
        return learning_rate * (it + 1) / warmup_iters
    ratio = (it - warmup_iters) / (max_iters - warmup_iters)
    return min_lr + 0.5 * (1.0 + np.cos(np.pi * ratio)) * (learning_rate - min_lr)


def make_target():
    torch.manual_seed(seed)
    train, val = load_beats()
    train_dl = DataLoader(TensorDataset(torch.from_numpy(train)), batch_size=batch_size, shuffle=True, drop_last=True)
    val_dl = DataLoader(TensorDataset(torch.from_numpy(val)), batch_size=256, shuffle=False)
    model = BeatAE(latent_dim)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=1e-4)
    return dict(model=model, data=train_dl, val_data=val_dl, loss_fn=loss_fn,
                optimizer=optimizer, task="reconstruction")


@torch.no_grad()
def estimate_val_loss(model, val_dl):
    model.eval()
    losses = [loss_fn(model, b).item() for b in val_dl]
    model.train()
    return float(np.mean(losses))


def main():
    t = make_target()
    model, train_dl, val_dl, optimizer = t["model"], t["data"], t["val_data"], t["optimizer"]
    print(f"train beats: {len(train_dl.dataset)}, val beats: {len(val_dl.dataset)}, "
          f"params: {sum(p.numel() for p in model.parameters()) / 1e3:.1f}K")
    it = 0
    t0 = time.time()
    while it < max_iters:
        for batch in train_dl:
            lr = get_lr(it)
            for g in optimizer.param_groups:
                g["lr"] = lr
            if it % eval_interval == 0:
                print(f"step {it}: val loss {estimate_val_loss(model, val_dl):.4f}")
            loss = loss_fn(model, batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            if it % log_interval == 0:
                dt = time.time() - t0
                t0 = time.time()
                print(f"iter {it}: loss {loss.item():.4f}, lr {lr:.2e}, time {1000 * dt / max(1, log_interval if it else 1):.1f}ms")
            it += 1
            if it >= max_iters:
                break
    print(f"step {it}: val loss {estimate_val_loss(model, val_dl):.4f}")


if __name__ == "__main__":
    main()
