"""Conditional VAE on synthetic instrument amplitude envelopes.

Each sample is a 96-point waveform (carrier * ADSR-like envelope) drawn from one of
8 instrument classes.  The class is fed as a one-hot to both encoder and decoder.
Loss: Gaussian reconstruction (squared error summed over the 96 points) + beta * KL,
beta ramped linearly 0 -> 1 over the first third of training, then held at 1.
"""
import math
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 7
N_CLASSES = 8
SEQ_LEN = 96
LATENT = 6
HIDDEN = 128
BATCH = 64
EPOCHS = 45
LR = 1e-3
N_TRAIN = 4096
N_VAL = 512
NOISE = 0.05

# (attack, decay, sustain level, release, carrier cycles)
INSTRUMENTS = [
    (0.02, 0.10, 0.70, 0.20, 3.0),   # piano-ish
    (0.30, 0.10, 0.90, 0.30, 2.0),   # pad
    (0.01, 0.30, 0.00, 0.05, 5.0),   # pluck
    (0.10, 0.05, 0.80, 0.10, 4.0),   # organ
    (0.05, 0.40, 0.30, 0.40, 1.5),   # bell
    (0.40, 0.20, 0.50, 0.20, 6.0),   # swell
    (0.01, 0.05, 0.60, 0.60, 2.5),   # brass
    (0.15, 0.25, 0.40, 0.05, 3.5),   # string
]


def adsr(t, a, d, s, r):
    env = np.zeros_like(t)
    rel_start = 1.0 - r
    up = t < a
    env[up] = t[up] / a
    dec = (t >= a) & (t < a + d)
    env[dec] = 1.0 - (1.0 - s) * (t[dec] - a) / d
    sus = (t >= a + d) & (t < rel_start)
    env[sus] = s
    rel = t >= rel_start
    env[rel] = s * (1.0 - (t[rel] - rel_start) / r)
    return np.clip(env, 0.0, 1.0)


def make_dataset(n, rng):
    t = np.linspace(0.0, 1.0, SEQ_LEN)
    xs = np.zeros((n, SEQ_LEN), dtype=np.float32)
    ys = rng.integers(0, N_CLASSES, size=n)
    for i in range(n):
        a, d, s, r, cyc = INSTRUMENTS[ys[i]]
        # per-note variation: timing jitter, loudness, pitch, phase
        a = a * rng.uniform(0.7, 1.3)
        d = d * rng.uniform(0.7, 1.3)
        s = np.clip(s + rng.normal(0, 0.05), 0.0, 1.0)
        r = r * rng.uniform(0.7, 1.3)
        amp = rng.uniform(0.6, 1.0)
        cyc = cyc * rng.uniform(0.85, 1.15)
        phase = rng.uniform(0, 2 * math.pi)
        env = adsr(t, a, d, s, r)
        xs[i] = amp * env * np.sin(2 * math.pi * cyc * t + phase) + rng.normal(0, NOISE, SEQ_LEN)
    return torch.from_numpy(xs), torch.from_numpy(ys).long()


class CVAE(nn.Module):
    def __init__(self, seq_len=SEQ_LEN, n_classes=N_CLASSES, hidden=HIDDEN, latent=LATENT):
        super().__init__()
        self.n_classes = n_classes
        self.enc = nn.Sequential(
            nn.Linear(seq_len + n_classes, hidden), nn.SiLU(),
            nn.Linear(hidden, hidden), nn.SiLU(),
        )
        self.to_mu = nn.Linear(hidden, latent)
        self.to_logvar = nn.Linear(hidden, latent)
        self.dec = nn.Sequential(
            nn.Linear(latent + n_classes, hidden), nn.SiLU(),
            nn.Linear(hidden, hidden), nn.SiLU(),
            nn.Linear(hidden, seq_len),
        )

    def encode(self, x, c):
        h = self.enc(torch.cat([x, c], dim=1))
        return self.to_mu(h), self.to_logvar(h)

    def decode(self, z, c):
        return self.dec(torch.cat([z, c], dim=1))

    def forward(self, x, y):
        c = F.one_hot(y, self.n_classes).float()
        mu, logvar = self.encode(x, c)
        if self.training:
            z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        else:
            z = mu
        return self.decode(z, c), mu, logvar


