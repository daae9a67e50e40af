"""Regress the output of a fixed random teacher network with a small MLP, plain SGD.

Logs one JSON object per line.

    python train.py --steps 200
"""
import argparse
import json

import torch
import torch.nn.functional as F
from torch import nn


def make_data(n=2048, dim=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    teacher = nn.Sequential(nn.Linear(dim, 32), nn.Tanh(), nn.Linear(32, 1))
    x = torch.randn(n, dim, generator=g)
    with torch.no_grad():
        y = teacher(x)
    return x, y


def loss_fn(model, batch):
    x, y = batch
    return F.mse_loss(model(x), y)


def make_target():
    torch.manual_seed(0)
    x, y = make_data()
    data = list(zip(x.split(64), y.split(64)))
    model = nn.Sequential(nn.Linear(10, 64), nn.Tanh(), nn.Linear(64, 1))
    make_optimizer = lambda params: torch.optim.SGD(params, lr=0.03, momentum=0.9)
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
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf"))
        optimizer.step()
        if step % 5 == 0:
            record = {"step": step, "loss": loss.item(), "grad_norm": grad_norm.item(),
                      "lr": optimizer.param_groups[0]["lr"]}
            print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
