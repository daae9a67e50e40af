"""AOI defect classification on 24x24 grayscale PCB patches with a small ResNet.

Patches are synthesised from a trace-layout generator (parallel copper tracks
on laminate, blur, sensor noise) with five defect types injected; the 'ok'
class dominates as it does on a real inspection line.
"""
import os
import sys
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, WeightedRandomSampler

CLASSES = ["ok", "open", "short", "spur", "pinhole", "scratch"]
PRIORS = [0.60, 0.08, 0.08, 0.08, 0.08, 0.08]

CFG = dict(
    seed=3,
    n_train=2400,
    n_val=800,
    img=24,
    batch_size=64,
    epochs=10,
    max_lr=0.08,
    weight_decay=5e-4,
    label_smoothing=0.05,
)


# ----------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------
def render_patch(rng, label, img=32):
    pitch = rng.integers(6, 10)
    width = rng.integers(2, 4)
    offset = rng.integers(0, pitch)
    sub, cu = rng.uniform(0.15, 0.3), rng.uniform(0.7, 0.9)
    a = np.full((img, img), sub, np.float32)
    rows = [r for r in range(offset, img, pitch)]
    for r in rows:
        a[r:r + width, :] = cu
    k = rng.integers(1, len(rows) - 1) if len(rows) > 2 else 0
    r0 = rows[k]
    c = rng.integers(6, img - 8)
    if label == 1:  # open: gap in a track
        a[r0:r0 + width, c:c + rng.integers(3, 6)] = sub
    elif label == 2:  # short: copper bridge to the next track
        a[r0:rows[k + 1] if k + 1 < len(rows) else img, c:c + rng.integers(2, 4)] = cu
    elif label == 3:  # spur: protrusion that stops short of the next track
        gap = pitch - width
        a[r0 + width:r0 + width + max(2, gap - 1), c:c + rng.integers(2, 4)] = cu
    elif label == 4:  # pinhole in a track
        rr = r0 + rng.integers(0, width - 1)
        a[rr:rr + 2, c:c + 2] = sub
    elif label == 5:  # scratch: thin diagonal line across the patch
        x0, slope = rng.uniform(0, img), rng.uniform(-1.5, 1.5)
        for y in range(img):
            x = int(x0 + slope * (y - img / 2))
            if 0 <= x < img:
                a[y, x] = np.clip(a[y, x] + rng.choice([-0.6, 0.6]), 0, 1)
    if rng.random() < 0.5:
        a = a.T
    # optics blur + sensor noise + illumination gradient
    a = (a + np.roll(a, 1, 0) + np.roll(a, -1, 0) + np.roll(a, 1, 1) + np.roll(a, -1, 1)) / 5.0
    gy, gx = np.mgrid[0:img, 0:img] / img
    a = a + rng.uniform(-0.1, 0.1) * gx + rng.uniform(-0.1, 0.1) * gy
    a = a + rng.normal(0, 0.03, a.shape)
    return np.clip(a, 0, 1).astype(np.float32)


def build_dataset(n, seed, img):
    rng = np.random.default_rng(seed)
    labels = rng.choice(len(CLASSES), size=n, p=PRIORS)
    images = np.stack([render_patch(rng, int(l), img) for l in labels])
    return (images * 255).astype(np.uint8), labels


def load_split(cfg):
    root = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(root, "aoi_patches.npz")
    if not os.path.exists(path):
        xtr, ytr = build_dataset(cfg["n_train"], cfg["seed"], cfg["img"])
        xva, yva = build_dataset(cfg["n_val"], cfg["seed"] + 100, cfg["img"])
        np.savez_compressed(path, xtr=xtr, ytr=ytr, xva=xva, yva=yva)
    d = np.load(path)
    return d["xtr"], d["ytr"], d["xva"], d["yva"]


class PatchDataset(Dataset):
    def __init__(self, images, labels, mean, std, augment):
        self.images = images
        self.labels = labels
        self.mean, self.std = mean, std
        self.augment = augment

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        x = torch.from_numpy(self.images[i]).float().div(255.0)
        if self.augment:
            x = torch.rot90(x, int(torch.randint(0, 4, ())), (0, 1))
            if torch.rand(()) < 0.5:
                x = x.flip(1)
            dy, dx = torch.randint(-3, 4, (2,)).tolist()
            x = torch.roll(x, (dy, dx), (0, 1))
            x = x * (1 + 0.1 * torch.randn(())) + 0.05 * torch.randn(())
        x = (x - self.mean) / self.std
        return x.unsqueeze(0), int(self.labels[i])


