"""Convolutional autoencoder on 28x28 scanned glyph crops (32-d bottleneck)."""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

SEED = 0
IMG = 28
N_TRAIN = 3000
N_VAL = 600
LATENT = 32
BATCH_SIZE = 64
EPOCHS = 10
LR = 2e-3
WEIGHT_DECAY = 1e-5
LOG_EVERY = 25

torch.set_num_threads(1)
torch.manual_seed(SEED)


def render_glyphs(n, seed):
    """Anti-aliased pen strokes (segments and arcs), like binarised scans of handwritten marks."""
    g = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:IMG, 0:IMG].astype(np.float32)
    pix = np.stack([xx.ravel(), yy.ravel()], 1)
    out = np.zeros((n, IMG * IMG), dtype=np.float32)
    for i in range(n):
        img = np.zeros(IMG * IMG, dtype=np.float32)
        width = g.uniform(0.8, 1.8)
        for _ in range(g.integers(2, 5)):
            if g.random() < 0.6:
                a, b = g.uniform(5, 23, size=2), g.uniform(5, 23, size=2)
                ab = b - a
                t = np.clip(((pix - a) @ ab) / (ab @ ab + 1e-6), 0, 1)
                d = np.linalg.norm(pix - (a + t[:, None] * ab), axis=1)
            else:
                c = g.uniform(9, 19, size=2)
                r = g.uniform(3, 8)
                th0 = g.uniform(0, 2 * math.pi)
                span = g.uniform(math.pi / 2, 2 * math.pi)
                rel = pix - c
                ang = (np.arctan2(rel[:, 1], rel[:, 0]) - th0) % (2 * math.pi)
                d_ring = np.abs(np.linalg.norm(rel, axis=1) - r)
                e0 = c + r * np.array([math.cos(th0), math.sin(th0)])
                e1 = c + r * np.array([math.cos(th0 + span), math.sin(th0 + span)])
                d_end = np.minimum(np.linalg.norm(pix - e0, axis=1), np.linalg.norm(pix - e1, axis=1))
                d = np.where(ang <= span, d_ring, d_end)
            img = np.maximum(img, np.clip(width + 0.5 - d, 0, 1))
        out[i] = img
    out = np.round(out * 255) / 255  # 8-bit scans
    return out.reshape(n, 1, IMG, IMG)


class GlyphDataset(Dataset):
    def __init__(self, images, mean, std):
        self.images = torch.from_numpy(images)
        self.mean, self.std = mean, std

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        return (self.images[i] - self.mean) / self.std


def build_data():
    train_imgs = render_glyphs(N_TRAIN, SEED)
    val_imgs = render_glyphs(N_VAL, SEED + 1)
    mean, std = float(train_imgs.mean()), float(train_imgs.std())
    train_ds = GlyphDataset(train_imgs, mean, std)
    val_ds = GlyphDataset(val_imgs, mean, std)
    g = torch.Generator().manual_seed(SEED)
    train_dl = DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True, generator=g, drop_last=True)
    val_dl = DataLoader(val_ds, batch_size=200)
    return train_dl, val_dl, (mean, std)


class ConvAutoencoder(nn.Module):
    def __init__(self, latent=LATENT):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv2d(1, 16, 3, stride=2, padding=1), nn.ReLU(),   # 14x14
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),  # 7x7
            nn.Flatten(),
            nn.Linear(32 * 7 * 7, latent),
        )
        self.decoder = nn.Sequential(
            nn.Linear(latent, 32 * 7 * 7), nn.ReLU(),
            nn.Unflatten(1, (32, 7, 7)),
            nn.ConvTranspose2d(32, 16, 4, stride=2, padding=1), nn.ReLU(),  # 14x14
            nn.ConvTranspose2d(16, 1, 4, stride=2, padding=1),              # 28x28
            nn.Sigmoid(),
        )

    def forward(self, x):
        return self.decoder(self.encoder(x))


def loss_fn(model, batch):
    return F.mse_loss(model(batch), batch)


def make_target():
    train_dl, val_dl, stats = build_data()
    model = ConvAutoencoder()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    return {"model": model, "data": train_dl, "val_data": val_dl, "loss_fn": loss_fn,
            "optimizer": optimizer, "norm_stats": stats, "task": "reconstruction"}


@torch.no_grad()
def validate(model, dl, stats):
    mean, std = stats
    model.eval()
    loss_sum, px_se, n = 0.0, 0.0, 0
    for x in dl:
        recon = model(x)
        loss_sum += F.mse_loss(recon, x, reduction="sum").item()
        px_se += F.mse_loss(recon * std + mean, x * std + mean, reduction="sum").item()
        n += x.numel()
    model.train()
    px_mse = px_se / n
    return loss_sum / n, px_mse, 10 * math.log10(1.0 / px_mse)


def main():
    t0 = time.time()
    tgt = make_target()
    model, train_dl, val_dl, opt = tgt["model"], tgt["data"], tgt["val_data"], tgt["optimizer"]
    stats = tgt["norm_stats"]
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=LR, total_steps=EPOCHS * len(train_dl), pct_start=0.15)
    print(f"train={len(train_dl.dataset)} val={len(val_dl.dataset)} params={sum(p.numel() for p in model.parameters())}")
    step = 0
    for epoch in range(EPOCHS):
        for x in train_dl:
            loss = loss_fn(model, x)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            step += 1
            if step % LOG_EVERY == 0:
                print(f"epoch {epoch} step {step:4d} | loss {loss.item():.5f} | lr {sched.get_last_lr()[0]:.2e}")
        val_loss, px_mse, psnr = validate(model, val_dl, stats)
        print(f"==> epoch {epoch} | val_loss {val_loss:.5f} | val_px_mse {px_mse:.5f} | val_psnr {psnr:.2f} dB "
              f"| elapsed {time.time() - t0:.1f}s")
    print(f"done in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
