"""Lane-arrow recognition for the HD-map road-marking extractor.

Each sample is a 28x28 RGB patch cropped (top-down, after inverse perspective
mapping) around a painted lane arrow. Five arrow types are mapped. The
patches come with worn paint, tyre marks, shadows and sensor noise. A small
Conv-BN CNN is trained with SGD + momentum and a step schedule; the training
Dataset applies the usual geometric / photometric augmentation.
Lightning-style epoch logs.
"""
import argparse
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

CONFIG = dict(
    seed=2024,
    n_train=2000,
    n_val=600,
    img=28,
    batch_size=32,
    epochs=12,
    lr=0.05,
    momentum=0.9,
    weight_decay=5e-4,
    milestones=(7, 10),
)

ARROWS = ["left", "right", "straight", "straight_left", "straight_right"]
ARROW_P = [0.18, 0.18, 0.34, 0.15, 0.15]


def _segment(yy, xx, p, q, w):
    p, q = np.asarray(p, np.float32), np.asarray(q, np.float32)
    d = q - p
    t = np.clip(((yy - p[0]) * d[0] + (xx - p[1]) * d[1]) / (d @ d + 1e-6), 0, 1)
    return np.hypot(yy - (p[0] + t * d[0]), xx - (p[1] + t * d[1])) < w


def _triangle(yy, xx, a, b, c):
    def side(p, q):
        return (xx - p[1]) * (q[0] - p[0]) - (yy - p[0]) * (q[1] - p[1])
    s1, s2, s3 = side(a, b), side(b, c), side(c, a)
    return ((s1 >= 0) & (s2 >= 0) & (s3 >= 0)) | ((s1 <= 0) & (s2 <= 0) & (s3 <= 0))


def arrow_mask(kind, size, rng):
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    s = rng.uniform(0.85, 1.1)
    c0 = (size - 1) / 2
    cy, cx = c0 + rng.uniform(-2, 2), c0 + rng.uniform(-2, 2)
    ang = np.deg2rad(rng.uniform(-10, 10))  # residual heading after IPM
    ry = np.cos(ang) * (yy - cy) - np.sin(ang) * (xx - cx)
    rx = np.sin(ang) * (yy - cy) + np.cos(ang) * (xx - cx)
    w = 1.4 * s
    m = _segment(ry, rx, (11 * s, 0), (-2 * s, 0), w)  # stem from the bottom
    if kind in ("straight", "straight_left", "straight_right"):
        m |= _segment(ry, rx, (-2 * s, 0), (-6 * s, 0), w)
        m |= _triangle(ry, rx, (-12 * s, 0), (-6 * s, -4.5 * s), (-6 * s, 4.5 * s))
    if kind in ("left", "straight_left"):
        m |= _segment(ry, rx, (0, 0), (0, -5 * s), w)
        m |= _triangle(ry, rx, (0, -11 * s), (-4.5 * s, -5 * s), (4.5 * s, -5 * s))
    if kind in ("right", "straight_right"):
        m |= _segment(ry, rx, (0, 0), (0, 5 * s), w)
        m |= _triangle(ry, rx, (0, 11 * s), (-4.5 * s, 5 * s), (4.5 * s, 5 * s))
    return m.astype(np.float32)


def render_patch(kind, size, rng):
    asphalt = rng.uniform(0.25, 0.45)
    img = np.full((3, size, size), asphalt, np.float32)
    img += rng.normal(0, 0.05, (3, size, size)).astype(np.float32)  # asphalt grain
    paint = arrow_mask(kind, size, rng)
    paint *= rng.random((size, size)) > rng.uniform(0.1, 0.6)  # worn paint
    colour = np.array([0.95, 0.95, 0.9] if rng.random() < 0.85 else [0.95, 0.8, 0.2], np.float32)
    img = img * (1 - paint) + colour[:, None, None] * paint
    if rng.random() < 0.4:  # tyre mark across the lane
        yy, xx = np.mgrid[0:size, 0:size]
        band = np.abs(xx + rng.uniform(-0.5, 0.5) * yy - rng.uniform(0, size)) < rng.uniform(1, 3)
        img[:, band] *= 0.55
    if rng.random() < 0.3:  # shadow of a vehicle / tree
        cut = int(rng.integers(0, size))
        img[:, :, cut:] *= rng.uniform(0.4, 0.7)
    if rng.random() < 0.3:  # partly hidden by a vehicle / debris
        oy, ox = rng.integers(0, size - 8, size=2)
        img[:, oy:oy + 9, ox:ox + 9] = rng.uniform(0.05, 0.3)
    img *= rng.uniform(0.7, 1.3)
    img += rng.normal(0, rng.uniform(0.05, 0.25), img.shape).astype(np.float32)
    return img


