"""Seven-segment display reader: classify single hex digits (0-9, A-F) cropped
from photos of LED/LCD register displays.

The crops are synthesised here: segments are rasterised as capsules in numpy,
with per-sample slant, stroke width, ghosting of unlit segments, blur-ish edges,
gain and sensor noise. Training output mimics timm's train.py.
"""
import math
import random
import time
from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

SEED = 7
IMG = 28
EPOCHS = 8
BATCH_SIZE = 64
LR = 0.05
WEIGHT_DECAY = 5e-4
WARMUP_EPOCHS = 1
LOG_INTERVAL = 25
N_TRAIN_PER_CLASS = 280
N_VAL_PER_CLASS = 80

CLASSES = ("0", "1", "2", "3", "4", "5", "6", "7",
           "8", "9", "A", "b", "C", "d", "E", "F")

#         a  b  c  d  e  f  g
SEGMENTS = OrderedDict([
    ("0", "1111110"), ("1", "0110000"), ("2", "1101101"), ("3", "1111001"),
    ("4", "0110011"), ("5", "1011011"), ("6", "1011111"), ("7", "1110000"),
    ("8", "1111111"), ("9", "1111011"), ("A", "1110111"), ("b", "0011111"),
    ("C", "1001110"), ("d", "0111101"), ("E", "1001111"), ("F", "1000111"),
])

# segment end points in a unit cell: x in [0, 1], y in [0, 2] (y grows downwards)
SEG_GEOM = {
    "a": ((0.0, 0.0), (1.0, 0.0)),
    "b": ((1.0, 0.0), (1.0, 1.0)),
    "c": ((1.0, 1.0), (1.0, 2.0)),
    "d": ((0.0, 2.0), (1.0, 2.0)),
    "e": ((0.0, 1.0), (0.0, 2.0)),
    "f": ((0.0, 0.0), (0.0, 1.0)),
    "g": ((0.0, 1.0), (1.0, 1.0)),
}

_YY, _XX = np.mgrid[0:IMG, 0:IMG].astype(np.float32)


def _capsule(p0, p1, width):
    """Soft mask of a thick line segment from p0 to p1 (pixel coordinates)."""
    (x0, y0), (x1, y1) = p0, p1
    dx, dy = x1 - x0, y1 - y0
    t = ((_XX - x0) * dx + (_YY - y0) * dy) / (dx * dx + dy * dy + 1e-6)
    t = np.clip(t, 0.0, 1.0)
    dist = np.hypot(_XX - (x0 + t * dx), _YY - (y0 + t * dy))
    return np.clip(width / 2.0 - dist + 0.5, 0.0, 1.0)


def render_digit(label, rng):
    code = SEGMENTS[CLASSES[label]]
    h = rng.uniform(8.0, 10.5)            # half-height of the digit in pixels
    w = h * rng.uniform(0.9, 1.15)        # cell width
    slant = rng.uniform(-0.12, 0.12)      # shear from the camera angle
    width = rng.uniform(1.8, 3.0)
    gap = rng.uniform(0.08, 0.18)         # segments do not touch at the corners
    cx = IMG / 2 + rng.uniform(-2.0, 2.0)
    cy = IMG / 2 + rng.uniform(-1.5, 1.5)
    ghost = rng.uniform(0.0, 0.25)        # unlit segments on LCDs are faintly visible

    def to_px(x, y):
        px = cx + (x - 0.5) * w + (1.0 - y) * slant * h
        py = cy + (y - 1.0) * h
        return px, py

    img = np.zeros((IMG, IMG), dtype=np.float32)
    for on, name in zip(code, "abcdefg"):
        (x0, y0), (x1, y1) = SEG_GEOM[name]
        # shrink every segment a little towards its midpoint
        mx, my = (x0 + x1) / 2, (y0 + y1) / 2
        x0, y0 = mx + (x0 - mx) * (1 - gap), my + (y0 - my) * (1 - gap)
        x1, y1 = mx + (x1 - mx) * (1 - gap), my + (y1 - my) * (1 - gap)
        level = 1.0 if on == "1" else ghost
        if level > 0:
            img = np.maximum(img, level * _capsule(to_px(x0, y0), to_px(x1, y1), width))
    gain = rng.uniform(0.6, 1.0)
    bg = rng.uniform(0.0, 0.25)
    img = bg + (gain - bg) * img + rng.normal(0.0, 0.06, size=img.shape)
    return np.clip(img, 0.0, 1.0).astype(np.float32)


def build_split(n_per_class, seed):
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(len(CLASSES)), n_per_class)
    rng.shuffle(labels)
    images = np.stack([render_digit(int(c), rng) for c in labels])
    return torch.from_numpy(images).unsqueeze(1), torch.from_numpy(labels).long()


MEAN, STD = 0.25, 0.30


class RandomCropFlip:
    """Pad-and-crop plus horizontal flip, the usual light augmentation."""

    def __init__(self, pad=2, flip_p=0.5):
        self.pad = pad
        self.flip_p = flip_p

    def __call__(self, x):
        if self.pad:
            x = F.pad(x, (self.pad,) * 4, mode="replicate")
            i = random.randint(0, 2 * self.pad)
            j = random.randint(0, 2 * self.pad)
            x = x[:, i:i + IMG, j:j + IMG]
        if random.random() < self.flip_p:
            x = x.flip(-1)
        return x


