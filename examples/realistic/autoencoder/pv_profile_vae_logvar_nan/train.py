"""VAE for daily solar (PV) generation profiles, 48 half-hour slots per day.

Each profile is the site's output as a fraction of installed capacity. The decoder is
heteroscedastic: it predicts a non-negative mean (ReLU, PV output can't be negative)
and a per-slot log-variance, trained with the Gaussian NLL + KL. The training loop
mimics a LightningModule/Trainer (epoch progress line with train_loss / val_loss).
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SLOTS = 48
LATENT = 4
MAX_EPOCHS = 40
BATCH_SIZE = 64
LR = 2e-3


def simulate_profiles(n_days, seed):
    """Clear-sky bell between sunrise and sunset, scaled by cloudiness, plus meter noise."""
    rng = np.random.default_rng(seed)
    t = (np.arange(SLOTS) + 0.5) / 2.0                       # hour of day
    doy = rng.integers(0, 365, size=n_days)
    season = np.cos(2 * np.pi * (doy - 172) / 365.0)          # +1 midsummer, -1 midwinter
    daylen = 12.0 + 4.0 * season
    sunrise = 12.5 - daylen / 2 + rng.normal(0, 0.15, n_days)
    sunset = 12.5 + daylen / 2 + rng.normal(0, 0.15, n_days)
    peak = 0.55 + 0.3 * season
    cloud = np.clip(rng.beta(2.0, 5.0, n_days), 0, 0.95)
    x = np.zeros((n_days, SLOTS))
    for i in range(n_days):
        up = (t > sunrise[i]) & (t < sunset[i])
        phase = (t[up] - sunrise[i]) / (sunset[i] - sunrise[i])
        bell = np.sin(np.pi * phase) ** 1.5
        passing = 1.0 - cloud[i] * (0.5 + 0.5 * np.sin(2 * np.pi * rng.random() + t[up] * rng.uniform(0.3, 1.2)))
        x[i, up] = peak[i] * bell * passing + rng.normal(0, 0.02, up.sum())
    return np.clip(x, 0.0, 1.0).astype(np.float32)      # inverter output as fraction of capacity


class PVProfileVAE(nn.Module):
    def __init__(self, d_in=SLOTS, hidden=96, latent=LATENT):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.enc_mu = nn.Linear(hidden, latent)
        self.enc_logvar = nn.Linear(hidden, latent)
        self.decoder = nn.Sequential(nn.Linear(latent, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.dec_mean = nn.Linear(hidden, d_in)
        self.dec_logvar = nn.Linear(hidden, d_in)

    def encode(self, x):
        h = self.encoder(x)
        return self.enc_mu(h), self.enc_logvar(h)

    def decode(self, z):
        h = self.decoder(z)
        return F.relu(self.dec_mean(h)), self.dec_logvar(h)

    def forward(self, x):
        mu, logvar = self.encode(x)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        x_mean, x_logvar = self.decode(z)
        return x_mean, x_logvar, mu, logvar


def vae_loss(model, batch):
    (x,) = batch
    x_mean, x_logvar, mu, logvar = model(x)
    nll = 0.5 * (x_logvar + (x - x_mean) ** 2 * torch.exp(-x_logvar) + math.log(2 * math.pi))
    kl = -0.5 * (1 + logvar - mu ** 2 - logvar.exp())
    return nll.sum(dim=1).mean() + kl.sum(dim=1).mean()


def make_loaders(seed=0):
    train = torch.from_numpy(simulate_profiles(2048, seed=11))
    val = torch.from_numpy(simulate_profiles(512, seed=12))
    g = torch.Generator().manual_seed(seed)
    train_dl = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(train), batch_size=BATCH_SIZE,
                                           shuffle=True, generator=g)
    val_dl = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(val), batch_size=256)
    return train_dl, val_dl


def configure_optimizer(params):
    return torch.optim.Adam(params, lr=LR)


def make_target():
    torch.manual_seed(0)
    model = PVProfileVAE()
    train_dl, _ = make_loaders()
    it = iter(train_dl)
    data = [next(it) for _ in range(3)]
    return {
        "model": model,
        "batch": data[0],
        "data": data,
        "loss_fn": vae_loss,
        "optimizer": configure_optimizer(model.parameters()),
        "make_optimizer": configure_optimizer,
        "task": "regression",
    }


def summarize(model):
    print()
    print("  | Name       | Type       | Params | Mode ")
    print("--------------------------------------------------")
    for i, (name, mod) in enumerate(model.named_children()):
        n = sum(p.numel() for p in mod.parameters())
        print(f"{i} | {name:<10} | {type(mod).__name__:<10} | {n / 1000:.1f} K  | train")
    print("--------------------------------------------------")
    total = sum(p.numel() for p in model.parameters())
    print(f"{total / 1000:.1f} K     Trainable params")
    print("0         Non-trainable params")
    print(f"{total / 1000:.1f} K     Total params")
    print(f"{total * 4 / 1e6:.3f}     Total estimated model params size (MB)")


def main():
    torch.manual_seed(0)
    model = PVProfileVAE()
    train_dl, val_dl = make_loaders()
    optimizer = configure_optimizer(model.parameters())
    print("GPU available: False, used: False")
    print("TPU available: False, using: 0 TPU cores")
    print("HPU available: False, using: 0 HPUs")
    summarize(model)
    n_batches = len(train_dl)
    for epoch in range(MAX_EPOCHS):
        t0 = time.time()
        model.train()
        losses = []
        for batch in train_dl:
            loss = vae_loss(model, batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        model.eval()
        with torch.no_grad():
            val = [vae_loss(model, b).item() * len(b[0]) for b in val_dl]
        val_loss = sum(val) / len(val_dl.dataset)
        dt = time.time() - t0
        bar = "█" * 10
        print(f"Epoch {epoch}: 100%|{bar}| {n_batches}/{n_batches} [00:{int(dt):02d}<00:00, {n_batches / dt:.2f}it/s, "
              f"v_num=0, train_loss={np.mean(losses):.3f}, val_loss={val_loss:.3f}]")
    print(f"`Trainer.fit` stopped: `max_epochs={MAX_EPOCHS}` reached.")


if __name__ == "__main__":
    main()
