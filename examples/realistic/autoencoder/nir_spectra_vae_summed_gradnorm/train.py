"""VAE on near-infrared absorbance spectra (1024 wavelength bins).

Synthetic stand-in for the feed-mill NIR dataset: each spectrum is a
non-negative mixture of a few pure-component bands (moisture, protein,
fat, starch, fibre) plus a sloping scatter baseline and detector noise.
Reconstruction is a Gaussian log-likelihood with fixed sigma, summed over
the wavelength bins and averaged over the batch (the usual VAE ELBO).
Keras-style progress lines.
"""
import argparse
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIG = dict(
    n_bins=1024,
    n_train=3072,
    n_val=512,
    batch_size=64,
    epochs=20,
    lr=1e-3,
    weight_decay=0.0,
    latent_dim=8,
    hidden=(512, 256),
    kl_warmup_epochs=6,
    obs_sigma=1.0,
    seed=1234,
)


def parse_args(argv=None):
    p = argparse.ArgumentParser()
    for k, v in CONFIG.items():
        if isinstance(v, tuple):
            continue
        p.add_argument(f"--{k}", type=type(v), default=v)
    a = p.parse_args(argv)
    cfg = dict(CONFIG)
    cfg.update(vars(a))
    return cfg


def pure_components(n_bins, rng):
    wl = np.linspace(1100, 2500, n_bins)
    bands = {
        "moisture": [(1450, 40, 0.8), (1940, 50, 1.0)],
        "protein": [(1510, 35, 0.4), (2050, 45, 0.6), (2180, 30, 0.5)],
        "fat": [(1210, 25, 0.4), (1730, 30, 0.7), (2310, 25, 0.8)],
        "starch": [(1580, 60, 0.3), (2100, 40, 0.7)],
        "fibre": [(1360, 50, 0.3), (2270, 35, 0.5)],
    }
    comps = []
    for name, peaks in bands.items():
        s = np.zeros_like(wl)
        for c, w, a in peaks:
            s += a * np.exp(-0.5 * ((wl - c) / w) ** 2)
        comps.append(s)
    return wl, np.stack(comps).astype(np.float32)


def make_spectra(n, n_bins, seed):
    rng = np.random.default_rng(seed)
    wl, comps = pure_components(n_bins, rng)
    conc = rng.dirichlet(np.ones(len(comps)) * 2.0, size=n).astype(np.float32)
    conc *= rng.uniform(0.7, 1.3, size=(n, 1)).astype(np.float32)
    x = conc @ comps
    # multiplicative scatter + sloped baseline
    t = (wl - wl.min()) / (wl.max() - wl.min())
    offset = rng.normal(0.1, 0.03, size=(n, 1))
    slope = rng.normal(0.15, 0.05, size=(n, 1))
    x = x * rng.uniform(0.9, 1.1, size=(n, 1)) + offset + slope * t[None, :]
    x += rng.normal(0, 0.01, size=x.shape)
    return torch.tensor(x, dtype=torch.float32)


def build_datasets(cfg):
    x = make_spectra(cfg["n_train"] + cfg["n_val"], cfg["n_bins"], cfg["seed"])
    # SNV-free pipeline: just centre and scale with train statistics
    tr, va = x[: cfg["n_train"]], x[cfg["n_train"]:]
    mean, std = tr.mean(0, keepdim=True), tr.std(0, keepdim=True)
    return (tr - mean) / std, (va - mean) / std


class SpectraVAE(nn.Module):
    def __init__(self, n_bins, hidden, latent_dim):
        super().__init__()
        h1, h2 = hidden
        self.enc = nn.Sequential(
            nn.Linear(n_bins, h1), nn.GELU(),
            nn.Linear(h1, h2), nn.GELU(),
        )
        self.fc_mu = nn.Linear(h2, latent_dim)
        self.fc_logvar = nn.Linear(h2, latent_dim)
        self.dec = nn.Sequential(
            nn.Linear(latent_dim, h2), nn.GELU(),
            nn.Linear(h2, h1), nn.GELU(),
            nn.Linear(h1, n_bins),
        )

    def encode(self, x):
        h = self.enc(x)
        return self.fc_mu(h), self.fc_logvar(h)

    def forward(self, x):
        mu, logvar = self.encode(x)
        std = torch.exp(0.5 * logvar)
        z = mu + std * torch.randn_like(std)
        return self.dec(z), mu, logvar


