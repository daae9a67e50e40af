"""VAE on gearbox accelerometer spectra (condition-monitoring embeddings).

Each sample is a 128-bin log-magnitude spectrum (0-2 kHz) from the
high-speed-shaft accelerometer of a test-rig gearbox. The VAE latent is
used downstream as a compact health embedding.
"""
import math
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

SEED = 3
N_BINS = 128
F_MAX = 2000.0
HERE = os.path.dirname(os.path.abspath(__file__))
DATA_PATH = os.path.join(HERE, "data", "hss_spectra.npz")

CFG = dict(
    batch_size=128,
    epochs=30,
    lr=1e-3,
    latent_dim=10,
    hidden=256,
    kl_warmup_epochs=12,
    log_every=100,
)


# ---------------------------------------------------------------------------
# synthetic rig data
# ---------------------------------------------------------------------------
def _peak(freqs, f0, width, amp):
    return amp * np.exp(-0.5 * ((freqs[None, :] - f0[:, None]) / width) ** 2)


def simulate_spectra(n, rng):
    freqs = np.linspace(0, F_MAX, N_BINS)
    shaft_hz = rng.uniform(18, 38, n)
    load = rng.beta(2, 2, n)
    wear = rng.gamma(1.5, 0.25, n)
    gain_db = rng.normal(0, 1.0, n)
    teeth = 23
    gmf = teeth * shaft_hz

    floor = -38 - 6 * (freqs / F_MAX)[None, :] + gain_db[:, None] + 2.0 * load[:, None]
    lin = np.zeros((n, N_BINS))
    for h in (1, 2, 3):
        lin += _peak(freqs, h * shaft_hz, 12.0, 10 ** ((-6 - 5 * h + 6 * load) / 10)[:, None] * np.ones(1))
    for h, a in ((1, 0.0), (2, -6.0)):
        amp = 10 ** ((a + 8 * load + 3 * wear) / 10)
        lin += _peak(freqs, h * gmf, 14.0, amp[:, None] * np.ones(1))
        for sb in (1, 2):
            sb_amp = amp * (0.15 * wear * sb ** -0.7)
            lin += _peak(freqs, h * gmf + sb * 2 * shaft_hz, 12.0, sb_amp[:, None] * np.ones(1))
            lin += _peak(freqs, h * gmf - sb * 2 * shaft_hz, 12.0, sb_amp[:, None] * np.ones(1))
    resonance = _peak(freqs, np.full(n, 1520.0), 110.0, (10 ** ((-12 + 4 * wear) / 10))[:, None])
    lin += resonance
    spec_db = 10 * np.log10(10 ** (floor / 10) + lin)
    spec_db += rng.normal(0, 0.6, spec_db.shape)  # Welch-averaging residual
    meta = np.stack([shaft_hz, load, wear], axis=1)
    return spec_db.astype(np.float32), meta.astype(np.float32)


def load_dataset():
    if not os.path.exists(DATA_PATH):
        os.makedirs(os.path.dirname(DATA_PATH), exist_ok=True)
        rng = np.random.default_rng(SEED)
        x, meta = simulate_spectra(7000, rng)
        np.savez_compressed(DATA_PATH, x=x, meta=meta)
    d = np.load(DATA_PATH)
    return d["x"], d["meta"]


def build_data(cfg):
    x, _ = load_dataset()
    rng = np.random.default_rng(SEED)
    idx = rng.permutation(len(x))
    n_val = 1000
    tr, va = idx[n_val:], idx[:n_val]
    mu = x[tr].mean(axis=0, keepdims=True)
    sd = x[tr].std(axis=0, keepdims=True) + 1e-6
    x_tr = torch.from_numpy((x[tr] - mu) / sd)
    x_va = torch.from_numpy((x[va] - mu) / sd)
    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(TensorDataset(x_tr), batch_size=cfg["batch_size"], shuffle=True,
                              generator=g, drop_last=True)
    val_loader = DataLoader(TensorDataset(x_va), batch_size=500)
    return train_loader, val_loader


