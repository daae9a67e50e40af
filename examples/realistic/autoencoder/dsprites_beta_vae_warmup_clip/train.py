"""beta-VAE on procedurally generated dSprites-style images (16x16).

Shapes (square / ellipse / triangle) with random scale, position and
rotation; the goal is a disentangled latent, so beta > 1 with a linear
KL warmup from 0. Logging mimics the HF Trainer: one dict per logging
step with loss, grad_norm (pre-clip, like Trainer), learning_rate, epoch.
"""
import argparse
import json
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def get_args(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--img", type=int, default=16)
    p.add_argument("--n_train", type=int, default=6000)
    p.add_argument("--n_eval", type=int, default=600)
    p.add_argument("--batch_size", type=int, default=200)
    p.add_argument("--num_train_epochs", type=int, default=22)
    p.add_argument("--learning_rate", type=float, default=2e-3)
    p.add_argument("--latent_dim", type=int, default=10)
    p.add_argument("--beta", type=float, default=4.0)
    p.add_argument("--kl_warmup_steps", type=int, default=330)
    p.add_argument("--max_grad_norm", type=float, default=60.0)
    p.add_argument("--logging_steps", type=int, default=30)
    p.add_argument("--seed", type=int, default=7)
    return p.parse_args(argv)


def render_sprites(n, img, seed):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:img, 0:img].astype(np.float32)
    out = np.zeros((n, 1, img, img), dtype=np.float32)
    shapes = rng.integers(0, 3, n)
    scale = rng.uniform(0.12, 0.28, n) * img
    cx = rng.uniform(0.25, 0.75, n) * img
    cy = rng.uniform(0.25, 0.75, n) * img
    rot = rng.uniform(0, np.pi, n)
    for i in range(n):
        c, s = np.cos(rot[i]), np.sin(rot[i])
        u = (xx - cx[i]) * c + (yy - cy[i]) * s
        v = -(xx - cx[i]) * s + (yy - cy[i]) * c
        if shapes[i] == 0:
            m = (np.abs(u) <= scale[i]) & (np.abs(v) <= scale[i])
        elif shapes[i] == 1:
            m = (u / scale[i]) ** 2 + (v / (0.6 * scale[i])) ** 2 <= 1.0
        else:
            m = (v >= -scale[i]) & (v <= scale[i] - 2 * np.abs(u))
        out[i, 0] = m
    return torch.from_numpy(out)


