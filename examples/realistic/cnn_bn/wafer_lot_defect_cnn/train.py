"""Wafer-map defect pattern classification with a small BatchNorm CNN.

Synthetic WM-811K-style wafer maps (0 = off-wafer, 1 = pass die, 2 = fail die)
on a 20x20 grid, nine pattern classes with a long-tailed distribution. Wafers
come in lots of 25; the validation set is the most recent 15% of lots so that
no lot is shared between train and validation. SGD + Nesterov momentum with a
one-cycle schedule, light flip/rotation augmentation, Keras-style epoch log.
"""
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

SEED = 7
GRID = 20
WAFERS_PER_LOT = 25
N_LOTS = 120
VAL_LOT_FRAC = 0.15
BATCH_SIZE = 64
EPOCHS = 18
MAX_LR = 0.05
WEIGHT_DECAY = 5e-4

CLASSES = ["none", "center", "donut", "edge_loc", "edge_ring", "loc", "random", "scratch", "near_full"]
CLASS_PRIOR = np.array([0.34, 0.11, 0.06, 0.14, 0.16, 0.09, 0.04, 0.06, 0.0])

torch.set_num_threads(2)


def wafer_mask():
    yy, xx = np.mgrid[0:GRID, 0:GRID]
    c = (GRID - 1) / 2
    r = np.sqrt((yy - c) ** 2 + (xx - c) ** 2)
    return r <= GRID / 2 - 0.3, r, yy, xx


MASK, RADIUS, YY, XX = wafer_mask()
R_MAX = RADIUS[MASK].max()


def draw_wafer(label, rng):
    fail_p = np.full((GRID, GRID), rng.uniform(0.01, 0.04))
    name = CLASSES[label]
    if name == "center":
        s = rng.uniform(2.0, 3.5)
        fail_p += 0.9 * np.exp(-(RADIUS / s) ** 2)
    elif name == "donut":
        r0 = rng.uniform(0.35, 0.6) * R_MAX
        fail_p += 0.85 * np.exp(-((RADIUS - r0) / 1.2) ** 2)
    elif name == "edge_ring":
        fail_p += 0.85 * (RADIUS > R_MAX - rng.uniform(1.2, 2.2))
    elif name == "edge_loc":
        ang = rng.uniform(0, 2 * np.pi)
        cy, cx = (GRID - 1) / 2 + R_MAX * np.sin(ang), (GRID - 1) / 2 + R_MAX * np.cos(ang)
        fail_p += 0.85 * np.exp(-((YY - cy) ** 2 + (XX - cx) ** 2) / (2 * rng.uniform(1.8, 3.0) ** 2))
    elif name == "loc":
        ang, rr = rng.uniform(0, 2 * np.pi), rng.uniform(0.3, 0.65) * R_MAX
        cy, cx = (GRID - 1) / 2 + rr * np.sin(ang), (GRID - 1) / 2 + rr * np.cos(ang)
        fail_p += 0.85 * np.exp(-((YY - cy) ** 2 + (XX - cx) ** 2) / (2 * rng.uniform(1.2, 2.0) ** 2))
    elif name == "random":
        fail_p += rng.uniform(0.15, 0.35)
    elif name == "scratch":
        ang = rng.uniform(0, np.pi)
        py, px = rng.uniform(5, GRID - 5, size=2)
        d = np.abs((YY - py) * np.cos(ang) - (XX - px) * np.sin(ang))
        along = np.abs((YY - py) * np.sin(ang) + (XX - px) * np.cos(ang))
        fail_p += 0.9 * ((d < 0.75) & (along < rng.uniform(4, 8)))
    elif name == "near_full":
        fail_p += rng.uniform(0.75, 0.92)
    fail = rng.random((GRID, GRID)) < np.clip(fail_p, 0, 1)
    wafer = np.where(MASK, np.where(fail, 2, 1), 0).astype(np.uint8)
    return wafer


def generate_lots(seed=SEED):
    rng = np.random.default_rng(seed)
    maps, labels, lots = [], [], []
    excursion_lots = set(rng.choice(np.arange(10, 40), size=2, replace=False).tolist())
    for lot in range(N_LOTS):
        p = CLASS_PRIOR.copy()
        p /= p.sum()
        for w in range(WAFERS_PER_LOT):
            if lot in excursion_lots and w in (11, 12, 13, 14):
                y = CLASSES.index("near_full")
            else:
                y = rng.choice(len(CLASSES), p=p)
            maps.append(draw_wafer(y, rng))
            labels.append(y)
            lots.append(lot)
    return np.stack(maps), np.array(labels), np.array(lots)


