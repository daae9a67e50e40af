"""Dense VAE on synthetic 16x16 bar/blob glyphs with a linear KL warm-up.

Loss per example = summed Bernoulli NLL over pixels + beta * KL(q(z|x) || N(0, I)),
averaged over the batch. beta ramps linearly from 0 to 1 over the first
WARMUP_EPOCHS epochs and then stays at 1. Evaluation always uses beta = 1
(recon decoded from the posterior mean + full KL) so numbers are comparable
across epochs.
"""
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)

SEED = 42
IMG = 16
N_TRAIN = 8000
N_VAL = 1000
LATENT = 12
HIDDEN = 256
BATCH_SIZE = 128
EPOCHS = 30
WARMUP_EPOCHS = 10
LR = 1e-3
LOG_EVERY = 20


def render_glyphs(n, rng):
    """Each glyph: 1-2 soft oriented bars and sometimes a round blob."""
    yy, xx = np.mgrid[0:IMG, 0:IMG].astype(np.float32)
    imgs = np.zeros((n, IMG, IMG), dtype=np.float32)
    for _ in range(2):
        present = rng.random(n) < np.where(_ == 0, 1.0, 0.6)
        cx = rng.uniform(4, 12, n)[:, None, None]
        cy = rng.uniform(4, 12, n)[:, None, None]
        th = rng.uniform(0, np.pi, n)[:, None, None]
        half_len = rng.uniform(3, 7, n)[:, None, None]
        across = (xx - cx) * np.sin(th) - (yy - cy) * np.cos(th)
        along = (xx - cx) * np.cos(th) + (yy - cy) * np.sin(th)
        bar = np.exp(-across ** 2 / 0.8) * (1.0 / (1.0 + np.exp(2.0 * (np.abs(along) - half_len))))
        imgs += present[:, None, None] * bar
    blob = rng.random(n) < 0.4
    bx = rng.uniform(3, 13, n)[:, None, None]
    by = rng.uniform(3, 13, n)[:, None, None]
    r = rng.uniform(1.2, 2.5, n)[:, None, None]
    imgs += blob[:, None, None] * np.exp(-((xx - bx) ** 2 + (yy - by) ** 2) / (2 * r ** 2))
    return np.clip(imgs, 0.0, 1.0).reshape(n, IMG * IMG)


def build_data():
    rng = np.random.default_rng(SEED)
    x_train = torch.from_numpy(render_glyphs(N_TRAIN, rng))
    x_val = torch.from_numpy(render_glyphs(N_VAL, rng))
    return x_train, x_val


def make_loader(x, shuffle, seed=SEED):
    g = torch.Generator().manual_seed(seed)
    return torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(x), batch_size=BATCH_SIZE, shuffle=shuffle, generator=g
    )


class VAE(nn.Module):
    def __init__(self, d_in=IMG * IMG, hidden=HIDDEN, latent=LATENT):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden // 2), nn.ReLU())
        self.mu = nn.Linear(hidden // 2, latent)
        self.logvar = nn.Linear(hidden // 2, latent)
        self.dec = nn.Sequential(
            nn.Linear(latent, hidden // 2), nn.ReLU(), nn.Linear(hidden // 2, hidden), nn.ReLU(), nn.Linear(hidden, d_in)
        )

    def forward(self, x):
        h = self.enc(x)
        mu, logvar = self.mu(h), self.logvar(h)
        if self.training:
            z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        else:
            z = mu
        return self.dec(z), mu, logvar


def vae_terms(model, x):
    logits, mu, logvar = model(x)
    recon = F.binary_cross_entropy_with_logits(logits, x, reduction="none").sum(dim=1)
    kl = -0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).sum(dim=1)
    return recon.mean(), kl.mean(), kl.detach()


def kl_weight(epoch_float):
    return min(1.0, epoch_float / WARMUP_EPOCHS)


def loss_fn(model, batch, beta=1.0):
    (x,) = batch
    recon, kl, _ = vae_terms(model, x)
    return recon + beta * kl


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    tot_recon = tot_kl = 0.0
    n = 0
    per_dim_kl = torch.zeros(LATENT)
    for (x,) in loader:
        logits, mu, logvar = model(x)
        tot_recon += F.binary_cross_entropy_with_logits(logits, x, reduction="sum").item()
        kl_dims = -0.5 * (1 + logvar - mu.pow(2) - logvar.exp())
        tot_kl += kl_dims.sum().item()
        per_dim_kl += kl_dims.sum(dim=0)
        n += x.shape[0]
    model.train()
    active = int((per_dim_kl / n > 0.01).sum())
    return {"eval_loss": (tot_recon + tot_kl) / n, "eval_recon": tot_recon / n, "eval_kl": tot_kl / n, "active_units": active}


def make_target():
    torch.manual_seed(SEED)
    x_train, _ = build_data()
    loader = make_loader(x_train, shuffle=True)
    batches = []
    for i, b in enumerate(loader):
        batches.append(b)
        if i == 4:
            break
    return {
        "model": VAE(),
        "data": batches,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "task": "regression",
    }


def main():
    torch.manual_seed(SEED)
    x_train, x_val = build_data()
    train_loader = make_loader(x_train, shuffle=True)
    val_loader = make_loader(x_val, shuffle=False)
    model = VAE()
    optimizer = make_optimizer(model.parameters())
    steps_per_epoch = len(train_loader)
    print(f"***** Running training *****\n  Num examples = {N_TRAIN}\n  Num Epochs = {EPOCHS}\n"
          f"  Batch size = {BATCH_SIZE}\n  Total optimization steps = {EPOCHS * steps_per_epoch}")

    start = time.time()
    step = 0
    for epoch in range(EPOCHS):
        model.train()
        acc_loss = acc_recon = acc_kl = 0.0
        acc_n = 0
        for (x,) in train_loader:
            beta = kl_weight(epoch + step % steps_per_epoch / steps_per_epoch)
            recon, kl, _ = vae_terms(model, x)
            loss = recon + beta * kl
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            acc_loss += loss.item()
            acc_recon += recon.item()
            acc_kl += kl.item()
            acc_n += 1
            if step % LOG_EVERY == 0:
                print({"loss": round(acc_loss / acc_n, 4), "recon": round(acc_recon / acc_n, 4),
                       "kl": round(acc_kl / acc_n, 4), "beta": round(beta, 3), "learning_rate": LR,
                       "epoch": round(step / steps_per_epoch, 2)})
                acc_loss = acc_recon = acc_kl = 0.0
                acc_n = 0
        metrics = evaluate(model, val_loader)
        metrics = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in metrics.items()}
        metrics["epoch"] = float(epoch + 1)
        print(metrics)

    runtime = time.time() - start
    print({"train_runtime": round(runtime, 2), "train_steps_per_second": round(step / runtime, 3), "epoch": float(EPOCHS)})


if __name__ == "__main__":
    main()
