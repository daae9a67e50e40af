"""VAE for baseline-corrected Raman spectra with a heteroscedastic Gaussian decoder.

Spectra (256 bins) are mixtures of 6 reference compounds plus fluorescence baseline and
shot noise. The baseline is removed, the result is clipped at zero (intensities are
non-negative) and the bins under the laser notch filter are blanked, as the instrument
software does. The decoder outputs a non-negative mean and a log-variance per bin, so
that noisy bins are down-weighted in the reconstruction term.

Minimal Lightning-like loop (LightningModule hooks + a small Trainer) that prints the
usual progress-bar summary line at the end of every epoch.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

SEED = 42
N_BINS = 256
NOTCH = slice(0, 18)
HPARAMS = dict(latent_dim=8, hidden=128, lr=5e-4, batch_size=64, max_epochs=20, kl_warmup_epochs=5)


def simulate_spectra(n, seed=SEED):
    rng = np.random.default_rng(seed)
    shift = np.linspace(100, 1800, N_BINS)
    refs = []
    for _ in range(6):
        centers = rng.uniform(300, 1750, rng.integers(3, 7))
        widths = rng.uniform(6, 25, centers.size)
        heights = rng.uniform(0.3, 1.0, centers.size)
        refs.append((heights[:, None] * np.exp(-0.5 * ((shift[None] - centers[:, None]) / widths[:, None]) ** 2)).sum(0))
    refs = np.stack(refs)
    conc = rng.dirichlet(np.full(6, 0.7), size=n) * rng.uniform(0.5, 2.0, (n, 1))
    clean = conc @ refs
    baseline = rng.uniform(0.2, 1.0, (n, 1)) * np.exp(-shift[None] / rng.uniform(600, 1500, (n, 1)))
    noisy = clean + baseline + rng.normal(0, 0.03, (n, N_BINS)) * np.sqrt(clean + baseline + 0.05)
    corrected = np.clip(noisy - baseline, 0.0, None)
    corrected[:, NOTCH] = 0.0
    return corrected.astype(np.float32)


class SpectraVAE(nn.Module):
    def __init__(self, latent_dim=8, hidden=128, lr=5e-4, kl_warmup_epochs=5, **_):
        super().__init__()
        self.lr, self.kl_warmup_epochs = lr, kl_warmup_epochs
        self.current_epoch = 0
        self.encoder = nn.Sequential(nn.Linear(N_BINS, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.fc_mu = nn.Linear(hidden, latent_dim)
        self.fc_logvar = nn.Linear(hidden, latent_dim)
        self.decoder = nn.Sequential(nn.Linear(latent_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.dec_mean = nn.Linear(hidden, N_BINS)
        self.dec_logvar = nn.Linear(hidden, N_BINS)
        self.logged = {}

    def log(self, name, value):
        self.logged[name] = value.item() if torch.is_tensor(value) else float(value)

    def forward(self, x):
        h = self.encoder(x)
        mu, logvar = self.fc_mu(h), self.fc_logvar(h)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        d = self.decoder(z)
        return F.relu(self.dec_mean(d)), self.dec_logvar(d).clamp(-6.0, 6.0), mu, logvar

    def elbo_terms(self, x):
        x_mean, x_logvar, mu, logvar = self(x)
        nll = 0.5 * (x_logvar + (x - x_mean) ** 2 * torch.exp(-x_logvar) + math.log(2 * math.pi))
        recon = nll.sum(dim=1).mean()
        kl = (-0.5 * (1 + logvar - mu.pow(2) - logvar.exp())).sum(dim=1).mean()
        return recon, kl

    def kl_weight(self):
        return min(1.0, (self.current_epoch + 1) / self.kl_warmup_epochs)

    def training_step(self, batch, batch_idx):
        recon, kl = self.elbo_terms(batch[0])
        loss = recon + self.kl_weight() * kl
        self.log("train_loss", loss)
        self.log("kl", kl)
        return loss

    @torch.no_grad()
    def validation_step(self, batch, batch_idx):
        recon, kl = self.elbo_terms(batch[0])
        return recon + kl

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.lr)


def make_loaders(batch_size=HPARAMS["batch_size"]):
    spectra = torch.from_numpy(simulate_spectra(4800))
    train, val = spectra[:4096], spectra[4096:]
    g = torch.Generator().manual_seed(SEED)
    return (DataLoader(TensorDataset(train), batch_size=batch_size, shuffle=True, generator=g),
            DataLoader(TensorDataset(val), batch_size=256))


def loss_fn(model, batch):
    return model.training_step(batch, 0)


def make_target():
    torch.manual_seed(SEED)
    train_loader, _ = make_loaders()
    it = iter(train_loader)
    data = [next(it) for _ in range(3)]
    model = SpectraVAE(**HPARAMS)
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": model.configure_optimizers(),
            "make_optimizer": lambda params: torch.optim.Adam(params, lr=HPARAMS["lr"]),
            "task": "regression"}


def fmt_time(s):
    return f"{int(s // 60):02d}:{int(s % 60):02d}"


class Trainer:
    def __init__(self, max_epochs):
        self.max_epochs = max_epochs

    def fit(self, model, train_loader, val_loader):
        n_params = sum(p.numel() for p in model.parameters())
        print("GPU available: False, used: False")
        print("TPU available: False, using: 0 TPU cores")
        print()
        print("  | Name       | Type       | Params")
        print("--------------------------------------------")
        for name, mod in model.named_children():
            print(f"  | {name:<10} | {type(mod).__name__:<10} | {sum(p.numel() for p in mod.parameters()):,}")
        print("--------------------------------------------")
        print(f"{n_params:,}     Trainable params")
        optimizer = model.configure_optimizers()
        n = len(train_loader)
        for epoch in range(self.max_epochs):
            model.current_epoch = epoch
            model.train()
            t0 = time.time()
            losses = []
            for i, batch in enumerate(train_loader):
                loss = model.training_step(batch, i)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                losses.append(loss.item())
            model.eval()
            val = [model.validation_step(b, i).item() for i, b in enumerate(val_loader)]
            model.train()
            dt = time.time() - t0
            print(f"Epoch {epoch}: 100%|##########| {n}/{n} [{fmt_time(dt)}<00:00, {n / dt:.2f}it/s, v_num=0, "
                  f"train_loss={np.mean(losses):.3f}, kl={model.logged['kl']:.3f}, val_loss={np.mean(val):.3f}]")
        print(f"`Trainer.fit` stopped: `max_epochs={self.max_epochs}` reached.")


def main():
    torch.manual_seed(SEED)
    train_loader, val_loader = make_loaders()
    model = SpectraVAE(**HPARAMS)
    Trainer(HPARAMS["max_epochs"]).fit(model, train_loader, val_loader)


if __name__ == "__main__":
    main()
