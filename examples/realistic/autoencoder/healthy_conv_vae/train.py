"""Convolutional VAE on procedurally generated 28x28 "ellipse sprites".

Keras-style epoch summaries (loss = reconstruction + KL, per image).

    python train.py [--epochs 8] [--latent-dim 8]
"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

IMG = 28


def ellipse_sprites(n, seed):
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.linspace(-1, 1, IMG), torch.linspace(-1, 1, IMG), indexing="ij")
    cx, cy = (torch.rand(n, 1, 1, generator=g) - 0.5) * 0.9, (torch.rand(n, 1, 1, generator=g) - 0.5) * 0.9
    a = 0.15 + 0.35 * torch.rand(n, 1, 1, generator=g)
    b = 0.15 + 0.35 * torch.rand(n, 1, 1, generator=g)
    th = math.pi * torch.rand(n, 1, 1, generator=g)
    dx, dy = xx - cx, yy - cy
    u = dx * torch.cos(th) + dy * torch.sin(th)
    v = -dx * torch.sin(th) + dy * torch.cos(th)
    r = (u / a) ** 2 + (v / b) ** 2
    hollow = (torch.rand(n, 1, 1, generator=g) < 0.4).float()
    filled = torch.sigmoid((1 - r) * 12)
    ring = torch.sigmoid((1 - r) * 12) * torch.sigmoid((r - 0.55) * 12)
    img = hollow * ring + (1 - hollow) * filled
    return img.unsqueeze(1).clamp(0, 1)


class ConvVAE(nn.Module):
    def __init__(self, latent_dim=8):
        super().__init__()
        self.enc = nn.Sequential(
            nn.Conv2d(1, 32, 3, stride=2, padding=1), nn.LeakyReLU(0.2),   # 14x14
            nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.LeakyReLU(0.2),  # 7x7
            nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.LeakyReLU(0.2))
        self.fc_mu = nn.Linear(128, latent_dim)
        self.fc_logvar = nn.Linear(128, latent_dim)
        self.dec_fc = nn.Sequential(nn.Linear(latent_dim, 128), nn.LeakyReLU(0.2),
                                    nn.Linear(128, 64 * 7 * 7), nn.LeakyReLU(0.2))
        self.dec = nn.Sequential(
            nn.ConvTranspose2d(64, 32, 4, stride=2, padding=1), nn.LeakyReLU(0.2),  # 14x14
            nn.ConvTranspose2d(32, 1, 4, stride=2, padding=1))              # 28x28 logits

    def encode(self, x):
        h = self.enc(x)
        return self.fc_mu(h), self.fc_logvar(h).clamp(-10.0, 10.0)

    def decode(self, z):
        return self.dec(self.dec_fc(z).view(-1, 64, 7, 7))

    def forward(self, x):
        mu, logvar = self.encode(x)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return self.decode(z), mu, logvar


def vae_terms(model, x):
    logits, mu, logvar = model(x)
    recon = F.binary_cross_entropy_with_logits(logits, x, reduction="sum") / x.size(0)
    kl = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp()) / x.size(0)
    return recon, kl


def loss_fn(model, batch):
    (x,) = batch
    recon, kl = vae_terms(model, x)
    return recon + kl


def make_optimizer(params, lr=1e-3):
    return torch.optim.Adam(params, lr=lr)


def build_data(batch_size=64):
    train = TensorDataset(ellipse_sprites(6000, seed=0))
    val = TensorDataset(ellipse_sprites(1000, seed=1))
    return DataLoader(train, batch_size=batch_size, shuffle=True), DataLoader(val, batch_size=500)


def parse_args(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--latent-dim", type=int, default=8)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def make_target():
    args = parse_args([])
    torch.manual_seed(args.seed)
    train_loader, _ = build_data(args.batch_size)
    model = ConvVAE(args.latent_dim)
    it = iter(train_loader)
    data = [next(it) for _ in range(4)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model.parameters(), args.lr),
            "make_optimizer": lambda params: make_optimizer(params, args.lr), "task": "regression"}


def main():
    torch.set_num_threads(1)  # shared CPU machine
    args = parse_args()
    torch.manual_seed(args.seed)
    train_loader, val_loader = build_data(args.batch_size)
    model = ConvVAE(args.latent_dim)
    opt = make_optimizer(model.parameters(), args.lr)
    print(f'Model: "conv_vae"  (latent_dim={args.latent_dim})')
    print(f"Total params: {sum(p.numel() for p in model.parameters()):,}")
    steps = len(train_loader)
    for epoch in range(1, args.epochs + 1):
        t0 = time.time()
        model.train()
        sums, n = [0.0, 0.0, 0.0], 0
        for (x,) in train_loader:
            recon, kl = vae_terms(model, x)
            loss = recon + kl
            opt.zero_grad()
            loss.backward()
            opt.step()
            for i, v in enumerate((loss, recon, kl)):
                sums[i] += v.item() * x.size(0)
            n += x.size(0)
        model.eval()
        vs, vn = [0.0, 0.0], 0
        with torch.no_grad():
            for (x,) in val_loader:
                recon, kl = vae_terms(model, x)
                vs[0] += recon.item() * x.size(0)
                vs[1] += kl.item() * x.size(0)
                vn += x.size(0)
        dt = time.time() - t0
        print(f"Epoch {epoch}/{args.epochs}")
        print(f"{steps}/{steps} - {dt:.0f}s - {1000 * dt / steps:.0f}ms/step - loss: {sums[0] / n:.4f} - "
              f"reconstruction_loss: {sums[1] / n:.4f} - kl_loss: {sums[2] / n:.4f} - "
              f"val_loss: {(vs[0] + vs[1]) / vn:.4f} - val_reconstruction_loss: {vs[0] / vn:.4f} - "
              f"val_kl_loss: {vs[1] / vn:.4f}", flush=True)


if __name__ == "__main__":
    main()
