"""Heteroscedastic VAE on identicon-style sprites.

Sprites are 5x5 mirrored block patterns (GitHub-identicon style) upscaled 3x
to 15x15 and pasted at a random offset into a 19x19 canvas, one foreground
grey level per sprite. The decoder outputs a per-pixel mean (sigmoid) and log-variance,
and the reconstruction term is the Gaussian negative log-likelihood.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HPARAMS = {
    "seed": 11,
    "n_train": 4096,
    "n_val": 512,
    "latent_dim": 16,
    "hidden_dim": 256,
    "batch_size": 64,
    "lr": 1e-3,
    "weight_decay": 0.0,
    "max_epochs": 20,
}
SIDE = 19
LOG2PI = math.log(2 * math.pi)


def make_identicons(n, rng):
    half = rng.random((n, 5, 3)) < 0.5
    grid = np.concatenate([half, half[:, :, 1::-1]], axis=2)          # 5x5, mirrored
    level = rng.choice([0.45, 0.7, 0.95], size=(n, 1, 1))
    blocks = np.kron(grid.astype(np.float32), np.ones((3, 3), np.float32)) * level
    out = np.zeros((n, SIDE, SIDE), dtype=np.float32)
    offs = rng.integers(0, SIDE - 15 + 1, size=(n, 2))
    for k, (r, c) in enumerate(offs):
        out[k, r:r + 15, c:c + 15] = blocks[k]
    return out.reshape(n, -1)


class SpriteVAE(nn.Module):
    def __init__(self, d_x, d_h, d_z):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(d_x, d_h), nn.ReLU(), nn.Linear(d_h, d_h), nn.ReLU())
        self.enc_mu = nn.Linear(d_h, d_z)
        self.enc_logvar = nn.Linear(d_h, d_z)
        self.dec = nn.Sequential(nn.Linear(d_z, d_h), nn.ReLU(), nn.Linear(d_h, d_h), nn.ReLU())
        self.dec_mean = nn.Linear(d_h, d_x)
        self.dec_logvar = nn.Linear(d_h, d_x)

    def encode(self, x):
        h = self.enc(x)
        return self.enc_mu(h), self.enc_logvar(h)

    def decode(self, z):
        h = self.dec(z)
        mean = torch.sigmoid(self.dec_mean(h))
        logvar = -6.0 + F.softplus(self.dec_logvar(h) + 6.0)
        return mean, logvar

    def forward(self, x):
        mu, logvar = self.encode(x)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        x_mean, x_logvar = self.decode(z)
        return x_mean, x_logvar, mu, logvar


def neg_elbo(model, x):
    x_mean, x_logvar, mu, logvar = model(x)
    nll = 0.5 * (LOG2PI + x_logvar + (x - x_mean) ** 2 * torch.exp(-x_logvar))
    nll = nll.sum(dim=1).mean()
    kl = -0.5 * (1 + logvar - mu ** 2 - logvar.exp()).sum(dim=1).mean()
    return nll + kl, nll, kl, x_logvar


def make_optimizer(params, hp=HPARAMS):
    return torch.optim.Adam(params, lr=hp["lr"], weight_decay=hp["weight_decay"])


def setup(hp=HPARAMS):
    torch.manual_seed(hp["seed"])
    rng = np.random.default_rng(hp["seed"])
    x = torch.from_numpy(make_identicons(hp["n_train"] + hp["n_val"], rng))
    model = SpriteVAE(SIDE * SIDE, hp["hidden_dim"], hp["latent_dim"])
    return model, x[:hp["n_train"]], x[hp["n_train"]:]


def make_target():
    model, x_train, _ = setup()
    bs = HPARAMS["batch_size"]
    data = [x_train[i * bs:(i + 1) * bs] for i in range(3)]
    return {
        "model": model,
        "batch": data[0],
        "data": data,
        "loss_fn": lambda m, b: neg_elbo(m, b)[0],
        "optimizer": make_optimizer(model.parameters()),
        "make_optimizer": make_optimizer,
    }


def fmt(v):
    s = "{0:.3g}".format(v).replace("+0", "+").replace("-0", "-")
    return s if len(s) < len(str(v)) else str(v)


def main(hp=HPARAMS):
    model, x_train, x_val = setup(hp)
    opt = make_optimizer(model.parameters(), hp)
    bs = hp["batch_size"]
    n_batches = math.ceil(len(x_train) / bs)
    print(f"Seed set to {hp['seed']}")
    print("GPU available: False (cuda), used: False")
    print("TPU available: False, using: 0 TPU cores")
    print(f"  | Name  | Type      | Params | Mode\n"
          f"--------------------------------------------\n"
          f"0 | model | SpriteVAE | {sum(p.numel() for p in model.parameters()) / 1e3:.0f} K  | train\n"
          f"--------------------------------------------")

    for epoch in range(hp["max_epochs"]):
        t0 = time.time()
        model.train()
        perm = torch.randperm(len(x_train))
        run_loss = run_nll = run_kl = 0.0
        step_min_logvar = []
        for i in range(n_batches):
            x = x_train[perm[i * bs:(i + 1) * bs]]
            loss, nll, kl, x_logvar = neg_elbo(model, x)
            opt.zero_grad()
            loss.backward()
            opt.step()
            run_loss += loss.item()
            run_nll += nll.item()
            run_kl += kl.item()
            step_min_logvar.append(x_logvar.min().item())

        model.eval()
        with torch.no_grad():
            v_loss, v_nll, v_kl, _ = neg_elbo(model, x_val)
            mu, _ = model.encode(x_val)
            v_mse = F.mse_loss(model.decode(mu)[0], x_val).item()
        dt = time.time() - t0
        metrics = {
            "train_loss": run_loss / n_batches, "nll": run_nll / n_batches, "kl": run_kl / n_batches,
            "min_logvar": np.min(step_min_logvar), "val_loss": v_loss.item(), "val_mse": v_mse,
        }
        post = ", ".join(f"{k}={fmt(v)}" for k, v in metrics.items())
        print(f"Epoch {epoch}: 100%|██████████| {n_batches}/{n_batches} "
              f"[00:{int(dt):02d}<00:00, {n_batches / dt:5.2f}it/s, v_num=1, {post}]", flush=True)
    print(f"`Trainer.fit` stopped: `max_epochs={hp['max_epochs']}` reached.")


if __name__ == "__main__":
    main()
