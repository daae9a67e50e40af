"""Stroke-pattern classifier for line-scan inspection crops.

Small conv-BN net, AdamW + warmup/cosine, timm-ish console output.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

CLASSES = ["horizontal_line", "vertical_line", "diagonal", "cross"]
IMG = 24
SEED = 7

CFG = dict(
    n_train=3200,
    n_val=600,
    batch_size=64,
    epochs=10,
    lr=3e-3,
    weight_decay=0.05,
    warmup_epochs=1,
    log_interval=16,
)


def draw_sample(rng, label):
    img = np.zeros((IMG, IMG), dtype=np.float32)
    width = rng.integers(1, 3)
    length = rng.integers(10, 20)
    r0 = rng.integers(3, IMG - 3 - width)
    c0 = rng.integers(2, IMG - 2 - length)
    if label == 0:      # horizontal
        img[r0:r0 + width, c0:c0 + length] = 1.0
    elif label == 1:    # vertical
        img[c0:c0 + length, r0:r0 + width] = 1.0
    elif label == 2:    # diagonal, either direction
        start = rng.integers(2, IMG - 2 - length)
        idx = np.arange(length)
        rows = start + idx
        cols = start + idx if rng.random() < 0.5 else IMG - 1 - (start + idx)
        for w in range(width):
            img[rows, np.clip(cols + w, 0, IMG - 1)] = 1.0
    else:               # cross
        half = length // 2
        cr, cc = rng.integers(half + 1, IMG - half - 1, size=2)
        img[cr:cr + width, cc - half:cc + half] = 1.0
        img[cr - half:cr + half, cc:cc + width] = 1.0
    # dust specks and sensor noise
    for _ in range(rng.integers(0, 4)):
        y, x = rng.integers(0, IMG, size=2)
        img[y, x] = rng.uniform(0.4, 1.0)
    img = img * rng.uniform(0.6, 1.0) + rng.normal(0.0, 0.15, size=img.shape).astype(np.float32)
    return img


def make_split(n, seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, len(CLASSES), size=n)
    images = np.stack([draw_sample(rng, int(y)) for y in labels])[:, None]
    return torch.from_numpy(images), torch.from_numpy(labels).long()


class StrokeCrops(Dataset):
    def __init__(self, images, labels, train):
        self.images = images
        self.labels = labels
        self.train = train
        self.mean, self.std = 0.06, 0.22

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        x = self.images[i]
        y = self.labels[i]
        if self.train:
            if torch.rand(1).item() < 0.5:
                x = torch.flip(x, dims=[2])
            if torch.rand(1).item() < 0.5:
                x = torch.flip(x, dims=[1])
            if torch.rand(1).item() < 0.5:
                x = x.transpose(1, 2)
            dy, dx = torch.randint(-2, 3, (2,)).tolist()
            x = torch.roll(x, shifts=(dy, dx), dims=(1, 2))
        x = (x - self.mean) / self.std
        return x, y


def conv_bn(cin, cout):
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class StrokeNet(nn.Module):
    def __init__(self, num_classes=len(CLASSES)):
        super().__init__()
        self.features = nn.Sequential(
            conv_bn(1, 16), conv_bn(16, 16), nn.MaxPool2d(2),
            conv_bn(16, 32), nn.MaxPool2d(2),
            conv_bn(32, 48),
        )
        self.head = nn.Linear(48, num_classes)

    def forward(self, x):
        x = self.features(x)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.head(x)


criterion = nn.CrossEntropyLoss()


def loss_fn(model, batch):
    x, y = batch
    return criterion(model(x), y)


def build_loaders():
    xtr, ytr = make_split(CFG["n_train"], SEED)
    xva, yva = make_split(CFG["n_val"], SEED + 100)
    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(StrokeCrops(xtr, ytr, train=True), batch_size=CFG["batch_size"],
                              shuffle=True, drop_last=True, generator=g)
    val_loader = DataLoader(StrokeCrops(xva, yva, train=False), batch_size=100, shuffle=False)
    return train_loader, val_loader


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=CFG["lr"], weight_decay=CFG["weight_decay"])


def lr_at(step, total_steps, warmup_steps):
    if step < warmup_steps:
        return CFG["lr"] * (step + 1) / warmup_steps
    t = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return 1e-5 + 0.5 * (CFG["lr"] - 1e-5) * (1 + math.cos(math.pi * t))


class AverageMeter:
    def __init__(self):
        self.val = self.sum = self.avg = 0.0
        self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


def make_target():
    torch.manual_seed(SEED)
    train_loader, _ = build_loaders()
    it = iter(train_loader)
    data = [next(it) for _ in range(3)]
    model = StrokeNet()
    return {
        "model": model,
        "batch": data[0],
        "data": data,
        "loss_fn": loss_fn,
        "optimizer": make_optimizer(model.parameters()),
        "make_optimizer": make_optimizer,
        "num_classes": len(CLASSES),
        "task": "classification",
    }


def train_one_epoch(epoch, model, loader, optimizer, step, total_steps, warmup_steps):
    model.train()
    losses = AverageMeter()
    batch_time = AverageMeter()
    last_idx = len(loader) - 1
    end = time.time()
    for batch_idx, (x, y) in enumerate(loader):
        lr = lr_at(step, total_steps, warmup_steps)
        for g in optimizer.param_groups:
            g["lr"] = lr
        loss = loss_fn(model, (x, y))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        losses.update(loss.item(), x.size(0))
        batch_time.update(time.time() - end)
        end = time.time()
        if batch_idx % CFG["log_interval"] == 0 or batch_idx == last_idx:
            pct = 100.0 * batch_idx / last_idx
            print(
                f"Train: {epoch} [{batch_idx:>4d}/{len(loader)} ({pct:>3.0f}%)]  "
                f"Loss: {losses.val:#.4g} ({losses.avg:#.4g})  "
                f"Time: {batch_time.val:.3f}s, {x.size(0) / batch_time.val:>7.2f}/s  "
                f"({batch_time.avg:.3f}s, {x.size(0) / batch_time.avg:>7.2f}/s)  "
                f"LR: {lr:.3e}"
            )
    return step, losses.avg


@torch.no_grad()
def validate(model, loader):
    model.eval()
    losses, top1 = AverageMeter(), AverageMeter()
    last_idx = len(loader) - 1
    per_class_hits = torch.zeros(len(CLASSES))
    per_class_n = torch.zeros(len(CLASSES))
    for batch_idx, (x, y) in enumerate(loader):
        out = model(x)
        loss = criterion(out, y)
        pred = out.argmax(1)
        acc = (pred == y).float().mean().item() * 100
        losses.update(loss.item(), x.size(0))
        top1.update(acc, x.size(0))
        per_class_hits += torch.bincount(y[pred == y], minlength=len(CLASSES)).float()
        per_class_n += torch.bincount(y, minlength=len(CLASSES)).float()
        if batch_idx == last_idx:
            print(f"Test: [{batch_idx:>4d}/{last_idx}]  Loss: {losses.val:>7.4f} ({losses.avg:>6.4f})  "
                  f"Acc@1: {acc:>7.4f} ({top1.avg:>7.4f})")
    return losses.avg, top1.avg, (per_class_hits / per_class_n.clamp(min=1) * 100).tolist()


def main():
    torch.manual_seed(SEED)
    np.random.seed(SEED)
    train_loader, val_loader = build_loaders()
    model = StrokeNet()
    print(f"Model StrokeNet created, param count: {sum(p.numel() for p in model.parameters())}")
    optimizer = make_optimizer(model.parameters())
    total_steps = CFG["epochs"] * len(train_loader)
    warmup_steps = CFG["warmup_epochs"] * len(train_loader)
    print(f"Scheduled epochs: {CFG['epochs']}. LR stepped per update.")
    step = 0
    best_acc, best_epoch = 0.0, -1
    for epoch in range(CFG["epochs"]):
        step, train_loss = train_one_epoch(epoch, model, train_loader, optimizer, step, total_steps, warmup_steps)
        val_loss, val_acc, per_class = validate(model, val_loader)
        if val_acc > best_acc:
            best_acc, best_epoch = val_acc, epoch
            print(f"Current checkpoints:\n ('./output/train/checkpoint-{epoch}.pth.tar', {val_acc})")
    print("per-class Acc@1: " + ", ".join(f"{c}={a:.1f}" for c, a in zip(CLASSES, per_class)))
    print(f"*** Best metric: {best_acc} (epoch {best_epoch})")


if __name__ == "__main__":
    main()
