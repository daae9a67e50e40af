"""VAE on half-hourly feeder load profiles (48 points/day).

Gaussian decoder (sum of squared errors), analytic KL with a linear beta warm-up,
Lightning-like progress bar lines.
"""
import math
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

SEED = 11
N_POINTS = 48
LATENT = 6
BATCH = 64
EPOCHS = 40
LR = 2e-3
KL_WARMUP_EPOCHS = 10
LOGVAR_MIN, LOGVAR_MAX = -6.0, 4.0


def make_profiles(n, rng):
    t = np.linspace(0, 24, N_POINTS, endpoint=False)
    base = rng.uniform(0.2, 0.6, size=(n, 1))
    morning_amp = rng.uniform(0.0, 0.8, size=(n, 1))
    morning_t = rng.normal(7.5, 0.8, size=(n, 1))
    evening_amp = rng.uniform(0.3, 1.2, size=(n, 1))
    evening_t = rng.normal(19.0, 1.0, size=(n, 1))
    midday_solar = rng.uniform(0.0, 0.5, size=(n, 1)) * (rng.random((n, 1)) < 0.4)
    x = (base
         + morning_amp * np.exp(-0.5 * ((t - morning_t) / 1.2) ** 2)
         + evening_amp * np.exp(-0.5 * ((t - evening_t) / 1.8) ** 2)
         - midday_solar * np.exp(-0.5 * ((t - 13.0) / 2.5) ** 2))
    x = x + rng.normal(0, 0.04, size=x.shape)
    return x.astype(np.float32)


def build_data():
    rng = np.random.default_rng(SEED)
    x = make_profiles(9000, rng)
    x_train, x_val = x[:8000], x[8000:]
    mean, std = x_train.mean(0, keepdims=True), x_train.std(0, keepdims=True)
    x_train = (x_train - mean) / std
    x_val = (x_val - mean) / std
    return torch.from_numpy(x_train), torch.from_numpy(x_val)


class ProfileVAE(nn.Module):
    def __init__(self, d_in=N_POINTS, hidden=192, latent=LATENT):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(d_in, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU())
        self.to_mu = nn.Linear(hidden, latent)
        self.to_logvar = nn.Linear(hidden, latent)
        self.decoder = nn.Sequential(nn.Linear(latent, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(),
                                     nn.Linear(hidden, d_in))

    def encode(self, x):
        h = self.encoder(x)
        mu = self.to_mu(h)
        logvar = self.to_logvar(h).clamp(LOGVAR_MIN, LOGVAR_MAX)
        return mu, logvar

    def forward(self, x):
        mu, logvar = self.encode(x)
        if self.training:
            z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        else:
            z = mu
        return self.decoder(z), mu, logvar


def kl_beta(step, steps_per_epoch):
    warmup_steps = KL_WARMUP_EPOCHS * steps_per_epoch
    return min(1.0, step / warmup_steps)


def vae_terms(model, x):
    x_hat, mu, logvar = model(x)
    recon = F.mse_loss(x_hat, x, reduction="none").sum(dim=1).mean()
    kl = (-0.5 * (1 + logvar - mu.pow(2) - logvar.exp())).sum(dim=1).mean()
    return recon, kl


def loss_fn(model, batch, beta=1.0):
    (x,) = batch
    recon, kl = vae_terms(model, x)
    return recon + beta * kl


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR)


def make_target():
    torch.manual_seed(SEED)
    x_train, _ = build_data()
    loader = DataLoader(TensorDataset(x_train), batch_size=BATCH, shuffle=True,
                        generator=torch.Generator().manual_seed(SEED))
    it = iter(loader)
    data = [next(it) for _ in range(3)]
    model = ProfileVAE()
    return {
        "model": model,
        "batch": data[0],
        "data": data,
        "loss_fn": loss_fn,
        "optimizer": make_optimizer(model.parameters()),
        "make_optimizer": make_optimizer,
        "task": "regression",
    }


def print_summary(model):
    print("GPU available: False, used: False")
    print("TPU available: False, using: 0 TPU cores")
    print()
    print("  | Name      | Type       | Params")
    print("-----------------------------------------")
    for i, (name, mod) in enumerate(model.named_children()):
        n = sum(p.numel() for p in mod.parameters())
        print(f"{i} | {name:<9} | {type(mod).__name__:<10} | {n / 1e3:.1f} K")
    print("-----------------------------------------")
    total = sum(p.numel() for p in model.parameters())
    print(f"{total / 1e3:.1f} K     Trainable params")


def bar(n, total, width=10):
    filled = int(width * n / total)
    return "\u2588" * filled + " " * (width - filled)


@torch.no_grad()
def validate(model, x_val):
    model.eval()
    recon, kl = vae_terms(model, x_val)
    model.train()
    return (recon + kl).item(), recon.item(), kl.item()


def main():
    torch.manual_seed(SEED)
    x_train, x_val = build_data()
    loader = DataLoader(TensorDataset(x_train), batch_size=BATCH, shuffle=True,
                        generator=torch.Generator().manual_seed(SEED))
    model = ProfileVAE()
    optimizer = make_optimizer(model.parameters())
    print_summary(model)
    steps_per_epoch = len(loader)
    step = 0
    val_loss = float("nan")
    for epoch in range(EPOCHS):
        model.train()
        t_start = time.time()
        tot = rec_sum = kl_sum = 0.0
        for i, batch in enumerate(loader):
            beta = kl_beta(step, steps_per_epoch)
            (x,) = batch
            recon, kl = vae_terms(model, x)
            loss = recon + beta * kl
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            tot += loss.item()
            rec_sum += recon.item()
            kl_sum += kl.item()
        n = steps_per_epoch
        val_loss, val_rec, val_kl = validate(model, x_val)
        elapsed = time.time() - t_start
        its = n / max(elapsed, 1e-6)
        mm, ss = divmod(int(elapsed), 60)
        print(f"Epoch {epoch}: 100%|{bar(n, n)}| {n}/{n} [{mm:02d}:{ss:02d}<00:00, {its:.2f}it/s, v_num=0, "
              f"train_loss={tot / n:.3f}, recon={rec_sum / n:.3f}, kl={kl_sum / n:.3f}, beta={beta:.3f}, "
              f"val_loss={val_loss:.3f}, val_recon={val_rec:.3f}]")
        sys.stdout.flush()
    print(f"`Trainer.fit` stopped: `max_epochs={EPOCHS}` reached.")


if __name__ == "__main__":
    main()
