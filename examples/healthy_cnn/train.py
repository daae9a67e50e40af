"""Classify the orientation of a bar (4 classes) in noisy 12x12 images with a small CNN
(batch-norm, dropout), evaluating on a held-out set every 50 steps. Logs like the HF Trainer.

    python train.py --steps 150
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn

NUM_CLASSES = 4
SIZE = 12


def make_images(n, seed):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, NUM_CLASSES, (n,), generator=g)
    x = 0.5 * torch.randn(n, 1, SIZE, SIZE, generator=g)
    pos = torch.randint(2, SIZE - 2, (n, 2), generator=g)
    idx = torch.arange(-2, 3)
    for i in range(n):
        r, c = pos[i].tolist()
        k = y[i].item()
        rows = [r + idx * 0, r + idx, r + idx, r - idx][k]
        cols = [c + idx, c + idx * 0, c + idx, c + idx][k]
        x[i, 0, rows, cols] += 2.0
    return x, y


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(nn.Flatten(), nn.Dropout(0.2), nn.Linear(32 * 3 * 3, NUM_CLASSES))

    def forward(self, x):
        return self.classifier(self.features(x))


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def make_target():
    torch.manual_seed(0)
    x, y = make_images(1024, seed=1)
    data = list(zip(x.split(32), y.split(32)))
    model = SmallCNN()
    make_optimizer = lambda params: torch.optim.Adam(params, lr=2e-3)
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model.parameters()), "make_optimizer": make_optimizer,
            "num_classes": NUM_CLASSES, "task": "classification"}


def evaluate(model, x, y):
    model.eval()
    with torch.no_grad():
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        acc = (logits.argmax(dim=1) == y).float().mean()
    model.train()
    return {"eval_loss": round(loss.item(), 4), "eval_accuracy": round(acc.item(), 4)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=150)
    args = parser.parse_args()
    t = make_target()
    model, optimizer, data = t["model"], t["optimizer"], t["data"]
    x_val, y_val = make_images(256, seed=2)
    model.train()
    for step in range(1, args.steps + 1):
        optimizer.zero_grad()
        loss = loss_fn(model, data[step % len(data)])
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        epoch = round(step / len(data), 2)
        if step % 10 == 0:
            print({"loss": round(loss.item(), 4), "grad_norm": round(grad_norm.item(), 4),
                   "learning_rate": optimizer.param_groups[0]["lr"], "epoch": epoch}, flush=True)
        if step % 50 == 0:
            print({**evaluate(model, x_val, y_val), "epoch": epoch}, flush=True)


if __name__ == "__main__":
    main()
