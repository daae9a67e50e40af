"""Classify 5 classes of a nonlinear rule (which of 5 random directions a point is closest to, in angle)
with a backbone + classification head.

    python train.py --steps 200
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn

NUM_CLASSES = 5


def make_data(n=2048, dim=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    directions = F.normalize(torch.randn(NUM_CLASSES, dim, generator=g), dim=1)
    x = torch.randn(n, dim, generator=g)
    y = (F.normalize(x, dim=1) @ directions.T).abs().argmax(dim=1)
    return x, y


class Net(nn.Module):
    def __init__(self, dim=16, hidden=64):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.head = nn.Linear(hidden, NUM_CLASSES)

    def forward(self, x):
        return self.head(self.backbone(x))


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def make_target():
    torch.manual_seed(0)
    x, y = make_data()
    data = list(zip(x.split(64), y.split(64)))
    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": optimizer, "num_classes": NUM_CLASSES, "task": "classification"}


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
            acc = (model(data[0][0]).argmax(1) == data[0][1]).float().mean()
            print(f"step {step} | loss {loss.item():.4f} | acc {acc.item():.3f} | lr {optimizer.param_groups[0]['lr']:.1e}", flush=True)


if __name__ == "__main__":
    main()
