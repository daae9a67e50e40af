"""Convolutional VAE on wafer bin maps (pass/fail per die) for defect-pattern
embedding. The latent space is later used for clustering and retrieval of
similar failure signatures; here we only fit the generative model and track
the validation negative ELBO (nats per wafer).
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

SEED = 2024
MAP = 32
N_TRAIN, N_VAL = 3500, 800
LATENT = 16
BATCH = 128
EPOCHS = 12
LR = 2e-3

PATTERNS = ["none", "center", "donut", "edge_ring", "edge_loc", "scratch", "local", "random"]
PATTERN_P = [0.30, 0.12, 0.08, 0.14, 0.10, 0.10, 0.10, 0.06]


# ----------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------
def synth_wafers(n, rng):
    """Synthetic stand-in for the fab's wafer-map export: binary fail maps inside a circular wafer."""
    yy, xx = np.mgrid[0:MAP, 0:MAP]
    cy = cx = (MAP - 1) / 2
    r = np.sqrt((yy - cy) ** 2 + (xx - cx) ** 2) / (MAP / 2)
    theta = np.arctan2(yy - cy, xx - cx)
    wafer = (r <= 1.0).astype(np.float32)
    maps = np.zeros((n, MAP, MAP), dtype=np.float32)
    labels = rng.choice(len(PATTERNS), size=n, p=PATTERN_P)
    for i, lab in enumerate(labels):
        p = np.full((MAP, MAP), rng.uniform(0.01, 0.06))
        kind = PATTERNS[lab]
        if kind == "center":
            p += 0.9 * np.exp(-(r / rng.uniform(0.2, 0.4)) ** 2)
        elif kind == "donut":
            r0 = rng.uniform(0.35, 0.6)
            p += 0.85 * np.exp(-((r - r0) / 0.1) ** 2)
        elif kind == "edge_ring":
            p += 0.9 * (r > rng.uniform(0.8, 0.9))
        elif kind == "edge_loc":
            t0 = rng.uniform(-math.pi, math.pi)
            dth = np.angle(np.exp(1j * (theta - t0)))
            p += 0.9 * (r > 0.75) * (np.abs(dth) < rng.uniform(0.4, 0.9))
        elif kind == "scratch":
            a = rng.uniform(0, math.pi)
            off = rng.uniform(-0.4, 0.4)
            d = np.abs((xx - cx) / (MAP / 2) * math.sin(a) - (yy - cy) / (MAP / 2) * math.cos(a) - off)
            along = (xx - cx) / (MAP / 2) * math.cos(a) + (yy - cy) / (MAP / 2) * math.sin(a)
            p += 0.9 * (d < 0.05) * (np.abs(along - rng.uniform(-0.3, 0.3)) < rng.uniform(0.3, 0.6))
        elif kind == "local":
            py, px = rng.uniform(-0.6, 0.6, size=2)
            dd = ((xx - cx) / (MAP / 2) - px) ** 2 + ((yy - cy) / (MAP / 2) - py) ** 2
            p += 0.9 * np.exp(-dd / rng.uniform(0.01, 0.03))
        elif kind == "random":
            p += rng.uniform(0.15, 0.3)
        p = np.clip(p, 0, 0.98) * wafer
        maps[i] = (rng.random((MAP, MAP)) < p).astype(np.float32)
    return maps, labels


class WaferMaps(Dataset):
    def __init__(self, maps, labels, augment=False, seed=0):
        self.maps = torch.from_numpy(maps).unsqueeze(1)
        self.labels = torch.from_numpy(labels)
        self.augment = augment
        self.g = torch.Generator().manual_seed(seed)

    def __len__(self):
        return len(self.maps)

    def __getitem__(self, i):
        x = self.maps[i]
        if self.augment:
            # wafers are loaded at arbitrary notch orientation: random 90-degree rotation / flip
            k = int(torch.randint(0, 4, (1,), generator=self.g))
            x = torch.rot90(x, k, dims=(1, 2))
            if torch.rand(1, generator=self.g).item() < 0.5:
                x = torch.flip(x, dims=(2,))
        return x, self.labels[i]


