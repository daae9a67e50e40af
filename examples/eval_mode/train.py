"""Classify 4 noisy classes from 64 features with few examples (128) and a wide MLP with
batch-norm and dropout; validation loss is reported as training goes.

    python train.py --steps 200
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn

NUM_CLASSES = 4


def make_split(n, seed):
    g = torch.Generator().manual_seed(0)  # same class centres for every split
    centers = torch.randn(NUM_CLASSES, 64, generator=g) * 0.35
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, NUM_CLASSES, (n,), generator=g)
    x = 3.0 + centers[y] + torch.randn(n, 64, generator=g)
    return x, y


def build_model():
    return nn.Sequential(
        nn.Linear(64, 256), nn.BatchNorm1d(256), nn.ReLU(), nn.Dropout(0.5),
        nn.Linear(256, 256), nn.BatchNorm1d(256), nn.ReLU(), nn.Dropout(0.5),
        nn.Linear(256, NUM_CLASSES),
    )


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


@torch.no_grad()
def evaluate(model, x, y):
    model.eval()
    loss = F.cross_entropy(model(x), y).item()
    return loss


def make_target():
    torch.manual_seed(0)
    x, y = make_split(128, seed=1)
    data = list(zip(x.split(64), y.split(64)))
    model = build_model()
    print(f"initial val_loss {evaluate(model, *make_split(512, seed=2)):.4f}")
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
    x_val, y_val = make_split(512, seed=2)
    for step in range(args.steps):
        optimizer.zero_grad()
        loss = loss_fn(model, data[step % len(data)])
        loss.backward()
        optimizer.step()
        if step % 25 == 0 or step == args.steps - 1:
            val_loss = evaluate(model, x_val, y_val)
            print(f"step {step} | loss {loss.item():.4f} | val_loss {val_loss:.4f} | lr {optimizer.param_groups[0]['lr']:.1e}", flush=True)


if __name__ == "__main__":
    main()
