"""Patch autoencoder: an MLP (256-64-8-64-256) compressing 16x16 patches that lie near a rank-6 subspace,
logged to a W&B offline run.

The patches are generated (6 smooth basis images, Gaussian codes, small pixel noise); the bottleneck of 8 is
wider than the true rank, so reconstruction error falls toward the noise floor. Metrics go to Weights &
Biases in offline mode (wandb/offline-run-*/, nothing leaves the machine); without the wandb package they are
printed instead.

    python train.py [--epochs 8] [--batch-size 64] [--lr 1e-3]
"""
import argparse
import math
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 0
SIDE, RANK, N_PATCHES = 16, 6, 4000


def make_patches(n=N_PATCHES, seed=SEED):
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.linspace(0, 1, SIDE), torch.linspace(0, 1, SIDE), indexing="ij")
    basis = torch.stack([torch.cos(math.pi * (k % 3 + 1) * xx) * torch.cos(math.pi * (k // 3 + 1) * yy)
                         for k in range(RANK)]).reshape(RANK, -1)
    codes = torch.randn(n, RANK, generator=g)
    return codes @ basis + 0.05 * torch.randn(n, SIDE * SIDE, generator=g)


def build_data(batch_size=64):
    x = make_patches()
    n_val = len(x) // 5
    g = torch.Generator().manual_seed(SEED)
    train = DataLoader(TensorDataset(x[n_val:]), batch_size=batch_size, shuffle=True, generator=g)
    return train, DataLoader(TensorDataset(x[:n_val]), batch_size=512)


class PatchAE(nn.Module):
    def __init__(self, d=SIDE * SIDE, hidden=64, code=8):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(d, hidden), nn.GELU(), nn.Linear(hidden, code))
        self.decoder = nn.Sequential(nn.Linear(code, hidden), nn.GELU(), nn.Linear(hidden, d))

    def forward(self, x):
        return self.decoder(self.encoder(x))


def loss_fn(model, batch):
    (x,) = batch
    return nn.functional.mse_loss(model(x), x)


def make_optimizer(params, lr=1e-3):
    return torch.optim.Adam(params, lr=lr)


def make_target():
    torch.manual_seed(SEED)
    train_loader, _ = build_data()
    model = PatchAE()
    data = [b for _, b in zip(range(4), train_loader)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model.parameters()), "make_optimizer": make_optimizer, "task": "regression"}


class Logger:
    """A W&B offline run when wandb is installed, stdout otherwise."""

    def __init__(self, config):
        try:
            import wandb
        except ImportError:
            self.run = None
            return
        self.run = wandb.init(project="patch-ae", mode="offline", dir=HERE, config=config)

    def log(self, step, **values):
        if self.run is None:
            print(f"step={step} " + " ".join(f"{k}={v:.5g}" for k, v in values.items()), flush=True)
        else:
            self.run.log({k.replace("_", "/", 1): v for k, v in values.items()}, step=step)

    def close(self):
        if self.run is not None:
            self.run.finish()


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    total = n = 0
    for (x,) in loader:
        total += nn.functional.mse_loss(model(x), x, reduction="sum").item() / x.shape[1]
        n += len(x)
    model.train()
    return total / n


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--log-every", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(SEED)
    train_loader, val_loader = build_data(args.batch_size)
    model = PatchAE()
    optimizer = make_optimizer(model.parameters(), args.lr)
    logger = Logger(vars(args))
    step = 0
    for epoch in range(1, args.epochs + 1):
        for batch in train_loader:
            loss = loss_fn(model, batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if step % args.log_every == 0:
                logger.log(step, train_loss=loss.item(), train_lr=optimizer.param_groups[0]["lr"])
        val_loss = evaluate(model, val_loader)
        logger.log(step, val_loss=val_loss)
        print(f"epoch {epoch}: val_loss {val_loss:.5f}", flush=True)
    logger.close()


if __name__ == "__main__":
    main()
