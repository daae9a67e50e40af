"""MLP VAE on procedurally generated 16x16 sprites (circles, squares, bars).

Bernoulli decoder (logits + BCE), diagonal Gaussian posterior, Adam.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)

# ----------------------------------------------------------------------------
# config
IMG = 16
N_TRAIN = 6000
N_VAL = 1000
LATENT = 16
HIDDEN = 256
BATCH_SIZE = 64
EPOCHS = 12
LR = 1e-3
SEED = 1234
LOG_EVERY = 50


# ----------------------------------------------------------------------------
# data
def render_sprite(rng):
    """One grayscale sprite in [0, 1]: a filled circle, square or bar with soft edges."""
    yy, xx = np.mgrid[0:IMG, 0:IMG].astype(np.float32)
    kind = rng.integers(3)
    cx, cy = rng.uniform(4, IMG - 4, size=2)
    size = rng.uniform(2.0, 4.5)
    intensity = rng.uniform(0.6, 1.0)
    if kind == 0:  # circle
        d = np.sqrt((xx - cx) ** 2 + (yy - cy) ** 2) - size
    elif kind == 1:  # square
        d = np.maximum(np.abs(xx - cx), np.abs(yy - cy)) - size
    else:  # bar, random orientation
        theta = rng.uniform(0, math.pi)
        u = (xx - cx) * math.cos(theta) + (yy - cy) * math.sin(theta)
        v = -(xx - cx) * math.sin(theta) + (yy - cy) * math.cos(theta)
        d = np.maximum(np.abs(u) - size * 1.6, np.abs(v) - 1.2)
    img = intensity / (1.0 + np.exp(2.5 * d))  # soft edge
    return img.astype(np.float32)


def make_dataset(n, seed):
    rng = np.random.default_rng(seed)
    imgs = np.stack([render_sprite(rng) for _ in range(n)])
    return torch.from_numpy(imgs.reshape(n, IMG * IMG))


def get_splits():
    x_train = make_dataset(N_TRAIN, SEED)
    x_val = make_dataset(N_VAL, SEED + 1)
    return x_train, x_val


def iterate_batches(x, batch_size, shuffle, generator=None):
    n = x.size(0)
    idx = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
    for i in range(0, n, batch_size):
        yield x[idx[i:i + batch_size]]


# ----------------------------------------------------------------------------
# model
class VAE(nn.Module):
    def __init__(self, d_in=IMG * IMG, hidden=HIDDEN, latent=LATENT):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Linear(d_in, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden // 2), nn.ReLU(),
        )
        self.to_mu = nn.Linear(hidden // 2, latent)
        self.to_logvar = nn.Linear(hidden // 2, latent)
        self.decoder = nn.Sequential(
            nn.Linear(latent, hidden // 2), nn.ReLU(),
            nn.Linear(hidden // 2, hidden), nn.ReLU(),
            nn.Linear(hidden, d_in),
        )

    def encode(self, x):
        h = self.encoder(x)
        return self.to_mu(h), self.to_logvar(h).clamp(-8.0, 8.0)

    def forward(self, x):
        mu, logvar = self.encode(x)
        std = torch.exp(0.5 * logvar)
        z = mu + std * torch.randn_like(std)
        return self.decoder(z), mu, logvar


def vae_terms(model, x):
    logits, mu, logvar = model(x)
    recon = F.binary_cross_entropy_with_logits(logits, x)
    kl = (-0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).sum(dim=1)).mean()
    return recon, kl


def loss_fn(model, batch):
    recon, kl = vae_terms(model, batch)
    return recon + kl


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR)


@torch.no_grad()
def evaluate(model, x_val):
    model.eval()
    tot_loss, tot_kl, tot_mse, n = 0.0, 0.0, 0.0, 0
    for xb in iterate_batches(x_val, 256, shuffle=False):
        recon, kl = vae_terms(model, xb)
        mu, _ = model.encode(xb)
        x_hat = torch.sigmoid(model.decoder(mu))
        b = xb.size(0)
        tot_loss += (recon + kl).item() * b
        tot_kl += kl.item() * b
        tot_mse += F.mse_loss(x_hat, xb, reduction="sum").item() / (IMG * IMG)
        n += b
    model.train()
    return tot_loss / n, tot_kl / n, tot_mse / n


def make_target():
    torch.manual_seed(SEED)
    x_train, _ = get_splits()
    g = torch.Generator().manual_seed(SEED)
    data = [b for _, b in zip(range(6), iterate_batches(x_train, BATCH_SIZE, True, g))]
    return {
        "model": VAE(),
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "task": "regression",
    }


def main():
    torch.manual_seed(SEED)
    x_train, x_val = get_splits()
    print(f"train images: {tuple(x_train.shape)}  val images: {tuple(x_val.shape)}  "
          f"pixel mean {x_train.mean():.4f}")
    model = VAE()
    print(f"number of parameters: {sum(p.numel() for p in model.parameters()) / 1e3:.1f}K")
    optimizer = make_optimizer(model.parameters())
    g = torch.Generator().manual_seed(SEED)

    step = 0
    t0 = time.time()
    for epoch in range(1, EPOCHS + 1):
        for xb in iterate_batches(x_train, BATCH_SIZE, True, g):
            recon, kl = vae_terms(model, xb)
            loss = recon + kl
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if step % LOG_EVERY == 0:
                dt = (time.time() - t0) * 1000
                t0 = time.time()
                print(f"iter {step}: loss {loss.item():.4f}, recon {recon.item():.4f}, "
                      f"kl {kl.item():.4f}, time {dt:.1f}ms")
            step += 1
        val_loss, val_kl, val_mse = evaluate(model, x_val)
        print(f"epoch {epoch}: val loss {val_loss:.4f}, val kl {val_kl:.4f}, "
              f"val pixel mse {val_mse:.5f}")

    torch.save(model.state_dict(), "vae_sprites.pt")


if __name__ == "__main__":
    main()
