"""Convolutional VAE on 28x28 grayscale sprite images (disks, squares, triangles, rings, crosses).

Gaussian decoder with a shared output scale set to its maximum-likelihood value on each batch
(optimal sigma-VAE, Rybkin et al. 2021), diagonal Gaussian posterior, full ELBO (beta = 1).
"""
import math
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

SEED = 0
RUN_DIR = Path(__file__).resolve().parent
DATA_PATH = RUN_DIR / "data" / "sprites_28.npz"

IMG = 28
N_TRAIN, N_VAL = 4000, 1000
BATCH_SIZE = 64
EPOCHS = 8
LR = 2e-3
LATENT_DIM = 10
LOG_EVERY = 25

torch.set_num_threads(1)


# ----------------------------------------------------------------------------- data

def render_sprites(n, rng):
    yy, xx = np.mgrid[0:IMG, 0:IMG].astype(np.float32)
    shape = rng.integers(0, 5, n)
    cx, cy = rng.uniform(8, 20, n), rng.uniform(8, 20, n)
    r = rng.uniform(4, 8, n)
    level = rng.uniform(0.65, 1.0, n)
    imgs = np.zeros((n, IMG, IMG), np.float32)
    for i in range(n):
        dx, dy = xx - cx[i], yy - cy[i]
        if shape[i] == 0:
            m = dx ** 2 + dy ** 2 <= r[i] ** 2
        elif shape[i] == 1:
            m = (np.abs(dx) <= 0.8 * r[i]) & (np.abs(dy) <= 0.8 * r[i])
        elif shape[i] == 2:
            m = (dy <= 0.8 * r[i]) & (dy >= -r[i] + 2 * np.abs(dx))
        elif shape[i] == 3:
            d2 = dx ** 2 + dy ** 2
            m = (d2 <= r[i] ** 2) & (d2 >= (0.55 * r[i]) ** 2)
        else:
            w = max(1.0, 0.3 * r[i])
            m = ((np.abs(dx) <= w) & (np.abs(dy) <= r[i])) | ((np.abs(dy) <= w) & (np.abs(dx) <= r[i]))
        imgs[i] = m * level[i]
    k = np.array([0.25, 0.5, 0.25], np.float32)
    padded = np.pad(imgs, ((0, 0), (1, 1), (1, 1)))
    blur = sum(k[a] * k[b] * padded[:, a:a + IMG, b:b + IMG] for a in range(3) for b in range(3))
    return np.clip(blur, 0.0, 1.0).astype(np.float32), shape


def load_sprites():
    if not DATA_PATH.exists():
        DATA_PATH.parent.mkdir(exist_ok=True)
        rng = np.random.default_rng(SEED)
        x, s = render_sprites(N_TRAIN + N_VAL, rng)
        np.savez_compressed(DATA_PATH, x=x, shape=s)
    d = np.load(DATA_PATH)
    x = torch.from_numpy(d["x"]).unsqueeze(1)
    return x[:N_TRAIN], x[N_TRAIN:]


def build_loaders():
    x_train, x_val = load_sprites()
    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(TensorDataset(x_train), batch_size=BATCH_SIZE, shuffle=True, drop_last=True,
                              generator=g)
    val_loader = DataLoader(TensorDataset(x_val), batch_size=500)
    return train_loader, val_loader


# ----------------------------------------------------------------------------- model

class ConvVAE(nn.Module):
    def __init__(self, latent_dim=LATENT_DIM):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv2d(1, 16, 4, 2, 1), nn.ReLU(),   # 14x14
            nn.Conv2d(16, 32, 4, 2, 1), nn.ReLU(),  # 7x7
            nn.Flatten(),
            nn.Linear(32 * 7 * 7, 128), nn.ReLU(),
        )
        self.to_mu = nn.Linear(128, latent_dim)
        self.to_logvar = nn.Linear(128, latent_dim)
        self.decoder = nn.Sequential(
            nn.Linear(latent_dim, 128), nn.ReLU(),
            nn.Linear(128, 32 * 7 * 7), nn.ReLU(),
            nn.Unflatten(1, (32, 7, 7)),
            nn.ConvTranspose2d(32, 16, 4, 2, 1), nn.ReLU(),
            nn.ConvTranspose2d(16, 1, 4, 2, 1), nn.Sigmoid(),
        )

    def encode(self, x):
        h = self.encoder(x)
        return self.to_mu(h), self.to_logvar(h)

    def forward(self, x):
        mu, logvar = self.encode(x)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return self.decoder(z), mu, logvar


