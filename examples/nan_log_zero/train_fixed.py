"""Binary classification (is the point above a random hyperplane?) with a hand-written BCE loss.

    python train.py --steps 200
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn


def make_data(n=2048, dim=20, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(dim, generator=g)
    x = torch.randn(n, dim, generator=g)
    y = (x @ w > 0).float()
    return x, y


def loss_fn(model, batch):
    x, y = batch
    z = model(x).squeeze(-1)
    return F.binary_cross_entropy_with_logits(z, y)


def make_target():
    torch.manual_seed(0)
    x, y = make_data()
    data = list(zip(x.split(128), y.split(128)))
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
    make_optimizer = lambda params: torch.optim.Adam(params, lr=1e-2)
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model.parameters()), "make_optimizer": make_optimizer,
            "num_classes": 2, "task": "classification"}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    t = make_target()
    model, optimizer, data = t["model"], t["optimizer"], t["data"]
    for step in range(1, args.steps + 1):
        optimizer.zero_grad()
        loss = loss_fn(model, data[step % len(data)])
        loss.backward()
        optimizer.step()
        if step % 5 == 0:
            grad_norm = torch.norm(torch.stack([p.grad.norm() for p in model.parameters()]))
            print(f"step {step} | loss {loss.item():.4f} | grad_norm {grad_norm.item():.4f} | lr {optimizer.param_groups[0]['lr']:.1e}", flush=True)


if __name__ == "__main__":
    main()
