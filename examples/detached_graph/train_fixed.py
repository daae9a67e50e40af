"""Learn a nonlinear 1-D target of 12 inputs through an 8-unit bottleneck encoder and a head.

The model keeps the last features it computed for a feature-statistics dashboard.

    python train.py --steps 200
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn


def make_data(n=2048, dim=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dim, generator=g)
    w = torch.randn(dim, 3, generator=g)
    h = x @ w
    y = (torch.sin(h[:, 0]) + h[:, 1] * h[:, 2] / 3).unsqueeze(-1)
    return x, y


class EncoderHead(nn.Module):
    def __init__(self, dim=12, bottleneck=8):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(dim, 64), nn.ReLU(), nn.Linear(64, bottleneck))
        self.head = nn.Sequential(nn.Linear(bottleneck, 64), nn.ReLU(), nn.Linear(64, 1))
        self.last_features = None

    def forward(self, x):
        features = self.encoder(x)
        self.last_features = features.detach()
        return self.head(features)


def loss_fn(model, batch):
    x, y = batch
    return F.mse_loss(model(x), y)


def make_target():
    torch.manual_seed(0)
    x, y = make_data()
    data = list(zip(x.split(64), y.split(64)))
    model = EncoderHead()
    make_optimizer = lambda params: torch.optim.Adam(params, lr=3e-3)
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model.parameters()), "make_optimizer": make_optimizer,
            "task": "regression"}


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
            feature_std = model.last_features.std().item()
            print(f"step {step} | loss {loss.item():.4f} | feature_std {feature_std:.3f} | lr {optimizer.param_groups[0]['lr']:.1e}", flush=True)


if __name__ == "__main__":
    main()
