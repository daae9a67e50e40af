"""VAE on procedurally rendered 16x16 glyphs (rings, bars, crosses, blobs).

Bernoulli decoder, diagonal Gaussian posterior, standard-normal prior.
Logs HF-Trainer-style dicts so the run can be compared with the other
representation-learning baselines in the dashboard.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Normal, kl_divergence
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)

SEED = 1234
IMG = 16
LATENT = 12
BATCH_SIZE = 128
EPOCHS = 15
LR = 1e-3
WEIGHT_DECAY = 1e-5
LOG_EVERY = 40


# ----------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------
def render_glyph(rng):
    yy, xx = np.mgrid[0:IMG, 0:IMG].astype(np.float32)
    img = np.zeros((IMG, IMG), dtype=np.float32)
    for _ in range(rng.integers(1, 3)):
        kind = rng.integers(0, 4)
        cy, cx = rng.uniform(4, 12, size=2)
        if kind == 0:  # ring
            r = rng.uniform(2.5, 5.5)
            d = np.abs(np.hypot(yy - cy, xx - cx) - r)
            img = np.maximum(img, np.clip(1.2 - d, 0, 1))
        elif kind == 1:  # bar at an angle
            theta = rng.uniform(0, math.pi)
            length = rng.uniform(4, 7)
            u = (xx - cx) * math.cos(theta) + (yy - cy) * math.sin(theta)
            v = -(xx - cx) * math.sin(theta) + (yy - cy) * math.cos(theta)
            mask = np.clip(1.3 - np.abs(v), 0, 1) * (np.abs(u) < length)
            img = np.maximum(img, mask)
        elif kind == 2:  # cross
            w = rng.uniform(3, 6)
            h = (np.abs(yy - cy) < 1.0) & (np.abs(xx - cx) < w)
            v = (np.abs(xx - cx) < 1.0) & (np.abs(yy - cy) < w)
            img = np.maximum(img, (h | v).astype(np.float32))
        else:  # filled blob
            sy, sx = rng.uniform(1.5, 3.5, size=2)
            g = np.exp(-0.5 * (((yy - cy) / sy) ** 2 + ((xx - cx) / sx) ** 2))
            img = np.maximum(img, (g > 0.35).astype(np.float32) * 0.9 + 0.1 * g)
    return np.clip(img, 0, 1)


def make_dataset(n, seed):
    rng = np.random.default_rng(seed)
    X = np.stack([render_glyph(rng) for _ in range(n)]).astype(np.float32)
    return torch.from_numpy(X.reshape(n, -1))


def build_loaders():
    x_train = make_dataset(6000, SEED)
    x_val = make_dataset(1000, SEED + 1)
    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(TensorDataset(x_train), batch_size=BATCH_SIZE,
                              shuffle=True, drop_last=True, generator=g)
    val_loader = DataLoader(TensorDataset(x_val), batch_size=500)
    return train_loader, val_loader


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class GlyphVAE(nn.Module):
    def __init__(self, d_in=IMG * IMG, hidden=256, latent=LATENT):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Linear(d_in, hidden), nn.SiLU(),
            nn.Linear(hidden, hidden // 2), nn.SiLU(),
        )
        self.to_mu = nn.Linear(hidden // 2, latent)
        self.to_logvar = nn.Linear(hidden // 2, latent)
        self.decoder = nn.Sequential(
            nn.Linear(latent, hidden // 2), nn.SiLU(),
            nn.Linear(hidden // 2, hidden), nn.SiLU(),
            nn.Linear(hidden, d_in),
        )
        self.register_buffer("prior_loc", torch.zeros(latent))
        self.register_buffer("prior_scale", torch.ones(latent))

    def posterior(self, x):
        h = self.encoder(x)
        mu = self.to_mu(h)
        logvar = self.to_logvar(h).clamp(-8.0, 6.0)
        return Normal(mu, torch.exp(0.5 * logvar))

    def prior(self):
        return Normal(self.prior_loc, self.prior_scale)

    def forward(self, x):
        q = self.posterior(x)
        z = q.rsample() if self.training else q.mean
        logits = self.decoder(z)
        return logits, q


def elbo_terms(model, x):
    logits, q = model(x)
    recon = F.binary_cross_entropy_with_logits(logits, x, reduction="none").sum(-1)
    kl = kl_divergence(q, model.prior()).sum(-1)
    return recon.mean(), kl.mean()


def vae_loss(model, batch):
    (x,) = batch
    recon, kl = elbo_terms(model, x)
    return recon + kl


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    rec_sum, kl_sum, n = 0.0, 0.0, 0
    for (x,) in loader:
        recon, kl = elbo_terms(model, x)
        rec_sum += recon.item() * x.shape[0]
        kl_sum += kl.item() * x.shape[0]
        n += x.shape[0]
    model.train()
    return rec_sum / n, kl_sum / n


def make_target():
    torch.manual_seed(SEED)
    train_loader, _ = build_loaders()
    data = []
    for i, batch in enumerate(train_loader):
        if i == 5:
            break
        data.append(batch)
    return {
        "model": GlyphVAE(),
        "data": data,
        "loss_fn": vae_loss,
        "make_optimizer": make_optimizer,
        "task": "regression",
    }


def main():
    torch.manual_seed(SEED)
    train_loader, val_loader = build_loaders()
    model = GlyphVAE()
    optimizer = make_optimizer(model.parameters())
    total_steps = EPOCHS * len(train_loader)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, total_steps) / total_steps)))

    print(f"***** Running training *****")
    print(f"  Num examples = {len(train_loader.dataset)}")
    print(f"  Num Epochs = {EPOCHS}")
    print(f"  Batch size = {BATCH_SIZE}")
    print(f"  Total optimization steps = {total_steps}")
    step, t_start = 0, time.time()
    rec_acc, kl_acc, k = 0.0, 0.0, 0
    for epoch in range(EPOCHS):
        for batch in train_loader:
            (x,) = batch
            recon, kl = elbo_terms(model, x)
            loss = recon + kl
            optimizer.zero_grad()
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
            optimizer.step()
            scheduler.step()
            step += 1
            rec_acc += recon.item(); kl_acc += kl.item(); k += 1
            if step % LOG_EVERY == 0:
                print({"loss": round((rec_acc + kl_acc) / k, 4), "recon": round(rec_acc / k, 4),
                       "kl": round(kl_acc / k, 4), "grad_norm": round(float(grad_norm), 4),
                       "learning_rate": float(f"{scheduler.get_last_lr()[0]:.4g}"),
                       "epoch": round(step / len(train_loader), 2)})
                rec_acc, kl_acc, k = 0.0, 0.0, 0
        v_rec, v_kl = evaluate(model, val_loader)
        print({"eval_loss": round(v_rec + v_kl, 4), "eval_recon": round(v_rec, 4),
               "eval_kl": round(v_kl, 4), "epoch": float(epoch + 1)})
    runtime = time.time() - t_start
    print({"train_runtime": round(runtime, 2), "train_steps_per_second": round(step / runtime, 2),
           "epoch": float(EPOCHS)})


if __name__ == "__main__":
    main()
