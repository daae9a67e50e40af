"""Classify 5 Gaussian blobs; the objective is written as the log-likelihood of the labels.

    python train.py --steps 200
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn

NUM_CLASSES = 5


def make_data(n=2048, dim=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(NUM_CLASSES, dim, generator=g) * 0.8
    y = torch.randint(0, NUM_CLASSES, (n,), generator=g)
    x = centers[y] + torch.randn(n, dim, generator=g)
    return x, y


def loss_fn(model, batch):
    x, y = batch
    log_probs = F.log_softmax(model(x), dim=-1)
    return F.nll_loss(log_probs, y)


def make_target():
    torch.manual_seed(0)
    x, y = make_data()
    data = list(zip(x.split(64), y.split(64)))
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, NUM_CLASSES))
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
        x, y = data[step % len(data)]
        optimizer.zero_grad()
        loss = loss_fn(model, (x, y))
        loss.backward()
        optimizer.step()
        if step % 20 == 0:
            print(f"step {step} | loss {loss.item():.4f} | lr {optimizer.param_groups[0]['lr']:.1e}", flush=True)


if __name__ == "__main__":
    main()
