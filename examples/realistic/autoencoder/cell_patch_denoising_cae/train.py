"""Denoising conv autoencoder for 32x32 fluorescence-microscopy patches.

Patches are rendered synthetically: a handful of blurred elliptical nuclei on
a dark, slightly uneven background. Training pairs are (noisy, clean), where
the noise model is Poisson-like shot noise + Gaussian read noise + a few hot
pixels, roughly what a cheap sCMOS camera gives at low exposure.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

SEED = 1234
IMG = 32
N_TRAIN = 1280
N_VAL = 256
BATCH_SIZE = 32
EPOCHS = 8
LR = 2e-3
WEIGHT_DECAY = 1e-5
LOG_EVERY = 16


# ----------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------
def render_patch(rng):
    yy, xx = np.mgrid[0:IMG, 0:IMG].astype(np.float32)
    # smooth background gradient
    gx, gy = rng.normal(0, 0.02, 2)
    img = 0.05 + gx * (xx - IMG / 2) / IMG + gy * (yy - IMG / 2) / IMG
    for _ in range(rng.integers(2, 6)):
        cx, cy = rng.uniform(4, IMG - 4, 2)
        a, b = rng.uniform(2.5, 6.0, 2)
        theta = rng.uniform(0, np.pi)
        c, s = np.cos(theta), np.sin(theta)
        u = ((xx - cx) * c + (yy - cy) * s) / a
        v = (-(xx - cx) * s + (yy - cy) * c) / b
        r2 = u ** 2 + v ** 2
        brightness = rng.uniform(0.4, 0.9)
        # soft-edged nucleus with a bit of chromatin texture
        texture = 1.0 + 0.15 * np.sin(rng.uniform(0.5, 1.5) * xx + rng.uniform(0, 6)) \
            * np.cos(rng.uniform(0.5, 1.5) * yy)
        img = img + brightness * texture / (1.0 + np.exp(np.minimum((r2 - 1.0) * 6.0, 50.0)))
    return np.clip(img, 0.0, 1.0).astype(np.float32)


def add_camera_noise(clean, rng, photons=30.0, read_sigma=0.04, hot_frac=0.003):
    noisy = rng.poisson(clean * photons).astype(np.float32) / photons
    noisy += rng.normal(0.0, read_sigma, clean.shape).astype(np.float32)
    hot = rng.random(clean.shape) < hot_frac
    noisy[hot] = 1.0
    return np.clip(noisy, 0.0, 1.0).astype(np.float32)


class NoisyPatchDataset(Dataset):
    """Clean patches are fixed; noise is re-sampled each time an item is read."""

    def __init__(self, n, seed, fixed_noise=False):
        rng = np.random.default_rng(seed)
        self.clean = np.stack([render_patch(rng) for _ in range(n)])[:, None]
        self.seed = seed
        self.fixed_noise = fixed_noise
        self.epoch = 0

    def __len__(self):
        return len(self.clean)

    def __getitem__(self, idx):
        epoch = 0 if self.fixed_noise else self.epoch
        rng = np.random.default_rng((self.seed, epoch, idx))
        clean = self.clean[idx]
        noisy = add_camera_noise(clean, rng)
        return torch.from_numpy(noisy), torch.from_numpy(clean)


def build_loaders(seed=SEED):
    train_ds = NoisyPatchDataset(N_TRAIN, seed)
    val_ds = NoisyPatchDataset(N_VAL, seed + 1, fixed_noise=True)
    g = torch.Generator().manual_seed(seed)
    train_loader = DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True, generator=g, drop_last=True)
    val_loader = DataLoader(val_ds, batch_size=128, shuffle=False)
    return train_loader, val_loader


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
def conv_block(c_in, c_out, stride=1):
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1),
        nn.BatchNorm2d(c_out),
        nn.ReLU(inplace=True),
    )


class DenoisingCAE(nn.Module):
    def __init__(self, base=16):
        super().__init__()
        self.encoder = nn.Sequential(
            conv_block(1, base),                 # 32x32
            conv_block(base, base * 2, stride=2),  # 16x16
            conv_block(base * 2, base * 4, stride=2),  # 8x8
        )
        self.decoder = nn.Sequential(
            nn.ConvTranspose2d(base * 4, base * 2, 4, stride=2, padding=1),  # 16x16
            nn.BatchNorm2d(base * 2), nn.ReLU(inplace=True),
            nn.ConvTranspose2d(base * 2, base, 4, stride=2, padding=1),  # 32x32
            nn.BatchNorm2d(base), nn.ReLU(inplace=True),
            nn.Conv2d(base, 1, 3, padding=1),
        )

    def forward(self, x):
        return torch.sigmoid(self.decoder(self.encoder(x)))


def loss_fn(model, batch):
    noisy, clean = batch
    return F.mse_loss(model(noisy), clean)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY)


def make_scheduler(optimizer):
    # halve the learning rate every 3 epochs
    return torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)


def make_target():
    torch.manual_seed(SEED)
    train_loader, _ = build_loaders()
    batches = []
    for i, batch in enumerate(train_loader):
        batches.append(batch)
        if i == 4:
            break
    return {
        "model": DenoisingCAE(),
        "data": batches,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "task": "regression",
    }


def psnr(mse):
    return 10.0 * math.log10(1.0 / max(mse, 1e-12))


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    tot, n = 0.0, 0
    for noisy, clean in loader:
        tot += F.mse_loss(model(noisy), clean, reduction="sum").item()
        n += clean.numel()
    model.train()
    return tot / n


def main():
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    train_loader, val_loader = build_loaders()
    model = DenoisingCAE()
    optimizer = make_optimizer(model.parameters())
    scheduler = make_scheduler(optimizer)

    # reference: how good is the noisy input itself?
    base_mse = np.mean([F.mse_loss(n, c).item() for n, c in val_loader])
    print(f"***** Running training *****")
    print(f"  Num examples = {N_TRAIN}")
    print(f"  Num Epochs = {EPOCHS}")
    print(f"  Batch size = {BATCH_SIZE}")
    print(f"  Total optimization steps = {EPOCHS * len(train_loader)}")
    print(f"  Noisy-input baseline: val_mse = {base_mse:.5f}, psnr = {psnr(base_mse):.2f} dB")

    step = 0
    t_start = time.time()
    steps_per_epoch = len(train_loader)
    for epoch in range(EPOCHS):
        train_loader.dataset.epoch = epoch
        running, count = 0.0, 0
        for batch in train_loader:
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model, batch)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            step += 1
            running += loss.item()
            count += 1
            if step % LOG_EVERY == 0:
                print({
                    "loss": round(running / count, 5),
                    "learning_rate": float(f"{optimizer.param_groups[0]['lr']:.4g}"),
                    "epoch": round(step / steps_per_epoch, 2),
                })
                running, count = 0.0, 0
        val_mse = evaluate(model, val_loader)
        print({
            "eval_loss": round(val_mse, 5),
            "eval_psnr": round(psnr(val_mse), 2),
            "epoch": float(epoch + 1),
        })
    runtime = time.time() - t_start
    print({
        "train_runtime": round(runtime, 2),
        "train_steps_per_second": round(step / runtime, 2),
        "epoch": float(EPOCHS),
    })


if __name__ == "__main__":
    main()
