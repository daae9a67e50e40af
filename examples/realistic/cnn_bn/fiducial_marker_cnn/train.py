"""Fiducial-marker type classifier for PCB inspection crops.

Six marker types printed on boards (all designed to be mirror symmetric so a
flipped board still registers): dot, ring, square, plus, cross, diamond.
Crops are 32x32 grey images rendered in render_marker(); training uses random
pad-crop and horizontal flips.  Logging follows timm's train.py.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

SEED = 5
SIZE = 32
MARKERS = ["dot", "ring", "square", "plus", "cross", "diamond"]
TRAIN_N, VAL_N = 3600, 1200
BATCH_SIZE = 64
EPOCHS = 10
BASE_LR = 0.05
MOMENTUM = 0.9
WD = 5e-4
PAD = 4
LOG_EVERY = 10


def render_marker(kind, rng):
    yy, xx = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32) + 0.5
    cx = SIZE / 2 + rng.uniform(-3, 3)
    cy = SIZE / 2 + rng.uniform(-3, 3)
    r = rng.uniform(6.0, 11.0)
    th = math.radians(rng.uniform(-10, 10))
    w = rng.uniform(1.5, 3.0)
    dx, dy = xx - cx, yy - cy
    u = dx * math.cos(th) + dy * math.sin(th)
    v = -dx * math.sin(th) + dy * math.cos(th)
    rad = np.hypot(u, v)
    if kind == "dot":
        m = rad < r * 0.7
    elif kind == "ring":
        m = np.abs(rad - r * 0.8) < w / 2 + 0.3
    elif kind == "square":
        m = np.maximum(np.abs(u), np.abs(v)) < r * 0.7
    elif kind == "plus":
        m = ((np.abs(u) < w) & (np.abs(v) < r)) | ((np.abs(v) < w) & (np.abs(u) < r))
    elif kind == "cross":
        a, b = (u + v) / math.sqrt(2), (u - v) / math.sqrt(2)
        m = ((np.abs(a) < w) & (np.abs(b) < r)) | ((np.abs(b) < w) & (np.abs(a) < r))
    else:  # diamond
        m = np.abs(u) + np.abs(v) < r * 0.9
    copper = rng.uniform(0.55, 0.95)
    board = rng.uniform(0.05, 0.3)
    img = np.where(m, copper, board) + rng.normal(0, 0.07, (SIZE, SIZE))
    # uneven lighting across the crop
    img += rng.uniform(-0.1, 0.1) * (xx - SIZE / 2) / SIZE + rng.uniform(-0.1, 0.1) * (yy - SIZE / 2) / SIZE
    return np.clip(img, 0, 1).astype(np.float32)


def build_split(n, seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, len(MARKERS), n)
    x = np.stack([render_marker(MARKERS[k], rng) for k in y])[:, None]
    x = (x - 0.35) / 0.3
    return torch.from_numpy(x), torch.from_numpy(y).long()


def augment_batch(x):
    """Random pad-crop and horizontal flip, applied per sample on a batch."""
    n = x.size(0)
    padded = F.pad(x, (PAD, PAD, PAD, PAD), mode="reflect")
    oy = torch.randint(0, 2 * PAD + 1, (n,))
    ox = torch.randint(0, 2 * PAD + 1, (n,))
    out = torch.stack([padded[i, :, oy[i]:oy[i] + SIZE, ox[i]:ox[i] + SIZE] for i in range(n)])
    flip = torch.rand(n) < 0.5
    out[flip] = out[flip].flip(-1)
    return out


class AugLoader:
    """Wraps a DataLoader and augments each training batch."""

    def __init__(self, loader):
        self.loader = loader

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        for x, y in self.loader:
            yield augment_batch(x), y


def get_loaders():
    xtr, ytr = build_split(TRAIN_N, SEED)
    xva, yva = build_split(VAL_N, SEED + 1)
    g = torch.Generator().manual_seed(SEED)
    train = AugLoader(DataLoader(TensorDataset(xtr, ytr), batch_size=BATCH_SIZE, shuffle=True,
                                 drop_last=True, generator=g))
    val = DataLoader(TensorDataset(xva, yva), batch_size=300)
    return train, val


class MarkerNet(nn.Module):
    def __init__(self, num_classes=len(MARKERS)):
        super().__init__()

        def stage(cin, cout):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                                 nn.ReLU(inplace=True), nn.MaxPool2d(2))
        self.body = nn.Sequential(stage(1, 16), stage(16, 32), stage(32, 64))
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x):
        x = self.body(x).mean((2, 3))
        return self.fc(x)


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def make_optimizer(params):
    return torch.optim.SGD(params, lr=BASE_LR, momentum=MOMENTUM, nesterov=True, weight_decay=WD)


def make_target():
    torch.manual_seed(SEED)
    train, _ = get_loaders()
    model = MarkerNet()
    it = iter(train)
    data = [next(it) for _ in range(3)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model.parameters()), "make_optimizer": make_optimizer,
            "num_classes": len(MARKERS), "task": "classification"}


def train_epoch(epoch, model, loader, opt):
    model.train()
    loss_sum = acc_sum = n_sum = 0.0
    last = len(loader) - 1
    tic = time.time()
    for i, (x, y) in enumerate(loader):
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        b = y.numel()
        acc = 100.0 * (logits.argmax(1) == y).float().mean().item()
        loss_sum += loss.item() * b
        acc_sum += acc * b
        n_sum += b
        if i % LOG_EVERY == 0 or i == last:
            bt = (time.time() - tic) / (i + 1)
            print(f"Train: {epoch} [{i:>3d}/{len(loader)} ({100 * i / last:>3.0f}%)]  "
                  f"Loss: {loss.item():.4f} ({loss_sum / n_sum:.4f})  Acc@1: {acc:6.2f} ({acc_sum / n_sum:6.2f})  "
                  f"Time: {bt:.3f}s, {b / bt:>7.1f}/s  LR: {opt.param_groups[0]['lr']:.3e}", flush=True)
    return loss_sum / n_sum, acc_sum / n_sum


@torch.no_grad()
def validate(model, loader):
    model.eval()
    loss_sum = correct = n = 0.0
    for x, y in loader:
        logits = model(x)
        loss_sum += F.cross_entropy(logits, y, reduction="sum").item()
        correct += (logits.argmax(1) == y).sum().item()
        n += y.numel()
    print(f"Test: [{len(loader)}/{len(loader)}]  Loss: {loss_sum / n:.4f}  Acc@1: {100 * correct / n:.2f}",
          flush=True)
    return loss_sum / n, 100 * correct / n


def main():
    torch.manual_seed(SEED)
    start = time.time()
    train_loader, val_loader = get_loaders()
    model = MarkerNet()
    opt = make_optimizer(model.parameters())
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=EPOCHS, eta_min=1e-3)
    print(f"Model markernet created, param count: {sum(p.numel() for p in model.parameters())}")
    print(f"Scheduled epochs: {EPOCHS}. Train {TRAIN_N}, val {VAL_N}, classes {MARKERS}")
    best = (0.0, -1)
    for epoch in range(EPOCHS):
        tr_loss, tr_acc = train_epoch(epoch, model, train_loader, opt)
        va_loss, va_acc = validate(model, val_loader)
        sched.step()
        print(f"Epoch {epoch} summary: train_loss={tr_loss:.4f} train_top1={tr_acc:.2f} "
              f"eval_loss={va_loss:.4f} eval_top1={va_acc:.2f}", flush=True)
        if va_acc > best[0]:
            best = (va_acc, epoch)
    print(f"*** Best metric: {best[0]:.2f} (epoch {best[1]})")
    print(f"Total time: {time.time() - start:.1f}s")


if __name__ == "__main__":
    main()