class WaferDataset(Dataset):
    def __init__(self, maps, labels, augment=False, seed=0):
        self.x = torch.from_numpy(maps.astype(np.float32) / 2.0).unsqueeze(1)
        self.y = torch.from_numpy(labels).long()
        self.augment = augment

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        x = self.x[i]
        if self.augment:
            k = int(torch.randint(0, 4, ()).item())
            x = torch.rot90(x, k, dims=(1, 2))
            if torch.rand(()) < 0.5:
                x = torch.flip(x, dims=(2,))
        return x, self.y[i]


def conv_bn(c_in, c_out):
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(inplace=True))


class WaferCNN(nn.Module):
    def __init__(self, n_classes=len(CLASSES)):
        super().__init__()
        self.features = nn.Sequential(
            conv_bn(1, 16), conv_bn(16, 16), nn.MaxPool2d(2),
            conv_bn(16, 32), nn.MaxPool2d(2),
            conv_bn(32, 64),
        )
        self.drop = nn.Dropout(0.2)
        self.fc = nn.Linear(64, n_classes)

    def forward(self, x):
        x = self.features(x)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(self.drop(x))


def build_loaders():
    maps, labels, lots = generate_lots()
    n_val_lots = int(round(VAL_LOT_FRAC * N_LOTS))
    val_mask = lots >= N_LOTS - n_val_lots
    train_ds = WaferDataset(maps[~val_mask], labels[~val_mask], augment=True)
    val_ds = WaferDataset(maps[val_mask], labels[val_mask], augment=False)
    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True, generator=g, drop_last=True)
    val_loader = DataLoader(val_ds, batch_size=256, shuffle=False)
    return train_loader, val_loader


def compute_loss(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y, label_smoothing=0.05)


def make_optimizer(params):
    return torch.optim.SGD(params, lr=MAX_LR, momentum=0.9, nesterov=True, weight_decay=WEIGHT_DECAY)


def make_target():
    torch.manual_seed(SEED)
    train_loader, val_loader = build_loaders()
    model = WaferCNN()
    return {
        "model": model,
        "data": train_loader,
        "val_data": val_loader,
        "loss_fn": compute_loss,
        "optimizer": make_optimizer(model.parameters()),
        "make_optimizer": make_optimizer,
        "num_classes": len(CLASSES),
        "task": "classification",
    }


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    losses, preds, targets = [], [], []
    for x, y in loader:
        logits = model(x)
        losses.append(F.cross_entropy(logits, y, reduction="sum").item())
        preds.append(logits.argmax(1))
        targets.append(y)
    model.train()
    preds, targets = torch.cat(preds).numpy(), torch.cat(targets).numpy()
    cm = np.zeros((len(CLASSES), len(CLASSES)), dtype=np.int64)
    np.add.at(cm, (targets, preds), 1)
    per_class_recall = np.diag(cm) / cm.sum(axis=1)
    return {
        "val_loss": sum(losses) / len(targets),
        "val_acc": (preds == targets).mean(),
        "val_bal_acc": per_class_recall.mean(),
        "recall": per_class_recall,
    }


def main():
    torch.manual_seed(SEED)
    train_loader, val_loader = build_loaders()
    print(f"Train on {len(train_loader.dataset)} wafers, validate on {len(val_loader.dataset)} wafers")
    model = WaferCNN()
    optimizer = make_optimizer(model.parameters())
    steps_per_epoch = len(train_loader)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=MAX_LR, epochs=EPOCHS,
                                                    steps_per_epoch=steps_per_epoch, pct_start=0.25)
    for epoch in range(1, EPOCHS + 1):
        t0 = time.time()
        model.train()
        tot_loss, tot_correct, n = 0.0, 0, 0
        for x, y in train_loader:
            logits = model(x)
            loss = F.cross_entropy(logits, y, label_smoothing=0.05)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            tot_loss += loss.item() * y.size(0)
            tot_correct += (logits.argmax(1) == y).sum().item()
            n += y.size(0)
        m = evaluate(model, val_loader)
        dt = time.time() - t0
        print(f"Epoch {epoch}/{EPOCHS}")
        print(f"{steps_per_epoch}/{steps_per_epoch} - {dt:.0f}s - loss: {tot_loss / n:.4f} - acc: {tot_correct / n:.4f}"
              f" - val_loss: {m['val_loss']:.4f} - val_acc: {m['val_acc']:.4f} - val_bal_acc: {m['val_bal_acc']:.4f}"
              f" - lr: {scheduler.get_last_lr()[0]:.4f}")
    print("per-class val recall: " + ", ".join(f"{c}={r:.3f}" for c, r in zip(CLASSES, m["recall"])))


if __name__ == "__main__":
    main()
