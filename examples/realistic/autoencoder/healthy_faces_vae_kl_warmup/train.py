"""Convolutional VAE on procedurally drawn 28x28 cartoon faces.

Each face has a head outline (ellipse), two eyes, optional eyebrows and a
mouth whose curvature encodes the expression; position, size, eye spacing
and stroke width vary per sample.  Bernoulli decoder (BCE on logits) summed
over pixels and averaged over the batch, linear KL warm-up.
"""
import argparse
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

IMG = 28


def draw_faces(n, seed):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:IMG, 0:IMG].astype(np.float32)
    out = np.zeros((n, IMG, IMG), dtype=np.float32)
    for i in range(n):
        cx = 13.5 + rng.uniform(-2.0, 2.0)
        cy = 13.5 + rng.uniform(-2.0, 2.0)
        rx = rng.uniform(8.0, 11.0)
        ry = rx * rng.uniform(1.0, 1.2)
        width = rng.uniform(0.8, 1.4)
        r = np.sqrt(((xx - cx) / rx) ** 2 + ((yy - cy) / ry) ** 2)
        img = np.clip(1.0 - np.abs(r - 1.0) * rx / width, 0.0, 1.0)

        eye_dx = rx * rng.uniform(0.3, 0.45)
        eye_y = cy - ry * rng.uniform(0.2, 0.35)
        eye_r = rng.uniform(1.0, 1.8)
        for sx in (-1.0, 1.0):
            d = np.sqrt((xx - (cx + sx * eye_dx)) ** 2 + (yy - eye_y) ** 2)
            img = np.maximum(img, np.clip(eye_r + 0.5 - d, 0.0, 1.0))
            if rng.random() < 0.5:
                tilt = rng.uniform(-0.4, 0.4) * sx
                bx = cx + sx * eye_dx
                by = eye_y - eye_r - 1.8
                on_brow = (np.abs(xx - bx) <= 2.0) & (np.abs(yy - (by + tilt * (xx - bx))) <= 0.6)
                img = np.maximum(img, on_brow.astype(np.float32))

        mouth_y = cy + ry * rng.uniform(0.3, 0.45)
        half = rx * rng.uniform(0.3, 0.5)
        curve = rng.uniform(-0.35, 0.35)
        mx = np.linspace(cx - half, cx + half, 24, dtype=np.float32)
        my = mouth_y + curve * (half ** 2 - (mx - cx) ** 2) / max(half, 1.0)
        d = np.sqrt((xx[None] - mx[:, None, None]) ** 2 + (yy[None] - my[:, None, None]) ** 2).min(axis=0)
        img = np.maximum(img, np.clip(width - d + 0.3, 0.0, 1.0))
        out[i] = img
    return torch.from_numpy(out).unsqueeze(1)


def build_loaders(batch_size=32, n_train=4000, n_val=1000, seed=0):
    x_train = draw_faces(n_train, seed)
    x_val = draw_faces(n_val, seed + 1)
    g = torch.Generator().manual_seed(seed)
    train_loader = DataLoader(TensorDataset(x_train), batch_size=batch_size, shuffle=True,
                              drop_last=True, generator=g)
    val_loader = DataLoader(TensorDataset(x_val), batch_size=256)
    return train_loader, val_loader


class ConvVAE(nn.Module):
    def __init__(self, latent_dim=12):
        super().__init__()
        self.latent_dim = latent_dim
        self.encoder = nn.Sequential(
            nn.Conv2d(1, 16, 4, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, 4, stride=2, padding=1), nn.ReLU(),
            nn.Flatten(),
            nn.Linear(32 * 7 * 7, 128), nn.ReLU(),
        )
        self.fc_mu = nn.Linear(128, latent_dim)
        self.fc_logvar = nn.Linear(128, latent_dim)
        self.decoder_in = nn.Sequential(
            nn.Linear(latent_dim, 128), nn.ReLU(),
            nn.Linear(128, 32 * 7 * 7), nn.ReLU(),
        )
        self.decoder = nn.Sequential(
            nn.ConvTranspose2d(32, 16, 4, stride=2, padding=1), nn.ReLU(),
            nn.ConvTranspose2d(16, 1, 4, stride=2, padding=1),
        )

    def encode(self, x):
        h = self.encoder(x)
        return self.fc_mu(h), self.fc_logvar(h)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        return mu + std * torch.randn_like(std)

    def decode(self, z):
        return self.decoder(self.decoder_in(z).view(-1, 32, 7, 7))

    def forward(self, x):
        mu, logvar = self.encode(x)
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


def vae_terms(model, x):
    logits, mu, logvar = model(x)
    recon = F.binary_cross_entropy_with_logits(logits, x, reduction="sum") / x.size(0)
    kl = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp()) / x.size(0)
    return recon, kl


def loss_fn(model, batch, beta=1.0):
    (x,) = batch
    recon, kl = vae_terms(model, x)
    return recon + beta * kl


def kl_weight(step, warmup_steps):
    return min(1.0, step / warmup_steps)


def make_target():
    torch.manual_seed(0)
    train_loader, _ = build_loaders()
    model = ConvVAE()
    it = iter(train_loader)
    data = [next(it) for _ in range(4)]
    return {
        "model": model,
        "batch": data[0],
        "data": data,
        "loss_fn": loss_fn,
        "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3),
        "make_optimizer": lambda params: torch.optim.Adam(params, lr=1e-3),
        "task": "regression",
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--warmup-epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    train_loader, val_loader = build_loaders(args.batch_size, seed=args.seed)
    model = ConvVAE()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"ConvVAE: {n_params:,} params | train batches {len(train_loader)} | val images {len(val_loader.dataset)}")
    warmup_steps = args.warmup_epochs * len(train_loader)

    step = 0
    for epoch in range(args.epochs):
        t0 = time.time()
        model.train()
        tot = rec_sum = kl_sum = 0.0
        for batch in train_loader:
            beta = kl_weight(step, warmup_steps)
            (x,) = batch
            recon, kl = vae_terms(model, x)
            loss = recon + beta * kl
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            tot += loss.item()
            rec_sum += recon.item()
            kl_sum += kl.item()
            step += 1
        n = len(train_loader)

        model.eval()
        v_rec = v_kl = 0.0
        with torch.no_grad():
            for (x,) in val_loader:
                recon, kl = vae_terms(model, x)
                v_rec += recon.item() * x.size(0)
                v_kl += kl.item() * x.size(0)
        n_val = len(val_loader.dataset)
        v_rec, v_kl = v_rec / n_val, v_kl / n_val
        val_loss = v_rec + beta * v_kl
        print(f"epoch {epoch} | train_loss {tot / n:.2f} | recon {rec_sum / n:.2f} | kl {kl_sum / n:.2f} "
              f"| val_loss {val_loss:.2f} | val_recon {v_rec:.2f} | val_kl {v_kl:.2f} | beta {beta:.2f} "
              f"| {time.time() - t0:.1f}s")



if __name__ == "__main__":
    main()
