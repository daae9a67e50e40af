"""Classify 10 Gaussian blobs with an MLP and Adam.

    python train.py --steps 200
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn

NUM_CLASSES = 10


def make_data(n=2048, dim=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(NUM_CLASSES, dim, generator=g) * 0.8
    y = torch.randint(0, NUM_CLASSES, (n,), generator=g)
    x = centers[y] + torch.randn(n, dim, generator=g)
    return x, y


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def make_target():
    torch.manual_seed(0)
    x, y = make_data()
    data = list(zip(x.split(64), y.split(64)))
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, NUM_CLASSES))
    make_optimizer = lambda params: torch.optim.Adam(params, lr=1e-7)
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model.parameters()), "make_optimizer": make_optimizer,
            "num_classes": NUM_CLASSES, "task": "classification"}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    t = make_target()
    model, optimizer, data = t["model"], t["optimizer"], t["data"]
    n = len(data)
    for step in range(args.steps):
        optimizer.zero_grad()
        loss = loss_fn(model, data[step % n])
        loss.backward()
        optimizer.step()
        if step % 20 == 0:
            print({"loss": round(loss.item(), 4), "learning_rate": optimizer.param_groups[0]["lr"],
                   "epoch": round(step / n, 2)}, flush=True)


if __name__ == "__main__":
    main()
