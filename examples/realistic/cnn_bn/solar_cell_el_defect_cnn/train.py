"""Defect classification on electroluminescence (EL) images of mono-Si solar cells.

Small VGG-style CNN with BatchNorm2d, SGD + momentum, MultiStepLR.
Images are 8-bit grayscale crops, 32x32.
"""
import math
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

SEED = 3
IMG = 32
CLASSES = ["ok", "crack", "finger_interruption", "black_core", "busbar_corrosion"]
N_PER_CLASS = {"ok": 600, "crack": 380, "finger_interruption": 380, "black_core": 280, "busbar_corrosion": 280}
VAL_FRAC = 0.2
BATCH_SIZE = 64
EPOCHS = 10
LR = 0.05
MOMENTUM = 0.9
WEIGHT_DECAY = 5e-4
MILESTONES = [6, 8]
HERE = os.path.dirname(os.path.abspath(__file__))
DATA_FILE = os.path.join(HERE, "el_cells_32px.npz")


# ----------------------------------------------------------------------------- synthetic EL images
def _cell(rng):
    """Base EL cell: bright silicon with grain texture, dark busbars, vignetting."""
    yy, xx = np.mgrid[0:IMG, 0:IMG].astype(np.float32)
    level = rng.uniform(120, 170)
    img = np.full((IMG, IMG), level, np.float32)
    # efficiency falls off towards the edges of the wafer
    r = np.sqrt((yy - IMG / 2) ** 2 + (xx - IMG / 2) ** 2) / (IMG / 2)
    img *= 1.0 - rng.uniform(0.05, 0.2) * r ** 2
    # low-frequency texture
    tex = rng.normal(0, 1, (IMG // 4, IMG // 4)).astype(np.float32)
    img += rng.uniform(4, 10) * np.kron(tex, np.ones((4, 4), np.float32))
    busbars = [int(IMG * f) + rng.integers(-1, 2) for f in (0.25, 0.5, 0.75)]
    for b in busbars:
        img[:, b] *= 0.55
    return img, busbars, yy, xx


def _render(cls, rng):
    img, busbars, yy, xx = _cell(rng)
    depth = rng.uniform(0.35, 0.65)
    if cls == "crack":
        # thin dark line at a random angle, sometimes with a darker inactive region on one side
        th = rng.uniform(0, np.pi)
        c = rng.uniform(8, IMG - 8, size=2)
        d = (xx - c[0]) * np.sin(th) - (yy - c[1]) * np.cos(th)
        along = np.abs((xx - c[0]) * np.cos(th) + (yy - c[1]) * np.sin(th))
        line = (np.abs(d) < 0.8) & (along < rng.uniform(8, 20))
        img[line] *= 1 - depth
        if rng.random() < 0.35:
            img[(d > 0) & (along < 14)] *= 0.85
    elif cls == "finger_interruption":
        for _ in range(rng.integers(2, 5)):
            x0 = rng.integers(2, IMG - 6)
            y0 = rng.integers(2, IMG - 4)
            w, h = rng.integers(2, 5), rng.integers(2, 4)
            img[y0:y0 + h, x0:x0 + w] *= 1 - 0.8 * depth
    elif cls == "black_core":
        r = np.sqrt((yy - IMG / 2 - rng.normal(0, 2)) ** 2 + (xx - IMG / 2 - rng.normal(0, 2)) ** 2)
        rad = rng.uniform(6, 11)
        img *= 1 - 0.8 * depth * np.clip(1.2 - r / rad, 0, 1)
    elif cls == "busbar_corrosion":
        for b in busbars:
            img[:, max(b - 2, 0):b + 3] *= 1 - 0.7 * depth * rng.uniform(0.5, 1.0)
    img *= rng.uniform(0.8, 1.15)  # camera exposure
    img += rng.normal(0, 6, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def load_el_dataset():
    if os.path.exists(DATA_FILE):
        d = np.load(DATA_FILE)
        return d["images"], d["labels"]
    rng = np.random.default_rng(SEED)
    images, labels = [], []
    for k, cls in enumerate(CLASSES):
        for _ in range(N_PER_CLASS[cls]):
            img = _render(cls, rng)
            if rng.random() < 0.5:
                img = img.T.copy()  # landscape/portrait crops from different modules
            images.append(img)
            labels.append(k)
    images, labels = np.stack(images), np.array(labels, np.int64)
    np.savez_compressed(DATA_FILE, images=images, labels=labels)
    return images, labels


# ----------------------------------------------------------------------------- transforms
class Compose:
    def __init__(self, ts):
        self.ts = ts

    def __call__(self, x):
        for t in self.ts:
            x = t(x)
        return x


class ToTensor:
    def __call__(self, img):
        return torch.from_numpy(img).float().div_(255.0).unsqueeze(0)


class Normalize:
    def __init__(self, mean, std):
        self.mean, self.std = mean, std

    def __call__(self, x):
        return (x - self.mean) / self.std


class RandomFlips:
    def __call__(self, x):
        if torch.rand(1).item() < 0.5:
            x = x.flip(-1)
        if torch.rand(1).item() < 0.5:
            x = x.flip(-2)
        return x


def _blend(img1, img2, ratio):
    return (ratio * img1 + (1.0 - ratio) * img2).clamp(0.0, 1.0)


class BrightnessContrast:
    """Random exposure / contrast changes, as torchvision's ColorJitter(brightness, contrast)."""

    def __init__(self, brightness=0.25, contrast=0.25, p=0.8):
        self.b, self.c, self.p = brightness, contrast, p

    def __call__(self, x):
        if torch.rand(1).item() >= self.p:
            return x
        b = float(torch.empty(1).uniform_(1 - self.b, 1 + self.b))
        x = _blend(x, torch.zeros_like(x), b)
        c = float(torch.empty(1).uniform_(1 - self.c, 1 + self.c))
        x = _blend(x, x.mean().expand_as(x), c)
        return x


class ELCells(Dataset):
    def __init__(self, images, labels, transform):
        self.images, self.labels, self.transform = images, labels, transform

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.transform(self.images[i]), self.labels[i]


def build_loaders():
    images, labels = load_el_dataset()
    rng = np.random.default_rng(SEED)
    idx = rng.permutation(len(labels))
    n_val = int(VAL_FRAC * len(labels))
    va_idx, tr_idx = idx[:n_val], idx[n_val:]
    mean = float(images[tr_idx].mean() / 255.0)
    std = float(images[tr_idx].std() / 255.0)
    train_tf = Compose([ToTensor(), RandomFlips(), Normalize(mean, std), BrightnessContrast(0.25, 0.25)])
    val_tf = Compose([ToTensor(), Normalize(mean, std)])
    train_ds = ELCells(images[tr_idx], labels[tr_idx], train_tf)
    val_ds = ELCells(images[va_idx], labels[va_idx], val_tf)
    g = torch.Generator().manual_seed(SEED)
    train_dl = DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True, drop_last=True, generator=g)
    val_dl = DataLoader(val_ds, batch_size=256, shuffle=False)
    return train_dl, val_dl


# ----------------------------------------------------------------------------- model
def conv_bn(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class ELNet(nn.Module):
    def __init__(self, n_classes=len(CLASSES), w=16):
        super().__init__()
        self.body = nn.Sequential(
            conv_bn(1, w), conv_bn(w, w), nn.MaxPool2d(2),          # 16
            conv_bn(w, 2 * w), conv_bn(2 * w, 2 * w), nn.MaxPool2d(2),  # 8
            conv_bn(2 * w, 4 * w), nn.MaxPool2d(2),                 # 4
            conv_bn(4 * w, 4 * w),
        )
        self.head = nn.Linear(4 * w, n_classes)

    def forward(self, x):
        x = self.body(x)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.head(x)


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def make_target():
    torch.manual_seed(SEED)
    train_dl, val_dl = build_loaders()
    model = ELNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY, nesterov=True)
    return dict(model=model, data=train_dl, val_data=val_dl, loss_fn=loss_fn, optimizer=optimizer,
                num_classes=len(CLASSES), task="classification")


@torch.no_grad()
def validate(model, dl):
    model.eval()
    loss, correct, n = 0.0, 0, 0
    per_cls = np.zeros((len(CLASSES), 2))
    for x, y in dl:
        out = model(x)
        loss += F.cross_entropy(out, y, reduction="sum").item()
        pred = out.argmax(1)
        correct += (pred == y).sum().item()
        n += len(y)
        for c in range(len(CLASSES)):
            m = y == c
            per_cls[c] += [(pred[m] == c).sum().item(), m.sum().item()]
    return loss / n, correct / n, per_cls[:, 0] / np.maximum(per_cls[:, 1], 1)


def main():
    torch.set_num_threads(1)
    t = make_target()
    model, train_dl, val_dl, optimizer = t["model"], t["data"], t["val_data"], t["optimizer"]
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=MILESTONES, gamma=0.1)
    print(f"train={len(train_dl.dataset)} val={len(val_dl.dataset)} classes={CLASSES}")
    best = 0.0
    t_start = time.time()
    for epoch in range(1, EPOCHS + 1):
        model.train()
        t0 = time.time()
        avg = 0.0
        for it, (x, y) in enumerate(train_dl):
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            avg = 0.9 * avg + 0.1 * loss.item() if it else loss.item()
            if it % 20 == 0:
                print(f"epoch {epoch:2d} iter {it:3d}/{len(train_dl)} loss {loss.item():.4f} (avg {avg:.4f}) "
                      f"lr {optimizer.param_groups[0]['lr']:.4f}")
        scheduler.step()
        vl, va, per_cls = validate(model, val_dl)
        best = max(best, va)
        recalls = " ".join(f"{c[:6]}={r:.2f}" for c, r in zip(CLASSES, per_cls))
        print(f"==> epoch {epoch:2d} train_loss(avg) {avg:.4f} val_loss {vl:.4f} val_acc {va:.4f} "
              f"best {best:.4f} | recall {recalls} | {time.time() - t0:.1f}s")
    print(f"done in {time.time() - t_start:.1f}s, best val_acc {best:.4f}")


if __name__ == "__main__":
    main()
