"""Dense autoencoder for compressing synthetic Raman-like spectra.

Each spectrum (256 bins) is a mixture of 2-5 Lorentzian peaks from a small
library of compounds, plus a polynomial fluorescence baseline and shot noise.
Encoder/decoder depth is configured through HIDDEN_DIMS.
"""
import json
import math
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)

N_BINS = 256
HIDDEN_DIMS = [256, 128]
LATENT = 10
BATCH_SIZE = 100
EPOCHS = 30
LR = 1e-3
N_TRAIN = 5000
N_VAL = 1000
SEED = 42
LIBRARY_FILE = "compound_library.json"


# ----------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------
def load_library(path=LIBRARY_FILE, n_compounds=6, seed=SEED):
    """Peak positions/widths per compound; generated once and cached next to the script."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), path)
    if not os.path.exists(path):
        rng = np.random.default_rng(seed)
        lib = []
        for k in range(n_compounds):
            n_peaks = int(rng.integers(2, 6))
            lib.append({
                "name": f"compound_{k}",
                "centers": sorted(rng.uniform(10, N_BINS - 10, n_peaks).round(2).tolist()),
                "widths": rng.uniform(1.5, 6.0, n_peaks).round(2).tolist(),
                "heights": rng.uniform(0.3, 1.0, n_peaks).round(3).tolist(),
            })
        with open(path, "w") as f:
            json.dump(lib, f, indent=1)
    with open(path) as f:
        return json.load(f)


def synth_spectra(n, library, rng):
    grid = np.arange(N_BINS, dtype=np.float64)
    comp = []
    for c in library:
        s = np.zeros(N_BINS)
        for mu, w, h in zip(c["centers"], c["widths"], c["heights"]):
            s += h * w ** 2 / ((grid - mu) ** 2 + w ** 2)
        comp.append(s)
    comp = np.stack(comp)                                       # (K, bins)
    conc = rng.dirichlet(np.full(len(library), 0.5), size=n)    # mixture fractions
    conc *= rng.uniform(0.5, 1.5, size=(n, 1))                  # overall intensity
    u = np.linspace(-1, 1, N_BINS)
    base = (rng.uniform(0.0, 0.3, (n, 1)) + rng.normal(0, 0.1, (n, 1)) * u
            + rng.normal(0, 0.05, (n, 1)) * u ** 2)
    spec = conc @ comp + base
    spec += rng.normal(0, 0.01, size=spec.shape)
    return spec.astype(np.float32)


def build_datasets():
    library = load_library()
    rng = np.random.default_rng(SEED)
    train = synth_spectra(N_TRAIN, library, rng)
    val = synth_spectra(N_VAL, library, rng)
    scale = float(np.abs(train).max())
    return torch.from_numpy(train / scale), torch.from_numpy(val / scale)


def iterate_batches(x, batch_size, shuffle, generator=None):
    n = x.shape[0]
    idx = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
    for start in range(0, n, batch_size):
        yield x[idx[start:start + batch_size]]


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
def mlp(dims, final_act=False):
    layers = []
    for i in range(len(dims) - 1):
        layers.append(nn.Linear(dims[i], dims[i + 1]))
        if i < len(dims) - 2 or final_act:
            layers.append(nn.SiLU())
    return layers


class SpectraAE(nn.Module):
    def __init__(self, in_dim=N_BINS, hidden_dims=HIDDEN_DIMS, latent=LATENT):
        super().__init__()
        self.encoder = nn.Sequential(*mlp([in_dim, *hidden_dims, latent]))
        self.decoder_layers = nn.ModuleList(mlp([latent, *reversed(hidden_dims), in_dim]))

    def encode(self, x):
        return self.encoder(x)

    def decode(self, z):
        h = z
        for layer in self.decoder_layers:
            h = layer(h)
        return h

    def forward(self, x):
        return self.decode(self.encode(x))


def compute_loss(model, batch):
    return F.mse_loss(model(batch), batch)


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR)


@torch.no_grad()
def evaluate(model, val_x):
    model.eval()
    recon = model(val_x)
    mse = F.mse_loss(recon, val_x).item()
    # fraction of variance explained, averaged over bins
    r2 = 1.0 - ((recon - val_x) ** 2).sum(0) / ((val_x - val_x.mean(0)) ** 2).sum(0)
    model.train()
    return mse, r2.mean().item()


def make_target():
    torch.manual_seed(SEED)
    train_x, _ = build_datasets()
    g = torch.Generator().manual_seed(SEED)
    batches = []
    for i, xb in enumerate(iterate_batches(train_x, BATCH_SIZE, shuffle=True, generator=g)):
        batches.append(xb)
        if i == 4:
            break
    return {
        "model": SpectraAE(),
        "data": batches,
        "loss_fn": compute_loss,
        "make_optimizer": make_optimizer,
        "task": "regression",
    }


def main():
    torch.manual_seed(SEED)
    t0 = time.time()
    train_x, val_x = build_datasets()
    model = SpectraAE()
    opt = make_optimizer(model.parameters())
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=3)
    n_params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print(f"[setup] train={tuple(train_x.shape)} val={tuple(val_x.shape)} "
          f"hidden={HIDDEN_DIMS} latent={LATENT} trainable_params={n_params:,}")
    g = torch.Generator().manual_seed(SEED)
    step = 0
    best = float("inf")
    for epoch in range(EPOCHS):
        tot, nb = 0.0, 0
        for xb in iterate_batches(train_x, BATCH_SIZE, shuffle=True, generator=g):
            loss = compute_loss(model, xb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += loss.item(); nb += 1; step += 1
        val_mse, val_r2 = evaluate(model, val_x)
        sched.step(val_mse)
        best = min(best, val_mse)
        print(f"[epoch {epoch:02d}] step={step} train_mse={tot/nb:.3e} val_mse={val_mse:.3e} "
              f"val_r2={val_r2:.4f} lr={opt.param_groups[0]['lr']:.1e} elapsed={time.time()-t0:.1f}s")
    print(f"[done] best val_mse={best:.3e} total_time={time.time()-t0:.1f}s")


if __name__ == "__main__":
    main()
