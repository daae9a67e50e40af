"""Predict the machine state (4 classes) from 24 vibration-sensor readings.

Each reading is standardised per sample first, so the model sees the shape of the
vibration profile and not its overall level. Some recordings come from a stuck sensor.

    python train.py --steps 200
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn

NUM_CLASSES = 4


def make_recordings(n=2048, width=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    profiles = torch.randn(NUM_CLASSES, width, generator=g)
    y = torch.randint(0, NUM_CLASSES, (n,), generator=g)
    level = torch.rand(n, 1, generator=g) * 10
    x = level + profiles[y] * 2 + torch.randn(n, width, generator=g)
    stuck = torch.rand(n, generator=g) < 0.02  # the sensor repeats its last value
    x[stuck] = level[stuck]
    return x, y


class Standardize(nn.Module):
    def forward(self, x):
        return (x - x.mean(dim=-1, keepdim=True)) / x.std(dim=-1, keepdim=True)


class Classifier(nn.Module):
    def __init__(self, width=24, hidden=64):
        super().__init__()
        self.norm = Standardize()
        self.net = nn.Sequential(nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, NUM_CLASSES))

    def forward(self, x):
        return self.net(self.norm(x))


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def make_target():
    torch.manual_seed(0)
    x, y = make_recordings()
    data = list(zip(x.split(64), y.split(64)))
    model = Classifier()
    make_optimizer = lambda params: torch.optim.AdamW(params, lr=3e-3)
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model.parameters()), "make_optimizer": make_optimizer,
            "num_classes": NUM_CLASSES, "task": "classification"}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    t = make_target()
    model, optimizer, data = t["model"], t["optimizer"], t["data"]
    for step in range(args.steps):
        x, y = data[step % len(data)]
        optimizer.zero_grad()
        loss = loss_fn(model, (x, y))
        loss.backward()
        optimizer.step()
        if step % 10 == 0:
            print(f"step={step} loss={loss.item():.4f} lr={optimizer.param_groups[0]['lr']:.1e}", flush=True)


if __name__ == "__main__":
    main()
