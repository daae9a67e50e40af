"""Wafer-map defect pattern classifier fine-tuned from a coarse-family CNN.

Stage 1 pretrains a small CNN on a large archive of wafer maps from a legacy
product that were only labelled with 4 coarse defect families
(none / radial / local / scratch); weights go to ./checkpoints/backbone.pt.
Stage 2 fine-tunes the whole network (backbone at 1/10 of the head LR) with a
new 8-way head on a small, fully labelled set from the new product, using
dihedral augmentation + mixup.
"""
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

RUN_DIR = os.path.dirname(os.path.abspath(__file__))
DATA_PATH = os.path.join(RUN_DIR, "data", "wafer_maps.npz")
CKPT_PATH = os.path.join(RUN_DIR, "checkpoints", "backbone.pt")
torch.set_num_threads(1)

GRID = 32
CLASSES = ["none", "center", "donut", "edge_ring", "edge_loc", "loc", "scratch", "near_full"]
COARSE = {0: 0, 1: 1, 2: 1, 3: 1, 7: 1, 4: 2, 5: 2, 6: 3}   # fine -> coarse family

CONFIG = dict(
    seed=7,
    n_legacy=4000,
    pretrain_epochs=3,
    pretrain_lr=2e-3,
    n_per_class_train=40,
    n_val=480,
    batch_size=32,
    epochs=20,
    head_lr=3e-3,
    backbone_lr_mult=0.1,
    weight_decay=5e-4,
    mixup_alpha=0.4,
    dropout=0.3,
)


# ----------------------------------------------------------------------------
# synthetic wafer maps: 0 = off-wafer, 1 = pass die, 2 = fail die
# ----------------------------------------------------------------------------
_yy, _xx = np.mgrid[0:GRID, 0:GRID]
_cx = (GRID - 1) / 2
_R = np.sqrt((_xx - _cx) ** 2 + (_yy - _cx) ** 2) / (GRID / 2)
_TH = np.arctan2(_yy - _cx, _xx - _cx)
ON_WAFER = _R <= 1.0


def _wafer(cls, rng, base_fail):
    p = np.full((GRID, GRID), base_fail)
    if cls == 1:      # center
        r0 = rng.uniform(0.2, 0.4)
        p = np.where(_R < r0, rng.uniform(0.6, 0.9), p)
    elif cls == 2:    # donut
        r0, w = rng.uniform(0.4, 0.6), rng.uniform(0.1, 0.18)
        p = np.where(np.abs(_R - r0) < w, rng.uniform(0.55, 0.85), p)
    elif cls == 3:    # edge ring
        p = np.where(_R > rng.uniform(0.82, 0.9), rng.uniform(0.6, 0.9), p)
    elif cls == 4:    # edge-local
        th0 = rng.uniform(-np.pi, np.pi)
        d = np.abs(np.angle(np.exp(1j * (_TH - th0))))
        p = np.where((_R > 0.72) & (d < rng.uniform(0.35, 0.7)), rng.uniform(0.6, 0.9), p)
    elif cls == 5:    # local cluster
        r, th = rng.uniform(0.1, 0.6), rng.uniform(-np.pi, np.pi)
        cx, cy = _cx + r * np.cos(th) * GRID / 2, _cx + r * np.sin(th) * GRID / 2
        dist = np.sqrt((_xx - cx) ** 2 + (_yy - cy) ** 2)
        p = np.where(dist < rng.uniform(2.5, 4.5), rng.uniform(0.6, 0.9), p)
    elif cls == 6:    # scratch
        th = rng.uniform(0, np.pi)
        off = rng.uniform(-6, 6)
        along = (_xx - _cx) * np.cos(th) + (_yy - _cx) * np.sin(th)
        perp = -(_xx - _cx) * np.sin(th) + (_yy - _cx) * np.cos(th)
        L0 = rng.uniform(-10, 0)
        line = (np.abs(perp - off) < 0.9) & (along > L0) & (along < L0 + rng.uniform(8, 18))
        p = np.where(line, 0.85, p)
    elif cls == 7:    # near full
        p = np.full((GRID, GRID), rng.uniform(0.6, 0.85))
    fail = rng.random((GRID, GRID)) < p
    m = np.where(fail, 2, 1) * ON_WAFER
    return m.astype(np.uint8)


