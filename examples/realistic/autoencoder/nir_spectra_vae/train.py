"""VAE on synthetic NIR absorbance spectra (grain samples).

Each spectrum is a mixture of a few constituent spectra (moisture, protein,
starch, oil) plus a sloped baseline, multiplicative scatter and detector noise.
The VAE is meant to give a compact latent space for downstream calibration
and for flagging odd samples.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

SEED = 0
N_WAVELENGTHS = 256
N_TRAIN = 4000
N_VAL = 800
BATCH_SIZE = 64
EPOCHS = 40
LR = 1e-3
LATENT_DIM = 8
HIDDEN = (256, 128)


# ----------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------
def _constituent_spectra(wl):
    """Absorption band shapes for the pure constituents (arbitrary units)."""
    def band(center, width, height):
        return height * np.exp(-0.5 * ((wl - center) / width) ** 2)

    moisture = band(1450, 40, 1.0) + band(1940, 55, 1.6)
    protein = band(1510, 30, 0.5) + band(2055, 35, 0.7) + band(2180, 30, 0.6)
    starch = band(1580, 45, 0.4) + band(2100, 40, 0.9) + band(2320, 35, 0.5)
    oil = band(1725, 20, 0.6) + band(1760, 22, 0.5) + band(2310, 25, 0.8)
    return np.stack([moisture, protein, starch, oil])  # (4, n_wl)


def generate_spectra(n, rng):
    wl = np.linspace(1100, 2500, N_WAVELENGTHS)
    pure = _constituent_spectra(wl)

    # composition on a simplex-ish scale: moisture 8-16 %, protein 8-18 %, oil 1-6 %
    moisture = rng.uniform(0.08, 0.16, n)
    protein = rng.uniform(0.08, 0.18, n)
    oil = rng.uniform(0.01, 0.06, n)
    starch = 1.0 - moisture - protein - oil
    conc = np.stack([moisture, protein, starch, oil], axis=1)

    absorb = conc @ pure * 4.0
    # baseline offset + slope from particle size / packing
    wl01 = (wl - wl.min()) / (wl.max() - wl.min())
    offset = rng.normal(0.3, 0.05, (n, 1))
    slope = rng.normal(0.15, 0.04, (n, 1))
    scatter = rng.lognormal(0.0, 0.05, (n, 1))
    spectra = scatter * absorb + offset + slope * wl01[None, :]
    spectra += rng.normal(0.0, 0.004, spectra.shape)
    return spectra.astype(np.float32), conc.astype(np.float32)


def build_datasets(seed=SEED):
    rng = np.random.default_rng(seed)
    x_train, _ = generate_spectra(N_TRAIN, rng)
    x_val, _ = generate_spectra(N_VAL, rng)
    # per-wavelength standardisation, fitted on train only
    mean = x_train.mean(axis=0, keepdims=True)
    std = x_train.std(axis=0, keepdims=True) + 1e-6
    x_train = (x_train - mean) / std
    x_val = (x_val - mean) / std
    return TensorDataset(torch.from_numpy(x_train)), TensorDataset(torch.from_numpy(x_val))


def build_loaders(seed=SEED):
    train_ds, val_ds = build_datasets(seed)
    g = torch.Generator().manual_seed(seed)
    train_loader = DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True, generator=g, drop_last=True)
    val_loader = DataLoader(val_ds, batch_size=256, shuffle=False)
    return train_loader, val_loader


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class SpectraVAE(nn.Module):
    def __init__(self, n_in=N_WAVELENGTHS, hidden=HIDDEN, latent_dim=LATENT_DIM):
        super().__init__()
        h1, h2 = hidden
        self.encoder = nn.Sequential(
            nn.Linear(n_in, h1), nn.SiLU(),
            nn.Linear(h1, h2), nn.SiLU(),
        )
        self.fc_mu = nn.Linear(h2, latent_dim)
        self.fc_logvar = nn.Linear(h2, latent_dim)
        self.decoder = nn.Sequential(
            nn.Linear(latent_dim, h2), nn.SiLU(),
            nn.Linear(h2, h1), nn.SiLU(),
            nn.Linear(h1, n_in),
        )

    def encode(self, x):
        h = self.encoder(x)
        return self.fc_mu(h), self.fc_logvar(h)

    def reparameterize(self, mu, logvar):
        if self.training:
            std = torch.exp(0.5 * logvar)
            return mu + std * torch.randn_like(std)
        return mu

    def forward(self, x):
        mu, logvar = self.encode(x)
        z = self.reparameterize(mu, logvar)
        return self.decoder(z), mu, logvar


def vae_loss(recon, x, mu, logvar):
    """Gaussian-decoder ELBO: reconstruction + KL(q(z|x) || N(0, I))."""
    recon_loss = F.mse_loss(recon, x)
    kl = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp(), dim=1).mean()
    return recon_loss + kl, recon_loss, kl


def loss_fn(model, batch):
    (x,) = batch
    recon, mu, logvar = model(x)
    loss, _, _ = vae_loss(recon, x, mu, logvar)
    return loss


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR)


def make_target():
    torch.manual_seed(SEED)
    train_loader, _ = build_loaders()
    batches = []
    for i, batch in enumerate(train_loader):
        batches.append(batch)
        if i == 5:
            break
    return {
        "model": SpectraVAE(),
        "data": batches,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "task": "regression",
    }


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    sq_err, kl_sum, n = 0.0, 0.0, 0
    active = None
    for (x,) in loader:
        recon, mu, logvar = model(x)
        sq_err += F.mse_loss(recon, x, reduction="sum").item()
        kl_per_dim = -0.5 * (1 + logvar - mu.pow(2) - logvar.exp())
        kl_sum += kl_per_dim.sum().item()
        a = kl_per_dim.sum(0)
        active = a if active is None else active + a
        n += x.shape[0]
    model.train()
    active_units = int(((active / n) > 0.01).sum().item())
    return sq_err / (n * N_WAVELENGTHS), kl_sum / n, active_units


def main():
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    train_loader, val_loader = build_loaders()
    model = SpectraVAE()
    optimizer = make_optimizer(model.parameters())
    n_params = sum(p.numel() for p in model.parameters())
    print(f"SpectraVAE | params: {n_params:,} | train: {N_TRAIN} | val: {N_VAL} | latent: {LATENT_DIM}")

    steps_per_epoch = len(train_loader)
    for epoch in range(1, EPOCHS + 1):
        t0 = time.time()
        model.train()
        tot, tot_rec, tot_kl = 0.0, 0.0, 0.0
        for batch in train_loader:
            (x,) = batch
            recon, mu, logvar = model(x)
            loss, rec, kl = vae_loss(recon, x, mu, logvar)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            tot += loss.item()
            tot_rec += rec.item()
            tot_kl += kl.item()
        val_mse, val_kl, active = evaluate(model, val_loader)
        dt = time.time() - t0
        print(
            f"Epoch {epoch}/{EPOCHS} - {steps_per_epoch}/{steps_per_epoch} - {dt:.1f}s"
            f" - loss: {tot / steps_per_epoch:.4f} - recon: {tot_rec / steps_per_epoch:.4f}"
            f" - kl: {tot_kl / steps_per_epoch:.4f} - val_mse: {val_mse:.4f}"
            f" - val_kl: {val_kl:.4f} - active_units: {active}"
        )


if __name__ == "__main__":
    main()
