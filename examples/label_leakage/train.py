"""Predict a customer's churn tier (3 classes) from a table of 12 noisy numeric columns.

The raw table has the features followed by the target column.

    python train.py --steps 200
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn

NUM_CLASSES = 3


def load_table(n=2048, seed=0):
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(NUM_CLASSES, 12, generator=g) * 0.7
    tier = torch.randint(0, NUM_CLASSES, (n,), generator=g)
    features = centers[tier] + torch.randn(n, 12, generator=g)
    return torch.cat([features, tier[:, None].float()], dim=1)


def make_dataset():
    table = load_table()
    x = table[:, :]
    y = table[:, -1].long()
    return x, y


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def make_target():
    torch.manual_seed(0)
    x, y = make_dataset()
    data = list(zip(x.split(64), y.split(64)))
    model = nn.Sequential(nn.Linear(x.shape[1], 64), nn.ReLU(), nn.Linear(64, NUM_CLASSES))
    make_optimizer = lambda params: torch.optim.Adam(params, lr=3e-3)
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
        optimizer.zero_grad()
        loss = loss_fn(model, data[step % len(data)])
        loss.backward()
        optimizer.step()
        if step % 20 == 0:
            print(f"[step {step}/{args.steps}] train_loss={loss.item():.4f} lr={optimizer.param_groups[0]['lr']:.1e}", flush=True)


if __name__ == "__main__":
    main()