def make_maps(labels, rng, base_fail_range):
    maps = np.stack([_wafer(int(c), rng, rng.uniform(*base_fail_range)) for c in labels])
    return maps


def prepare_data(cfg):
    if os.path.exists(DATA_PATH):
        return dict(np.load(DATA_PATH))
    rng = np.random.default_rng(cfg["seed"])
    # legacy product: many maps, coarse family labels only, noisier line
    legacy_fine = rng.choice(8, size=cfg["n_legacy"], p=[.3, .1, .1, .1, .1, .1, .1, .1])
    legacy_maps = make_maps(legacy_fine, rng, (0.03, 0.09))
    legacy_coarse = np.array([COARSE[int(c)] for c in legacy_fine])
    # new product: few labelled maps per fine class
    train_y = np.repeat(np.arange(8), cfg["n_per_class_train"])
    val_y = rng.integers(0, 8, size=cfg["n_val"])
    train_x = make_maps(train_y, rng, (0.02, 0.07))
    val_x = make_maps(val_y, rng, (0.02, 0.07))
    os.makedirs(os.path.dirname(DATA_PATH), exist_ok=True)
    out = dict(legacy_x=legacy_maps, legacy_y=legacy_coarse, train_x=train_x,
               train_y=train_y, val_x=val_x, val_y=val_y)
    np.savez_compressed(DATA_PATH, **out)
    return out


class WaferDataset(Dataset):
    def __init__(self, maps, labels, augment=False):
        self.maps = torch.from_numpy(maps.astype(np.float32) / 2.0).unsqueeze(1)
        self.labels = torch.from_numpy(np.asarray(labels, dtype=np.int64))
        self.augment = augment

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        x = self.maps[i]
        if self.augment:   # defect patterns are invariant to wafer rotation / flip
            k = int(torch.randint(0, 4, ()))
            x = torch.rot90(x, k, dims=(1, 2))
            if torch.rand(()) < 0.5:
                x = torch.flip(x, dims=(2,))
        return x, self.labels[i]


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        def block(ci, co):
            return nn.Sequential(nn.Conv2d(ci, co, 3, padding=1, bias=False),
                                 nn.BatchNorm2d(co), nn.ReLU(inplace=True))
        self.features = nn.Sequential(
            block(1, 16), nn.MaxPool2d(2),
            block(16, 32), nn.MaxPool2d(2),
            block(32, 64), nn.MaxPool2d(2),
            block(64, 64),
        )
        self.out_dim = 64

    def forward(self, x):
        return self.features(x).mean(dim=(2, 3))


class Classifier(nn.Module):
    def __init__(self, backbone, n_classes, dropout):
        super().__init__()
        self.backbone = backbone
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(backbone.out_dim, n_classes)

    def forward(self, x):
        return self.head(self.dropout(self.backbone(x)))


# ----------------------------------------------------------------------------
# keras-like progress output
# ----------------------------------------------------------------------------
def progbar_line(n_steps, seconds, logs):
    per_step = seconds / max(1, n_steps)
    unit = f"{per_step * 1000:.0f}ms/step" if per_step < 1 else f"{per_step:.0f}s/step"
    metrics = " - ".join(f"{k}: {v:.4f}" if k != "lr" else f"{k}: {v:.4e}" for k, v in logs.items())
    return f"{n_steps}/{n_steps} [==============================] - {seconds:.0f}s {unit} - {metrics}"


# ----------------------------------------------------------------------------
# stage 1
# ----------------------------------------------------------------------------
def pretrain(cfg, data):
    torch.manual_seed(cfg["seed"])
    ds = WaferDataset(data["legacy_x"], data["legacy_y"], augment=True)
    loader = DataLoader(ds, batch_size=64, shuffle=True)
    model = Classifier(Backbone(), 4, dropout=0.1)
    opt = torch.optim.Adam(model.parameters(), lr=cfg["pretrain_lr"])
    print(f"Pretraining backbone on {len(ds)} legacy maps (4 coarse families)")
    for epoch in range(cfg["pretrain_epochs"]):
        print(f"Epoch {epoch + 1}/{cfg['pretrain_epochs']}")
        model.train()
        t0, tot, correct, n = time.time(), 0.0, 0, 0
        for x, y in loader:
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += loss.item() * len(y)
            correct += (logits.argmax(1) == y).sum().item()
            n += len(y)
        print(progbar_line(len(loader), time.time() - t0,
                           {"loss": tot / n, "accuracy": correct / n}))
    os.makedirs(os.path.dirname(CKPT_PATH), exist_ok=True)
    torch.save(model.backbone.state_dict(), CKPT_PATH)