def build_loaders(seed=SEED):
    rng = np.random.default_rng(seed)
    tr_maps, tr_lab = synth_wafers(N_TRAIN, rng)
    va_maps, va_lab = synth_wafers(N_VAL, rng)
    train_ds = WaferMaps(tr_maps, tr_lab, augment=True, seed=seed)
    val_ds = WaferMaps(va_maps, va_lab, augment=False)
    g = torch.Generator().manual_seed(seed)
    train_dl = DataLoader(train_ds, batch_size=BATCH, shuffle=True, drop_last=True, generator=g)
    val_dl = DataLoader(val_ds, batch_size=500, shuffle=False)
    return train_dl, val_dl


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class ConvVAE(nn.Module):
    def __init__(self, latent=LATENT):
        super().__init__()
        self.enc = nn.Sequential(
            nn.Conv2d(1, 16, 4, 2, 1), nn.LeakyReLU(0.2),    # 16x16
            nn.Conv2d(16, 32, 4, 2, 1), nn.LeakyReLU(0.2),   # 8x8
            nn.Conv2d(32, 32, 4, 2, 1), nn.LeakyReLU(0.2),   # 4x4
            nn.Flatten(),
            nn.Linear(32 * 4 * 4, 256), nn.LeakyReLU(0.2),
        )
        self.fc_mu = nn.Linear(256, latent)
        self.fc_logvar = nn.Linear(256, latent)
        self.dec_fc = nn.Sequential(nn.Linear(latent, 256), nn.LeakyReLU(0.2),
                                    nn.Linear(256, 32 * 4 * 4), nn.LeakyReLU(0.2))
        self.dec = nn.Sequential(
            nn.ConvTranspose2d(32, 32, 4, 2, 1), nn.LeakyReLU(0.2),   # 8x8
            nn.ConvTranspose2d(32, 16, 4, 2, 1), nn.LeakyReLU(0.2),   # 16x16
            nn.ConvTranspose2d(16, 1, 4, 2, 1),                      # 32x32 logits
        )

    def encode(self, x):
        h = self.enc(x)
        mu = self.fc_mu(h)
        logvar = self.fc_logvar(h)
        return mu, logvar

    def decode(self, z):
        return self.dec(self.dec_fc(z).view(-1, 32, 4, 4))

    def forward(self, x):
        mu, logvar = self.encode(x)
        std = torch.exp(0.5 * logvar)
        z = mu + std * torch.randn_like(std)
        return self.decode(z), mu, logvar


def elbo_terms(model, x):
    logits, mu, logvar = model(x)
    recon = F.binary_cross_entropy_with_logits(logits, x, reduction="none").flatten(1).sum(1)
    kl = -0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).sum(1)
    return recon.mean(), kl.mean()


def loss_fn(model, batch):
    x, _ = batch
    recon, kl = elbo_terms(model, x)
    return recon + kl


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR)


@torch.no_grad()
def evaluate(model, val_dl):
    model.eval()
    tot_r = tot_k = n = 0.0
    for x, _ in val_dl:
        r, k = elbo_terms(model, x)
        tot_r += r.item() * len(x); tot_k += k.item() * len(x); n += len(x)
    model.train()
    return (tot_r + tot_k) / n, tot_r / n, tot_k / n


def make_target():
    torch.manual_seed(SEED)
    train_dl, _ = build_loaders()
    data = []
    for i, b in enumerate(train_dl):
        data.append(b)
        if i == 3:
            break
    return {"model": ConvVAE(), "data": data, "loss_fn": loss_fn,
            "make_optimizer": make_optimizer, "task": "regression"}


def main():
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    t0 = time.time()
    train_dl, val_dl = build_loaders()
    model = ConvVAE()
    opt = make_optimizer(model.parameters())
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[8, 11], gamma=0.3)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"  | Name | Type    | Params\n0 | vae  | ConvVAE | {n_params / 1e3:.1f} K")
    print(f"train wafers: {len(train_dl.dataset)}  val wafers: {len(val_dl.dataset)}")
    step = 0
    best = float("inf")
    for epoch in range(EPOCHS):
        te = time.time()
        run = 0.0
        for batch in train_dl:
            loss = loss_fn(model, batch)
            opt.zero_grad()
            loss.backward()
            opt.step()
            run += loss.item()
            step += 1
        sched.step()
        v, vr, vk = evaluate(model, val_dl)
        best = min(best, v)
        print(f"Epoch {epoch}: {len(train_dl)}/{len(train_dl)} [{time.time() - te:.1f}s] step={step} "
              f"train_loss={run / len(train_dl):.2f} val_nelbo={v:.2f} val_recon={vr:.2f} val_kl={vk:.2f}")
    print(f"`Trainer.fit` stopped: max_epochs={EPOCHS} reached. best val_nelbo={best:.2f}  wall={time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
