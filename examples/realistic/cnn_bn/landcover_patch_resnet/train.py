"""Land-cover classification of 20x20 RGB satellite-style patches.

Small ResNet with BatchNorm, SGD + Nesterov, cosine
annealing with warm restarts (SGDR), mixup and flip/rot90/colour augmentation.
Patches are rendered procedurally per class (water, forest, cropland, urban,
bare soil) with per-scene illumination, haze and sensor noise.
"""
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

CLASSES = ["water", "forest", "cropland", "urban", "bare_soil"]

CFG = dict(
    seed=11,
    n_train=2000,
    n_val=600,
    img=20,
    batch_size=64,
    epochs=12,
    lr=0.1,
    momentum=0.9,
    weight_decay=5e-4,
    t0=4,
    t_mult=2,
    mixup_alpha=0.4,
    label_smoothing=0.1,
    log_interval=15,
)


# ----------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------
def _smooth(rng, img, scale):
    z = rng.standard_normal((img // scale + 2, img // scale + 2))
    z = np.kron(z, np.ones((scale, scale)))[:img, :img]
    return (z + np.roll(z, 1, 0) + np.roll(z, 1, 1) + np.roll(z, -1, 0) + np.roll(z, -1, 1)) / 5


def render(rng, label, img):
    yy, xx = np.mgrid[0:img, 0:img].astype(np.float32)
    if label == 0:  # water: dark blue-green, low texture, faint ripples
        base = np.array([0.10, 0.22, 0.35]) + rng.normal(0, 0.09, 3)
        tex = 0.03 * np.sin(0.9 * (xx * np.cos(rng.uniform(0, 3.14)) + yy * np.sin(rng.uniform(0, 3.14))))
        tex = tex + 0.02 * _smooth(rng, img, 4)
    elif label == 1:  # forest: dark green, blobby canopy texture
        base = np.array([0.12, 0.30, 0.12]) + rng.normal(0, 0.09, 3)
        tex = 0.07 * _smooth(rng, img, 2)
    elif label == 2:  # cropland: parallel field stripes in random orientation
        base = np.array([0.35, 0.40, 0.18]) + rng.normal(0, 0.09, 3)
        th = rng.uniform(0, np.pi)
        period = rng.uniform(3.0, 6.0)
        tex = 0.07 * np.sign(np.sin(2 * np.pi * (xx * np.cos(th) + yy * np.sin(th)) / period))
    elif label == 3:  # urban: grey with a grid of bright roofs and dark streets
        base = np.array([0.42, 0.41, 0.40]) + rng.normal(0, 0.09, 3)
        p = rng.integers(4, 7)
        ox, oy = rng.integers(0, p, 2)
        street = (((xx + ox) % p) < 1) | (((yy + oy) % p) < 1)
        tex = np.where(street, -0.10, 0.0) + 0.08 * (rng.random((img, img)) > 0.8)
    else:  # bare soil: tan/brown, fine grain noise
        base = np.array([0.55, 0.45, 0.32]) + rng.normal(0, 0.09, 3)
        tex = 0.05 * rng.standard_normal((img, img)) + 0.04 * _smooth(rng, img, 5)
    x = base[:, None, None] + tex[None] * rng.uniform(0.6, 1.3, (3, 1, 1))
    # scene illumination, haze and sensor noise
    x = x * rng.uniform(0.6, 1.4) + rng.uniform(0.0, 0.15)
    x = x + rng.normal(0, 0.09, x.shape)
    return np.clip(x, 0, 1).astype(np.float32)


def make_split(n, seed, img):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, len(CLASSES), n)
    x = np.stack([render(rng, int(c), img) for c in y])
    return x, y


def get_data(cfg):
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "patches.npz")
    if not os.path.exists(path):
        xtr, ytr = make_split(cfg["n_train"], cfg["seed"], cfg["img"])
        xva, yva = make_split(cfg["n_val"], cfg["seed"] + 1, cfg["img"])
        np.savez_compressed(path, xtr=xtr, ytr=ytr, xva=xva, yva=yva)
    d = np.load(path)
    mean = d["xtr"].mean(axis=(0, 2, 3), keepdims=True)
    std = d["xtr"].std(axis=(0, 2, 3), keepdims=True)
    xtr = torch.from_numpy((d["xtr"] - mean) / std).float()
    xva = torch.from_numpy((d["xva"] - mean) / std).float()
    return xtr, torch.from_numpy(d["ytr"]).long(), xva, torch.from_numpy(d["yva"]).long()


def augment(x):
    """Batch-level GPU-style augmentation: dihedral flips/rotations + per-sample colour jitter."""
    k = int(torch.randint(0, 4, ()))
    x = torch.rot90(x, k, (2, 3))
    if torch.rand(()) < 0.5:
        x = x.flip(3)
    b = x.shape[0]
    gain = 1 + 0.15 * torch.randn(b, 1, 1, 1)
    shift = 0.15 * torch.randn(b, x.shape[1], 1, 1)
    return x * gain + shift


