"""Character classifier for hand-written parcel routing codes.

Each sample is one character cropped from a routing label (digits plus the
two hub letters M and W).  Characters are drawn here from stroke templates with
a random affine pose, per-point wobble and variable pen width, then rasterised
to 28x28.  The log follows timm's train.py format.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

CFG = dict(
    seed=11,
    img_size=28,
    n_train_per_class=360,
    n_val_per_class=90,
    epochs=8,
    batch_size=96,
    lr=2e-3,
    weight_decay=0.05,
    warmup_steps=40,
    label_smoothing=0.0,
    log_interval=15,
)

CLASSES = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "M", "W"]


def _arc(cx, cy, rx, ry, a0, a1, n=10):
    t = np.linspace(math.radians(a0), math.radians(a1), n)
    return list(zip(cx + rx * np.cos(t), cy + ry * np.sin(t)))


def _rot180(strokes):
    return [[(1.0 - x, 1.0 - y) for x, y in s] for s in strokes]


# stroke templates in a unit box, x to the right, y downwards
TEMPLATES = {
    "0": [_arc(0.5, 0.5, 0.32, 0.45, 0, 360, 16)],
    "1": [[(0.3, 0.22), (0.55, 0.05), (0.55, 0.95)]],
    "2": [_arc(0.5, 0.3, 0.32, 0.25, 190, 360, 8) + _arc(0.5, 0.3, 0.32, 0.25, 0, 40, 3)
          + [(0.15, 0.95), (0.88, 0.95)]],
    "3": [_arc(0.5, 0.28, 0.3, 0.23, 200, 450, 10), _arc(0.5, 0.72, 0.33, 0.23, 270, 520, 10)],
    "4": [[(0.68, 0.95), (0.68, 0.05), (0.1, 0.66), (0.9, 0.66)]],
    "5": [[(0.82, 0.05), (0.25, 0.05), (0.2, 0.45)] + _arc(0.48, 0.67, 0.34, 0.28, 230, 500, 11)],
    "6": [[(0.72, 0.05), (0.42, 0.25)] + _arc(0.5, 0.7, 0.3, 0.25, 195, 555, 14)],
    "7": [[(0.1, 0.05), (0.9, 0.05), (0.38, 0.95)], [(0.35, 0.5), (0.75, 0.5)]],
    "8": [_arc(0.5, 0.27, 0.25, 0.22, 0, 360, 12), _arc(0.5, 0.72, 0.31, 0.23, 0, 360, 12)],
    "M": [[(0.1, 0.95), (0.12, 0.05), (0.5, 0.62), (0.88, 0.05), (0.9, 0.95)]],
}
TEMPLATES["9"] = _rot180(TEMPLATES["6"])
TEMPLATES["W"] = _rot180(TEMPLATES["M"])


def render_char(name, rng, size):
    """Pose, wobble and rasterise one character; returns float32 [size, size] in [0, 1]."""
    ang = math.radians(rng.uniform(-12, 12))
    sx = rng.uniform(0.55, 0.75) * size
    sy = rng.uniform(0.62, 0.8) * size
    shear = rng.uniform(-0.2, 0.2)
    tx, ty = rng.uniform(-2, 2), rng.uniform(-2, 2)
    pen = rng.uniform(1.4, 2.6)
    ca, sa = math.cos(ang), math.sin(ang)
    segs = []
    for stroke in TEMPLATES[name]:
        p = np.asarray(stroke, dtype=np.float64) - 0.5
        p = p + rng.normal(0.0, 0.025, size=p.shape)
        x = (p[:, 0] + shear * p[:, 1]) * sx
        y = p[:, 1] * sy
        xr = ca * x - sa * y + size / 2 + tx
        yr = sa * x + ca * y + size / 2 + ty
        pts = np.stack([xr, yr], 1)
        segs.append(np.concatenate([pts[:-1], pts[1:]], 1))
    segs = np.concatenate(segs, 0)                       # [S, 4] = x0, y0, x1, y1
    yy, xx = np.mgrid[0:size, 0:size]
    px = xx.reshape(1, -1) + 0.5
    py = yy.reshape(1, -1) + 0.5
    x0, y0, x1, y1 = (segs[:, i:i + 1] for i in range(4))
    dx, dy = x1 - x0, y1 - y0
    t = np.clip(((px - x0) * dx + (py - y0) * dy) / (dx * dx + dy * dy + 1e-9), 0, 1)
    d = np.hypot(px - x0 - t * dx, py - y0 - t * dy).min(0)
    ink = np.clip(pen / 2 - d + 0.6, 0, 1).reshape(size, size)
    img = ink * rng.uniform(0.7, 1.0) + rng.normal(0, 0.05, (size, size))
    return np.clip(img, 0, 1).astype(np.float32)


def make_split(n_per_class, seed, size):
    rng = np.random.default_rng(seed)
    ys = np.repeat(np.arange(len(CLASSES)), n_per_class)
    rng.shuffle(ys)
    xs = np.stack([render_char(CLASSES[k], rng, size) for k in ys])
    return torch.from_numpy(xs)[:, None], torch.from_numpy(ys).long()


def augment(img):
    """Train-time augmentation: small translation."""
    shift = torch.randint(-2, 3, (2,))
    img = torch.roll(img, shifts=(int(shift[0]), int(shift[1])), dims=(1, 2))
    return img


class CharCrops(Dataset):
    def __init__(self, x, y, train):
        self.x, self.y, self.train = x, y, train

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        img = self.x[i]
        if self.train:
            img = augment(img)
        return (img - 0.2) / 0.33, self.y[i]


def get_loaders(cfg=CFG):
    xtr, ytr = make_split(cfg["n_train_per_class"], cfg["seed"], cfg["img_size"])
    xva, yva = make_split(cfg["n_val_per_class"], cfg["seed"] + 1, cfg["img_size"])
    gen = torch.Generator().manual_seed(cfg["seed"])
    train = DataLoader(CharCrops(xtr, ytr, True), batch_size=cfg["batch_size"], shuffle=True,
                       drop_last=True, generator=gen)
    val = DataLoader(CharCrops(xva, yva, False), batch_size=270)
    return train, val


class Block(nn.Module):
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
        return F.relu(out + (x if self.short is None else self.short(x)))


class TinyResNet(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.layer1 = Block(16, 24, 2)
        self.layer2 = Block(24, 48, 2)
        self.fc = nn.Linear(48, num_classes)

    def forward(self, x):
        x = self.layer2(self.layer1(self.stem(x)))
        return self.fc(x.mean((2, 3)))


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y, label_smoothing=CFG["label_smoothing"])


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=CFG["lr"], weight_decay=CFG["weight_decay"])


def make_scheduler(optimizer, total_steps):
    warm = CFG["warmup_steps"]

    def factor(step):
        if step < warm:
            return (step + 1) / warm
        return 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, total_steps - warm)))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def make_target():
    torch.manual_seed(CFG["seed"])
    train_loader, _ = get_loaders()
    model = TinyResNet(len(CLASSES))
    it = iter(train_loader)
    data = [next(it) for _ in range(3)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model.parameters()), "make_optimizer": make_optimizer,
            "num_classes": len(CLASSES), "task": "classification"}


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    tot_loss, correct, n = 0.0, 0, 0
    confusion = torch.zeros(len(CLASSES), len(CLASSES), dtype=torch.long)
    for x, y in loader:
        logits = model(x)
        tot_loss += F.cross_entropy(logits, y, reduction="sum").item()
        pred = logits.argmax(1)
        correct += (pred == y).sum().item()
        n += y.numel()
        confusion += torch.bincount(y * len(CLASSES) + pred,
                                    minlength=len(CLASSES) ** 2).view(len(CLASSES), -1)
    model.train()
    return tot_loss / n, 100.0 * correct / n, confusion


def main(cfg=CFG):
    torch.manual_seed(cfg["seed"])
    start = time.time()
    train_loader, val_loader = get_loaders(cfg)
    model = TinyResNet(len(CLASSES))
    optimizer = make_optimizer(model.parameters())
    total = cfg["epochs"] * len(train_loader)
    scheduler = make_scheduler(optimizer, total)
    print(f"Model tiny_resnet created, param count: {sum(p.numel() for p in model.parameters())}")
    print(f"Train: {len(train_loader.dataset)} samples, Val: {len(val_loader.dataset)} samples, "
          f"classes: {' '.join(CLASSES)}")
    best_acc, best_ep = 0.0, -1
    for epoch in range(cfg["epochs"]):
        model.train()
        run_sum, run_n = 0.0, 0
        last = len(train_loader) - 1
        tic = time.time()
        for step, (x, y) in enumerate(train_loader):
            loss = loss_fn(model, (x, y))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            run_sum += loss.item() * x.size(0)
            run_n += x.size(0)
            if step % cfg["log_interval"] == 0 or step == last:
                dt = time.time() - tic
                tic = time.time()
                print(f"Train: {epoch} [{step:>4d}/{len(train_loader)} ({100.0 * step / last:>3.0f}%)]  "
                      f"Loss: {loss.item():.4f} ({run_sum / run_n:.4f})  "
                      f"Time: {dt:.3f}s  LR: {optimizer.param_groups[0]['lr']:.3e}", flush=True)
        val_loss, val_acc, conf = evaluate(model, val_loader)
        print(f"Test: [{len(val_loader)}/{len(val_loader)}]  Loss: {val_loss:.4f}  Acc@1: {val_acc:.2f}",
              flush=True)
        if val_acc > best_acc:
            best_acc, best_ep = val_acc, epoch
    recall = conf.diag().float() / conf.sum(1).float()
    print("Per-class recall: " + "  ".join(f"{c}:{100 * r:.0f}" for c, r in zip(CLASSES, recall.tolist())))
    print(f"*** Best metric: {best_acc:.2f} (epoch {best_ep})")
    print(f"Done in {time.time() - start:.1f}s")


if __name__ == "__main__":
    main()