class BetaVAE(nn.Module):
    def __init__(self, img, latent_dim, hidden=400):
        super().__init__()
        self.img = img
        d = img * img
        self.encoder = nn.Sequential(
            nn.Flatten(),
            nn.Linear(d, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden // 2), nn.ReLU(),
        )
        self.to_stats = nn.Linear(hidden // 2, 2 * latent_dim)
        self.decoder = nn.Sequential(
            nn.Linear(latent_dim, hidden // 2), nn.ReLU(),
            nn.Linear(hidden // 2, hidden), nn.ReLU(),
            nn.Linear(hidden, d),
        )
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(m):
        if isinstance(m, nn.Linear):
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            nn.init.zeros_(m.bias)

    def forward(self, x):
        mu, logvar = self.to_stats(self.encoder(x)).chunk(2, dim=1)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        logits = self.decoder(z).view(-1, 1, self.img, self.img)
        return logits, mu, logvar


def vae_losses(model, x):
    logits, mu, logvar = model(x)
    # Bernoulli decoder: BCE summed over pixels, mean over batch
    recon = F.binary_cross_entropy_with_logits(logits, x, reduction="sum") / x.shape[0]
    kl = (-0.5 * (1 + logvar - mu.pow(2) - logvar.exp())).sum(dim=1).mean()
    return recon, kl


class BetaSchedule:
    def __init__(self, beta, warmup_steps):
        self.beta = beta
        self.warmup_steps = warmup_steps

    def __call__(self, step):
        if self.warmup_steps == 0:
            return self.beta
        return self.beta * min(1.0, step / self.warmup_steps)


def make_target():
    args = get_args([])
    torch.manual_seed(args.seed)
    x = render_sprites(4 * args.batch_size, args.img, args.seed)
    model = BetaVAE(args.img, args.latent_dim)
    data = [x[i * args.batch_size:(i + 1) * args.batch_size] for i in range(4)]

    def loss_fn(m, batch):
        recon, kl = vae_losses(m, batch)
        return recon + args.beta * kl  # post-warmup objective

    return {
        "model": model,
        "batch": data[0],
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": lambda params: torch.optim.AdamW(
            params, lr=args.learning_rate, weight_decay=0.0),
        "task": "regression",
    }


@torch.no_grad()
def evaluate(model, x_eval, bs, beta):
    model.eval()
    r, k = 0.0, 0.0
    for i in range(0, len(x_eval), bs):
        rb, kb = vae_losses(model, x_eval[i:i + bs])
        r += rb.item() * len(x_eval[i:i + bs])
        k += kb.item() * len(x_eval[i:i + bs])
    model.train()
    n = len(x_eval)
    return {"eval_loss": round((r + beta * k) / n, 4), "eval_recon": round(r / n, 4),
            "eval_kl": round(k / n, 4)}


def main():
    args = get_args()
    torch.manual_seed(args.seed)
    x_train = render_sprites(args.n_train, args.img, args.seed)
    x_eval = render_sprites(args.n_eval, args.img, args.seed + 1)
    model = BetaVAE(args.img, args.latent_dim)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, weight_decay=0.0)
    steps_per_epoch = math.ceil(args.n_train / args.batch_size)
    max_steps = steps_per_epoch * args.num_train_epochs
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: 1.0 - 0.9 * s / max_steps)
    beta_at = BetaSchedule(args.beta, args.kl_warmup_steps)

    n_params = sum(p.numel() for p in model.parameters())
    print("***** Running training *****")
    print(f"  Num examples = {args.n_train}")
    print(f"  Num Epochs = {args.num_train_epochs}")
    print(f"  Instantaneous batch size per device = {args.batch_size}")
    print(f"  Total optimization steps = {max_steps}")
    print(f"  Number of trainable parameters = {n_params}")

    g = torch.Generator().manual_seed(args.seed)
    step = 0
    acc_loss, acc_n, clipped = 0.0, 0, 0
    t0 = time.time()
    for epoch in range(args.num_train_epochs):
        perm = torch.randperm(args.n_train, generator=g)
        for b in range(steps_per_epoch):
            xb = x_train[perm[b * args.batch_size:(b + 1) * args.batch_size]]
            beta = beta_at(step)
            recon, kl = vae_losses(model, xb)
            loss = recon + beta * kl
            optimizer.zero_grad()
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
            if grad_norm > args.max_grad_norm:
                clipped += 1
            optimizer.step()
            scheduler.step()
            step += 1
            acc_loss += loss.item()
            acc_n += 1
            if step % args.logging_steps == 0:
                print({"loss": round(acc_loss / acc_n, 4), "recon": round(recon.item(), 4),
                       "kl": round(kl.item(), 4), "beta": round(beta, 3),
                       "grad_norm": round(grad_norm.item(), 4),
                       "learning_rate": float(f"{scheduler.get_last_lr()[0]:.4e}"),
                       "epoch": round(step / steps_per_epoch, 2)})
                acc_loss, acc_n = 0.0, 0
        metrics = evaluate(model, x_eval, args.batch_size, beta_at(step))
        metrics["epoch"] = float(epoch + 1)
        print(metrics)

    runtime = time.time() - t0
    print({"train_runtime": round(runtime, 2),
           "train_steps_per_second": round(step / runtime, 3),
           "clipped_steps": clipped, "total_steps": step,
           "epoch": float(args.num_train_epochs)})


if __name__ == "__main__":
    main()