# ---------------------------------------------------------------------------
# model
# ---------------------------------------------------------------------------
class SpectraVAE(nn.Module):
    def __init__(self, n_in=N_BINS, hidden=256, latent_dim=10):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(n_in, hidden), nn.SiLU(), nn.Linear(hidden, hidden // 2), nn.SiLU())
        self.mu = nn.Linear(hidden // 2, latent_dim)
        self.logvar = nn.Linear(hidden // 2, latent_dim)
        self.dec = nn.Sequential(nn.Linear(latent_dim, hidden // 2), nn.SiLU(),
                                 nn.Linear(hidden // 2, hidden), nn.SiLU(), nn.Linear(hidden, n_in))

    def forward(self, x):
        h = self.enc(x)
        mu, logvar = self.mu(h), self.logvar(h).clamp(-8.0, 6.0)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return self.dec(z), mu, logvar


class KLWarmup:
    """Linear KL weight ramp 0 -> 1 over the first `warmup_steps` optimizer steps."""

    def __init__(self, warmup_steps):
        self.warmup_steps = max(1, warmup_steps)
        self.step_num = 0

    @property
    def beta(self):
        return min(1.0, self.step_num / self.warmup_steps)

    def step(self):
        self.step_num += 1


def vae_terms(model, x):
    recon, mu, logvar = model(x)
    rec = 0.5 * ((recon - x) ** 2).sum(dim=1).mean()
    kl = (-0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).sum(dim=1)).mean()
    return rec, kl


def make_loss_fn(schedule):
    def loss_fn(model, batch):
        (x,) = batch
        rec, kl = vae_terms(model, x)
        return rec + schedule.beta * kl
    return loss_fn


def make_target():
    torch.manual_seed(SEED)
    train_loader, val_loader = build_data(CFG)
    model = SpectraVAE(hidden=CFG["hidden"], latent_dim=CFG["latent_dim"])
    optimizer = torch.optim.Adam(model.parameters(), lr=CFG["lr"])
    schedule = KLWarmup(CFG["kl_warmup_epochs"] * len(train_loader))
    return dict(model=model, data=train_loader, val_data=val_loader, loss_fn=make_loss_fn(schedule),
                optimizer=optimizer, kl_schedule=schedule, task="reconstruction")


@torch.no_grad()
def evaluate(model, loader, beta):
    model.eval()
    rec_sum, kl_sum, n = 0.0, 0.0, 0
    for (x,) in loader:
        rec, kl = vae_terms(model, x)
        rec_sum += rec.item() * len(x)
        kl_sum += kl.item() * len(x)
        n += len(x)
    model.train()
    rec, kl = rec_sum / n, kl_sum / n
    return rec + beta * kl, rec, kl


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    train_loader, val_loader = build_data(CFG)
    model = SpectraVAE(hidden=CFG["hidden"], latent_dim=CFG["latent_dim"])
    optimizer = torch.optim.Adam(model.parameters(), lr=CFG["lr"])
    steps_per_epoch = len(train_loader)
    total = CFG["epochs"] * steps_per_epoch
    schedule = KLWarmup(CFG["kl_warmup_epochs"] * steps_per_epoch)
    loss_fn = make_loss_fn(schedule)
    lr_sched = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, total) / total)) * 0.9 + 0.1)
    print(f"number of parameters: {sum(p.numel() for p in model.parameters()) / 1e3:.1f}K")
    print(f"train spectra: {len(train_loader.dataset)}, val spectra: {len(val_loader.dataset)}, "
          f"{steps_per_epoch} steps/epoch, {total} steps")

    step = 0
    t0 = time.time()
    for epoch in range(CFG["epochs"]):
        for batch in train_loader:
            rec, kl = vae_terms(model, batch[0])
            loss = rec + schedule.beta * kl
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()
            lr_sched.step()
            step += 1
            if step % CFG["log_every"] == 0 or step == 1:
                dt = (time.time() - t0) * 1000 / (1 if step == 1 else CFG["log_every"])
                print(f"step {step:5d}/{total} | epoch {epoch:2d} | loss {loss.item():8.3f} | recon {rec.item():7.3f}"
                      f" | kl {kl.item():7.3f} | beta {schedule.beta:.3f} | lr {optimizer.param_groups[0]['lr']:.2e}"
                      f" | {dt:.1f}ms")
                t0 = time.time()
            schedule.step()
        if (epoch + 1) % 3 == 0 or epoch == 0:
            vloss, vrec, vkl = evaluate(model, val_loader, schedule.beta)
            print(f"---> eval epoch {epoch:2d}: val_loss {vloss:8.3f} | val_recon {vrec:7.3f} | val_kl {vkl:7.3f}"
                  f" | beta {schedule.beta:.3f}")

    vloss, vrec, vkl = evaluate(model, val_loader, 1.0)
    with torch.no_grad():
        _, mu, logvar = model(val_loader.dataset.tensors[0])
        active = int((mu.var(dim=0) > 0.01).sum())
    print(f"final: val_neg_elbo {vloss:.3f} (recon {vrec:.3f} + kl {vkl:.3f}), "
          f"active latent dims {active}/{CFG['latent_dim']}")


if __name__ == "__main__":
    main()
