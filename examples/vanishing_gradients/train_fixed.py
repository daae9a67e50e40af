"""Classify 6 Gaussian blobs with a deep (12 hidden layers) sigmoid MLP.

    python train.py --steps 200
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn

NUM_CLASSES = 6


def make_data(n=2048, dim=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(NUM_CLASSES, dim, generator=g) * 1.5
    y = torch.randint(0, NUM_CLASSES, (n,), generator=g)
    x = centers[y] + torch.randn(n, dim, generator=g)
    return x, y


class DeepMLP(nn.Module):
    def __init__(self, dim=16, width=64, depth=12):
        super().__init__()
        layers = []
        for i in range(depth):
            layers += [nn.Linear(dim if i == 0 else width, width), nn.Tanh()]
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, NUM_CLASSES)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_normal_(m.weight, gain=nn.init.calculate_gain("tanh"))
                nn.init.zeros_(m.bias)
        nn.init.normal_(self.head.weight, std=0.01)

    def forward(self, x):
        return self.head(self.body(x))


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def make_target():
    torch.manual_seed(0)
    x, y = make_data()
    data = list(zip(x.split(64), y.split(64)))
    model = DeepMLP()
    make_optimizer = lambda params: torch.optim.SGD(params, lr=0.05, momentum=0.9)
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model.parameters()), "make_optimizer": make_optimizer,
            "num_classes": NUM_CLASSES, "task": "classification"}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    t = make_target()
    model, optimizer, data = t["model"], t["optimizer"], t["data"]
    first = model.body[0]
    for step in range(args.steps):
        optimizer.zero_grad()
        loss = loss_fn(model, data[step % len(data)])
        loss.backward()
        optimizer.step()
        if step % 20 == 0:
            print(f"step {step:4d} | loss {loss.item():.4f} | grad_norm(layer0) {first.weight.grad.norm().item():.2e}"
                  f" | grad_norm(head) {model.head.weight.grad.norm().item():.2e}", flush=True)


if __name__ == "__main__":
    main()
