"""Sheet-metal surface defect classifier (6 classes) - small ResNet with BatchNorm.

Images are 32x32 RGB patches from the line-scan camera, stored as uint8 (C, H, W).
Log format follows timm's train.py.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

CFG = dict(
    seed=0,
    img=32,
    n_train=2048,
    n_val=768,
    batch_size=64,
    epochs=8,
    lr=0.1,
    momentum=0.9,
    weight_decay=5e-4,
    warmup_epochs=1,
    log_interval=12,
    brightness=36,
    pad=3,
)
CLASSES = ["ok", "scratch", "crack", "pitting", "dent", "stain"]
MEAN = torch.tensor([0.86, 0.85, 0.86]).view(3, 1, 1)
STD = torch.tensor([0.06, 0.06, 0.06]).view(3, 1, 1)


# ---------------------------------------------------------------------------
# synthetic line-camera data
# ---------------------------------------------------------------------------
def _line(xx, yy, rng, size, length, width):
    cx, cy = rng.uniform(8, size - 8, 2)
    th = rng.uniform(0, np.pi)
    u = (xx - cx) * np.cos(th) + (yy - cy) * np.sin(th)
    v = -(xx - cx) * np.sin(th) + (yy - cy) * np.cos(th)
    return u, v, length, width


def _defect(cls, rng, size):
    """Returns an additive intensity map (negative = darker) for one defect class."""
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    d = np.zeros((size, size), np.float32)
    depth = rng.uniform(30, 50)
    if cls == 1:    # scratch: long straight thin dark line
        u, v, L, w = _line(xx, yy, rng, size, rng.uniform(9, 14), 0.7)
        d -= depth * np.exp(-v ** 2 / (2 * w ** 2)) * (np.abs(u) < L)
    elif cls == 2:  # crack: jagged line (random walk)
        x, y = rng.uniform(8, size - 8, 2)
        th = rng.uniform(0, 2 * np.pi)
        for _ in range(22):
            th += rng.normal(0, 0.7)
            x += np.cos(th); y += np.sin(th)
            d -= depth * np.exp(-((xx - x) ** 2 + (yy - y) ** 2) / 0.6)
        d = np.maximum(d, -1.2 * depth)
    elif cls == 3:  # pitting: cluster of small dark dots
        cx, cy = rng.uniform(9, size - 9, 2)
        for _ in range(rng.integers(5, 9)):
            px, py = cx + rng.normal(0, 3.5), cy + rng.normal(0, 3.5)
            d -= depth * np.exp(-((xx - px) ** 2 + (yy - py) ** 2) / 0.8)
    elif cls == 4:  # dent: smooth shading bump (bright rim on one side, dark on the other)
        cx, cy = rng.uniform(9, size - 9, 2)
        r2 = rng.uniform(10, 25)
        g = np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / r2)
        ang = rng.uniform(0, 2 * np.pi)
        d += 0.9 * depth * g * ((xx - cx) * np.cos(ang) + (yy - cy) * np.sin(ang)) / np.sqrt(r2)
    elif cls == 5:  # stain: large faint blotch
        cx, cy = rng.uniform(8, size - 8, 2)
        a, b = rng.uniform(12, 40, 2)
        d -= 0.45 * depth * np.exp(-(xx - cx) ** 2 / a - (yy - cy) ** 2 / b)
    return d


def make_images(n, rng, size=32):
    labels = rng.integers(0, len(CLASSES), n)
    imgs = np.empty((n, 3, size, size), dtype=np.uint8)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    for i, c in enumerate(labels):
        # brushed, over-exposed stainless: bright with a grain direction
        base = rng.uniform(195, 240)
        gth = rng.uniform(0, np.pi)
        grain = 4 * np.sin((xx * np.cos(gth) + yy * np.sin(gth)) * rng.uniform(1.5, 3.0) + rng.uniform(0, 6))
        shade = rng.uniform(-8, 8) * (xx - size / 2) / size + rng.uniform(-8, 8) * (yy - size / 2) / size
        surf = base + grain + shade + _defect(c, rng, size)
        tint = rng.uniform(0.96, 1.03, 3)
        for ch in range(3):
            val = surf * tint[ch] + rng.normal(0, 6, (size, size))
            imgs[i, ch] = np.clip(val, 0, 255).astype(np.uint8)
    return imgs, labels.astype(np.int64)


class DefectPatches(Dataset):
    def __init__(self, images, labels, train, cfg):
        self.images = torch.from_numpy(images)
        self.labels = torch.from_numpy(labels)
        self.train = train
        self.pad = cfg["pad"]
        self.brightness = cfg["brightness"]
        p = self.pad
        # reflect-padded copy for random translation crops
        self.padded = F.pad(self.images.float(), (p, p, p, p), mode="reflect").to(torch.uint8)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        img = self.images[i]
        if self.train:
            # random translation (reflect-pad + crop)
            ox, oy = torch.randint(0, 2 * self.pad + 1, (2,)).tolist()
            img = self.padded[i, :, oy:oy + img.shape[1], ox:ox + img.shape[2]]
            # exposure jitter: the line camera's auto-exposure drifts
            if torch.rand(1).item() < 0.8:
                delta = int(torch.randint(-self.brightness, self.brightness + 1, (1,)))
                img = (img.short() + delta).clamp(0, 255).to(torch.uint8)
        x = img.float().div(255.0)
        x = (x - MEAN) / STD
        return x, self.labels[i]


# ---------------------------------------------------------------------------
# model
# ---------------------------------------------------------------------------
class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = None
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        sc = x if self.short is None else self.short(x)
        return F.relu(out + sc)


class DefectNet(nn.Module):
    def __init__(self, num_classes, width=16):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True))
        self.layer1 = BasicBlock(width, width, 2)
        self.layer2 = BasicBlock(width, 2 * width, 2)
        self.layer3 = BasicBlock(2 * width, 4 * width, 2)
        self.head = nn.Linear(4 * width, num_classes)

    def forward(self, x):
        x = self.stem(x)
        x = self.layer3(self.layer2(self.layer1(x)))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.head(x)


# ---------------------------------------------------------------------------
def build(cfg=CFG):
    torch.manual_seed(cfg["seed"])
    rng = np.random.default_rng(cfg["seed"])
    xtr, ytr = make_images(cfg["n_train"], rng, cfg["img"])
    xva, yva = make_images(cfg["n_val"], rng, cfg["img"])
    train_ds = DefectPatches(xtr, ytr, train=True, cfg=cfg)
    val_ds = DefectPatches(xva, yva, train=False, cfg=cfg)
    g = torch.Generator().manual_seed(cfg["seed"])
    train_loader = DataLoader(train_ds, batch_size=cfg["batch_size"], shuffle=True, drop_last=True, generator=g)
    val_loader = DataLoader(val_ds, batch_size=128, shuffle=False)
    model = DefectNet(len(CLASSES))
    decay, no_decay = [], []
    for n_, p in model.named_parameters():
        (no_decay if p.ndim <= 1 else decay).append(p)
    optimizer = torch.optim.SGD(
        [{"params": decay, "weight_decay": cfg["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg["lr"], momentum=cfg["momentum"], nesterov=True,
    )
    return model, train_loader, val_loader, optimizer


def compute_loss(model, batch, criterion=nn.CrossEntropyLoss()):
    x, y = batch
    return criterion(model(x), y)


def make_target():
    model, train_loader, val_loader, optimizer = build(CFG)
    return dict(model=model, data=train_loader, val_data=val_loader, loss_fn=compute_loss,
                optimizer=optimizer, num_classes=len(CLASSES), task="classification")


def lr_at(step, total, warmup, base):
    if step < warmup:
        return base * (step + 1) / warmup
    t = (step - warmup) / max(1, total - warmup)
    return 0.5 * base * (1 + math.cos(math.pi * t))


class AverageMeter:
    def __init__(self):
        self.val = self.sum = self.count = self.avg = 0.0

    def update(self, v, n=1):
        self.val = v
        self.sum += v * n
        self.count += n
        self.avg = self.sum / self.count


@torch.no_grad()
def validate(model, loader):
    model.eval()
    loss_m, top1_m = AverageMeter(), AverageMeter()
    crit = nn.CrossEntropyLoss()
    last = len(loader) - 1
    t0 = time.time()
    for bi, (x, y) in enumerate(loader):
        out = model(x)
        loss_m.update(crit(out, y).item(), x.size(0))
        top1_m.update((out.argmax(1) == y).float().mean().item() * 100, x.size(0))
        if bi == last:
            print(f"Test: [{bi:>3d}/{last}]  Time: {time.time() - t0:.3f}  "
                  f"Loss: {loss_m.val:>7.4f} ({loss_m.avg:>6.4f})  Acc@1: {top1_m.val:>7.4f} ({top1_m.avg:>7.4f})")
    return loss_m.avg, top1_m.avg


def main():
    cfg = CFG
    torch.set_num_threads(1)
    model, train_loader, val_loader, optimizer = build(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"Model defectnet_r8 created, param count: {n_params}")
    print(f"Train samples: {len(train_loader.dataset)}, val samples: {len(val_loader.dataset)}")
    crit = nn.CrossEntropyLoss()
    steps_per_epoch = len(train_loader)
    total = cfg["epochs"] * steps_per_epoch
    warmup = cfg["warmup_epochs"] * steps_per_epoch
    step = 0
    best = (0.0, -1)
    t_start = time.time()
    for epoch in range(cfg["epochs"]):
        model.train()
        loss_m = AverageMeter()
        t0 = time.time()
        for bi, (x, y) in enumerate(train_loader):
            lr = lr_at(step, total, warmup, cfg["lr"])
            for g in optimizer.param_groups:
                g["lr"] = lr
            loss = compute_loss(model, (x, y), crit)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            loss_m.update(loss.item(), x.size(0))
            step += 1
            if bi % cfg["log_interval"] == 0 or bi == steps_per_epoch - 1:
                dt = (time.time() - t0) / (bi + 1)
                print(f"Train: {epoch} [{bi:>4d}/{steps_per_epoch} ({100.0 * bi / (steps_per_epoch - 1):>3.0f}%)]  "
                      f"Loss: {loss_m.val:#.4g} ({loss_m.avg:#.4g})  "
                      f"Time: {dt:.3f}s, {x.size(0) / dt:>7.2f}/s  LR: {lr:.3e}")
        vloss, vacc = validate(model, val_loader)
        if vacc > best[0]:
            best = (vacc, epoch)
    print(f"*** Best metric: {best[0]:.4f} (epoch {best[1]})")
    print(f"Total time: {time.time() - t_start:.1f}s")


if __name__ == "__main__":
    main()
