"""Convolutional autoencoder on 24x24 synthetic "parts inspection" images.

Each image is a dark background with a few bright primitives (discs, bars,
rings) plus sensor noise. The autoencoder compresses to a 32-d code; the
reconstruction error is used downstream to flag unusual parts.
"""
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 1234
IMG = 24
N_TRAIN = 2400
N_VAL = 600
BATCH_SIZE = 64
EPOCHS = 25
LR = 1e-3
LATENT_DIM = 32


def render_image(rng):
    yy, xx = np.mgrid[0:IMG, 0:IMG].astype(np.float32)
    img = np.zeros((IMG, IMG), dtype=np.float32)
    for _ in range(rng.integers(1, 4)):
        kind = rng.integers(0, 3)
        cy, cx = rng.uniform(4, IMG - 4, size=2)
        intensity = rng.uniform(0.5, 1.0)
        if kind == 0:  # disc
            r = rng.uniform(2.0, 5.0)
            mask = (yy - cy) ** 2 + (xx - cx) ** 2 <= r ** 2
        elif kind == 1:  # bar at a random angle
            theta = rng.uniform(0, np.pi)
            length, width = rng.uniform(6, 14), rng.uniform(1.0, 2.5)
            u = (xx - cx) * np.cos(theta) + (yy - cy) * np.sin(theta)
            v = -(xx - cx) * np.sin(theta) + (yy - cy) * np.cos(theta)
            mask = (np.abs(u) <= length / 2) & (np.abs(v) <= width / 2)
        else:  # ring
            r = rng.uniform(3.0, 6.0)
            d = np.sqrt((yy - cy) ** 2 + (xx - cx) ** 2)
            mask = np.abs(d - r) <= 1.0
        img = np.maximum(img, mask.astype(np.float32) * intensity)
    img = img + rng.normal(0, 0.03, size=img.shape).astype(np.float32)
    return np.clip(img, 0.0, 1.0)


def make_dataset(n, seed):
    rng = np.random.default_rng(seed)
    images = np.stack([render_image(rng) for _ in range(n)])
    return torch.from_numpy(images).unsqueeze(1)  # (N, 1, H, W)


def build_datasets():
    return make_dataset(N_TRAIN, SEED), make_dataset(N_VAL, SEED + 1)


def loader(images, batch_size, shuffle, generator=None):
    idx = torch.randperm(len(images), generator=generator) if shuffle else torch.arange(len(images))
    for start in range(0, len(images), batch_size):
        yield images[idx[start : start + batch_size]]


class ConvAE(nn.Module):
    def __init__(self, latent_dim=LATENT_DIM):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv2d(1, 16, 3, stride=2, padding=1),   # 24 -> 12
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1),  # 12 -> 6
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(32 * 6 * 6, latent_dim),
        )
        self.decoder_fc = nn.Linear(latent_dim, 32 * 6 * 6)
        self.decoder = nn.Sequential(
            nn.ReLU(),
            nn.ConvTranspose2d(32, 16, 4, stride=2, padding=1),  # 6 -> 12
            nn.ReLU(),
            nn.ConvTranspose2d(16, 1, 4, stride=2, padding=1),   # 12 -> 24
        )

    def forward(self, x):
        z = self.encoder(x)
        h = self.decoder_fc(z).view(-1, 32, 6, 6)
        return torch.sigmoid(self.decoder(h))


def loss_fn(model, batch):
    return F.mse_loss(model(batch), batch)


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR)


def make_scheduler(optimizer):
    # halve the LR when validation stops improving
    return torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.5, patience=2)


@torch.no_grad()
def evaluate(model, images):
    model.eval()
    tot = 0.0
    for batch in loader(images, 200, shuffle=False):
        tot += loss_fn(model, batch).item() * len(batch)
    model.train()
    return tot / len(images)


def make_target():
    torch.manual_seed(SEED)
    train_images = make_dataset(BATCH_SIZE * 5, SEED)
    g = torch.Generator().manual_seed(SEED)
    data = list(loader(train_images, BATCH_SIZE, shuffle=True, generator=g))
    return {
        "model": ConvAE(),
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "task": "regression",
    }


def main():
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    train_images, val_images = build_datasets()
    print(f"train: {tuple(train_images.shape)}  val: {tuple(val_images.shape)}  pixel mean={train_images.mean():.3f}")

    model = ConvAE()
    optimizer = make_optimizer(model.parameters())
    scheduler = make_scheduler(optimizer)
    g = torch.Generator().manual_seed(SEED)
    step = 0
    best_val = float("inf")
    t_start = time.time()

    for epoch in range(EPOCHS):
        t0 = time.time()
        epoch_loss = 0.0
        for batch in loader(train_images, BATCH_SIZE, shuffle=True, generator=g):
            loss = loss_fn(model, batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            epoch_loss += loss.item() * len(batch)
            step += 1
            if step % 100 == 0:
                print(f"step {step:5d} | loss {loss.item():.5f}")
        train_mse = epoch_loss / len(train_images)
        val_mse = evaluate(model, val_images)
        scheduler.step(val_mse)
        if val_mse < best_val:
            best_val = val_mse
            torch.save(model.state_dict(), "ae_best.pt")
        lr = optimizer.param_groups[0]["lr"]
        print(
            f"epoch {epoch:3d} | train_mse {train_mse:.5f} | val_mse {val_mse:.5f} | "
            f"lr {lr:.2e} | {1000 * (time.time() - t0):.0f}ms"
        )
    print(f"done in {time.time() - t_start:.1f}s, best val_mse {best_val:.5f}")


if __name__ == "__main__":
    main()
