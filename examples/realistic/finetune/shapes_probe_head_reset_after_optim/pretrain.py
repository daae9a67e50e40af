"""Pretrain the small conv backbone on the 6-class source shapes and save backbone.pt.

This is how backbone.pt in this folder was made (python pretrain.py, ~30 s on CPU);
train.py only loads it.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from train import IMG, Backbone, grid

SOURCE_CLASSES = ("disk", "ring", "square", "triangle", "plus", "cross")


def draw_source(cls, g):
    yy, xx = grid()
    u = torch.rand(6, generator=g)
    cy, cx = 9 + 10 * u[0], 9 + 10 * u[1]
    r = 4.5 + 4.0 * u[2]
    name = SOURCE_CLASSES[cls]
    th = (u[3] - 0.5) * math.pi / 6 if name in ("plus", "cross") else math.pi * u[3]
    w = 1.2 + 1.2 * u[4]
    dy, dx = yy - cy, xx - cx
    ry = dx * math.sin(th) + dy * math.cos(th)
    rx = dx * math.cos(th) - dy * math.sin(th)
    rad = torch.sqrt(dx ** 2 + dy ** 2)
    if name == "disk":
        m = rad < r
    elif name == "ring":
        m = (rad < r) & (rad > r - w)
    elif name == "square":
        m = (rx.abs() < r * 0.8) & (ry.abs() < r * 0.8)
    elif name == "triangle":
        m = (ry < r * 0.5) & (ry > -r + 2 * rx.abs())
    elif name == "plus":
        m = ((rx.abs() < w) & (ry.abs() < r)) | ((ry.abs() < w) & (rx.abs() < r))
    else:
        a, b = (rx + ry) / math.sqrt(2), (rx - ry) / math.sqrt(2)
        m = ((a.abs() < w) & (b.abs() < r)) | ((b.abs() < w) & (a.abs() < r))
    img = m.float() * (0.55 + 0.45 * u[5]) + 0.18 * torch.rand(IMG, IMG, generator=g)
    return img.clamp(0, 1)


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(123)
    y = torch.randint(len(SOURCE_CLASSES), (6000,), generator=g)
    x = torch.stack([draw_source(int(c), g) for c in y]).unsqueeze(1)
    x = (x - 0.5) / 0.25
    backbone, head = Backbone(), nn.Linear(Backbone.feature_dim, len(SOURCE_CLASSES))
    params = list(backbone.parameters()) + list(head.parameters())
    opt = torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=5e-4)
    steps = 6 * (len(y) // 64)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.05, total_steps=steps)
    backbone.train()
    for epoch in range(6):
        perm = torch.randperm(len(y))
        correct = 0
        for i in range(0, len(y) - 63, 64):
            idx = perm[i:i + 64]
            logits = head(backbone(x[idx]))
            loss = F.cross_entropy(logits, y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            correct += (logits.argmax(1) == y[idx]).sum().item()
        print(f"pretrain epoch {epoch}: loss {loss.item():.3f} acc {correct / len(y):.3f}")
    torch.save(backbone.state_dict(), "backbone.pt")


if __name__ == "__main__":
    main()
