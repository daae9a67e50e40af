"""Gaussian VAE on a synthetic tabular dataset (process-sensor style features).

20 continuous features driven by 4 latent process factors through a nonlinear
map, plus heteroscedastic measurement noise. Features are standardised with
training statistics. The KL weight is warmed up linearly over the first
WARMUP_EPOCHS epochs and then held at 1.0 (standard ELBO).
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)

SEED = 2024
N_FEATURES = 20
N_FACTORS = 4
N_TRAIN = 8000
N_VAL = 2000
LATENT = 8
HIDDEN = 128
BATCH_SIZE = 128
EPOCHS = 24
WARMUP_EPOCHS = 8
LR = 1e-3
LOGGING_STEPS = 100
DEC_LOG_SIGMA = math.log(0.3)  # fixed decoder noise scale (in standardised units)


# ------------------------------------------------------------------ data
def generate_table(n, rng, proj):
    w1, w2, mix = proj
    f = rng.normal(size=(n, N_FACTORS)).astype(np.float32)
    h = np.tanh(f @ w1) + 0.5 * np.sin(f @ w2)
    x = h @ mix
    noise_scale = 0.1 + 0.1 * np.abs(x[:, :1])
    x = x + rng.normal(size=x.shape).astype(np.float32) * noise_scale
    return x.astype(np.float32)


def build_datasets():
    rng = np.random.default_rng(SEED)
    proj = (
        rng.normal(size=(N_FACTORS, 16)).astype(np.float32),
        rng.normal(size=(N_FACTORS, 16)).astype(np.float32),
        rng.normal(size=(16, N_FEATURES)).astype(np.float32) / 4.0,
    )
    train = generate_table(N_TRAIN, rng, proj)
    val = generate_table(N_VAL, rng, proj)
    mu, sd = train.mean(axis=0), train.std(axis=0) + 1e-6
    return torch.from_numpy((train - mu) / sd), torch.from_numpy((val - mu) / sd)


def dataloader(x, batch_size, shuffle, generator=None):
    order = torch.randperm(len(x), generator=generator) if shuffle else torch.arange(len(x))
    for i in range(0, len(x), batch_size):
        yield x[order[i:i + batch_size]]


# ------------------------------------------------------------------ model
class TabularVAE(nn.Module):
    def __init__(self, d=N_FEATURES, hidden=HIDDEN, latent=LATENT):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(d, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU())
        self.mu = nn.Linear(hidden, latent)
        self.logvar = nn.Linear(hidden, latent)
        self.dec = nn.Sequential(nn.Linear(latent, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(),
                                 nn.Linear(hidden, d))

    def forward(self, x):
        h = self.enc(x)
        mu, logvar = self.mu(h), self.logvar(h).clamp(-10.0, 6.0)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return self.dec(z), mu, logvar


def gaussian_nll(x_hat, x):
    # -log N(x | x_hat, sigma^2), summed over features
    var = math.exp(2 * DEC_LOG_SIGMA)
    return (0.5 * (x - x_hat).pow(2) / var + DEC_LOG_SIGMA + 0.5 * math.log(2 * math.pi)).sum(dim=1)


def kl_to_prior(mu, logvar):
    return -0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).sum(dim=1)


def kl_weight(epoch_float):
    return min(1.0, epoch_float / WARMUP_EPOCHS)


def compute_loss(model, x, beta):
    x_hat, mu, logvar = model(x)
    rec = gaussian_nll(x_hat, x).mean()
    kl = kl_to_prior(mu, logvar).mean()
    return rec + beta * kl, rec, kl


def loss_fn(model, batch):
    # loss at the start of training (epoch 0 -> beta = 0), as in the training loop
    return compute_loss(model, batch, kl_weight(0.0))[0]


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=LR, weight_decay=0.0)


def make_scheduler(optimizer, total_steps):
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, total_steps) / total_steps)) * 0.9 + 0.1)


@torch.no_grad()
def evaluate(model, x_val, beta):
    model.eval()
    tot, rec_tot, kl_tot, mse_tot = 0.0, 0.0, 0.0, 0.0
    for xb in dataloader(x_val, 500, False):
        loss, rec, kl = compute_loss(model, xb, beta)
        h = model.enc(xb)
        mse = F.mse_loss(model.dec(model.mu(h)), xb, reduction="sum").item() / N_FEATURES
        tot += loss.item() * len(xb); rec_tot += rec.item() * len(xb); kl_tot += kl.item() * len(xb)
        mse_tot += mse
    model.train()
    n = len(x_val)
    return {"eval_loss": tot / n, "eval_recon": rec_tot / n, "eval_kl": kl_tot / n,
            "eval_elbo": -(rec_tot + kl_tot) / n, "eval_mse": mse_tot / n}


def make_target():
    torch.manual_seed(SEED)
    x_train, _ = build_datasets()
    g = torch.Generator().manual_seed(SEED)
    data = [b for _, b in zip(range(6), dataloader(x_train, BATCH_SIZE, True, g))]
    return {"model": TabularVAE(), "data": data, "loss_fn": loss_fn,
            "make_optimizer": make_optimizer, "task": "regression"}


def main():
    torch.manual_seed(SEED)
    x_train, x_val = build_datasets()
    model = TabularVAE()
    optimizer = make_optimizer(model.parameters())
    steps_per_epoch = math.ceil(len(x_train) / BATCH_SIZE)
    total_steps = EPOCHS * steps_per_epoch
    scheduler = make_scheduler(optimizer, total_steps)
    g = torch.Generator().manual_seed(SEED)
    print(f"***** Running training *****\n  Num examples = {len(x_train)}\n  Num Epochs = {EPOCHS}\n"
          f"  Batch size = {BATCH_SIZE}\n  Total optimization steps = {total_steps}")

    step, t_start = 0, time.time()
    acc = {"loss": 0.0, "recon": 0.0, "kl": 0.0, "n": 0}
    for epoch in range(EPOCHS):
        for xb in dataloader(x_train, BATCH_SIZE, True, g):
            beta = kl_weight(epoch + step % steps_per_epoch / steps_per_epoch)
            loss, rec, kl = compute_loss(model, xb, beta)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 100.0)
            optimizer.step()
            scheduler.step()
            step += 1
            acc["loss"] += loss.item(); acc["recon"] += rec.item(); acc["kl"] += kl.item(); acc["n"] += 1
            if step % LOGGING_STEPS == 0:
                n = acc["n"]
                print({"loss": round(acc["loss"] / n, 4), "recon": round(acc["recon"] / n, 4),
                       "kl": round(acc["kl"] / n, 4), "kl_weight": round(beta, 3),
                       "grad_norm": round(grad_norm.item(), 4),
                       "learning_rate": float(f"{scheduler.get_last_lr()[0]:.3e}"),
                       "epoch": round(step / steps_per_epoch, 2)})
                acc = {"loss": 0.0, "recon": 0.0, "kl": 0.0, "n": 0}
        if (epoch + 1) % 2 == 0:
            metrics = evaluate(model, x_val, kl_weight(epoch + 1))
            metrics = {k: round(v, 4) for k, v in metrics.items()}
            metrics["epoch"] = float(epoch + 1)
            print(metrics)

    runtime = time.time() - t_start
    print({"train_runtime": round(runtime, 2), "train_samples_per_second": round(EPOCHS * len(x_train) / runtime, 1),
           "epoch": float(EPOCHS)})
    torch.save(model.state_dict(), "tabular_vae.pt")


if __name__ == "__main__":
    main()
