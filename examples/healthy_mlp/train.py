"""Classify 10 Gaussian blobs in 32 dimensions with a two-layer MLP (a healthy run).

    python train.py --steps 200
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn

NUM_CLASSES = 10


def make_blobs(n, seed):
    g = torch.Generator().manual_seed(0)  # the class centres are shared by train and val
    centers = torch.randn(NUM_CLASSES, 32, generator=g) * 0.8
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, NUM_CLASSES, (n,), generator=g)
    x = centers[y] + torch.randn(n, 32, generator=g)
    return x, y


class MLP(nn.Module):
    def __init__(self, dim=32, hidden=64, classes=NUM_CLASSES):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, classes)

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.out(x)


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def make_target():
    torch.manual_seed(0)
    x, y = make_blobs(2048, seed=1)
    data = list(zip(x.split(64), y.split(64)))
    model = MLP()
    make_optimizer = lambda params: torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01)
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model.parameters()), "make_optimizer": make_optimizer,
            "num_classes": NUM_CLASSES, "task": "classification"}


@torch.no_grad()
def evaluate(model, x, y):
    model.eval()
    loss = F.cross_entropy(model(x), y)
    model.train()
    return loss


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--log-every", type=int, default=10)
    args = parser.parse_args()

    t = make_target()
    model, optimizer, data = t["model"], t["optimizer"], t["data"]
    x_val, y_val = make_blobs(512, seed=2)
    model.train()
    for step in range(args.steps):
        batch = data[step % len(data)]
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model, batch)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=5.0)
        optimizer.step()
        if step % args.log_every == 0 or step == args.steps - 1:
            line = f"step {step:4d} | loss {loss.item():.4f} | grad_norm {grad_norm.item():.3f} | lr {optimizer.param_groups[0]['lr']:.1e}"
            if step % 100 == 0 or step == args.steps - 1:
                line += f" | val_loss {evaluate(model, x_val, y_val).item():.4f}"
            print(line, flush=True)


if __name__ == "__main__":
    main()
