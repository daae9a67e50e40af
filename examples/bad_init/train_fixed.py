"""Classify 10 Gaussian blobs with an MLP whose output layer gets a custom init.

    python train.py --steps 200
"""
import argparse
import math

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


class MLP(nn.Module):
    def __init__(self, dim=32, hidden=64):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, NUM_CLASSES)
        nn.init.normal_(self.out.weight, std=0.01)
        nn.init.zeros_(self.out.bias)

    def forward(self, x):
        return self.out(F.relu(self.fc2(F.relu(self.fc1(x)))))


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def make_target():
    torch.manual_seed(0)
    x, y = make_data()
    data = list(zip(x.split(64), y.split(64)))
    model = MLP()
    make_optimizer = lambda params: torch.optim.Adam(params, lr=1e-3)
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model.parameters()), "make_optimizer": make_optimizer,
            "num_classes": NUM_CLASSES, "task": "classification"}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    t = make_target()
    model, optimizer, data = t["model"], t["optimizer"], t["data"]
    print(f"expected initial loss ln({NUM_CLASSES}) = {math.log(NUM_CLASSES):.4f}")
    for step in range(args.steps):
        optimizer.zero_grad()
        loss = loss_fn(model, data[step % len(data)])
        loss.backward()
        optimizer.step()
        if step % 20 == 0:
            print(f"step {step} | loss {loss.item():.4f} | lr {optimizer.param_groups[0]['lr']:.1e}", flush=True)


if __name__ == "__main__":
    main()
