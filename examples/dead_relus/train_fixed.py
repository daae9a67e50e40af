"""Regress a random teacher network with a 3-layer ReLU MLP; biases start negative for sparse activations.

    python train.py --steps 200
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn


def make_data(n=2048, dim=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dim, generator=g)
    w1, w2 = torch.randn(dim, 32, generator=g) / 4, torch.randn(32, 1, generator=g) / 4
    y = torch.tanh(x @ w1) @ w2
    return x, y


class MLP(nn.Module):
    def __init__(self, dim=16, hidden=64):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(dim, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)])
        self.out = nn.Linear(hidden, 1)
        for layer in self.layers:
            nn.init.zeros_(layer.bias)

    def forward(self, x):
        for layer in self.layers:
            x = F.relu(layer(x))
        return self.out(x)


def loss_fn(model, batch):
    x, y = batch
    return F.mse_loss(model(x), y)


def make_target():
    torch.manual_seed(0)
    x, y = make_data()
    data = list(zip(x.split(64), y.split(64)))
    model = MLP()
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
            print(f"step {step:03d} | loss {loss.item():.5f} | lr {optimizer.param_groups[0]['lr']:.1e}", flush=True)


if __name__ == "__main__":
    main()
