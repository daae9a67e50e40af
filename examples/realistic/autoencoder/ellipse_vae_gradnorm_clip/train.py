"""VAE on 24x24 synthetic ellipse masks (soft edges), Bernoulli decoder.

Loss per sample = BCE summed over all 576 pixels + beta * KL, averaged over the batch.
beta is warmed up linearly over the first epochs.  Gradients are clipped at a generous
max_norm as a safety net; the pre-clip norm is logged every few steps.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 1234
IMG = 24
N_TRAIN = 3200
N_VAL = 400
LATENT = 12
HIDDEN = 256
BATCH = 64
EPOCHS = 20
WARMUP_EPOCHS = 4
LR = 1e-3
MAX_GRAD_NORM = 250.0
LOG_EVERY = 10


def make_images(n, rng):
    yy, xx = np.mgrid[0:IMG, 0:IMG].astype(np.float32) + 0.5
    out = np.zeros((n, IMG, IMG), dtype=np.float32)
    for i in range(n):
        img = np.zeros((IMG, IMG), dtype=np.float32)
        for _ in range(rng.integers(1, 3)):
            cx, cy = rng.uniform(6, IMG - 6, size=2)
            a, b = rng.uniform(2.5, 7.0, size=2)
            th = rng.uniform(0, math.pi)
            dx, dy = xx - cx, yy - cy
            u = (dx * math.cos(th) + dy * math.sin(th)) / a
            v = (-dx * math.sin(th) + dy * math.cos(th)) / b
            r = np.sqrt(u * u + v * v)
            img = np.maximum(img, 1.0 / (1.0 + np.exp((r - 1.0) * 6.0)))
        out[i] = img
    return torch.from_numpy(out.reshape(n, IMG * IMG))


class VAE(nn.Module):
    def __init__(self, d_in=IMG * IMG, hidden=HIDDEN, latent=LATENT):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.fc_mu = nn.Linear(hidden, latent)
        self.fc_logvar = nn.Linear(hidden, latent)
        self.decoder = nn.Sequential(
            nn.Linear(latent, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, d_in),
        )

    def forward(self, x):
        h = self.encoder(x)
        mu, logvar = self.fc_mu(h), self.fc_logvar(h)
        std = torch.exp(0.5 * logvar)
        z = mu + std * torch.randn_like(std) if self.training else mu
        return self.decoder(z), mu, logvar


def loss_terms(model, x):
    logits, mu, logvar = model(x)
    recon = F.binary_cross_entropy_with_logits(logits, x, reduction="none").sum(dim=1).mean()
    kl = 0.5 * (mu.pow(2) + logvar.exp() - 1.0 - logvar).sum(dim=1).mean()
    return recon, kl


def elbo_loss(model, x, beta=1.0):
    recon, kl = loss_terms(model, x)
    return recon + beta * kl


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR)


def build():
    torch.manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    x_tr = make_images(N_TRAIN, rng)
    x_va = make_images(N_VAL, rng)
    return VAE(), x_tr, x_va


def make_target():
    model, x_tr, _ = build()
    data = [x_tr[i * BATCH:(i + 1) * BATCH] for i in range(3)]
    return {
        "model": model,
        "batch": data[0],
        "data": data,
        "loss_fn": lambda m, b: elbo_loss(m, b, beta=1.0),
        "optimizer": make_optimizer(model.parameters()),
        "make_optimizer": make_optimizer,
        "task": "regression",
    }


@torch.no_grad()
def validate(model, x_va):
    model.eval()
    r, k = loss_terms(model, x_va)
    model.train()
    return r.item(), k.item()


def pbar(i, n, width=10):
    frac = i / n
    full = int(frac * width)
    return f"{int(frac * 100):3d}%|" + "\u2588" * full + " " * (width - full) + f"| {i}/{n}"


def main():
    model, x_tr, x_va = build()
    opt = make_optimizer(model.parameters())
    gen = torch.Generator().manual_seed(SEED)
    n_batches = math.ceil(N_TRAIN / BATCH)
    warmup_steps = WARMUP_EPOCHS * n_batches
    print(f"  | Name  | Type | Params\n0 | model | VAE  | {sum(p.numel() for p in model.parameters())/1e3:.1f} K")
    step = 0
    n_clipped = 0
    max_seen = 0.0
    for epoch in range(EPOCHS):
        t0 = time.time()
        perm = torch.randperm(N_TRAIN, generator=gen)
        tot = 0.0
        for i in range(n_batches):
            x = x_tr[perm[i * BATCH:(i + 1) * BATCH]]
            beta = min(1.0, step / warmup_steps)
            recon, kl = loss_terms(model, x)
            loss = recon + beta * kl
            opt.zero_grad(set_to_none=True)
            loss.backward()
            gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM).item()
            n_clipped += gnorm > MAX_GRAD_NORM
            max_seen = max(max_seen, gnorm)
            opt.step()
            step += 1
            tot += loss.item()
            if (i + 1) % LOG_EVERY == 0:
                el = time.time() - t0
                print(f"Epoch {epoch}: {pbar(i + 1, n_batches)} [00:{int(el):02d}<00:00, v_num=0, "
                      f"train_loss_step={loss.item():.2f}, recon={recon.item():.2f}, kl={kl.item():.2f}, "
                      f"beta={beta:.3f}, grad_norm={gnorm:.2f}]")
        val_r, val_k = validate(model, x_va)
        el = time.time() - t0
        print(f"Epoch {epoch}: {pbar(n_batches, n_batches)} [00:{int(el):02d}<00:00, v_num=0, "
              f"train_loss_epoch={tot / n_batches:.2f}, grad_norm={gnorm:.2f}, "
              f"val_loss={val_r + val_k:.2f}, val_recon={val_r:.2f}, val_kl={val_k:.2f}]")
    print(f"clip_grad_norm_ bound on {n_clipped}/{step} steps (max_norm={MAX_GRAD_NORM:g}, largest pre-clip norm {max_seen:.1f})")
    print(f"`Trainer.fit` stopped: `max_epochs={EPOCHS}` reached.")


if __name__ == "__main__":
    main()
