"""Denoising convolutional autoencoder for SEM micrograph texture patches.

Patches are 32x32 single-channel crops of grain/lamella textures. The model is
trained to remove additive sensor noise; random flips / translations are used
as augmentation on the training split.
"""
import math
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

torch.set_num_threads(1)

CFG = dict(
    n_patches=2000,
    patch=32,
    val_frac=0.15,
    noise_std=0.25,
    max_shift=4,
    batch_size=64,
    epochs=10,
    lr=2e-3,
    weight_decay=1e-5,
    seed=7,
)
DATA_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sem_patches.npz")


def synth_patches(n, size, rng):
    """Lamellar gratings + precipitate blobs, roughly what a polished steel SEM crop looks like."""
    yy, xx = np.meshgrid(np.arange(size), np.arange(size), indexing="ij")
    out = np.zeros((n, size, size), dtype=np.float32)
    for i in range(n):
        img = np.zeros((size, size), dtype=np.float64)
        for _ in range(rng.integers(1, 4)):
            theta = rng.uniform(0, np.pi)
            period = rng.uniform(3.0, 9.0)
            phase = rng.uniform(0, 2 * np.pi)
            amp = rng.uniform(0.3, 1.0)
            img += amp * np.sin(2 * np.pi * (xx * np.cos(theta) + yy * np.sin(theta)) / period + phase)
        for _ in range(rng.integers(2, 7)):
            cy, cx = rng.uniform(0, size, 2)
            r = rng.uniform(1.0, 3.0)
            img += rng.uniform(0.8, 2.0) * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * r * r))
        img = (img - img.min()) / (img.max() - img.min() + 1e-8)
        out[i] = img
    return out


def load_patches():
    if not os.path.exists(DATA_PATH):
        rng = np.random.default_rng(CFG["seed"])
        np.savez_compressed(DATA_PATH, patches=synth_patches(CFG["n_patches"], CFG["patch"], rng))
    return np.load(DATA_PATH)["patches"]


class PatchDataset(Dataset):
    def __init__(self, patches, noise_std, augment=False, max_shift=0, seed=0):
        self.patches = torch.from_numpy(patches).unsqueeze(1)
        self.noise_std = noise_std
        self.augment = augment
        self.max_shift = max_shift
        if not augment:
            g = torch.Generator().manual_seed(seed)
            self.fixed_noise = torch.randn(self.patches.shape, generator=g)

    def __len__(self):
        return len(self.patches)

    def _augment(self, x):
        if torch.rand(1).item() < 0.5:
            x = torch.flip(x, dims=[2])
        if torch.rand(1).item() < 0.5:
            x = torch.flip(x, dims=[1])
        dy, dx = torch.randint(-self.max_shift, self.max_shift + 1, (2,)).tolist()
        return torch.roll(x, shifts=(dy, dx), dims=(1, 2))

    def __getitem__(self, idx):
        clean = self.patches[idx]
        if self.augment:
            x = self._augment(clean)
            noisy = x + self.noise_std * torch.randn_like(x)
        else:
            x = clean
            noisy = x + self.noise_std * self.fixed_noise[idx]
        return noisy, clean


class ConvDenoiser(nn.Module):
    def __init__(self, ch=16):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv2d(1, ch, 3, stride=2, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(ch, 2 * ch, 3, stride=2, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(2 * ch, 2 * ch, 3, padding=1), nn.ReLU(inplace=True),
        )
        self.decoder = nn.Sequential(
            nn.ConvTranspose2d(2 * ch, ch, 4, stride=2, padding=1), nn.ReLU(inplace=True),
            nn.ConvTranspose2d(ch, 1, 4, stride=2, padding=1),
        )

    def forward(self, x):
        return self.decoder(self.encoder(x))


def loss_fn(model, batch):
    noisy, target = batch
    return F.mse_loss(model(noisy), target)


def build_loaders():
    patches = load_patches()
    n_val = int(len(patches) * CFG["val_frac"])
    perm = np.random.default_rng(CFG["seed"] + 1).permutation(len(patches))
    val_idx, train_idx = perm[:n_val], perm[n_val:]
    train_ds = PatchDataset(patches[train_idx], CFG["noise_std"], augment=True, max_shift=CFG["max_shift"])
    val_ds = PatchDataset(patches[val_idx], CFG["noise_std"], augment=False, seed=123)
    train_dl = DataLoader(train_ds, batch_size=CFG["batch_size"], shuffle=True, drop_last=True)
    val_dl = DataLoader(val_ds, batch_size=256, shuffle=False)
    return train_dl, val_dl


def make_target():
    torch.manual_seed(CFG["seed"])
    train_dl, val_dl = build_loaders()
    model = ConvDenoiser()
    optimizer = torch.optim.Adam(model.parameters(), lr=CFG["lr"], weight_decay=CFG["weight_decay"])
    return dict(model=model, data=train_dl, val_data=val_dl, loss_fn=loss_fn,
                optimizer=optimizer, task="reconstruction")


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    tot, n = 0.0, 0
    for noisy, target in loader:
        tot += F.mse_loss(model(noisy), target, reduction="sum").item()
        n += target.numel()
    model.train()
    mse = tot / n
    return mse, 10 * math.log10(1.0 / mse)


def main():
    t = make_target()
    model, train_dl, val_dl, opt = t["model"], t["data"], t["val_data"], t["optimizer"]
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=CFG["epochs"] * len(train_dl))
    steps = len(train_dl)
    base_mse = np.mean([F.mse_loss(noisy, clean).item() for noisy, clean in val_dl])
    print(f"train patches: {len(train_dl.dataset)}  val patches: {len(val_dl.dataset)}  "
          f"noisy-input val mse: {base_mse:.4f} ({10 * math.log10(1 / base_mse):.2f} dB)")
    for epoch in range(CFG["epochs"]):
        print(f"Epoch {epoch + 1}/{CFG['epochs']}")
        t0 = time.time()
        running = 0.0
        for noisy, clean in train_dl:
            loss = loss_fn(model, (noisy, clean))
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            running += loss.item()
        val_mse, val_psnr = evaluate(model, val_dl)
        dt = time.time() - t0
        print(f"{steps}/{steps} [==============================] - {dt:.0f}s {1000 * dt / steps:.0f}ms/step"
              f" - loss: {running / steps:.4f} - val_loss: {val_mse:.4f} - val_psnr: {val_psnr:.2f}")


if __name__ == "__main__":
    main()
