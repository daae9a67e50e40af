"""Wafer-map defect pattern classifier (small CNN + BatchNorm).

Synthetic wafer bin maps: each die is pass/fail, defects form spatial patterns
(center blob, edge ring, donut, scratch, local cluster, random/none).
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

torch.set_num_threads(1)

CLASSES = ["none", "center", "edge_ring", "donut", "scratch", "local"]
IMG = 24
BATCH_SIZE = 64
EPOCHS = 10
LR = 2e-3
WEIGHT_DECAY = 5e-4
SEED = 1234


# ----------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------
def _wafer_coords():
    yy, xx = np.mgrid[0:IMG, 0:IMG].astype(np.float32)
    c = (IMG - 1) / 2.0
    yy, xx = (yy - c) / c, (xx - c) / c
    r = np.sqrt(xx ** 2 + yy ** 2)
    return xx, yy, r


def render_wafer(label, rng):
    xx, yy, r = _wafer_coords()
    inside = r <= 1.0
    # background fail rate varies lot to lot
    base = rng.uniform(0.02, 0.12)
    p = np.full((IMG, IMG), base, dtype=np.float32)
    strength = rng.uniform(0.25, 0.55)
    if label == 1:  # center
        rad = rng.uniform(0.2, 0.45)
        p += strength * (r < rad)
    elif label == 2:  # edge ring
        w = rng.uniform(0.12, 0.25)
        p += strength * (r > 1.0 - w)
    elif label == 3:  # donut
        r0 = rng.uniform(0.35, 0.6)
        w = rng.uniform(0.1, 0.2)
        p += strength * (np.abs(r - r0) < w)
    elif label == 4:  # scratch: thin line at a random angle / offset
        ang = rng.uniform(0, math.pi)
        off = rng.uniform(-0.5, 0.5)
        d = np.abs(xx * math.sin(ang) - yy * math.cos(ang) - off)
        p += (strength + 0.2) * (d < 0.07)
    elif label == 5:  # local cluster somewhere off-center
        cx, cy = rng.uniform(-0.6, 0.6, size=2)
        rad = rng.uniform(0.15, 0.3)
        p += strength * (np.sqrt((xx - cx) ** 2 + (yy - cy) ** 2) < rad)
    fails = (rng.random((IMG, IMG)) < np.clip(p, 0, 1)).astype(np.float32)
    # encode: 0 = off-wafer, 1 = pass, 2 = fail  -> scaled to [0, 1]
    wafer = np.where(inside, 1.0 + fails, 0.0) / 2.0
    return wafer.astype(np.float32)


def make_split(n, seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, len(CLASSES), size=n)
    images = np.stack([render_wafer(int(l), rng) for l in labels])[:, None]
    return images, labels.astype(np.int64)


def compute_norm_stats(images):
    return float(images.mean()), float(images.std())


class WaferDataset(Dataset):
    def __init__(self, images, labels, mean, std, train=False, seed=0):
        self.images = (images - mean) / std
        self.labels = labels
        self.train = train
        self.rng = np.random.default_rng(seed)
        self.noise_std = 0.35

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, idx):
        img = self.images[idx]
        if self.train:
            if self.rng.random() < 0.5:
                img = img[:, :, ::-1]
            if self.rng.random() < 0.5:
                img = img[:, ::-1, :]
            # tester gain drift + read noise
            img *= self.rng.uniform(0.85, 1.15)
            img += self.noise_std * self.rng.standard_normal(img.shape).astype(np.float32)
        return torch.from_numpy(np.ascontiguousarray(img)), int(self.labels[idx])


def build_loaders(n_train=2000, n_val=600):
    x_tr, y_tr = make_split(n_train, SEED)
    x_va, y_va = make_split(n_val, SEED + 1)
    mean, std = compute_norm_stats(x_tr)
    train_ds = WaferDataset(x_tr, y_tr, mean, std, train=True, seed=SEED)
    val_ds = WaferDataset(x_va, y_va, mean, std, train=False)
    g = torch.Generator().manual_seed(SEED)
    train_dl = DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True, generator=g, drop_last=True)
    val_dl = DataLoader(val_ds, batch_size=256, shuffle=False)
    return train_dl, val_dl


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
def conv_bn(cin, cout):
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class WaferNet(nn.Module):
    def __init__(self, num_classes=len(CLASSES)):
        super().__init__()
        self.features = nn.Sequential(
            conv_bn(1, 16), nn.MaxPool2d(2),                  # 12x12
            conv_bn(16, 32), conv_bn(32, 32), nn.MaxPool2d(2),  # 6x6
            conv_bn(32, 64), nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(64, num_classes)

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1))


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    tot_loss, correct, n = 0.0, 0, 0
    for x, y in loader:
        logits = model(x)
        tot_loss += F.cross_entropy(logits, y, reduction="sum").item()
        correct += (logits.argmax(1) == y).sum().item()
        n += len(y)
    model.train()
    return tot_loss / n, correct / n


def make_target():
    torch.manual_seed(SEED)
    train_dl, _ = build_loaders()
    data = []
    for i, batch in enumerate(train_dl):
        data.append(batch)
        if i == 5:
            break
    return {
        "model": WaferNet(),
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "num_classes": len(CLASSES),
        "task": "classification",
    }


def main():
    torch.manual_seed(SEED)
    train_dl, val_dl = build_loaders()
    model = WaferNet()
    optimizer = make_optimizer(model.parameters())
    total_steps = EPOCHS * len(train_dl)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=LR, total_steps=total_steps, pct_start=0.15)
    print(f"train={len(train_dl.dataset)} val={len(val_dl.dataset)} "
          f"params={sum(p.numel() for p in model.parameters())}")
    step = 0
    t0 = time.time()
    for epoch in range(1, EPOCHS + 1):
        model.train()
        run_loss, run_correct, seen = 0.0, 0, 0
        for x, y in train_dl:
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            step += 1
            run_loss += loss.item() * len(y)
            run_correct += (logits.argmax(1) == y).sum().item()
            seen += len(y)
        val_loss, val_acc = evaluate(model, val_dl)
        print(f"Epoch {epoch}/{EPOCHS} - {time.time() - t0:.1f}s - step {step} - "
              f"loss: {run_loss / seen:.4f} - acc: {run_correct / seen:.4f} - "
              f"val_loss: {val_loss:.4f} - val_acc: {val_acc:.4f} - "
              f"lr: {scheduler.get_last_lr()[0]:.2e}")


if __name__ == "__main__":
    main()
