"""Convolutional VAE on procedurally generated 24x24 sprites.

Each sprite is a soft-edged ellipse with random position, size, aspect and
brightness.  Bernoulli likelihood (pixels in [0, 1]), standard-normal prior,
linear KL warm-up over the first epochs.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

SEED = 0
IMG = 24
N_TRAIN = 5000
N_VAL = 1000
BATCH_SIZE = 100
EPOCHS = 12
WARMUP_EPOCHS = 4
LATENT_DIM = 12
LR = 2e-3

torch.set_num_threads(1)


def make_sprites(n, seed):
    rng = np.random.default_rng(seed)
    yy, xx = np.meshgrid(np.arange(IMG), np.arange(IMG), indexing="ij")
    cx = rng.uniform(6, IMG - 6, n)
    cy = rng.uniform(6, IMG - 6, n)
    r = rng.uniform(2.5, 5.5, n)
    aspect = rng.uniform(0.6, 1.6, n)
    bright = rng.uniform(0.55, 1.0, n)
    d = ((xx[None] - cx[:, None, None]) / (r[:, None, None] * aspect[:, None, None])) ** 2 \
        + ((yy[None] - cy[:, None, None]) / r[:, None, None]) ** 2
    img = bright[:, None, None] / (1.0 + np.exp((np.sqrt(d) - 1.0) * 6.0))
    return torch.from_numpy(img.astype(np.float32)).unsqueeze(1)


def build_loaders():
    train_x = make_sprites(N_TRAIN, SEED)
    val_x = make_sprites(N_VAL, SEED + 100)
    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(TensorDataset(train_x), batch_size=BATCH_SIZE, shuffle=True,
                              drop_last=True, generator=g)
    val_loader = DataLoader(TensorDataset(val_x), batch_size=500)
    return train_loader, val_loader


class ConvVAE(nn.Module):
    def __init__(self, z_dim=LATENT_DIM):
        super().__init__()
        self.enc = nn.Sequential(
            nn.Conv2d(1, 32, 4, 2, 1), nn.ReLU(),     # 12x12
            nn.Conv2d(32, 64, 4, 2, 1), nn.ReLU(),    # 6x6
            nn.Flatten(), nn.Linear(64 * 6 * 6, 256), nn.ReLU(),
        )
        self.to_stats = nn.Linear(256, 2 * z_dim)
        self.dec = nn.Sequential(
            nn.Linear(z_dim, 256), nn.ReLU(),
            nn.Linear(256, 64 * 6 * 6), nn.ReLU(),
            nn.Unflatten(1, (64, 6, 6)),
            nn.ConvTranspose2d(64, 32, 4, 2, 1), nn.ReLU(),
            nn.ConvTranspose2d(32, 1, 4, 2, 1),       # logits
        )

    def encode(self, x):
        mu, logvar = self.to_stats(self.enc(x)).chunk(2, dim=1)
        return mu, logvar.clamp(-10, 10)

    def forward(self, x):
        mu, logvar = self.encode(x)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return self.dec(z), mu, logvar


# KL weight, updated once per epoch by the training loop
kl_state = {"beta": 0.0}


def kl_beta(epoch):
    return min(1.0, (epoch + 1) / WARMUP_EPOCHS)


def vae_terms(model, x):
    logits, mu, logvar = model(x)
    recon = F.binary_cross_entropy_with_logits(logits, x, reduction="sum") / x.size(0)
    kl_per_dim = 0.5 * (mu.pow(2) + logvar.exp() - 1.0 - logvar).mean(0)
    return recon, kl_per_dim


def loss_fn(model, batch):
    (x,) = batch
    recon, kl_per_dim = vae_terms(model, x)
    return recon + kl_state["beta"] * kl_per_dim.sum()


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    rec, kld, n = 0.0, None, 0
    for (x,) in loader:
        r, k = vae_terms(model, x)
        rec += r.item() * x.size(0)
        kld = k * x.size(0) if kld is None else kld + k * x.size(0)
        n += x.size(0)
    model.train()
    kld = kld / n
    return rec / n, kld


def make_target():
    torch.manual_seed(SEED)
    kl_state["beta"] = kl_beta(0)
    train_loader, _ = build_loaders()
    it = iter(train_loader)
    return {
        "model": ConvVAE(),
        "data": [next(it) for _ in range(4)],
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "task": "regression",
    }


def main():
    torch.manual_seed(SEED)
    train_loader, val_loader = build_loaders()
    model = ConvVAE()
    opt = make_optimizer(model.parameters())
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[9], gamma=0.3)
    steps = len(train_loader)
    for epoch in range(EPOCHS):
        kl_state["beta"] = kl_beta(epoch)
        t0 = time.time()
        model.train()
        tot = rec_sum = kl_sum = 0.0
        for batch in train_loader:
            recon, kl_per_dim = vae_terms(model, batch[0])
            loss = recon + kl_state["beta"] * kl_per_dim.sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += loss.item()
            rec_sum += recon.item()
            kl_sum += kl_per_dim.sum().item()
        sched.step()
        v_rec, v_kl = evaluate(model, val_loader)
        active = int((v_kl > 0.05).sum())
        dt = time.time() - t0
        print(f"Epoch {epoch+1}/{EPOCHS}")
        print(f"{steps}/{steps} [==============================] - {dt:.0f}s {1000*dt/steps:.0f}ms/step"
              f" - loss: {tot/steps:.2f} - recon: {rec_sum/steps:.2f} - kl: {kl_sum/steps:.2f}"
              f" - beta: {kl_state['beta']:.2f} - val_loss: {v_rec + v_kl.sum().item():.2f}"
              f" - val_recon: {v_rec:.2f} - val_kl: {v_kl.sum().item():.2f} - active_units: {active}/{LATENT_DIM}")


if __name__ == "__main__":
    main()
