"""Classify 10 Gaussian blobs; the model returns class probabilities.

    python train.py --steps 200
"""
import argparse

import torch
from torch import nn

NUM_CLASSES = 10


def make_data(n=2048, dim=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(NUM_CLASSES, dim, generator=g) * 0.8
    y = torch.randint(0, NUM_CLASSES, (n,), generator=g)
    x = centers[y] + torch.randn(n, dim, generator=g)
    return x, y


def build_model(dim=32, hidden=64):
    return nn.Sequential(
        nn.Linear(dim, hidden),
        nn.ReLU(),
        nn.Linear(hidden, NUM_CLASSES),
        nn.Softmax(dim=-1),
    )


criterion = nn.CrossEntropyLoss()


def loss_fn(model, batch):
    x, y = batch
    return criterion(model(x), y)


def make_target():
    torch.manual_seed(0)
    x, y = make_data()
    data = list(zip(x.split(64), y.split(64)))
    model = build_model()
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
    for step in range(args.steps):
        optimizer.zero_grad()
        loss = loss_fn(model, data[step % len(data)])
        loss.backward()
        optimizer.step()
        if step % 20 == 0:
            print(f"step {step} | loss {loss.item():.4f} | lr {optimizer.param_groups[0]['lr']:.1e}", flush=True)


if __name__ == "__main__":
    main()
