# Conditional VAE for synthetic sensor waveforms.
#
# Five waveform families (sine, triangle, two-tone, chirp, damped sine) with
# random frequency / phase / amplitude. The class label is given to both the
# encoder and the decoder, so the latent only has to carry the continuous
# factors. The first `kl_off_epochs` epochs train as a plain (conditional)
# autoencoder, then the KL term is ramped in linearly to weight 1. AdamW with a
# per-step cosine learning-rate decay.
import math
import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F


@dataclass
class Config:
    seed: int = 1234
    n_train: int = 3072
    n_val: int = 512
    length: int = 64
    n_classes: int = 5
    latent: int = 6
    hidden: int = 256
    batch_size: int = 32
    epochs: int = 24
    kl_off_epochs: int = 6
    kl_ramp_epochs: int = 5
    lr: float = 3e-3
    obs_sigma: float = 0.1


CFG = Config()


def synth_waveforms(n, cfg, rng):
    t = np.linspace(0.0, 1.0, cfg.length, dtype=np.float64)[None, :]
    y = rng.integers(0, cfg.n_classes, size=n)
    f = rng.uniform(1.0, 2.5, size=(n, 1))
    ph = rng.uniform(0.0, 2 * math.pi, size=(n, 1))
    a = rng.uniform(0.5, 1.0, size=(n, 1))
    arg = 2 * math.pi * f * t + ph
    frac = (arg / (2 * math.pi)) % 1.0
    waves = np.stack([
        np.sin(arg),
        4.0 * np.abs(frac - 0.5) - 1.0,
        0.7 * np.sin(arg) + 0.5 * np.sin(2 * arg),
        np.sin(2 * math.pi * f * t * (1.0 + 1.0 * t) + ph),
        np.exp(-3.0 * t) * np.sin(arg) * 1.5,
    ], axis=0)
    x = a * waves[y, np.arange(n)]
    x = x + 0.05 * rng.standard_normal(x.shape)
    return torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.long)


def build_datasets(cfg=CFG):
    rng = np.random.default_rng(cfg.seed)
    x, y = synth_waveforms(cfg.n_train + cfg.n_val, cfg, rng)
    return (x[:cfg.n_train], y[:cfg.n_train]), (x[cfg.n_train:], y[cfg.n_train:])


class CondVAE(nn.Module):
    def __init__(self, cfg=CFG):
        super().__init__()
        self.n_classes = cfg.n_classes
        self.encoder = nn.Sequential(
            nn.Linear(cfg.length + cfg.n_classes, cfg.hidden), nn.SiLU(),
            nn.Linear(cfg.hidden, cfg.hidden), nn.SiLU(),
            nn.Linear(cfg.hidden, 2 * cfg.latent),
        )
        self.decoder = nn.Sequential(
            nn.Linear(cfg.latent + cfg.n_classes, cfg.hidden), nn.SiLU(),
            nn.Linear(cfg.hidden, cfg.hidden), nn.SiLU(),
            nn.Linear(cfg.hidden, cfg.length),
        )

    def forward(self, x, y):
        c = F.one_hot(y, self.n_classes).float()
        mu, logvar = self.encoder(torch.cat([x, c], dim=1)).chunk(2, dim=1)
        z = mu + torch.exp(0.5 * logvar) * torch.randn_like(mu)
        x_hat = self.decoder(torch.cat([z, c], dim=1))
        return x_hat, mu, logvar


def elbo_terms(model, batch, cfg=CFG):
    x, y = batch
    x_hat, mu, logvar = model(x, y)
    # Gaussian likelihood with fixed sigma, summed over time steps, mean over batch
    recon = ((x_hat - x) ** 2).sum(dim=1).mean() / (2 * cfg.obs_sigma ** 2)
    kl = (-0.5 * (1 + logvar - mu ** 2 - logvar.exp()).sum(dim=1)).mean()
    return recon, kl


def kl_weight(epoch_float, cfg=CFG):
    if epoch_float < cfg.kl_off_epochs:
        return 0.0
    return min(1.0, (epoch_float - cfg.kl_off_epochs) / cfg.kl_ramp_epochs)


def compute_loss(model, batch, beta, cfg=CFG):
    recon, kl = elbo_terms(model, batch, cfg)
    return recon + beta * kl


def make_optimizer(params, cfg=CFG):
    return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=1e-4)


def iterate(data, batch_size, gen=None):
    x, y = data
    order = torch.randperm(len(x), generator=gen) if gen is not None else torch.arange(len(x))
    for i in range(0, len(x), batch_size):
        j = order[i:i + batch_size]
        yield x[j], y[j]


def make_target():
    torch.manual_seed(CFG.seed)
    train_data, _ = build_datasets()
    model = CondVAE()
    data = list(iterate(train_data, CFG.batch_size))[:3]
    final_beta = kl_weight(float(CFG.epochs))
    return {
        "model": model,
        "batch": data[0],
        "data": data,
        "loss_fn": lambda m, b: compute_loss(m, b, final_beta),
        "optimizer": make_optimizer(model.parameters()),
        "make_optimizer": make_optimizer,
        "num_classes": CFG.n_classes,
        "task": "regression",
    }


@torch.no_grad()
def validate(model, data, beta):
    model.eval()
    n = len(data[0])
    rec_sum = kl_sum = 0.0
    for xb, yb in iterate(data, 256):
        r, k = elbo_terms(model, (xb, yb))
        rec_sum += r.item() * len(xb)
        kl_sum += k.item() * len(xb)
    model.train()
    rec, kl = rec_sum / n, kl_sum / n
    return rec + beta * kl, rec, kl


def main(cfg=CFG):
    torch.manual_seed(cfg.seed)
    train_data, val_data = build_datasets(cfg)
    model = CondVAE(cfg)
    optimizer = make_optimizer(model.parameters(), cfg)
    gen = torch.Generator().manual_seed(cfg.seed)
    steps = math.ceil(cfg.n_train / cfg.batch_size)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=cfg.epochs * steps, eta_min=1e-5)

    print("GPU available: False, used: False")
    print(f"  | Name  | Type    | Params\n0 | model | CondVAE | {sum(p.numel() for p in model.parameters()) / 1e3:.1f} K")
    for epoch in range(cfg.epochs):
        start = time.time()
        model.train()
        run_loss = run_rec = run_kl = 0.0
        for i, batch in enumerate(iterate(train_data, cfg.batch_size, gen)):
            beta = kl_weight(epoch + i / steps, cfg)
            recon, kl = elbo_terms(model, batch, cfg)
            loss = recon + beta * kl
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            run_loss += loss.item()
            run_rec += recon.item()
            run_kl += kl.item()
        v_loss, v_rec, v_kl = validate(model, val_data, beta)
        dt = time.time() - start
        print(
            f"Epoch {epoch}: 100%|{chr(0x2588) * 10}| {steps}/{steps} [00:{int(dt):02d}<00:00, {steps / dt:.2f}it/s, "
            f"v_num=3, lr={scheduler.get_last_lr()[0]:.2e}, kl_weight={beta:.3f}, train_loss={run_loss / steps:.3f}, recon={run_rec / steps:.3f}, "
            f"kl={run_kl / steps:.3f}, val_loss={v_loss:.3f}, val_recon={v_rec:.3f}, val_kl={v_kl:.3f}]",
            flush=True,
        )
    print(f"`Trainer.fit` stopped: `max_epochs={cfg.epochs}` reached.")


if __name__ == "__main__":
    main()
