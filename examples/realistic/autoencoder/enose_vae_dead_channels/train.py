"""VAE on electronic-nose gas sensor array readings.

24 metal-oxide sensor channels; the readings are a smooth nonlinear function of a
few latent factors (gas mixture, humidity, temperature drift). Four channels of
the board are not populated and always read zero. The decoder is heteroscedastic:
it predicts a mean and a log-variance per channel and we fit the Gaussian NLL.
"""
import math
import sys
import time

import numpy as np
import torch
import torch.nn as nn

SEED = 42
N_CH = 24
DEAD = (5, 11, 17, 23)
LATENT = 4

hparams = dict(batch_size=128, max_epochs=30, lr=1e-3, hidden=64, beta=1.0)


def synth_readings(n, seed):
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, 4))
    mix = np.random.default_rng(1234).normal(size=(4, N_CH))
    bias = np.random.default_rng(1235).normal(size=N_CH)
    # sensor conductance in microsiemens: positive, saturating response
    x = 2.0 * (1.0 + np.tanh(z @ mix * 0.7 + bias)) + 0.3 * (1.0 + np.sin(z[:, :1] * 2.0))
    x = x * rng.lognormal(0.0, 0.03, size=x.shape)
    x[:, list(DEAD)] = 0.0
    return x.astype(np.float32)


class SensorDataModule:
    def __init__(self, batch_size):
        self.batch_size = batch_size
        train = synth_readings(6000, seed=1)
        val = synth_readings(1000, seed=2)
        # min-max scaling to [0, 1]; conductance is never negative
        self.lo = train.min(0)
        self.scale = train.max(0) - self.lo + 1e-6
        self.train = torch.from_numpy((train - self.lo) / self.scale)
        self.val = torch.from_numpy(np.clip((val - self.lo) / self.scale, 0.0, None))
        self.g = torch.Generator().manual_seed(SEED)

    def train_dataloader(self):
        perm = torch.randperm(len(self.train), generator=self.g)
        n_full = len(perm) // self.batch_size * self.batch_size
        return [self.train[perm[i:i + self.batch_size]] for i in range(0, n_full, self.batch_size)]

    def val_dataloader(self):
        return [self.val[i:i + 500] for i in range(0, len(self.val), 500)]


class SensorVAE(nn.Module):
    def __init__(self, n_in=N_CH, hidden=64, latent=LATENT):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(n_in, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU())
        self.to_mu = nn.Linear(hidden, latent)
        self.to_logvar = nn.Linear(hidden, latent)
        self.decoder = nn.Sequential(nn.Linear(latent, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU())
        self.out_mu = nn.Linear(hidden, n_in)
        self.out_logvar = nn.Linear(hidden, n_in)

    def encode(self, x):
        h = self.encoder(x)
        return self.to_mu(h), self.to_logvar(h)

    def decode(self, z):
        h = self.decoder(z)
        return torch.relu(self.out_mu(h)), self.out_logvar(h)

    def forward(self, x):
        mu, logvar = self.encode(x)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        x_mu, x_logvar = self.decode(z)
        return x_mu, x_logvar, mu, logvar


def vae_loss(model, x, beta=hparams["beta"]):
    x_mu, x_logvar, mu, logvar = model(x)
    nll = 0.5 * (x_logvar + (x - x_mu) ** 2 * torch.exp(-x_logvar) + math.log(2 * math.pi))
    kl = -0.5 * (1 + logvar - mu ** 2 - logvar.exp())
    return nll.sum(1).mean() + beta * kl.sum(1).mean()


def loss_fn(model, batch):
    return vae_loss(model, batch)


def make_optimizer(params):
    return torch.optim.Adam(params, lr=hparams["lr"])


def progress(epoch, n, elapsed, metrics):
    bar = "\u2588" * 10
    rate = n / max(elapsed, 1e-9)
    mm = ", ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items())
    return (f"Epoch {epoch}: 100%|{bar}| {n}/{n} [00:{int(elapsed):02d}<00:00, {rate:.2f}it/s, {mm}]")


def make_target():
    torch.manual_seed(SEED)
    dm = SensorDataModule(hparams["batch_size"])
    model = SensorVAE(hidden=hparams["hidden"])
    data = dm.train_dataloader()[:3]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model.parameters()), "make_optimizer": make_optimizer,
            "task": "regression"}


def main():
    torch.manual_seed(SEED)
    print(f"Seed set to {SEED}")
    dm = SensorDataModule(hparams["batch_size"])
    model = SensorVAE(hidden=hparams["hidden"])
    opt = make_optimizer(model.parameters())
    n_params = sum(p.numel() for p in model.parameters())
    print("  | Name  | Type      | Params | Mode ")
    print("--------------------------------------------")
    print(f"0 | model | SensorVAE | {n_params / 1000:.1f} K  | train")
    print("--------------------------------------------")
    for epoch in range(hparams["max_epochs"]):
        model.train()
        t0 = time.time()
        loader = dm.train_dataloader()
        tot = 0.0
        for x in loader:
            loss = loss_fn(model, x)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += loss.item()
        train_loss = tot / len(loader)
        model.eval()
        with torch.no_grad():
            vals = [loss_fn(model, x).item() for x in dm.val_dataloader()]
        val_loss = float(np.mean(vals))
        print(progress(epoch, len(loader), time.time() - t0,
                       {"v_num": 0, "train_loss": train_loss, "val_loss": val_loss}))
        sys.stdout.flush()
    print(f"`Trainer.fit` stopped: `max_epochs={hparams['max_epochs']}` reached.")


if __name__ == "__main__":
    main()
