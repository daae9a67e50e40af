"""Defect-tile classifier: 5 kinds of inspection patches (32x32 grayscale).

Classes are blob, ring, square, plus, speckle. None of them depends on
orientation, so the training pipeline uses flips + 90-degree rotations on top
of padded random crops, brightness jitter and sensor noise. AdamW + cosine.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(7)

CLASSES = ("blob", "ring", "square", "plus", "speckle")
H = W = 32

batch_size = 64
epochs = 8
base_lr = 3e-3
min_lr = 1e-5
weight_decay = 0.05
warmup_iters = 20
log_every = 20


def draw(cls, rng):
    yy, xx = np.mgrid[:H, :W].astype(np.float32)
    cy, cx = rng.uniform(12, 20, size=2)
    r = rng.uniform(5, 9)
    d = np.sqrt((yy - cy) ** 2 + (xx - cx) ** 2)
    if cls == 0:
        img = (d < r).astype(np.float32)
    elif cls == 1:
        img = ((d < r) & (d > r - rng.uniform(1.5, 3.0))).astype(np.float32)
    elif cls == 2:
        t = rng.uniform(1.5, 3.0)
        inside = (np.abs(yy - cy) < r) & (np.abs(xx - cx) < r)
        hole = (np.abs(yy - cy) < r - t) & (np.abs(xx - cx) < r - t)
        img = (inside & ~hole).astype(np.float32)
    elif cls == 3:
        t = rng.uniform(1.0, 2.5)
        img = (((np.abs(yy - cy) < t) & (np.abs(xx - cx) < r)) |
               ((np.abs(xx - cx) < t) & (np.abs(yy - cy) < r))).astype(np.float32)
    else:
        img = (rng.random((H, W)) < 0.08).astype(np.float32) * (d < r + 3)
    img = img * rng.uniform(0.5, 1.0) + rng.normal(0, 0.1, (H, W))
    return img.astype(np.float32)


def synth(n, seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, len(CLASSES), n)
    x = np.stack([draw(int(c), rng) for c in y])[:, None]
    return torch.tensor(x), torch.tensor(y, dtype=torch.long)


def augment(x, gen):
    """Batch augmentation: pad-4 random crop, flips, rot90, brightness, noise."""
    n = x.shape[0]
    pad = 4
    xp = F.pad(x, (pad, pad, pad, pad), mode="reflect")
    oy = torch.randint(0, 2 * pad + 1, (n,), generator=gen)
    ox = torch.randint(0, 2 * pad + 1, (n,), generator=gen)
    ar = torch.arange(H)
    rows = (ar[None] + oy[:, None])[:, :, None]
    cols = (ar[None] + ox[:, None])[:, None, :]
    x = xp[:, 0][torch.arange(n)[:, None, None], rows, cols].unsqueeze(1)
    f = torch.rand(n, generator=gen) < 0.5
    x[f] = x[f].flip(-1)
    f = torch.rand(n, generator=gen) < 0.5
    x[f] = x[f].flip(-2)
    f = torch.rand(n, generator=gen) < 0.5
    x[f] = x[f].transpose(-1, -2)
    gain = 0.7 + 0.6 * torch.rand(n, 1, 1, 1, generator=gen)
    x = x * gain + 0.15 * torch.randn(x.shape, generator=gen)
    return x


def batches(x, y, bs, shuffle, gen=None, aug=False):
    idx = torch.randperm(len(x), generator=gen) if shuffle else torch.arange(len(x))
    for i in range(0, len(x), bs):
        j = idx[i:i + bs]
        xb = x[j]
        if aug:
            xb = augment(xb, gen)
        yield xb, y[j]


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.skip = None
        if stride != 1 or cin != cout:
            self.skip = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.b1(self.c1(x)))
        out = self.b2(self.c2(out))
        return F.relu(out + (x if self.skip is None else self.skip(x)))


class TileNet(nn.Module):
    def __init__(self, n_cls=len(CLASSES)):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.layers = nn.Sequential(Block(16, 16, 2), Block(16, 32, 2), Block(32, 48, 2))
        self.fc = nn.Linear(48, n_cls)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(x.mean((2, 3)))


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y, label_smoothing=0.05)


def make_optimizer(params):
    params = list(params)
    decay = [p for p in params if p.ndim > 1]
    no_decay = [p for p in params if p.ndim <= 1]
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=base_lr)


def lr_at(it, total):
    if it < warmup_iters:
        return base_lr * (it + 1) / warmup_iters
    p = (it - warmup_iters) / max(1, total - warmup_iters)
    return min_lr + 0.5 * (base_lr - min_lr) * (1 + math.cos(math.pi * p))


def get_data():
    xtr, ytr = synth(2400, seed=11)
    xva, yva = synth(500, seed=12)
    return xtr, ytr, xva, yva


@torch.no_grad()
def evaluate(model, xva, yva):
    model.eval()
    loss_sum, hits, n, nb = 0.0, 0, 0, 0
    for xb, yb in batches(xva, yva, 125, shuffle=False):
        logits = model(xb)
        loss_sum += F.cross_entropy(logits, yb, reduction="sum").item()
        hits += (logits.argmax(1) == yb).sum().item()
        n += len(yb)
        nb += 1
    model.train()
    return nb, loss_sum / n, 100.0 * hits / n


def make_target():
    xtr, ytr, _, _ = get_data()
    gen = torch.Generator().manual_seed(0)
    model = TileNet()
    it = batches(xtr, ytr, batch_size, shuffle=True, gen=gen, aug=True)
    data = [next(it) for _ in range(3)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model.parameters()), "make_optimizer": make_optimizer,
            "num_classes": len(CLASSES), "task": "classification"}


def main():
    xtr, ytr, xva, yva = get_data()
    gen = torch.Generator().manual_seed(0)
    model = TileNet()
    opt = make_optimizer(model.parameters())
    print(f"Model tilenet created, param count: {sum(p.numel() for p in model.parameters())}")
    steps_per_epoch = math.ceil(len(xtr) / batch_size)
    total = epochs * steps_per_epoch
    it = 0
    for epoch in range(epochs):
        model.train()
        avg, seen = 0.0, 0
        t0 = time.time()
        for bi, batch in enumerate(batches(xtr, ytr, batch_size, shuffle=True, gen=gen, aug=True)):
            lr = lr_at(it, total)
            for g in opt.param_groups:
                g["lr"] = lr
            loss = loss_fn(model, batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            it += 1
            avg += loss.item() * len(batch[1])
            seen += len(batch[1])
            if bi % log_every == 0 or bi == steps_per_epoch - 1:
                dt = time.time() - t0
                t0 = time.time()
                print(f"Train: {epoch} [{bi:>4d}/{steps_per_epoch} ({100.0 * bi / (steps_per_epoch - 1):>3.0f}%)]  "
                      f"Loss: {loss.item():#.4g} ({avg / seen:#.4g})  Time: {dt:.3f}s  LR: {lr:.3e}")
        nb, vloss, vacc = evaluate(model, xva, yva)
        print(f"Test: [{nb:>4d}/{nb}]  Loss: {vloss:>7.4f}  Acc@1: {vacc:>7.3f}")


if __name__ == "__main__":
    main()
