"""Sparse autoencoder for Raman spectra of polymer blends (dictionary of peak
components). Overcomplete ReLU code with an L1 penalty; we track L0 and the
fraction of dead latents (never active over the logging window).
"""
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

cfg = {
    "seed": 21,
    "n_spectra": 8000,
    "n_bins": 128,
    "n_latents": 256,
    "l1_coeff": 1e-3,
    "lr": 1e-3,
    "batch_size": 128,
    "steps": 1500,
    "log_every": 100,
    "enc_bias_init": -4.0,     # start sparse: most latents off at init
}


def synth_raman(n, n_bins, seed):
    rng = np.random.default_rng(seed)
    wn = np.linspace(0, 1, n_bins)
    n_comp = 24
    centers = rng.uniform(0.05, 0.95, (n_comp, 3))
    widths = rng.uniform(0.004, 0.02, (n_comp, 3))
    heights = rng.uniform(0.3, 1.0, (n_comp, 3))
    comps = np.zeros((n_comp, n_bins))
    for c in range(n_comp):
        for p in range(3):
            comps[c] += heights[c, p] * np.exp(-0.5 * ((wn - centers[c, p]) / widths[c, p]) ** 2)
    mix = rng.random((n, n_comp)) * (rng.random((n, n_comp)) < 0.15)
    baseline = rng.uniform(0, 0.3, (n, 1)) * (1 + wn[None, :])
    X = mix @ comps + baseline + rng.normal(0, 0.02, (n, n_bins))
    return X.astype(np.float32)


class SparseAE(nn.Module):
    def __init__(self, d, m, bias_init):
        super().__init__()
        self.W_enc = nn.Linear(d, m)
        self.W_dec = nn.Linear(m, d)
        nn.init.kaiming_uniform_(self.W_enc.weight, nonlinearity="relu")
        nn.init.constant_(self.W_enc.bias, bias_init)
        with torch.no_grad():
            self.W_dec.weight.copy_(self.W_enc.weight.t())

    def encode(self, x):
        return F.relu(self.W_enc(x))

    def forward(self, x):
        f = self.encode(x)
        return self.W_dec(f), f


def sae_loss(model, x):
    x_hat, f = model(x)
    mse = F.mse_loss(x_hat, x)
    l1 = f.abs().sum(-1).mean()
    return mse + cfg["l1_coeff"] * l1, mse, l1, f


def loss_fn(model, batch):
    return sae_loss(model, batch)[0]


def setup():
    torch.manual_seed(cfg["seed"])
    X = synth_raman(cfg["n_spectra"], cfg["n_bins"], cfg["seed"])
    X = (X - X.mean(0)) / X.std(0)
    X = torch.from_numpy(X)
    n_val = 800
    model = SparseAE(cfg["n_bins"], cfg["n_latents"], cfg["enc_bias_init"])
    opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"])
    return model, opt, X[n_val:], X[:n_val]


def batches(X, gen):
    while True:
        perm = torch.randperm(len(X), generator=gen)
        for i in range(0, len(X) - cfg["batch_size"] + 1, cfg["batch_size"]):
            yield X[perm[i:i + cfg["batch_size"]]]


def main():
    model, opt, X_tr, X_val = setup()
    gen = torch.Generator().manual_seed(cfg["seed"])
    it = batches(X_tr, gen)
    fired = torch.zeros(cfg["n_latents"], dtype=torch.bool)
    t0 = time.time()
    print(f"SAE {cfg['n_bins']} -> {cfg['n_latents']} latents, train={len(X_tr)} val={len(X_val)}")
    for step in range(1, cfg["steps"] + 1):
        x = next(it)
        loss, mse, l1, f = sae_loss(model, x)
        opt.zero_grad()
        loss.backward()
        opt.step()
        fired |= (f > 0).any(0)
        if step % cfg["log_every"] == 0:
            with torch.no_grad():
                _, vmse, _, vf = sae_loss(model, X_val)
            l0 = (f > 0).float().sum(-1).mean().item()
            dead = 1.0 - fired.float().mean().item()
            print(f"step {step:5d} | loss {loss.item():.4f} | mse {mse.item():.4f} | l1 {l1.item():7.2f} | "
                  f"L0 {l0:6.1f} | dead {100 * dead:5.1f}% | val_mse {vmse.item():.4f} | "
                  f"{1000 * (time.time() - t0) / cfg['log_every']:.1f} ms/step")
            fired.zero_()
            t0 = time.time()


def make_target():
    model, opt, X_tr, _ = setup()
    return {"model": model, "batch": X_tr[:cfg["batch_size"]], "loss_fn": loss_fn, "optimizer": opt}


if __name__ == "__main__":
    main()
