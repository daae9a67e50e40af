"""Classify 8 Gaussian blobs with an MLP and a hand-written cross-entropy (log-softmax written out).

    python train.py --steps 200
"""
import argparse

import torch
from torch import nn

NUM_CLASSES = 8


def make_data(n=2048, dim=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(NUM_CLASSES, dim, generator=g) * 2.0
    y = torch.randint(0, NUM_CLASSES, (n,), generator=g)
    x = centers[y] + torch.randn(n, dim, generator=g)
    return x, y


def log_softmax(z):
    return z - torch.log(torch.exp(z).sum(dim=1, keepdim=True))


def loss_fn(model, batch):
    x, y = batch
    logp = log_softmax(model(x))
    return -logp.gather(1, y[:, None]).mean()


def make_target():
    torch.manual_seed(0)
    x, y = make_data()
    data = list(zip(x.split(128), y.split(128)))
    model = nn.Sequential(nn.Linear(16, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, NUM_CLASSES))
    make_optimizer = lambda params: torch.optim.Adam(params, lr=2e-2)
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
        if step % 5 == 0:
            print(f"iter {step}: loss {loss.item():.4f}, lr {optimizer.param_groups[0]['lr']:.0e}", flush=True)


if __name__ == "__main__":
    main()
