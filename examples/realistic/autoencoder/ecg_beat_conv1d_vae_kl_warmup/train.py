"""Conv1d VAE on single-lead ECG beats (R-peak aligned, 128 samples @ 250 Hz).

The encoder is meant as a compact beat descriptor for downstream rhythm
analysis. KL is switched on after a short pure-reconstruction phase and warmed up
linearly to avoid posterior collapse; validation always reports the full (beta = 1) negative
ELBO so numbers are comparable across the run.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

# config
seed = 11
beat_len = 128
n_train, n_val = 4000, 800
batch_size = 64
max_iters = 1400
kl_start_iter = 300   # pure autoencoder phase first, then ramp beta 0 -> 1
kl_ramp_iters = 600
eval_interval = 100
log_interval = 50
learning_rate = 2e-3
min_lr = 2e-4
latent_dim = 8
obs_sigma = 0.1   # fixed decoder std (mV) of the Gaussian likelihood


# ----------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------
def gauss(t, mu, w, a):
    return a * np.exp(-0.5 * ((t - mu) / w) ** 2)


def synth_beats(n, rng):
    """Synthetic stand-in for segmented beats: P-QRS-T waves with patient variability, PVCs, baseline wander and noise."""
    t = np.linspace(-0.25, 0.262, beat_len)   # seconds around R peak
    beats = np.zeros((n, beat_len), dtype=np.float32)
    for i in range(n):
        hr_scale = rng.uniform(0.85, 1.15)
        amp = rng.uniform(0.7, 1.4)
        if rng.random() < 0.12:   # premature ventricular contraction: wide QRS, no P, inverted T
            x = gauss(t, 0.0, 0.03 * rng.uniform(0.8, 1.3), 1.3 * amp) \
                + gauss(t, 0.05, 0.03, -0.5 * amp) \
                + gauss(t, 0.19 * hr_scale, 0.05, -0.35 * amp)
        else:
            x = gauss(t, -0.16 * hr_scale, 0.02, rng.uniform(0.08, 0.2)) \
                + gauss(t, -0.02, 0.008, -0.12 * amp) \
                + gauss(t, 0.0, 0.011 * rng.uniform(0.85, 1.2), amp) \
                + gauss(t, 0.022, 0.009, -0.22 * amp) \
                + gauss(t, 0.2 * hr_scale, 0.04 * rng.uniform(0.8, 1.2), rng.uniform(0.15, 0.4) * np.sign(rng.random() - 0.1))
        wander = rng.normal(0, 0.08) + rng.normal(0, 0.1) * t
        x = x + wander + rng.normal(0, 0.03, beat_len)
        beats[i] = x
    return beats


def build_data():
    rng = np.random.default_rng(seed)
    tr = torch.from_numpy(synth_beats(n_train, rng)).unsqueeze(1)
    va = torch.from_numpy(synth_beats(n_val, rng)).unsqueeze(1)
    g = torch.Generator().manual_seed(seed)
    train_dl = DataLoader(TensorDataset(tr), batch_size=batch_size, shuffle=True, drop_last=True, generator=g)
    return train_dl, va


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class BeatVAE(nn.Module):
    def __init__(self, latent=latent_dim):
        super().__init__()
        self.enc = nn.Sequential(
            nn.Conv1d(1, 16, 7, 2, 3), nn.GELU(),     # 64
            nn.Conv1d(16, 32, 5, 2, 2), nn.GELU(),    # 32
            nn.Conv1d(32, 32, 5, 2, 2), nn.GELU(),    # 16
            nn.Flatten(),
        )
        self.to_stats = nn.Linear(32 * 16, 2 * latent)
        self.from_z = nn.Linear(latent, 32 * 16)
        self.dec = nn.Sequential(
            nn.GELU(),
            nn.ConvTranspose1d(32, 32, 4, 2, 1), nn.GELU(),   # 32
            nn.ConvTranspose1d(32, 16, 4, 2, 1), nn.GELU(),   # 64
            nn.ConvTranspose1d(16, 16, 4, 2, 1), nn.GELU(),   # 128
            nn.Conv1d(16, 1, 5, 1, 2),
        )

    def forward(self, x):
        mu, logvar = self.to_stats(self.enc(x)).chunk(2, dim=-1)
        z = mu + torch.exp(0.5 * logvar) * torch.randn_like(mu)
        xhat = self.dec(self.from_z(z).view(-1, 32, 16))
        return xhat, mu, logvar


def vae_terms(model, x):
    xhat, mu, logvar = model(x)
    recon = 0.5 * ((xhat - x) ** 2).sum(dim=(1, 2)) / obs_sigma ** 2
    kl = -0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).sum(dim=1)
    return recon.mean(), kl.mean(), F.mse_loss(xhat, x)


def kl_beta(it):
    return min(1.0, max(0.0, (it - kl_start_iter) / kl_ramp_iters))


def loss_fn(model, batch, it=max_iters):
    (x,) = batch
    recon, kl, _ = vae_terms(model, x)
    return recon + kl_beta(it) * kl


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=learning_rate, weight_decay=0.0)


def get_lr(it):
    # linear warmup then cosine decay to min_lr
    warm = 50
    if it < warm:
        return learning_rate * (it + 1) / warm
    ratio = (it - warm) / max(1, max_iters - warm)
    return min_lr + 0.5 * (1 + math.cos(math.pi * ratio)) * (learning_rate - min_lr)


@torch.no_grad()
def estimate_val(model, va):
    model.eval()
    recon, kl, mse = vae_terms(model, va)
    model.train()
    return (recon + kl).item(), kl.item(), mse.item()


def make_target():
    torch.manual_seed(seed)
    train_dl, _ = build_data()
    data = []
    for i, b in enumerate(train_dl):
        data.append(b)
        if i == 3:
            break
    return {"model": BeatVAE(), "data": data, "loss_fn": loss_fn,
            "make_optimizer": make_optimizer, "task": "regression"}


def main():
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    t0 = time.time()
    train_dl, va = build_data()
    model = BeatVAE()
    print(f"number of parameters: {sum(p.numel() for p in model.parameters()) / 1e3:.1f}K")
    opt = make_optimizer(model.parameters())
    it = 0
    tl = time.time()
    data_iter = iter(train_dl)
    while it <= max_iters:
        lr = get_lr(it)
        for gp in opt.param_groups:
            gp["lr"] = lr
        if it % eval_interval == 0:
            v_nelbo, v_kl, v_mse = estimate_val(model, va)
            print(f"step {it}: val nelbo {v_nelbo:.2f}, val kl {v_kl:.2f}, val mse {v_mse:.5f}")
        if it == max_iters:
            break
        try:
            batch = next(data_iter)
        except StopIteration:
            data_iter = iter(train_dl)
            batch = next(data_iter)
        (x,) = batch
        recon, kl, _ = vae_terms(model, x)
        beta = kl_beta(it)
        loss = recon + beta * kl
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
        if it % log_interval == 0:
            dt = (time.time() - tl) * 1000 / (log_interval if it else 1)
            tl = time.time()
            print(f"iter {it}: loss {loss.item():.2f}, recon {recon.item():.2f}, kl {kl.item():.2f}, "
                  f"beta {beta:.2f}, lr {lr:.2e}, time {dt:.1f}ms")
        it += 1
    print(f"done in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
