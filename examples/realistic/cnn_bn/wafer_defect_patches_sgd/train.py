"""Wafer-map defect patch classifier.

Small VGG-style CNN with BatchNorm on 24x24 single-channel inspection patches.
The defect classes are heavily imbalanced (most patches are clean), so training
batches are drawn with a class-balanced WeightedRandomSampler.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, WeightedRandomSampler

SEED = 1234
IMG = 24
CLASSES = ["clean", "scratch", "particle", "ring", "edge"]
# approximate production mix of the inspection line
CLASS_COUNTS = {"clean": 1100, "scratch": 260, "particle": 200, "ring": 140, "edge": 100}
VAL_FRACTION = 0.25

BATCH_SIZE = 64
EPOCHS = 12
LR = 0.05
MOMENTUM = 0.9
WEIGHT_DECAY = 5e-4


# ----------------------------------------------------------------------------
# synthetic inspection patches
# ----------------------------------------------------------------------------
def _render_patch(kind, rng):
    yy, xx = np.mgrid[0:IMG, 0:IMG].astype(np.float32)
    # wafer background: low-frequency illumination gradient + sensor noise
    gx, gy = rng.normal(0, 0.02, size=2)
    img = 0.5 + gx * (xx - IMG / 2) + gy * (yy - IMG / 2)
    img = img + rng.normal(0, 0.08, size=(IMG, IMG))
    contrast = rng.uniform(0.25, 0.55)

    if kind == "scratch":
        theta = rng.uniform(0, np.pi)
        cx, cy = rng.uniform(6, IMG - 6, size=2)
        d = np.abs((xx - cx) * np.sin(theta) - (yy - cy) * np.cos(theta))
        along = np.abs((xx - cx) * np.cos(theta) + (yy - cy) * np.sin(theta))
        half_len = rng.uniform(6, 11)
        img += contrast * np.exp(-(d ** 2) / 0.8) * (along < half_len)
    elif kind == "particle":
        for _ in range(rng.integers(1, 3)):
            cx, cy = rng.uniform(4, IMG - 4, size=2)
            r = rng.uniform(1.0, 2.0)
            img += contrast * np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / (2 * r ** 2))
    elif kind == "ring":
        cx, cy = rng.uniform(9, IMG - 9, size=2)
        r0 = rng.uniform(4.0, 7.0)
        rr = np.sqrt((xx - cx) ** 2 + (yy - cy) ** 2)
        img += contrast * np.exp(-((rr - r0) ** 2) / 1.0)
    elif kind == "edge":
        side = rng.integers(4)
        width = rng.uniform(2.5, 5.0)
        dist = [xx, IMG - 1 - xx, yy, IMG - 1 - yy][side]
        img -= contrast * (1.0 / (1.0 + np.exp((dist - width) / 0.7)))
    return img.astype(np.float32)


def make_dataset(seed=SEED):
    rng = np.random.default_rng(seed)
    images, labels = [], []
    for label, name in enumerate(CLASSES):
        for _ in range(CLASS_COUNTS[name]):
            images.append(_render_patch(name, rng))
            labels.append(label)
    images = np.stack(images)[:, None]  # N, 1, H, W
    labels = np.asarray(labels, dtype=np.int64)
    order = rng.permutation(len(labels))
    return images[order], labels[order]


def train_val_split(images, labels, val_fraction=VAL_FRACTION, seed=SEED):
    # stratified split so the rare classes show up in validation
    rng = np.random.default_rng(seed + 1)
    train_idx, val_idx = [], []
    for c in range(len(CLASSES)):
        idx = np.flatnonzero(labels == c)
        rng.shuffle(idx)
        n_val = int(round(len(idx) * val_fraction))
        val_idx.extend(idx[:n_val])
        train_idx.extend(idx[n_val:])
    train_idx = np.sort(np.asarray(train_idx))
    val_idx = np.sort(np.asarray(val_idx))
    return (images[train_idx], labels[train_idx]), (images[val_idx], labels[val_idx])


class PatchDataset(Dataset):
    def __init__(self, images, labels, mean, std, augment=False, seed=SEED):
        self.images = torch.from_numpy((images - mean) / std)
        self.labels = torch.from_numpy(labels)
        self.augment = augment
        self.gen = torch.Generator().manual_seed(seed)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        x = self.images[i]
        if self.augment:
            # defects have no preferred orientation on the wafer
            k = int(torch.randint(4, (1,), generator=self.gen))
            x = torch.rot90(x, k, dims=(1, 2))
            if torch.rand(1, generator=self.gen) < 0.5:
                x = torch.flip(x, dims=(2,))
            x = x + 0.1 * torch.randn(x.shape, generator=self.gen)
        return x, self.labels[i]


def build_loaders(seed=SEED):
    images, labels = make_dataset(seed)
    (x_tr, y_tr), (x_va, y_va) = train_val_split(images, labels, seed=seed)
    mean, std = float(x_tr.mean()), float(x_tr.std())

    train_ds = PatchDataset(x_tr, y_tr, mean, std, augment=True, seed=seed)
    val_ds = PatchDataset(x_va, y_va, mean, std, augment=False)

    # inverse-frequency weights -> roughly balanced batches
    class_counts = np.bincount(y_tr, minlength=len(CLASSES))
    class_weights = 1.0 / class_counts
    sampler = WeightedRandomSampler(
        weights=torch.as_tensor(class_weights, dtype=torch.double),
        num_samples=len(train_ds),
        replacement=True,
        generator=torch.Generator().manual_seed(seed),
    )
    train_loader = DataLoader(train_ds, batch_size=BATCH_SIZE, sampler=sampler, drop_last=True)
    val_loader = DataLoader(val_ds, batch_size=256, shuffle=False)
    return train_loader, val_loader


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
def conv_bn(c_in, c_out):
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, 3, padding=1, bias=False),
        nn.BatchNorm2d(c_out),
        nn.ReLU(inplace=True),
    )


class DefectNet(nn.Module):
    def __init__(self, num_classes=len(CLASSES), width=16):
        super().__init__()
        self.features = nn.Sequential(
            conv_bn(1, width), conv_bn(width, width), nn.MaxPool2d(2),          # 12x12
            conv_bn(width, 2 * width), conv_bn(2 * width, 2 * width), nn.MaxPool2d(2),  # 6x6
            conv_bn(2 * width, 4 * width), nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(4 * width, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1))


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def make_optimizer(params):
    return torch.optim.SGD(params, lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY, nesterov=True)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    total_loss, preds, targets = 0.0, [], []
    for x, y in loader:
        logits = model(x)
        total_loss += F.cross_entropy(logits, y, reduction="sum").item()
        preds.append(logits.argmax(1))
        targets.append(y)
    preds, targets = torch.cat(preds), torch.cat(targets)
    acc = (preds == targets).float().mean().item()
    recalls = [(preds[targets == c] == c).float().mean().item() for c in range(len(CLASSES))]
    model.train()
    return total_loss / len(targets), acc, float(np.mean(recalls))


def make_target():
    torch.manual_seed(SEED)
    train_loader, _ = build_loaders()
    data = []
    for i, batch in enumerate(train_loader):
        data.append(batch)
        if i == 3:
            break
    return {
        "model": DefectNet(),
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "num_classes": len(CLASSES),
        "task": "classification",
    }


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    train_loader, val_loader = build_loaders()
    model = DefectNet()
    optimizer = make_optimizer(model.parameters())
    steps_per_epoch = len(train_loader)
    total_steps = EPOCHS * steps_per_epoch
    warmup = steps_per_epoch
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda s: (s + 1) / warmup if s < warmup
        else 0.5 * (1 + math.cos(math.pi * (s - warmup) / (total_steps - warmup))),
    )
    n_params = sum(p.numel() for p in model.parameters())
    print(f"DefectNet: {n_params / 1e3:.1f}k params | train batches/epoch {steps_per_epoch} | "
          f"val samples {len(val_loader.dataset)}")

    step = 0
    for epoch in range(1, EPOCHS + 1):
        t0 = time.time()
        model.train()
        running, seen = 0.0, 0
        for x, y in train_loader:
            loss = loss_fn(model, (x, y))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            step += 1
            running += loss.item() * len(y)
            seen += len(y)
        val_loss, val_acc, val_bal = evaluate(model, val_loader)
        print(f"epoch {epoch:2d}/{EPOCHS} | step {step:4d} | lr {scheduler.get_last_lr()[0]:.4f} | "
              f"train_loss {running / seen:.4f} | val_loss {val_loss:.4f} | val_acc {val_acc:.4f} | "
              f"val_bal_acc {val_bal:.4f} | {time.time() - t0:.1f}s")
    torch.save(model.state_dict(), "defectnet.pt")


if __name__ == "__main__":
    main()
