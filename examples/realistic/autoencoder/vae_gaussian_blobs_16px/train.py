"""Small fully-connected VAE on synthetic 16x16 "blob" images.

Each image is a sum of 1-3 anisotropic Gaussian blobs at random positions,
clipped to [0, 1]. Bernoulli decoder (BCE reconstruction) + Gaussian KL.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)

IMG = 16
LATENT_DIM = 8
HIDDEN = 256
BATCH_SIZE = 128
EPOCHS = 20
LR = 1e-3
N_TRAIN = 6000
N_VAL = 1000
SEED = 0


# ----------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------
def make_blob_images(n, seed):
    rng = np.random.default_rng(seed)
    yy, xx = np.meshgrid(np.arange(IMG), np.arange(IMG), indexing="ij")
    imgs = np.zeros((n, IMG, IMG), dtype=np.float32)
    for i in range(n):
        k = rng.integers(1, 4)
        for _ in range(k):
            cy, cx = rng.uniform(2, IMG - 2, size=2)
            sy, sx = rng.uniform(1.0, 3.5, size=2)
            amp = rng.uniform(0.6, 1.0)
            imgs[i] += amp * np.exp(-((yy - cy) ** 2 / (2 * sy ** 2) + (xx - cx) ** 2 / (2 * sx ** 2)))
    return np.clip(imgs, 0.0, 1.0)


def build_datasets():
    train = torch.from_numpy(make_blob_images(N_TRAIN, SEED)).view(N_TRAIN, -1)
    val = torch.from_numpy(make_blob_images(N_VAL, SEED + 1)).view(N_VAL, -1)
    return train, val


def iterate_batches(x, batch_size, shuffle, generator=None):
    n = x.shape[0]
    idx = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
    for start in range(0, n, batch_size):
        yield x[idx[start:start + batch_size]]


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class VAE(nn.Module):
    def __init__(self, in_dim=IMG * IMG, hidden=HIDDEN, latent=LATENT_DIM):
        super().__init__()
        self.enc = nn.Sequential(
            nn.Linear(in_dim, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
        )
        self.fc_mu = nn.Linear(hidden, latent)
        self.fc_logvar = nn.Linear(hidden, latent)
        self.dec = nn.Sequential(
            nn.Linear(latent, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, in_dim),
        )

    def encode(self, x):
        h = self.enc(x)
        return self.fc_mu(h), self.fc_logvar(h)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        return mu + std * torch.randn_like(std)

    def decode(self, z):
        return torch.sigmoid(self.dec(z))

    def forward(self, x):
        mu, logvar = self.encode(x)
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


def vae_loss(x_hat, x, mu, logvar):
    # negative ELBO per example: Bernoulli NLL + KL(q(z|x) || N(0, I))
    recon = F.binary_cross_entropy(x_hat, x)
    kl = (-0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).sum(dim=1)).mean()
    return recon + kl, recon, kl


def compute_loss(model, batch):
    x_hat, mu, logvar = model(batch)
    loss, _, _ = vae_loss(x_hat, batch, mu, logvar)
    return loss


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR)


# ----------------------------------------------------------------------------
# eval
# ----------------------------------------------------------------------------
@torch.no_grad()
def evaluate(model, val_x):
    model.eval()
    tot, tot_rec, tot_kl, tot_mse, n = 0.0, 0.0, 0.0, 0.0, 0
    for xb in iterate_batches(val_x, 500, shuffle=False):
        x_hat, mu, logvar = model(xb)
        loss, rec, kl = vae_loss(x_hat, xb, mu, logvar)
        # pixel MSE of the posterior-mean reconstruction, independent of loss scaling
        mse = F.mse_loss(model.decode(mu), xb)
        b = xb.shape[0]
        tot += loss.item() * b; tot_rec += rec.item() * b; tot_kl += kl.item() * b
        tot_mse += mse.item() * b; n += b
    model.train()
    return tot / n, tot_rec / n, tot_kl / n, tot_mse / n


def count_active_units(model, val_x, thresh=1e-2):
    with torch.no_grad():
        mu, _ = model.encode(val_x)
    return int((mu.var(dim=0) > thresh).sum())


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
        "model": VAE(),
        "data": batches,
        "loss_fn": compute_loss,
        "make_optimizer": make_optimizer,
        "task": "regression",
    }


def main():
    torch.manual_seed(SEED)
    t0 = time.time()
    train_x, val_x = build_datasets()
    print(f"data: train={tuple(train_x.shape)} val={tuple(val_x.shape)} "
          f"mean_pixel={train_x.mean():.4f} ({time.time() - t0:.1f}s)")

    model = VAE()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: VAE latent_dim={LATENT_DIM} hidden={HIDDEN} params={n_params/1e3:.1f}K")
    opt = make_optimizer(model.parameters())
    g = torch.Generator().manual_seed(SEED)

    step = 0
    for epoch in range(1, EPOCHS + 1):
        t_ep = time.time()
        run_loss = run_rec = run_kl = 0.0
        nb = 0
        for xb in iterate_batches(train_x, BATCH_SIZE, shuffle=True, generator=g):
            x_hat, mu, logvar = model(xb)
            loss, rec, kl = vae_loss(x_hat, xb, mu, logvar)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            run_loss += loss.item(); run_rec += rec.item(); run_kl += kl.item()
            nb += 1
            step += 1
        val_loss, val_rec, val_kl, val_mse = evaluate(model, val_x)
        print(f"epoch {epoch:2d}/{EPOCHS} | step {step:5d} | train_loss {run_loss/nb:.4f} "
              f"(recon {run_rec/nb:.4f}, kl {run_kl/nb:.4f}) | val_loss {val_loss:.4f} "
              f"(recon {val_rec:.4f}, kl {val_kl:.4f}) | val_mse {val_mse:.5f} | "
              f"{(time.time() - t_ep)*1000:.0f}ms")

    au = count_active_units(model, val_x)
    print(f"done in {time.time() - t0:.1f}s | active latent units: {au}/{LATENT_DIM} | final val_mse {val_mse:.5f}")


if __name__ == "__main__":
    main()
