"""VAE on synthetic absorption spectra.

Each spectrum is a baseline plus 1-3 Gaussian peaks (random centre, width,
height) sampled on 96 wavelength bins, with a little sensor noise. A small MLP
VAE is trained with Adam; the KL term is warmed up from BETA_START to BETA_END
over the first ANNEAL_EPOCHS epochs.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn

SEED = 2024
N_BINS = 96
N_TRAIN = 2560
N_VAL = 512
LATENT = 8
HIDDEN = 192
BATCH_SIZE = 64
MAX_EPOCHS = 20
ANNEAL_EPOCHS = 1
BETA_START = 0.0
BETA_END = 1.0
LR = 2e-3
NOISE_STD = 0.02
OBS_SIGMA = 0.1


def make_spectra(n, rng):
    grid = np.linspace(0.0, 1.0, N_BINS)
    x = np.zeros((n, N_BINS))
    n_peaks = rng.integers(1, 4, size=n)
    for i in range(n):
        x[i] += rng.uniform(0.0, 0.15) + rng.uniform(-0.1, 0.1) * grid
        for _ in range(n_peaks[i]):
            c = rng.uniform(0.1, 0.9)
            w = rng.uniform(0.02, 0.08)
            h = rng.uniform(0.3, 1.0)
            x[i] += h * np.exp(-0.5 * ((grid - c) / w) ** 2)
    x += NOISE_STD * rng.standard_normal(x.shape)
    return torch.tensor(x, dtype=torch.float32)


def load_data():
    rng = np.random.default_rng(SEED)
    x = make_spectra(N_TRAIN + N_VAL, rng)
    return x[:N_TRAIN], x[N_TRAIN:]


class SpectraVAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Linear(N_BINS, HIDDEN), nn.GELU(),
            nn.Linear(HIDDEN, HIDDEN), nn.GELU(),
        )
        self.to_mu = nn.Linear(HIDDEN, LATENT)
        self.to_logvar = nn.Linear(HIDDEN, LATENT)
        self.decoder = nn.Sequential(
            nn.Linear(LATENT, HIDDEN), nn.GELU(),
            nn.Linear(HIDDEN, HIDDEN), nn.GELU(),
            nn.Linear(HIDDEN, N_BINS),
        )

    def forward(self, x):
        h = self.encoder(x)
        mu, logvar = self.to_mu(h), self.to_logvar(h)
        z = mu + torch.randn_like(mu) * (0.5 * logvar).exp()
        return self.decoder(z), mu, logvar


def loss_terms(model, x):
    recon_x, mu, logvar = model(x)
    # Gaussian NLL with fixed sigma (up to a constant), summed over bins
    recon = ((recon_x - x) ** 2).sum(dim=1).mean() / (2 * OBS_SIGMA ** 2)
    kl = -0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).sum(dim=1).mean()
    return recon, kl, mu


class LinearBetaSchedule:
    def __init__(self, beta_start, beta_end, anneal_steps):
        self.beta_start = beta_start
        self.beta_end = beta_end
        self.anneal_steps = anneal_steps

    def __call__(self, step):
        frac = step / self.anneal_steps
        return self.beta_start + (self.beta_end - self.beta_start) * min(1.0, frac)


def steps_per_epoch():
    return math.ceil(N_TRAIN / BATCH_SIZE)


def build_schedule():
    return LinearBetaSchedule(BETA_START, BETA_END, ANNEAL_EPOCHS * steps_per_epoch())


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR)


def make_target():
    torch.manual_seed(SEED)
    x_train, _ = load_data()
    model = SpectraVAE()
    schedule = build_schedule()
    last_step = MAX_EPOCHS * steps_per_epoch() - 1
    data = [x_train[k * BATCH_SIZE:(k + 1) * BATCH_SIZE] for k in range(3)]

    def loss_fn(m, batch):
        recon, kl, _ = loss_terms(m, batch)
        return recon + schedule(last_step) * kl

    return {
        "model": model,
        "batch": data[0],
        "data": data,
        "loss_fn": loss_fn,
        "optimizer": make_optimizer(model.parameters()),
        "make_optimizer": make_optimizer,
        "task": "regression",
    }


@torch.no_grad()
def run_validation(model, x_val):
    model.eval()
    recon, kl, mu = loss_terms(model, x_val)
    # a latent dimension counts as active if its posterior mean varies across samples
    active = int((mu.var(dim=0) > 0.01).sum())
    # error of the posterior-mean reconstruction, in the data's own units
    rmse = (model.decoder(mu) - x_val).pow(2).mean().sqrt().item()
    model.train()
    return recon.item(), kl.item(), active, rmse


def main():
    torch.manual_seed(SEED)
    x_train, x_val = load_data()
    model = SpectraVAE()
    optimizer = make_optimizer(model.parameters())
    schedule = build_schedule()
    n_steps = steps_per_epoch()
    gen = torch.Generator().manual_seed(SEED)

    print("GPU available: False, used: False\nTPU available: False, using: 0 TPU cores")
    print(f"  | Name  | Type       | Params\n---------------------------------------\n"
          f"0 | model | SpectraVAE | {sum(p.numel() for p in model.parameters()) / 1e3:.1f} K")
    global_step = 0
    for epoch in range(MAX_EPOCHS):
        t0 = time.time()
        perm = torch.randperm(N_TRAIN, generator=gen)
        sums = np.zeros(3)
        for b in range(n_steps):
            xb = x_train[perm[b * BATCH_SIZE:(b + 1) * BATCH_SIZE]]
            beta = schedule(global_step)
            recon, kl, _ = loss_terms(model, xb)
            loss = recon + beta * kl
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            global_step += 1
            sums += (loss.item(), recon.item(), kl.item())
        sums /= n_steps
        v_recon, v_kl, active, rmse = run_validation(model, x_val)
        dt = time.time() - t0
        print(f"Epoch {epoch}: 100%|{'█' * 10}| {n_steps}/{n_steps} [00:{int(dt):02d}<00:00, "
              f"{n_steps / dt:.2f}it/s, loss={sums[0]:.2f}, v_num=0, beta={beta:.3f}, "
              f"train_recon={sums[1]:.2f}, train_kl={sums[2]:.2f}, val_recon={v_recon:.2f}, "
              f"val_kl={v_kl:.2f}, val_rmse={rmse:.4f}, active_units={active}]", flush=True)
    print(f"`Trainer.fit` stopped: `max_epochs={MAX_EPOCHS}` reached.")


if __name__ == "__main__":
    main()
