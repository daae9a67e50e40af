"""Variational autoencoder on 16x16 procedurally drawn shape sprites.

MLP encoder/decoder, Bernoulli likelihood (BCE with logits summed over
pixels, averaged over the batch) + analytic Gaussian KL. Trained with Adam,
cosine LR decay per epoch, gradient clipping and fp16 autocast with a
gradient scaler.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

SEED = 0
IMG = 16
N_TRAIN = 6000
N_VAL = 1000
BATCH_SIZE = 64
EPOCHS = 12
LR = 1e-3
HIDDEN = 128
LATENT = 8
CLIP = 5.0
LOG_EVERY = 25
USE_AMP = True
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

torch.set_num_threads(2)


def draw_sprites(n, rng):
    yy, xx = np.mgrid[0:IMG, 0:IMG].astype(np.float32)
    imgs = np.zeros((n, IMG, IMG), dtype=np.float32)
    kinds = rng.integers(0, 4, size=n)
    for i, k in enumerate(kinds):
        cx, cy = rng.uniform(4, IMG - 4, size=2)
        r = rng.uniform(2.0, 4.5)
        if k == 0:  # disc
            m = (xx - cx) ** 2 + (yy - cy) ** 2 <= r ** 2
        elif k == 1:  # square outline
            m = (np.maximum(np.abs(xx - cx), np.abs(yy - cy)) <= r) & \
                (np.maximum(np.abs(xx - cx), np.abs(yy - cy)) >= r - 1.2)
        elif k == 2:  # plus sign
            m = ((np.abs(xx - cx) <= 0.8) & (np.abs(yy - cy) <= r)) | \
                ((np.abs(yy - cy) <= 0.8) & (np.abs(xx - cx) <= r))
        else:  # ring
            d = np.sqrt((xx - cx) ** 2 + (yy - cy) ** 2)
            m = np.abs(d - r) <= 0.7
        img = m.astype(np.float32) * rng.uniform(0.7, 1.0)
        img += rng.normal(0, 0.03, size=img.shape).astype(np.float32)
        imgs[i] = np.clip(img, 0.0, 1.0)
    return imgs.reshape(n, IMG * IMG)


def make_datasets():
    rng = np.random.default_rng(SEED)
    x_train = torch.from_numpy(draw_sprites(N_TRAIN, rng))
    x_val = torch.from_numpy(draw_sprites(N_VAL, rng))
    return TensorDataset(x_train), TensorDataset(x_val)


class VAE(nn.Module):
    def __init__(self, d_in=IMG * IMG, hidden=HIDDEN, latent=LATENT):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.mu = nn.Linear(hidden, latent)
        self.logvar = nn.Linear(hidden, latent)
        self.dec = nn.Sequential(nn.Linear(latent, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, d_in))

    def forward(self, x):
        h = self.enc(x)
        mu, logvar = self.mu(h), self.logvar(h)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return self.dec(z), mu, logvar


def vae_loss(logits, x, mu, logvar):
    recon = F.binary_cross_entropy_with_logits(logits, x, reduction="sum") / x.size(0)
    kl = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp()) / x.size(0)
    return recon + kl, recon, kl


def compute_loss(model, batch):
    (x,) = batch
    x = x.to(DEVICE)
    with torch.autocast(device_type=DEVICE, dtype=torch.float16, enabled=USE_AMP):
        logits, mu, logvar = model(x)
    loss, _, _ = vae_loss(logits.float(), x, mu.float(), logvar.float())
    return loss


def make_loaders():
    train_ds, val_ds = make_datasets()
    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True, generator=g)
    val_loader = DataLoader(val_ds, batch_size=256, shuffle=False)
    return train_loader, val_loader


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR)


def make_target():
    torch.manual_seed(SEED)
    train_loader, val_loader = make_loaders()
    model = VAE().to(DEVICE)
    return {
        "model": model,
        "data": train_loader,
        "val_data": val_loader,
        "loss_fn": compute_loss,
        "optimizer": make_optimizer(model.parameters()),
        "make_optimizer": make_optimizer,
        "task": "generative",
    }


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    tot, rec, kld, n = 0.0, 0.0, 0.0, 0
    for (x,) in loader:
        x = x.to(DEVICE)
        logits, mu, logvar = model(x)
        loss, r, k = vae_loss(logits, x, mu, logvar)
        tot += loss.item() * x.size(0)
        rec += r.item() * x.size(0)
        kld += k.item() * x.size(0)
        n += x.size(0)
    model.train()
    return tot / n, rec / n, kld / n


def main():
    torch.manual_seed(SEED)
    train_loader, val_loader = make_loaders()
    model = VAE().to(DEVICE)
    optimizer = make_optimizer(model.parameters())
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=EPOCHS, eta_min=LR * 0.05)
    scaler = torch.amp.GradScaler(DEVICE, enabled=USE_AMP)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"VAE: {n_params} params | latent={LATENT} | train={len(train_loader.dataset)} val={len(val_loader.dataset)} | amp={USE_AMP}")

    steps_per_epoch = len(train_loader)
    total_steps = EPOCHS * steps_per_epoch
    step = 0
    t_start = time.time()
    for epoch in range(1, EPOCHS + 1):
        model.train()
        win_loss, win_rec, win_kl, win_gn = [], [], [], []
        for (x,) in train_loader:
            x = x.to(DEVICE)
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(device_type=DEVICE, dtype=torch.float16, enabled=USE_AMP):
                logits, mu, logvar = model(x)
            loss, rec, kl = vae_loss(logits.float(), x, mu.float(), logvar.float())
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
            scaler.step(optimizer)
            scaler.update()
            step += 1

            win_loss.append(loss.item())
            win_rec.append(rec.item())
            win_kl.append(kl.item())
            win_gn.append(grad_norm.item())
            if step % LOG_EVERY == 0:
                print(f"epoch {epoch} step {step:4d}/{total_steps} | loss {np.mean(win_loss):8.3f} | "
                      f"recon {np.mean(win_rec):8.3f} | kl {np.mean(win_kl):6.3f} | "
                      f"grad_norm {np.mean(win_gn):8.3f} | lr {optimizer.param_groups[0]['lr']:.2e}")
                win_loss, win_rec, win_kl, win_gn = [], [], [], []
        scheduler.step()
        val_loss, val_rec, val_kl = evaluate(model, val_loader)
        print(f"==> epoch {epoch}/{EPOCHS} | val_loss {val_loss:.3f} | val_recon {val_rec:.3f} | "
              f"val_kl {val_kl:.3f} | elapsed {time.time() - t_start:.1f}s")


if __name__ == "__main__":
    main()
