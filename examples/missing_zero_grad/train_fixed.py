"""Regress a smooth function of 8 inputs with an MLP, SGD with momentum.

    python train.py --steps 200
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn


def make_data(n=2048, dim=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dim, generator=g)
    w = torch.randn(dim, generator=g) / dim ** 0.5
    y = (torch.sin(2 * x @ w) + 0.5 * x[:, 0] * x[:, 1]).unsqueeze(-1)
    return x, y


def loss_fn(model, batch):
    x, y = batch
    return F.mse_loss(model(x), y)


def make_target():
    torch.manual_seed(0)
    x, y = make_data()
    data = list(zip(x.split(64), y.split(64)))
    model = nn.Sequential(nn.Linear(8, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1))
    make_optimizer = lambda params: torch.optim.SGD(params, lr=0.02, momentum=0.9)
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model.parameters()), "make_optimizer": make_optimizer,
            "task": "regression"}


def train_step(model, optimizer, batch):
    optimizer.zero_grad()
    loss = loss_fn(model, batch)
    loss.backward()
    optimizer.step()
    return loss


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    t = make_target()
    model, optimizer, data = t["model"], t["optimizer"], t["data"]
    model.train()
    for step in range(args.steps):
        loss = train_step(model, optimizer, data[step % len(data)])
        if step % 10 == 0:
            grad_norm = torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in model.parameters()]))
            print(f"step={step} loss={loss.item():.5f} grad_norm={grad_norm.item():.4f} lr={optimizer.param_groups[0]['lr']}", flush=True)


if __name__ == "__main__":
    main()
