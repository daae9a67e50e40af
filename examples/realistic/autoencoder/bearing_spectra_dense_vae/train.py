"""Dense VAE over log-magnitude vibration spectra from bearing test rigs.

Lightning-style training loop written out by hand (the rig PCs have no Lightning install).
KL weight is warmed up linearly to avoid posterior collapse early in training.
"""
import math
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

SEED = 3
N_BINS = 128
N_TRAIN = 6000
N_VAL = 1000
LATENT = 16
HIDDEN = 256
BATCH_SIZE = 128
MAX_EPOCHS = 16
KL_DELAY_EPOCHS = 2
KL_WARMUP_EPOCHS = 6
LR = 1e-3

torch.set_num_threads(1)
torch.manual_seed(SEED)


def simulate_spectra(n, seed):
    g = np.random.default_rng(seed)
    f = np.linspace(0, 1, N_BINS)
    out = np.empty((n, N_BINS), dtype=np.float32)
    for i in range(n):
        rpm = g.uniform(0.03, 0.09)                 # shaft frequency (normalised)
        load = g.uniform(0.3, 1.0)
        fault = g.choice(4, p=[0.55, 0.15, 0.15, 0.15])  # none / outer race / inner race / ball
        spec = -3.0 - 1.5 * f + 0.2 * g.normal()     # noise floor
        for k in range(1, 8):
            spec = np.logaddexp(spec, np.log(load / k) - ((f - k * rpm) / 0.006) ** 2)
        if fault:
            bpf = rpm * (3.1, 4.9, 2.3)[fault - 1]
            sev = g.uniform(0.2, 1.0)
            for k in range(1, 5):
                for sb in (-1, 0, 1):
                    c = k * bpf + sb * rpm * (fault == 2)
                    spec = np.logaddexp(spec, np.log(sev * 0.6 / k) - ((f - c) / 0.005) ** 2)
            res = g.uniform(0.55, 0.8)
            spec = np.logaddexp(spec, np.log(sev * 0.3) - ((f - res) / 0.06) ** 2)
        out[i] = spec + 0.08 * g.normal(size=N_BINS)
    return out


def build_loaders():
    x_tr = simulate_spectra(N_TRAIN, SEED)
    x_va = simulate_spectra(N_VAL, SEED + 100)
    mu, sd = x_tr.mean(0, keepdims=True), x_tr.std(0, keepdims=True) + 1e-6
    x_tr, x_va = (x_tr - mu) / sd, (x_va - mu) / sd
    g = torch.Generator().manual_seed(SEED)
    train_dl = DataLoader(TensorDataset(torch.from_numpy(x_tr)), batch_size=BATCH_SIZE, shuffle=True,
                          generator=g, drop_last=True)
    val_dl = DataLoader(TensorDataset(torch.from_numpy(x_va)), batch_size=500)
    return train_dl, val_dl


class SpectraVAE(nn.Module):
    def __init__(self, n_in=N_BINS, hidden=HIDDEN, latent=LATENT):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(n_in, hidden), nn.ELU(), nn.Linear(hidden, hidden), nn.ELU())
        self.mu = nn.Linear(hidden, latent)
        self.logvar = nn.Linear(hidden, latent)
        self.dec = nn.Sequential(nn.Linear(latent, hidden), nn.ELU(), nn.Linear(hidden, hidden), nn.ELU(),
                                 nn.Linear(hidden, n_in))

    def forward(self, x):
        h = self.enc(x)
        mu, logvar = self.mu(h), self.logvar(h).clamp(-8, 8)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar) if self.training else mu
        return self.dec(z), mu, logvar


def vae_terms(model, x):
    recon, mu, logvar = model(x)
    rec = 0.5 * ((recon - x) ** 2).sum(1).mean()
    kl = (-0.5 * (1 + logvar - mu.pow(2) - logvar.exp())).sum(1).mean()
    return rec, kl


class KLWarmup:
    def __init__(self, delay_steps, warmup_steps):
        self.delay_steps = delay_steps
        self.warmup_steps = warmup_steps
        self.step = 0

    @property
    def beta(self):
        return min(1.0, max(0.0, (self.step - self.delay_steps) / self.warmup_steps))


def make_target():
    train_dl, val_dl = build_loaders()
    model = SpectraVAE()
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    warmup = KLWarmup(KL_DELAY_EPOCHS * len(train_dl), KL_WARMUP_EPOCHS * len(train_dl))

    def loss_fn(model, batch):
        rec, kl = vae_terms(model, batch[0])
        return rec + warmup.beta * kl

    return {"model": model, "data": train_dl, "val_data": val_dl, "loss_fn": loss_fn,
            "optimizer": optimizer, "kl_warmup": warmup, "task": "reconstruction"}


@torch.no_grad()
def validate(model, dl, beta):
    model.eval()
    rec_s, kl_s, n = 0.0, 0.0, 0
    for (x,) in dl:
        rec, kl = vae_terms(model, x)
        rec_s += rec.item() * len(x); kl_s += kl.item() * len(x); n += len(x)
    model.train()
    rec, kl = rec_s / n, kl_s / n
    return rec + beta * kl, rec, kl


def main():
    t0 = time.time()
    tgt = make_target()
    model, train_dl, val_dl, opt = tgt["model"], tgt["data"], tgt["val_data"], tgt["optimizer"]
    loss_fn, warmup = tgt["loss_fn"], tgt["kl_warmup"]
    n_params = sum(p.numel() for p in model.parameters())
    print("  | Name  | Type       | Params\n-------------------------------------\n"
          f"0 | model | SpectraVAE | {n_params / 1e3:.0f} K\n-------------------------------------")
    best = math.inf
    nb = len(train_dl)
    for epoch in range(MAX_EPOCHS):
        te = time.time()
        model.train()
        for i, batch in enumerate(train_dl):
            loss = loss_fn(model, batch)
            opt.zero_grad()
            loss.backward()
            opt.step()
            warmup.step += 1
        beta = warmup.beta
        val_loss, val_rec, val_kl = validate(model, val_dl, beta)
        dt = time.time() - te
        print(f"Epoch {epoch}: 100%|##########| {nb}/{nb} [00:{dt:02.0f}<00:00, {nb / dt:.2f}it/s, v_num=0, "
              f"train_loss={loss.item():.2f}, beta={beta:.3f}, val_loss={val_loss:.2f}, "
              f"val_recon={val_rec:.2f}, val_kl={val_kl:.2f}]")
        if val_loss < best:
            print(f"Epoch {epoch}, global step {warmup.step}: 'val_loss' reached {val_loss:.5f} (best {val_loss:.5f}), "
                  f"saving model to 'checkpoints/epoch={epoch}-step={warmup.step}.ckpt' as top 1")
            best = val_loss
        else:
            print(f"Epoch {epoch}, global step {warmup.step}: 'val_loss' was not in top 1")
    print(f"`Trainer.fit` stopped: `max_epochs={MAX_EPOCHS}` reached. ({time.time() - t0:.1f}s)")


if __name__ == "__main__":
    main()