class DisplayDigits(Dataset):
    def __init__(self, images, labels, transform=None):
        self.images, self.labels, self.transform = images, labels, transform

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, idx):
        x = self.images[idx]
        if self.transform is not None:
            x = self.transform(x)
        return (x - MEAN) / STD, self.labels[idx]


def build_loaders(batch_size=BATCH_SIZE):
    xtr, ytr = build_split(N_TRAIN_PER_CLASS, SEED)
    xva, yva = build_split(N_VAL_PER_CLASS, SEED + 1000)
    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(DisplayDigits(xtr, ytr, RandomCropFlip()), batch_size=batch_size,
                              shuffle=True, drop_last=True, generator=g)
    val_loader = DataLoader(DisplayDigits(xva, yva), batch_size=200, shuffle=False)
    return train_loader, val_loader


def conv_bn(cin, cout, stride=1):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class SegNet(nn.Module):
    def __init__(self, num_classes=len(CLASSES)):
        super().__init__()
        self.features = nn.Sequential(
            conv_bn(1, 16, stride=2), conv_bn(16, 32),
            conv_bn(32, 48, stride=2), conv_bn(48, 64),
        )
        self.head = nn.Linear(64, num_classes)

    def forward(self, x):
        x = self.features(x)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.head(x)


criterion = nn.CrossEntropyLoss()


def loss_fn(model, batch):
    x, y = batch
    return criterion(model(x), y)


def make_optimizer(params):
    return torch.optim.SGD(params, lr=LR, momentum=0.9, nesterov=True, weight_decay=WEIGHT_DECAY)


def lr_at(epoch):
    if epoch < WARMUP_EPOCHS:
        return LR * 0.1
    t = (epoch - WARMUP_EPOCHS) / max(1, EPOCHS - WARMUP_EPOCHS)
    return 1e-4 + 0.5 * (LR - 1e-4) * (1 + math.cos(math.pi * t))


def make_target():
    torch.manual_seed(SEED)
    random.seed(SEED)
    train_loader, _ = build_loaders()
    model = SegNet()
    it = iter(train_loader)
    data = [next(it) for _ in range(3)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model.parameters()), "make_optimizer": make_optimizer,
            "num_classes": len(CLASSES), "task": "classification"}


class Meter:
    def __init__(self):
        self.val = self.sum = self.count = 0.0

    @property
    def avg(self):
        return self.sum / max(self.count, 1)

    def update(self, v, n=1):
        self.val = v
        self.sum += v * n
        self.count += n


def train_one_epoch(epoch, model, loader, optimizer):
    model.train()
    losses, batch_time = Meter(), Meter()
    last = len(loader) - 1
    end = time.time()
    for i, batch in enumerate(loader):
        loss = loss_fn(model, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        n = batch[0].size(0)
        losses.update(loss.item(), n)
        batch_time.update(time.time() - end)
        end = time.time()
        if i % LOG_INTERVAL == 0 or i == last:
            print(f"Train: {epoch} [{i:>4d}/{len(loader)} ({100.0 * i / last:>3.0f}%)]  "
                  f"Loss: {losses.val:#.4g} ({losses.avg:#.4g})  "
                  f"Time: {batch_time.val:.3f}s, {n / max(batch_time.val, 1e-6):>7.2f}/s  "
                  f"LR: {optimizer.param_groups[0]['lr']:.3e}", flush=True)
    return losses.avg


@torch.no_grad()
def validate(model, loader):
    model.eval()
    losses, top1 = Meter(), Meter()
    per_class_hits = torch.zeros(len(CLASSES))
    per_class_n = torch.zeros(len(CLASSES))
    last = len(loader) - 1
    for i, (x, y) in enumerate(loader):
        logits = model(x)
        loss = criterion(logits, y)
        hit = (logits.argmax(1) == y).float()
        losses.update(loss.item(), x.size(0))
        top1.update(100.0 * hit.mean().item(), x.size(0))
        per_class_hits.index_add_(0, y, hit)
        per_class_n.index_add_(0, y, torch.ones_like(hit))
        if i == last:
            print(f"Test: [{i:>4d}/{last}]  Loss: {losses.val:>7.4f} ({losses.avg:>6.4f})  "
                  f"Acc@1: {top1.val:>7.3f} ({top1.avg:>7.3f})", flush=True)
    return losses.avg, top1.avg, per_class_hits / per_class_n.clamp(min=1)


def main():
    torch.manual_seed(SEED)
    random.seed(SEED)
    np.random.seed(SEED)
    t0 = time.time()
    train_loader, val_loader = build_loaders()
    model = SegNet()
    optimizer = make_optimizer(model.parameters())
    n_params = sum(p.numel() for p in model.parameters())
    print(f"Model SegNet created, param count: {n_params}")
    print(f"Data: {len(train_loader.dataset)} train / {len(val_loader.dataset)} val crops, "
          f"{len(CLASSES)} classes")
    print(f"Scheduled epochs: {EPOCHS}")
    best = (0.0, -1)
    for epoch in range(EPOCHS):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(epoch)
        train_one_epoch(epoch, model, train_loader, optimizer)
        _, acc, per_class = validate(model, val_loader)
        if acc > best[0]:
            best = (acc, epoch)
    worst = torch.argsort(per_class)[:4]
    print("Per-class Acc@1 (worst 4): " + ", ".join(
        f"{CLASSES[k]}={100 * per_class[k]:.1f}" for k in worst.tolist()))
    print(f"*** Best metric: {best[0]:.3f} (epoch {best[1]})")
    print(f"Total time: {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
