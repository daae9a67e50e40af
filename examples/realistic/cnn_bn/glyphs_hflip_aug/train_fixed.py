"""Train a small BatchNorm CNN to read procedurally drawn 28x28 lowercase glyphs (6 classes).

Loosely follows timm's train.py: a config dump, per-interval `Train:` lines,
`Test:` lines after every epoch and a best-metric summary.

    python train.py [--epochs 10] [--batch-size 64] [--lr 0.05]
"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

CLASSES = ("b", "d", "p", "q", "o", "x")
IMG = 28


def draw_glyph(cls, g):
    """Rasterise one lowercase glyph (bowl + stem, ring or cross) with random placement and stroke."""
    yy, xx = torch.meshgrid(torch.arange(IMG, dtype=torch.float32),
                            torch.arange(IMG, dtype=torch.float32), indexing="ij")
    u = torch.rand(6, generator=g)
    r = 3.5 + 2.0 * u[0]
    w = 1.0 + 0.8 * u[1]
    cx = 2 + 2 * r + (IMG - 4 - 4 * r) * u[2]
    name = CLASSES[cls]
    stem_up = name in ("b", "d")
    if name in ("b", "d", "p", "q"):
        span = 3.4 * r
        top = 2 + (IMG - 4 - span) * u[3]
        cy = top + span - r if stem_up else top + r
    else:
        cy = 2 + r + (IMG - 4 - 2 * r) * u[3]
    dy, dx = yy - cy, xx - cx
    rad = torch.sqrt(dx ** 2 + dy ** 2)
    ring = (rad < r) & (rad > r - w)
    if name == "o":
        m = ring
    elif name == "x":
        a, b = (dx + dy) / 1.414, (dx - dy) / 1.414
        m = ((a.abs() < w / 2 + 0.3) | (b.abs() < w / 2 + 0.3)) & (dx.abs() < r) & (dy.abs() < r)
    else:
        sx = cx - r + w / 2 if name in ("b", "p") else cx + r - w / 2
        if stem_up:
            stem = ((xx - sx).abs() < w / 2 + 0.2) & (yy > cy - 2.4 * r) & (yy < cy)
        else:
            stem = ((xx - sx).abs() < w / 2 + 0.2) & (yy > cy) & (yy < cy + 2.4 * r)
        m = ring | stem
    fg = 0.55 + 0.45 * u[5]
    img = m.float() * fg + 0.18 * torch.rand(IMG, IMG, generator=g)
    return (img.clamp(0, 1) * 255).round().to(torch.uint8)


def make_split(n, seed):
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(len(CLASSES), (n,), generator=g)
    images = torch.stack([draw_glyph(int(c), g) for c in labels]).unsqueeze(1)
    return images, labels


class GlyphDataset(Dataset):
    def __init__(self, images, labels, mean, std, train):
        self.images, self.labels = images, labels
        self.mean, self.std = mean, std
        self.train = train

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        x = self.images[i].float() / 255.0
        if self.train:
            x = random_crop(x, pad=2)
        x = (x - self.mean) / self.std
        return x, self.labels[i]


def random_crop(x, pad):
    x = F.pad(x, (pad, pad, pad, pad))
    i, j = torch.randint(0, 2 * pad + 1, (2,)).tolist()
    return x[:, i:i + IMG, j:j + IMG]


def conv_bn(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class SmallConvNet(nn.Module):
    def __init__(self, num_classes=len(CLASSES)):
        super().__init__()
        self.features = nn.Sequential(
            conv_bn(1, 16), nn.MaxPool2d(2),
            conv_bn(16, 32), nn.MaxPool2d(2),
            conv_bn(32, 48), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(48, num_classes)

    def forward(self, x):
        return self.head(self.features(x))


class AverageMeter:
    def __init__(self):
        self.val = self.avg = self.sum = self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


def build_data(batch_size):
    train_x, train_y = make_split(3000, seed=1)
    val_x, val_y = make_split(600, seed=2)
    pix = train_x.float() / 255.0
    mean, std = pix.mean().item(), pix.std().item()
    train_ds = GlyphDataset(train_x, train_y, mean, std, train=True)
    val_ds = GlyphDataset(val_x, val_y, mean, std, train=False)
    train_loader = DataLoader(train_ds, batch_size=batch_size, shuffle=True, drop_last=True)
    val_loader = DataLoader(val_ds, batch_size=100, shuffle=False)
    return train_loader, val_loader, (mean, std)


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y, label_smoothing=0.1)


def make_optimizer(params, lr=0.05):
    return torch.optim.SGD(params, lr=lr, momentum=0.9, nesterov=True, weight_decay=5e-4)


def make_target():
    torch.manual_seed(0)
    train_loader, _, _ = build_data(64)
    model = SmallConvNet()
    it = iter(train_loader)
    data = [next(it) for _ in range(4)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model.parameters()), "make_optimizer": make_optimizer,
            "num_classes": len(CLASSES), "task": "classification"}


def train_one_epoch(epoch, model, loader, optimizer, log_interval):
    batch_time, data_time, losses = AverageMeter(), AverageMeter(), AverageMeter()
    model.train()
    last_idx = len(loader) - 1
    end = time.time()
    for batch_idx, (x, y) in enumerate(loader):
        data_time.update(time.time() - end)
        loss = loss_fn(model, (x, y))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.update(loss.item(), x.size(0))
        batch_time.update(time.time() - end)
        if batch_idx % log_interval == 0 or batch_idx == last_idx:
            lr = optimizer.param_groups[0]["lr"]
            print(f"Train: {epoch} [{batch_idx:>4d}/{len(loader)} ({100. * batch_idx / last_idx:>3.0f}%)]  "
                  f"Loss: {losses.val:#.3g} ({losses.avg:#.3g})  "
                  f"Time: {batch_time.val:.3f}s, {x.size(0) / batch_time.val:>7.2f}/s  "
                  f"({batch_time.avg:.3f}s, {x.size(0) / batch_time.avg:>7.2f}/s)  "
                  f"LR: {lr:.3e}  Data: {data_time.val:.3f} ({data_time.avg:.3f})", flush=True)
        end = time.time()
    return losses.avg


@torch.no_grad()
def validate(model, loader):
    batch_time, losses, top1 = AverageMeter(), AverageMeter(), AverageMeter()
    model.eval()
    last_idx = len(loader) - 1
    end = time.time()
    for batch_idx, (x, y) in enumerate(loader):
        out = model(x)
        loss = F.cross_entropy(out, y)
        acc1 = (out.argmax(1) == y).float().mean().item() * 100
        losses.update(loss.item(), x.size(0))
        top1.update(acc1, x.size(0))
        batch_time.update(time.time() - end)
        end = time.time()
        if batch_idx == last_idx:
            print(f"Test: [{batch_idx:>4d}/{last_idx}]  Time: {batch_time.val:.3f} ({batch_time.avg:.3f})  "
                  f"Loss: {losses.val:>7.3f} ({losses.avg:>6.3f})  "
                  f"Acc@1: {top1.val:>7.3f} ({top1.avg:>7.3f})", flush=True)
    return losses.avg, top1.avg


def main():
    parser = argparse.ArgumentParser(description="glyph training")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--log-interval", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    train_loader, val_loader, (mean, std) = build_data(args.batch_size)
    model = SmallConvNet()
    print("Training with a single process on 1 device (cpu).")
    print(f"Model glyphnet created, param count:{sum(p.numel() for p in model.parameters())}")
    print("Data processing configuration for current model + dataset:")
    print(f"\tinput_size: (1, {IMG}, {IMG})\n\tinterpolation: bilinear\n\tmean: ({mean:.4f},)\n"
          f"\tstd: ({std:.4f},)\n\tcrop_pct: 1.0\n\tcrop_mode: center")
    for k, v in vars(args).items():
        print(f"{k}: {v}")

    optimizer = make_optimizer(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs, eta_min=1e-4)
    print(f"Scheduled epochs: {args.epochs}. LR stepped per epoch.")

    best_metric, best_epoch = None, None
    for epoch in range(args.epochs):
        train_one_epoch(epoch, model, train_loader, optimizer, args.log_interval)
        _, top1 = validate(model, val_loader)
        scheduler.step()
        if best_metric is None or top1 > best_metric:
            best_metric, best_epoch = top1, epoch
    print(f"*** Best metric: {best_metric} (epoch {best_epoch})")


if __name__ == "__main__":
    main()