def elbo_terms(model, batch):
    x, y = batch
    x_hat, mu, logvar = model(x, y)
    recon = ((x_hat - x) ** 2).sum(dim=1).mean()
    kl = (-0.5 * (1 + logvar - mu.pow(2) - logvar.exp())).sum(dim=1).mean()
    return recon, kl


def vae_loss(model, batch, beta=1.0):
    recon, kl = elbo_terms(model, batch)
    return recon + beta * kl


def beta_at(step, total_steps):
    ramp = total_steps // 3
    return min(1.0, step / ramp)


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR)


def batches(x, y, bs, shuffle, gen=None):
    idx = torch.randperm(len(x), generator=gen) if shuffle else torch.arange(len(x))
    for i in range(0, len(x), bs):
        j = idx[i:i + bs]
        yield x[j], y[j]


def build():
    torch.manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    x_tr, y_tr = make_dataset(N_TRAIN, rng)
    x_va, y_va = make_dataset(N_VAL, rng)
    model = CVAE()
    return model, (x_tr, y_tr), (x_va, y_va)


def make_target():
    model, (x_tr, y_tr), _ = build()
    data = list(batches(x_tr, y_tr, BATCH, shuffle=False))[:3]
    return {
        "model": model,
        "batch": data[0],
        "data": data,
        "loss_fn": lambda m, b: vae_loss(m, b, beta=1.0),
        "optimizer": make_optimizer(model.parameters()),
        "make_optimizer": make_optimizer,
        "num_classes": N_CLASSES,
        "task": "regression",
    }


@torch.no_grad()
def evaluate(model, x, y):
    model.eval()
    tot_r = tot_k = 0.0
    n = 0
    for b in batches(x, y, 256, shuffle=False):
        r, k = elbo_terms(model, b)
        tot_r += r.item() * len(b[0])
        tot_k += k.item() * len(b[0])
        n += len(b[0])
    model.train()
    return tot_r / n, tot_k / n


def bar(frac, width=10):
    full = int(round(frac * width))
    return "\u2588" * full + " " * (width - full)


def main():
    model, (x_tr, y_tr), (x_va, y_va) = build()
    opt = make_optimizer(model.parameters())
    gen = torch.Generator().manual_seed(SEED)
    steps_per_epoch = math.ceil(N_TRAIN / BATCH)
    total_steps = EPOCHS * steps_per_epoch
    n_params = sum(p.numel() for p in model.parameters())
    print(f"  | Name  | Type | Params\n0 | model | CVAE | {n_params/1e3:.1f} K")
    step = 0
    for epoch in range(EPOCHS):
        t0 = time.time()
        run_loss = run_r = run_k = 0.0
        for i, batch in enumerate(batches(x_tr, y_tr, BATCH, shuffle=True, gen=gen)):
            beta = beta_at(step, total_steps)
            recon, kl = elbo_terms(model, batch)
            loss = recon + beta * kl
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            run_loss += loss.item()
            run_r += recon.item()
            run_k += kl.item()
        nb = i + 1
        val_r, val_k = evaluate(model, x_va, y_va)
        el = time.time() - t0
        print(
            f"Epoch {epoch}: 100%|{bar(1.0)}| {nb}/{nb} [00:{int(el):02d}<00:00, {nb/el:.2f}it/s, v_num=0, "
            f"train_loss={run_loss/nb:.3f}, recon={run_r/nb:.3f}, kl={run_k/nb:.3f}, beta={beta:.3f}, "
            f"val_loss={val_r + val_k:.3f}, val_recon={val_r:.3f}]"
        )
        sys.stdout.flush()
    print(f"`Trainer.fit` stopped: `max_epochs={EPOCHS}` reached.")


if __name__ == "__main__":
    main()
