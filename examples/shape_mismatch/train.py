"""Predict house prices (standardised) from 8 features with an MLP and mean-squared error.

    python train.py --steps 200
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn


def make_data(n=2048, dim=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dim, generator=g)
    w = torch.randn(dim, generator=g)
    y = x @ w / dim ** 0.5 + 0.3 * torch.sin(3 * x[:, 0]) + 0.1 * torch.randn(n, generator=g)
    return x, y  # y has shape (n,)


def loss_fn(model, batch):
    x, y = batch
    pred = model(x)
    return F.mse_loss(pred, y)


def make_target():
    torch.manual_seed(0)
    x, y = make_data()
    data = list(zip(x.split(64), y.split(64)))
    model = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
    make_optimizer = lambda params: torch.optim.Adam(params, lr=1e-3)
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model.parameters()), "make_optimizer": make_optimizer,
            "task": "regression"}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    t = make_target()
    model, optimizer, data = t["model"], t["optimizer"], t["data"]
    for step in range(args.steps):
        optimizer.zero_grad()
        loss = loss_fn(model, data[step % len(data)])
        loss.backward()
        optimizer.step()
        if step % 20 == 0:
            print(f"step {step} | loss {loss.item():.4f} | lr {optimizer.param_groups[0]['lr']:.1e}", flush=True)


if __name__ == "__main__":
    main()