def elbo_terms(model, x, sigma):
    x_hat, mu, logvar = model(x)
    recon = 0.5 * ((x_hat - x) / sigma).pow(2).sum(dim=1).mean()
    kl = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp(), dim=1).mean()
    return recon, kl


def kl_weight(step, steps_per_epoch, warmup_epochs):
    if warmup_epochs <= 0:
        return 1.0
    return min(1.0, step / (warmup_epochs * steps_per_epoch))


def global_grad_norm(params):
    norms = [p.grad.detach().norm(2) for p in params if p.grad is not None]
    return torch.norm(torch.stack(norms), 2).item()


def make_target():
    cfg = parse_args([])
    torch.manual_seed(cfg["seed"])
    train_x, _ = build_datasets(cfg)
    model = SpectraVAE(cfg["n_bins"], cfg["hidden"], cfg["latent_dim"])
    bs = cfg["batch_size"]
    data = [train_x[i * bs:(i + 1) * bs] for i in range(4)]

    def loss_fn(m, batch):
        recon, kl = elbo_terms(m, batch, cfg["obs_sigma"])
        return recon + kl  # beta = 1 once the warmup is over

    return {
        "model": model,
        "batch": data[0],
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": lambda params: torch.optim.Adam(
            params, lr=cfg["lr"], weight_decay=cfg["weight_decay"]),
        "task": "regression",
    }


@torch.no_grad()
def evaluate(model, val_x, cfg):
    model.eval()
    r_tot, k_tot, mse_tot = 0.0, 0.0, 0.0
    for i in range(0, len(val_x), cfg["batch_size"]):
        xb = val_x[i:i + cfg["batch_size"]]
        mu, _ = model.encode(xb)
        x_hat = model.dec(mu)
        recon, kl = elbo_terms(model, xb, cfg["obs_sigma"])
        r_tot += recon.item() * len(xb)
        k_tot += kl.item() * len(xb)
        mse_tot += F.mse_loss(x_hat, xb, reduction="sum").item()
    n = len(val_x)
    model.train()
    return r_tot / n, k_tot / n, mse_tot / (n * val_x.shape[1])


def main():
    cfg = parse_args()
    torch.manual_seed(cfg["seed"])
    train_x, val_x = build_datasets(cfg)
    model = SpectraVAE(cfg["n_bins"], cfg["hidden"], cfg["latent_dim"])
    opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"], weight_decay=cfg["weight_decay"])
    params = [p for p in model.parameters() if p.requires_grad]
    print(f"Train on {len(train_x)} samples, validate on {len(val_x)} samples "
          f"({cfg['n_bins']} bins, latent={cfg['latent_dim']})")

    bs = cfg["batch_size"]
    steps_per_epoch = math.ceil(len(train_x) / bs)
    step = 0
    for epoch in range(1, cfg["epochs"] + 1):
        t0 = time.time()
        perm = torch.randperm(len(train_x))
        tot, rec_sum, kl_sum, gn_sum, gn_max = 0.0, 0.0, 0.0, 0.0, 0.0
        for b in range(steps_per_epoch):
            xb = train_x[perm[b * bs:(b + 1) * bs]]
            beta = kl_weight(step, steps_per_epoch, cfg["kl_warmup_epochs"])
            recon, kl = elbo_terms(model, xb, cfg["obs_sigma"])
            loss = recon + beta * kl
            opt.zero_grad(set_to_none=True)
            loss.backward()
            gn = global_grad_norm(params)
            opt.step()
            step += 1
            tot += loss.item()
            rec_sum += recon.item()
            kl_sum += kl.item()
            gn_sum += gn
            gn_max = max(gn_max, gn)
        n = steps_per_epoch
        v_rec, v_kl, v_mse = evaluate(model, val_x, cfg)
        dt = time.time() - t0
        print(f"Epoch {epoch}/{cfg['epochs']}")
        print(f"{n}/{n} - {dt:.0f}s {1000*dt/n:.0f}ms/step - loss: {tot/n:.2f} - recon: {rec_sum/n:.2f} "
              f"- kl: {kl_sum/n:.2f} - beta: {beta:.2f} - grad_norm: {gn_sum/n:.1f} (max {gn_max:.1f}) "
              f"- val_loss: {v_rec + v_kl:.2f} - val_mse: {v_mse:.4f}")


if __name__ == "__main__":
    main()
