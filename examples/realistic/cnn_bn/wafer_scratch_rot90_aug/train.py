"""Small BN CNN for die-surface inspection images (1x32x32, 5 defect classes).

Classes: clean, particle, ring, scratch_h (along the scribe direction), scratch_v.
Training loop and log lines follow timm's train.py.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

CLASSES = ["clean", "particle", "ring", "scratch_h", "scratch_v"]
IMG = 32
ARGS = dict(epochs=5, batch_size=64, lr=2e-3, weight_decay=0.05, warmup_epochs=1, log_interval=15, seed=42)


def render(cls, rng):
    yy, xx = np.mgrid[0:IMG, 0:IMG].astype(np.float32)
    g = rng.uniform(-0.3, 0.3, size=2)
    img = 0.2 + 0.01 * (g[0] * (xx - 16) + g[1] * (yy - 16)) + rng.normal(0, 0.08, (IMG, IMG))
    if cls == 1:
        for _ in range(rng.integers(2, 6)):
            cy, cx = rng.uniform(4, 28, size=2)
            r = rng.uniform(1.0, 2.2)
            img += 0.8 * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * r * r))
    elif cls == 2:
        cy, cx = rng.uniform(12, 20, size=2)
        R = rng.uniform(6, 11)
        d = np.sqrt((yy - cy) ** 2 + (xx - cx) ** 2)
        img += 0.7 * np.exp(-((d - R) ** 2) / (2 * 0.9 ** 2))
    elif cls in (3, 4):
        ang = np.deg2rad(rng.uniform(-15, 15)) + (0.0 if cls == 3 else np.pi / 2)
        c = rng.uniform(8, 24, size=2)
        # distance of each pixel to the line through c with direction ang
        dist = np.abs(-(xx - c[0]) * np.sin(ang) + (yy - c[1]) * np.cos(ang))
        along = (xx - c[0]) * np.cos(ang) + (yy - c[1]) * np.sin(ang)
        half = rng.uniform(8, 16)
        w = rng.uniform(0.6, 1.3)
        img += 0.8 * np.exp(-dist ** 2 / (2 * w * w)) * (np.abs(along) < half)
    return img.astype(np.float32)


def make_split(n, seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, len(CLASSES), size=n)
    x = np.stack([render(c, rng) for c in y])[:, None]
    return torch.from_numpy(x), torch.from_numpy(y)


class DieImages(torch.utils.data.Dataset):
    def __init__(self, x, y, train, mean, std):
        self.x, self.y, self.train = x, y, train
        self.mean, self.std = mean, std

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        img = (self.x[i] - self.mean) / self.std
        if self.train:
            if torch.rand(()) < 0.5:
                img = img.flip(-1)
            if torch.rand(()) < 0.5:
                img = img.flip(-2)
            k = int(torch.randint(0, 4, ()))
            img = torch.rot90(img, k, dims=(-2, -1))
            img = img + 0.05 * torch.randn_like(img)
        return img, self.y[i]


def conv_bn(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class DefectNet(nn.Module):
    def __init__(self, num_classes=len(CLASSES)):
        super().__init__()
        self.features = nn.Sequential(conv_bn(1, 16), nn.MaxPool2d(2), conv_bn(16, 32), nn.MaxPool2d(2),
                                      conv_bn(32, 64))
        self.head = nn.Linear(64, num_classes)

    def forward(self, x):
        x = self.features(x)
        return self.head(F.adaptive_avg_pool2d(x, 1).flatten(1))


def train_loss(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y, label_smoothing=0.1)


def create_optimizer(params):
    return torch.optim.AdamW(params, lr=ARGS["lr"], weight_decay=ARGS["weight_decay"])


def build_loaders():
    g = torch.Generator().manual_seed(ARGS["seed"])
    xtr, ytr = make_split(3200, seed=1)
    xva, yva = make_split(800, seed=2)
    mean, std = xtr.mean(), xtr.std()
    train_dl = torch.utils.data.DataLoader(DieImages(xtr, ytr, True, mean, std), batch_size=ARGS["batch_size"],
                                           shuffle=True, drop_last=True, generator=g)
    val_dl = torch.utils.data.DataLoader(DieImages(xva, yva, False, mean, std), batch_size=200)
    return train_dl, val_dl


def make_target():
    torch.manual_seed(ARGS["seed"])
    train_dl, _ = build_loaders()
    model = DefectNet()
    it = iter(train_dl)
    data = [next(it) for _ in range(3)]
    return {
        "model": model,
        "batch": data[0],
        "data": data,
        "loss_fn": train_loss,
        "optimizer": create_optimizer(model.parameters()),
        "make_optimizer": create_optimizer,
        "num_classes": len(CLASSES),
        "task": "classification",
    }


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
    losses, top1 = AverageMeter(), AverageMeter()
    t0 = time.time()
    last = len(loader) - 1
    for i, (x, y) in enumerate(loader):
        out = model(x)
        loss = F.cross_entropy(out, y)
        acc = (out.argmax(1) == y).float().mean().item() * 100
        losses.update(loss.item(), x.size(0))
        top1.update(acc, x.size(0))
        if i == last:
            dt = time.time() - t0
            print(f"Test: [{i:>4d}/{last}]  Time: {dt / (i + 1):.3f} ({dt / (i + 1):.3f})  "
                  f"Loss: {losses.val:>7.4f} ({losses.avg:>6.4f})  Acc@1: {top1.val:>7.4f} ({top1.avg:>7.4f})")
    model.train()
    return losses.avg, top1.avg


def main():
    torch.manual_seed(ARGS["seed"])
    train_dl, val_dl = build_loaders()
    model = DefectNet()
    print(f"Model DefectNet created, param count: {sum(p.numel() for p in model.parameters())}")
    optimizer = create_optimizer(model.parameters())
    steps_per_epoch = len(train_dl)
    total = ARGS["epochs"] * steps_per_epoch
    warm = ARGS["warmup_epochs"] * steps_per_epoch

    def lr_at(step):
        if step < warm:
            return ARGS["lr"] * (step + 1) / warm
        return 0.5 * ARGS["lr"] * (1 + math.cos(math.pi * (step - warm) / (total - warm)))

    print(f"Scheduled epochs: {ARGS['epochs']}. LR stepped per update.")
    step = 0
    best = (0.0, -1)
    for epoch in range(ARGS["epochs"]):
        model.train()
        losses = AverageMeter()
        t_end = time.time()
        for i, batch in enumerate(train_dl):
            for gp in optimizer.param_groups:
                gp["lr"] = lr_at(step)
            loss = train_loss(model, batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            losses.update(loss.item(), batch[0].size(0))
            if i % ARGS["log_interval"] == 0 or i == steps_per_epoch - 1:
                dt = time.time() - t_end
                bs = batch[0].size(0)
                print(f"Train: {epoch} [{i:>4d}/{steps_per_epoch} ({100.0 * i / (steps_per_epoch - 1):>3.0f}%)]  "
                      f"Loss: {losses.val:#.3g} ({losses.avg:#.3g})  Time: {dt:.3f}s, {bs / max(dt, 1e-6):>7.2f}/s  "
                      f"LR: {optimizer.param_groups[0]['lr']:.3e}")
            t_end = time.time()
        val_loss, val_acc = validate(model, val_dl)
        if val_acc > best[0]:
            best = (val_acc, epoch)
    print(f"*** Best metric: {best[0]:.4f} (epoch {best[1]})")


if __name__ == "__main__":
    main()
