"""Dense VAE on damped-oscillation traces (e.g. ring-down of a struck beam).

Each trace is 64 samples of a damped sinusoid with random amplitude,
frequency, phase, decay and DC offset, plus measurement noise. Gaussian
decoder with fixed observation noise, standard-normal prior, linear KL
warm-up after a few KL-free epochs.
"""
import json
import math
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 42
SEQ_LEN = 64
N_TRAIN = 6000
N_VAL = 1000
BATCH_SIZE = 128
EPOCHS = 30
KL_FREE_EPOCHS = 3  # plain autoencoder phase before the KL term is switched on
WARMUP_EPOCHS = 10
LATENT_DIM = 16
HIDDEN = 256
LR = 1e-3
OBS_SIGMA = 0.1  # std of the Gaussian decoder
DATA_FILE = "traces.npz"


def generate_traces(n, rng):
    t = np.linspace(0.0, 1.0, SEQ_LEN, dtype=np.float32)[None, :]
    amp = rng.uniform(0.5, 1.5, size=(n, 1))
    freq = rng.uniform(2.0, 6.0, size=(n, 1))
    phase = rng.uniform(0, 2 * np.pi, size=(n, 1))
    decay = rng.uniform(0.5, 4.0, size=(n, 1))
    offset = rng.normal(0.0, 0.3, size=(n, 1))
    x = offset + amp * np.exp(-decay * t) * np.sin(2 * np.pi * freq * t + phase)
    x = x + rng.normal(0.0, 0.05, size=x.shape)
    return x.astype(np.float32)


def load_data(path=DATA_FILE):
    if not os.path.exists(path):
        rng = np.random.default_rng(SEED)
        np.savez_compressed(path, train=generate_traces(N_TRAIN, rng), val=generate_traces(N_VAL, rng))
    d = np.load(path)
    return torch.from_numpy(d["train"]), torch.from_numpy(d["val"])


def batches(x, batch_size, shuffle, generator=None):
    order = torch.randperm(len(x), generator=generator) if shuffle else torch.arange(len(x))
    for i in range(0, len(x), batch_size):
        yield x[order[i : i + batch_size]]


class VAE(nn.Module):
    def __init__(self, input_dim=SEQ_LEN, hidden=HIDDEN, latent_dim=LATENT_DIM):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Linear(input_dim, hidden), nn.SiLU(),
            nn.Linear(hidden, hidden), nn.SiLU(),
        )
        self.fc_mu = nn.Linear(hidden, latent_dim)
        self.fc_logvar = nn.Linear(hidden, latent_dim)
        self.decoder = nn.Sequential(
            nn.Linear(latent_dim, hidden), nn.SiLU(),
            nn.Linear(hidden, hidden), nn.SiLU(),
            nn.Linear(hidden, input_dim),
        )

    def encode(self, x):
        h = self.encoder(x)
        return self.fc_mu(h), self.fc_logvar(h).clamp(-10.0, 10.0)

    def forward(self, x, sample=True):
        mu, logvar = self.encode(x)
        if sample:
            z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        else:
            z = mu
        return self.decoder(z), mu, logvar


def elbo_terms(model, x, sample=True):
    recon, mu, logvar = model(x, sample=sample)
    # Gaussian negative log-likelihood (up to a constant), summed over time steps
    nll = 0.5 * ((recon - x) ** 2).sum(dim=1) / OBS_SIGMA ** 2
    kl_per_dim = 0.5 * (mu ** 2 + logvar.exp() - 1.0 - logvar)
    return nll.mean(), kl_per_dim.sum(dim=1).mean(), kl_per_dim


def kl_weight(epoch):
    if epoch < KL_FREE_EPOCHS:
        return 0.0
    return min(1.0, (epoch - KL_FREE_EPOCHS + 1) / WARMUP_EPOCHS)


def vae_loss(model, batch, beta=1.0):
    nll, kl, _ = elbo_terms(model, batch)
    return nll + beta * kl


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR)


@torch.no_grad()
def validate(model, x, beta):
    model.eval()
    nll_sum, kl_sum, kl_dims, mse_sum = 0.0, 0.0, 0.0, 0.0
    for batch in batches(x, 500, shuffle=False):
        # deterministic reconstruction through the posterior mean
        nll, kl, kl_per_dim = elbo_terms(model, batch, sample=False)
        n = len(batch)
        nll_sum += nll.item() * n
        kl_sum += kl.item() * n
        kl_dims = kl_dims + kl_per_dim.sum(dim=0)
        mse_sum += F.mse_loss(model(batch, sample=False)[0], batch, reduction="sum").item()
    model.train()
    n = len(x)
    active = int(((kl_dims / n) > 0.01).sum())
    return {
        "val_loss": (nll_sum + beta * kl_sum) / n,
        "val_nll": nll_sum / n,
        "val_kl": kl_sum / n,
        "val_mse": mse_sum / (n * SEQ_LEN),
        "active_dims": active,
    }


def make_target():
    torch.manual_seed(SEED)
    train_x, _ = load_data()
    g = torch.Generator().manual_seed(SEED)
    data = []
    for i, b in enumerate(batches(train_x, BATCH_SIZE, shuffle=True, generator=g)):
        if i == 5:
            break
        data.append(b)
    return {
        "model": VAE(),
        "data": data,
        "loss_fn": vae_loss,
        "make_optimizer": make_optimizer,
        "task": "regression",
    }


def main():
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    train_x, val_x = load_data()
    model = VAE()
    optimizer = make_optimizer(model.parameters())
    g = torch.Generator().manual_seed(SEED)
    steps_per_epoch = math.ceil(len(train_x) / BATCH_SIZE)
    print(f"train={len(train_x)} val={len(val_x)} steps/epoch={steps_per_epoch} latent_dim={LATENT_DIM}")
    t_start = time.time()
    global_step = 0
    for epoch in range(EPOCHS):
        beta = kl_weight(epoch)
        tot, tot_nll, tot_kl = 0.0, 0.0, 0.0
        for batch in batches(train_x, BATCH_SIZE, shuffle=True, generator=g):
            nll, kl, _ = elbo_terms(model, batch)
            loss = nll + beta * kl
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            global_step += 1
            n = len(batch)
            tot += loss.item() * n
            tot_nll += nll.item() * n
            tot_kl += kl.item() * n
        n = len(train_x)
        metrics = {
            "epoch": epoch,
            "step": global_step,
            "beta": round(beta, 3),
            "train_loss": round(tot / n, 3),
            "train_nll": round(tot_nll / n, 3),
            "train_kl": round(tot_kl / n, 3),
        }
        metrics.update({k: (round(v, 4) if isinstance(v, float) else v) for k, v in validate(model, val_x, beta).items()})
        print(json.dumps(metrics))
    print(f"Training finished in {time.time() - t_start:.1f}s")


if __name__ == "__main__":
    main()