def generate(n, size, rng):
    y = rng.choice(len(ARROWS), size=n, p=ARROW_P)
    x = np.stack([render_patch(ARROWS[k], size, rng) for k in y]).astype(np.float32)
    return x, y.astype(np.int64)


class ArrowPatches(Dataset):
    def __init__(self, images, labels, mean, std, train):
        self.images = torch.from_numpy(images)
        self.labels = torch.from_numpy(labels)
        self.mean = torch.tensor(mean).view(3, 1, 1)
        self.std = torch.tensor(std).view(3, 1, 1)
        self.train = train

    def __len__(self):
        return len(self.labels)

    def transform(self, img):
        dy, dx = torch.randint(-2, 3, (2,)).tolist()
        img = torch.roll(img, shifts=(dy, dx), dims=(1, 2))
        img = img * (0.8 + 0.4 * torch.rand(1)) + 0.05 * torch.randn(3, 1, 1)
        return img

    def __getitem__(self, i):
        img = self.images[i]
        if self.train:
            img = self.transform(img)
        return (img - self.mean) / self.std, self.labels[i]


def build_datasets(cfg):
    rng = np.random.default_rng(cfg["seed"])
    x_tr, y_tr = generate(cfg["n_train"], cfg["img"], rng)
    x_va, y_va = generate(cfg["n_val"], cfg["img"], rng)
    mean = x_tr.mean(axis=(0, 2, 3)).tolist()
    std = x_tr.std(axis=(0, 2, 3)).tolist()
    return ArrowPatches(x_tr, y_tr, mean, std, train=True), ArrowPatches(x_va, y_va, mean, std, train=False)


class ArrowNet(nn.Module):
    def __init__(self, n_classes=len(ARROWS)):
        super().__init__()

        def cbr(cin, cout, stride=1):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False),
                                 nn.BatchNorm2d(cout), nn.ReLU(inplace=True))

        self.body = nn.Sequential(cbr(3, 16), cbr(16, 24, stride=2), cbr(24, 32, stride=2), cbr(32, 48, stride=2))
        self.fc = nn.Linear(48, n_classes)

    def forward(self, x):
        return self.fc(self.body(x).mean(dim=(2, 3)))


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def make_optimizer(model, cfg):
    return torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=cfg["momentum"], nesterov=True,
                           weight_decay=cfg["weight_decay"])


def make_target():
    cfg = dict(CONFIG)
    torch.manual_seed(cfg["seed"])
    train_ds, _ = build_datasets(cfg)
    model = ArrowNet()
    it = iter(DataLoader(train_ds, batch_size=cfg["batch_size"], shuffle=True,
                         generator=torch.Generator().manual_seed(cfg["seed"])))
    data = [tuple(next(it)) for _ in range(4)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model, cfg), "task": "classification", "num_classes": len(ARROWS)}


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    tot, correct, n = 0.0, 0, 0
    for x, y in loader:
        logits = model(x)
        tot += F.cross_entropy(logits, y, reduction="sum").item()
        correct += (logits.argmax(1) == y).sum().item()
        n += len(y)
    model.train()
    return tot / n, correct / n


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=CONFIG["epochs"])
    p.add_argument("--lr", type=float, default=CONFIG["lr"])
    p.add_argument("--batch_size", type=int, default=CONFIG["batch_size"])
    cli = p.parse_args()
    cfg = dict(CONFIG, epochs=cli.epochs, lr=cli.lr, batch_size=cli.batch_size)

    torch.manual_seed(cfg["seed"])
    train_ds, val_ds = build_datasets(cfg)
    train_dl = DataLoader(train_ds, batch_size=cfg["batch_size"], shuffle=True,
                          generator=torch.Generator().manual_seed(cfg["seed"]))
    val_dl = DataLoader(val_ds, batch_size=200)
    model = ArrowNet()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"  | Name | Type    | Params\n0 | net  | ArrowNet | {n_params / 1e3:.1f} K")
    print(f"train samples: {len(train_ds)}  val samples: {len(val_ds)}")
    opt = make_optimizer(model, cfg)
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=list(cfg["milestones"]), gamma=0.1)

    for epoch in range(cfg["epochs"]):
        t0 = time.time()
        tot, n = 0.0, 0
        for xb, yb in train_dl:
            loss = loss_fn(model, (xb, yb))
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += loss.item() * len(yb)
            n += len(yb)
        sched.step()
        val_loss, val_acc = evaluate(model, val_dl)
        print(f"Epoch {epoch}: train_loss={tot / n:.3f} val_loss={val_loss:.3f} val_acc={val_acc:.3f} "
              f"lr={opt.param_groups[0]['lr']:.4f} [{time.time() - t0:.1f}s]")


if __name__ == "__main__":
    main()