def mixup(x, y, num_classes, alpha, smoothing):
    t = F.one_hot(y, num_classes).float() * (1 - smoothing) + smoothing / num_classes
    lam = float(np.random.beta(alpha, alpha))
    idx = torch.randperm(x.shape[0])
    return lam * x + (1 - lam) * x[idx], lam * t + (1 - lam) * t[idx]


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class LandCoverNet(nn.Module):
    def __init__(self, num_classes=5, widths=(12, 24, 48)):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 3, 1, 1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU(inplace=True))
        self.layer1 = BasicBlock(widths[0], widths[0], 1)
        self.layer2 = BasicBlock(widths[0], widths[1], 2)
        self.layer3 = BasicBlock(widths[1], widths[2], 2)
        self.head = nn.Linear(widths[2], num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = self.layer3(self.layer2(self.layer1(self.stem(x))))
        return self.head(F.adaptive_avg_pool2d(x, 1).flatten(1))


def soft_target_ce(logits, target):
    return torch.sum(-target * F.log_softmax(logits, dim=-1), dim=-1).mean()


def train_batch_transform(x, y, cfg=CFG):
    x = augment(x)
    return mixup(x, y, len(CLASSES), cfg["mixup_alpha"], cfg["label_smoothing"])


def loss_fn(model, batch):
    x, t = train_batch_transform(*batch)
    return soft_target_ce(model(x), t)


def make_optimizer(params, cfg=CFG):
    return torch.optim.SGD(params, lr=cfg["lr"], momentum=cfg["momentum"], nesterov=True, weight_decay=cfg["weight_decay"])


def make_target():
    torch.manual_seed(CFG["seed"])
    np.random.seed(CFG["seed"])
    xtr, ytr, xva, yva = get_data(CFG)
    train_dl = DataLoader(TensorDataset(xtr, ytr), batch_size=CFG["batch_size"], shuffle=True, drop_last=True)
    val_dl = DataLoader(TensorDataset(xva, yva), batch_size=200)
    model = LandCoverNet(len(CLASSES))
    return {
        "model": model,
        "data": train_dl,
        "val_data": val_dl,
        "loss_fn": loss_fn,
        "optimizer": make_optimizer(model.parameters()),
        "num_classes": len(CLASSES),
        "task": "classification",
    }


# ----------------------------------------------------------------------------
# train / validate (timm-style logging)
# ----------------------------------------------------------------------------
class AverageMeter:
    def __init__(self):
        self.val = self.avg = self.sum = self.count = 0.0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


def train_one_epoch(epoch, model, loader, opt, sched, cfg):
    model.train()
    losses, batch_time = AverageMeter(), AverageMeter()
    n = len(loader)
    end = time.time()
    for i, (x, y) in enumerate(loader):
        xm, t = train_batch_transform(x, y, cfg)
        loss = soft_target_ce(model(xm), t)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step(epoch + (i + 1) / n)
        losses.update(loss.item(), x.size(0))
        batch_time.update(time.time() - end)
        end = time.time()
        if i % cfg["log_interval"] == 0 or i == n - 1:
            print(
                f"Train: {epoch} [{i:>4d}/{n} ({100.0 * i / (n - 1):>3.0f}%)]  "
                f"Loss: {losses.val:#.4g} ({losses.avg:#.4g})  "
                f"Time: {batch_time.val:.3f}s, {x.size(0) / batch_time.val:>7.2f}/s  "
                f"LR: {opt.param_groups[0]['lr']:.3e}"
            )
    return losses.avg


@torch.no_grad()
def validate(model, loader):
    model.eval()
    losses, top1 = AverageMeter(), AverageMeter()
    for x, y in loader:
        logits = model(x)
        losses.update(F.cross_entropy(logits, y).item(), x.size(0))
        top1.update((logits.argmax(1) == y).float().mean().item() * 100, x.size(0))
    print(f"Test: [{len(loader):>4d}/{len(loader)}]  Loss: {losses.avg:>7.4f}  Acc@1: {top1.avg:>7.4f}")
    return losses.avg, top1.avg


def main():
    cfg = CFG
    torch.set_num_threads(1)
    torch.manual_seed(cfg["seed"])
    np.random.seed(cfg["seed"])
    xtr, ytr, xva, yva = get_data(cfg)
    train_dl = DataLoader(TensorDataset(xtr, ytr), batch_size=cfg["batch_size"], shuffle=True, drop_last=True)
    val_dl = DataLoader(TensorDataset(xva, yva), batch_size=200)
    model = LandCoverNet(len(CLASSES))
    print(f"Model LandCoverNet created, param count: {sum(p.numel() for p in model.parameters())}")
    print(f"Train samples: {len(xtr)}, val samples: {len(xva)}, classes: {CLASSES}")
    opt = make_optimizer(model.parameters(), cfg)
    sched = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=cfg["t0"], T_mult=cfg["t_mult"], eta_min=1e-4)
    best, best_epoch = 0.0, -1
    t_start = time.time()
    for epoch in range(cfg["epochs"]):
        train_loss = train_one_epoch(epoch, model, train_dl, opt, sched, cfg)
        val_loss, acc = validate(model, val_dl)
        if acc > best:
            best, best_epoch = acc, epoch
            print(f"Current checkpoints:\n ('checkpoint-{epoch}.pth.tar', {acc:.4f})")
        print(f"epoch {epoch}: train_loss {train_loss:.4f}  eval_loss {val_loss:.4f}  eval_top1 {acc:.2f}")
    print(f"*** Best metric: {best:.4f} (epoch {best_epoch})  total time {time.time() - t_start:.1f}s")


if __name__ == "__main__":
    main()