def softclip(t, lo):
    return lo + F.softplus(t - lo)


def optimal_log_sigma(x_hat, x):
    return softclip(0.5 * torch.log(((x - x_hat) ** 2).mean()), -6.0)


def gaussian_nll(x_hat, x, log_sigma):
    per_pixel = 0.5 * ((x - x_hat) / log_sigma.exp()) ** 2 + log_sigma + 0.5 * math.log(2 * math.pi)
    return per_pixel.sum() / x.size(0)


def vae_terms(model, x):
    x_hat, mu, logvar = model(x)
    log_sigma = optimal_log_sigma(x_hat, x)
    recon = gaussian_nll(x_hat, x, log_sigma)
    kl = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp()) / x.size(0)
    return recon, kl, log_sigma.detach()


def elbo_loss(model, batch):
    recon, kl, _ = vae_terms(model, batch[0])
    return recon + kl


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR)


@torch.no_grad()
def evaluate(model, val_loader):
    model.eval()
    rec_tot, kl_tot, se_tot, n, mus = 0.0, 0.0, 0.0, 0, []
    for (x,) in val_loader:
        recon, kl, _ = vae_terms(model, x)
        mu = model.encode(x)[0]
        rec_tot += recon.item() * x.size(0)
        kl_tot += kl.item() * x.size(0)
        se_tot += ((model.decoder(mu) - x) ** 2).mean().item() * x.size(0)
        n += x.size(0)
        mus.append(mu)
    model.train()
    active = int((torch.cat(mus).var(0) > 0.01).sum())
    return rec_tot / n, kl_tot / n, se_tot / n, active


def make_target():
    torch.manual_seed(SEED)
    train_loader, val_loader = build_loaders()
    model = ConvVAE()
    return {
        "model": model,
        "data": train_loader,
        "loss_fn": elbo_loss,
        "optimizer": make_optimizer(model.parameters()),
        "make_optimizer": make_optimizer,
        "task": "reconstruction",
        "val_data": val_loader,
    }


if __name__ == "__main__":
    t0 = time.time()
    target = make_target()
    model, train_loader, val_loader, optimizer = (target["model"], target["data"], target["val_data"],
                                                  target["optimizer"])
    steps_per_epoch = len(train_loader)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"ConvVAE: {n_params / 1e3:.1f}K params | train {len(train_loader.dataset)} val {len(val_loader.dataset)} "
          f"| {steps_per_epoch} steps/epoch")
    step = 0
    t_log = time.time()
    for epoch in range(1, EPOCHS + 1):
        for batch in train_loader:
            recon, kl, log_sigma = vae_terms(model, batch[0])
            loss = recon + kl
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if step % LOG_EVERY == 0:
                ms = (time.time() - t_log) / LOG_EVERY * 1000
                t_log = time.time()
                print(f"step {step:4d} | epoch {epoch:2d} | loss {loss.item():7.2f} | recon {recon.item():7.2f} "
                      f"| kl {kl.item():6.2f} | sigma {log_sigma.exp().item():.4f} | {ms:.1f}ms/step")
        v_rec, v_kl, v_mse, active = evaluate(model, val_loader)
        print(f"---- epoch {epoch:2d} val | neg_elbo {v_rec + v_kl:7.2f} | recon {v_rec:7.2f} | kl {v_kl:6.2f} "
              f"| pixel mse {v_mse:.5f} | active units {active}/{LATENT_DIM}")
    print(f"done in {time.time() - t0:.1f}s")
