"""beta-VAE on procedurally drawn 16x16 sprites (squares, discs, bars).

Reconstruction is Bernoulli log-likelihood summed over pixels and over the batch
(the classic `reduction="sum"` VAE objective); beta is annealed linearly from 0
to BETA_MAX over the first WARMUP_EPOCHS epochs.
"""
import math
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 7
IMG = 16
LATENT = 10
HIDDEN = 256
BATCH = 64
EPOCHS = 16
WARMUP_EPOCHS = 5
BETA_MAX = 2.0
LR = 1e-3
N_TRAIN = 4096
N_VAL = 512


def draw_sprites(n, rng):
    yy, xx = np.mgrid[0:IMG, 0:IMG].astype(np.float32)
    out = np.zeros((n, IMG, IMG), dtype=np.float32)
    shape = rng.integers(0, 3, size=n)
    cx = rng.uniform(4.0, 11.0, size=n)
    cy = rng.uniform(4.0, 11.0, size=n)
    s = rng.uniform(1.8, 3.8, size=n)
    theta = rng.uniform(0, math.pi, size=n)
    for i in range(n):
        dx, dy = xx - cx[i], yy - cy[i]
        if shape[i] == 0:
            d = np.maximum(np.abs(dx), np.abs(dy)) - s[i]
        elif shape[i] == 1:
            d = np.sqrt(dx ** 2 + dy ** 2) - s[i]
        else:
            u = dx * math.cos(theta[i]) + dy * math.sin(theta[i])
            v = -dx * math.sin(theta[i]) + dy * math.cos(theta[i])
            d = np.maximum(np.abs(u) - 1.6 * s[i], np.abs(v) - 0.9)
        out[i] = 1.0 / (1.0 + np.exp(4.0 * d))
    return out.reshape(n, -1)


def make_data(seed=SEED):
    rng = np.random.default_rng(seed)
    x = torch.from_numpy(draw_sprites(N_TRAIN + N_VAL, rng))
    return x[:N_TRAIN], x[N_TRAIN:]


class VAE(nn.Module):
    def __init__(self, d_in=IMG * IMG, hidden=HIDDEN, latent=LATENT):
        super().__init__()
        self.enc = nn.Sequential(
            nn.Linear(d_in, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
        )
        self.mu = nn.Linear(hidden, latent)
        self.logvar = nn.Linear(hidden, latent)
        self.dec = nn.Sequential(
            nn.Linear(latent, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, d_in),
        )

    def encode(self, x):
        h = self.enc(x)
        return self.mu(h), self.logvar(h)

    def forward(self, x):
        mu, logvar = self.encode(x)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return self.dec(z), mu, logvar


def vae_loss(model, x, beta):
    logits, mu, logvar = model(x)
    recon = F.binary_cross_entropy_with_logits(logits, x, reduction="sum")
    kl = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return recon + beta * kl, recon, kl


def beta_at(step, steps_per_epoch):
    warmup = WARMUP_EPOCHS * steps_per_epoch
    return BETA_MAX * min(1.0, step / warmup)


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR)


def batches(x, bs, shuffle, gen=None):
    idx = torch.randperm(len(x), generator=gen) if shuffle else torch.arange(len(x))
    for i in range(0, len(x), bs):
        yield x[idx[i:i + bs]]


def make_target():
    torch.manual_seed(SEED)
    x_train, _ = make_data()
    model = VAE()
    steps_per_epoch = math.ceil(N_TRAIN / BATCH)
    final_beta = beta_at(EPOCHS * steps_per_epoch, steps_per_epoch)
    data = [x_train[i * BATCH:(i + 1) * BATCH] for i in range(3)]

    def loss_fn(m, batch):
        return vae_loss(m, batch, final_beta)[0]

    return {
        "model": model,
        "batch": data[0],
        "data": data,
        "loss_fn": loss_fn,
        "optimizer": make_optimizer(model.parameters()),
        "make_optimizer": make_optimizer,
        "task": "regression",
    }


@torch.no_grad()
def evaluate(model, x_val, beta):
    model.eval()
    tot = rec = kl = 0.0
    for xb in batches(x_val, 256, shuffle=False):
        loss, r, k = vae_loss(model, xb, beta)
        tot += loss.item()
        rec += r.item()
        kl += k.item()
    mu, _ = model.encode(x_val)
    active = int((mu.var(dim=0) > 1e-2).sum())
    model.train()
    n = len(x_val)
    return tot / n, rec / n, kl / n, active


def progress(epoch, i, n, elapsed, metrics):
    rate = i / max(elapsed, 1e-9)
    pct = int(100 * i / n)
    bar = ("\u2588" * (pct // 10)).ljust(10)
    eta = (n - i) / max(rate, 1e-9)
    m = ", ".join(f"{k}={v}" for k, v in metrics.items())
    return (f"Epoch {epoch}: {pct:3d}%|{bar}| {i}/{n} [00:{int(elapsed):02d}<00:{int(eta):02d}, "
            f"{rate:.2f}it/s, v_num=0, {m}]")


def main():
    torch.manual_seed(SEED)
    x_train, x_val = make_data()
    model = VAE()
    opt = make_optimizer(model.parameters())
    steps_per_epoch = math.ceil(N_TRAIN / BATCH)
    gen = torch.Generator().manual_seed(SEED)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"  | Name  | Type | Params\n0 | model | VAE  | {n_params / 1e3:.0f} K")
    step = 0
    for epoch in range(EPOCHS):
        t0 = time.time()
        model.train()
        tot = rec = kl = 0.0
        gnorms = []
        for i, xb in enumerate(batches(x_train, BATCH, shuffle=True, gen=gen), 1):
            beta = beta_at(step, steps_per_epoch)
            loss, r, k = vae_loss(model, xb, beta)
            opt.zero_grad()
            loss.backward()
            gn = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf"))
            gnorms.append(gn.item())
            opt.step()
            step += 1
            tot += loss.item()
            rec += r.item()
            kl += k.item()
            if i % 16 == 0 and i < steps_per_epoch:
                print(progress(epoch, i, steps_per_epoch, time.time() - t0, {
                    "beta": f"{beta:.2f}",
                    "grad_norm": f"{gn.item():.1f}",
                    "train_loss_step": f"{loss.item() / len(xb):.2f}",
                }), flush=True)
        n = len(x_train)
        v_loss, v_rec, v_kl, active = evaluate(model, x_val, beta)
        print(progress(epoch, steps_per_epoch, steps_per_epoch, time.time() - t0, {
            "beta": f"{beta:.2f}",
            "grad_norm": f"{gnorms[-1]:.1f}",
            "train_loss_step": f"{loss.item() / len(xb):.2f}",
            "train_loss_epoch": f"{tot / n:.2f}",
            "train_recon": f"{rec / n:.2f}",
            "train_kl": f"{kl / n:.2f}",
            "val_loss": f"{v_loss:.2f}",
            "val_recon": f"{v_rec:.2f}",
            "val_kl": f"{v_kl:.2f}",
            "active_dims": active,
        }), flush=True)
    print(f"`Trainer.fit` stopped: `max_epochs={EPOCHS}` reached.")


if __name__ == "__main__":
    main()