def load_backbone(cfg, data):
    if not os.path.exists(CKPT_PATH):
        pretrain(cfg, data)
    bb = Backbone()
    bb.load_state_dict(torch.load(CKPT_PATH, map_location="cpu"))
    return bb


# ----------------------------------------------------------------------------
# stage 2
# ----------------------------------------------------------------------------
def build_loaders(cfg, data):
    train_ds = WaferDataset(data["train_x"], data["train_y"], augment=True)
    val_ds = WaferDataset(data["val_x"], data["val_y"], augment=False)
    g = torch.Generator().manual_seed(cfg["seed"])
    train_loader = DataLoader(train_ds, batch_size=cfg["batch_size"], shuffle=True,
                              drop_last=True, generator=g)
    val_loader = DataLoader(val_ds, batch_size=256)
    return train_loader, val_loader


def build_optimizer(cfg, model):
    return torch.optim.AdamW(
        [
            {"params": model.backbone.parameters(), "lr": cfg["head_lr"] * cfg["backbone_lr_mult"]},
            {"params": model.head.parameters(), "lr": cfg["head_lr"]},
        ],
        weight_decay=cfg["weight_decay"],
    )


def make_mixup_loss(alpha):
    beta = torch.distributions.Beta(torch.tensor(alpha), torch.tensor(alpha))

    def loss_fn(model, batch, return_logits=False):
        x, y = batch
        lam = float(beta.sample())
        perm = torch.randperm(x.size(0))
        logits = model(lam * x + (1 - lam) * x[perm])
        loss = lam * F.cross_entropy(logits, y) + (1 - lam) * F.cross_entropy(logits, y[perm])
        if return_logits:
            y_major = y if lam >= 0.5 else y[perm]
            return loss, logits, y_major
        return loss
    return loss_fn


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


def make_target():
    cfg = dict(CONFIG)
    torch.manual_seed(cfg["seed"])
    data = prepare_data(cfg)
    backbone = load_backbone(cfg, data)
    train_loader, val_loader = build_loaders(cfg, data)
    torch.manual_seed(cfg["seed"])
    model = Classifier(backbone, len(CLASSES), cfg["dropout"])
    return {
        "model": model,
        "data": train_loader,
        "val_data": val_loader,
        "loss_fn": make_mixup_loss(cfg["mixup_alpha"]),
        "optimizer": build_optimizer(cfg, model),
        "num_classes": len(CLASSES),
        "task": "classification",
    }


def main():
    cfg = dict(CONFIG)
    t_start = time.time()
    torch.manual_seed(cfg["seed"])
    data = prepare_data(cfg)
    pretrain(cfg, data)
    backbone = load_backbone(cfg, data)

    train_loader, val_loader = build_loaders(cfg, data)
    torch.manual_seed(cfg["seed"])
    model = Classifier(backbone, len(CLASSES), cfg["dropout"])
    optimizer = build_optimizer(cfg, model)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=cfg["epochs"])
    loss_fn = make_mixup_loss(cfg["mixup_alpha"])

    print(f"\nFine-tuning on {len(train_loader.dataset)} labelled maps "
          f"({len(CLASSES)} classes), validating on {len(val_loader.dataset)}")
    model.train()
    for epoch in range(cfg["epochs"]):
        print(f"Epoch {epoch + 1}/{cfg['epochs']}")
        t0, tot, correct, n = time.time(), 0.0, 0, 0
        lr_now = optimizer.param_groups[1]["lr"]
        for batch in train_loader:
            loss, logits, y_major = loss_fn(model, batch, return_logits=True)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            bs = len(y_major)
            tot += loss.item() * bs
            correct += (logits.argmax(1) == y_major).sum().item()
            n += bs
        scheduler.step()
        val_loss, val_acc = evaluate(model, val_loader)
        print(progbar_line(len(train_loader), time.time() - t0,
                           {"loss": tot / n, "accuracy": correct / n, "val_loss": val_loss,
                            "val_accuracy": val_acc, "lr": lr_now}))
    print(f"Total time: {time.time() - t_start:.1f}s")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