def build_loaders(cfg):
    xtr, ytr, xva, yva = load_split(cfg)
    mean, std = float(xtr.mean() / 255.0), float(xtr.std() / 255.0)
    train_ds = PatchDataset(xtr, ytr, mean, std, augment=True)
    val_ds = PatchDataset(xva, yva, mean, std, augment=False)
    # rebalance: defect classes are ~8% each, draw them as often as 'ok'
    counts = np.bincount(ytr, minlength=len(CLASSES))
    class_w = 1.0 / counts
    sampler = WeightedRandomSampler(torch.as_tensor(class_w[ytr], dtype=torch.double), num_samples=len(train_ds), replacement=True)
    train_dl = DataLoader(train_ds, batch_size=cfg["batch_size"], sampler=sampler, drop_last=True)
    val_dl = DataLoader(val_ds, batch_size=400, shuffle=False)
    return train_dl, val_dl, ytr


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


class AOIResNet(nn.Module):
    def __init__(self, num_classes, widths=(12, 24, 48)):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, widths[0], 3, 1, 1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU())
        self.layer1 = BasicBlock(widths[0], widths[0], 1)
        self.layer2 = BasicBlock(widths[0], widths[1], 2)
        self.layer3 = BasicBlock(widths[1], widths[2], 2)
        self.fc = nn.Linear(widths[2], num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = self.layer3(self.layer2(self.layer1(self.stem(x))))
        return self.fc(torch.flatten(F.adaptive_max_pool2d(x, 1), 1))


def make_optimizer(params, cfg=CFG):
    return torch.optim.SGD(params, lr=cfg["max_lr"], momentum=0.9, nesterov=True, weight_decay=cfg["weight_decay"])


def make_target():
    torch.manual_seed(CFG["seed"])
    train_dl, val_dl, ytr = build_loaders(CFG)
    model = AOIResNet(len(CLASSES))
    criterion = nn.CrossEntropyLoss(label_smoothing=CFG["label_smoothing"])

    def loss_fn(model, batch):
        x, y = batch
        return criterion(model(x), y)

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
# training
# ----------------------------------------------------------------------------
def macro_f1(y_true, y_pred, k):
    cm = pd.crosstab(pd.Series(y_true), pd.Series(y_pred)).reindex(index=range(k), columns=range(k), fill_value=0).values
    tp = np.diag(cm).astype(float)
    prec = tp / np.maximum(cm.sum(0), 1)
    rec = tp / np.maximum(cm.sum(1), 1)
    f1 = 2 * prec * rec / np.maximum(prec + rec, 1e-9)
    return f1.mean(), rec


@torch.no_grad()
def evaluate(model, dl, criterion):
    model.eval()
    losses, preds, ys = [], [], []
    for x, y in dl:
        logits = model(x)
        losses.append(criterion(logits, y).item() * len(y))
        preds.append(logits.argmax(1))
        ys.append(y)
    model.train()
    preds, ys = torch.cat(preds).numpy(), torch.cat(ys).numpy()
    f1, rec = macro_f1(ys, preds, len(CLASSES))
    return sum(losses) / len(ys), (preds == ys).mean(), f1, rec


def progress(i, n, width=30):
    done = int(width * i / n)
    return "[" + "=" * (done - 1) + (">" if done < width else "=") + "." * (width - done) + "]"


def main():
    cfg = CFG
    torch.set_num_threads(1)
    torch.manual_seed(cfg["seed"])
    train_dl, val_dl, ytr = build_loaders(cfg)
    print("train class counts:", dict(zip(CLASSES, np.bincount(ytr, minlength=len(CLASSES)).tolist())))
    model = AOIResNet(len(CLASSES))
    criterion = nn.CrossEntropyLoss(label_smoothing=cfg["label_smoothing"])
    opt = make_optimizer(model.parameters(), cfg)
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=cfg["max_lr"], epochs=cfg["epochs"], steps_per_epoch=len(train_dl), pct_start=0.2
    )
    n = len(train_dl)
    t_all = time.time()
    for epoch in range(cfg["epochs"]):
        print(f"Epoch {epoch + 1}/{cfg['epochs']}")
        t0 = time.time()
        tot, correct, seen = 0.0, 0, 0
        for i, (x, y) in enumerate(train_dl, 1):
            logits = model(x)
            loss = criterion(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            tot += loss.item() * len(y)
            correct += (logits.argmax(1) == y).sum().item()
            seen += len(y)
        dt = time.time() - t0
        vl, va, vf1, rec = evaluate(model, val_dl, criterion)
        sys.stdout.write(
            f"{n}/{n} {progress(n, n)} - {dt:.0f}s {dt / n * 1000:.0f}ms/step - loss: {tot / seen:.4f} - "
            f"accuracy: {correct / seen:.4f} - val_loss: {vl:.4f} - val_accuracy: {va:.4f} - val_macro_f1: {vf1:.4f}\n"
        )
    print("val recall per class:", " ".join(f"{c}={r:.2f}" for c, r in zip(CLASSES, rec)))
    print(f"total time {time.time() - t_all:.1f}s")


if __name__ == "__main__":
    main()
