"""Classify 16-step sequences of 6 channels (which of 4 motifs is embedded) with a 1-D conv net.

    python train.py --steps 200
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn

NUM_CLASSES = 4
T, C = 16, 6


def make_data(n=2048, seed=0):
    g = torch.Generator().manual_seed(seed)
    motifs = torch.randn(NUM_CLASSES, 4, C, generator=g) * 2
    y = torch.randint(0, NUM_CLASSES, (n,), generator=g)
    x = torch.randn(n, T, C, generator=g)
    start = torch.randint(0, T - 4, (n,), generator=g)
    for i in range(n):
        x[i, start[i]:start[i] + 4] += motifs[y[i]]
    return x, y  # (batch, time, channels)


class ConvNet(nn.Module):
    def __init__(self, hidden=32):
        super().__init__()
        self.conv = nn.Conv1d(C, hidden, kernel_size=5, padding=2)
        self.pool = nn.MaxPool1d(2)
        self.fc = nn.Linear(hidden * T // 2, NUM_CLASSES)

    def forward(self, x):
        b = x.shape[0]
        h = self.pool(F.relu(self.conv(x.transpose(1, 2))))  # (batch, hidden, time/2)
        h = h.permute(0, 2, 1).view(b, -1)
        return self.fc(h)


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def make_target():
    torch.manual_seed(0)
    x, y = make_data()
    data = list(zip(x.split(64), y.split(64)))
    model = ConvNet()
    make_optimizer = lambda params: torch.optim.Adam(params, lr=2e-3)
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
