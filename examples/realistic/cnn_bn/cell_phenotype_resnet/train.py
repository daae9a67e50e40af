"""Cell phenotype classification on 2-channel fluorescence crops (DAPI + actin).

Small ResNet (BasicBlocks, BatchNorm), SGD + Nesterov momentum,
cosine annealing with warm restarts (SGDR, T_0=2 epochs, T_mult=2), 14 epochs.
Synthetic crops are generated once and cached in cells_24px.npz.
"""
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

HERE = os.path.dirname(os.path.abspath(__file__))
CACHE = os.path.join(HERE, "cells_24px.npz")

SEED = 1234
IMG = 24
PHENOTYPES = ["interphase", "spindle", "multinucleate", "apoptotic", "spread", "mitotic"]
N_TRAIN_PER_CLASS = 200
N_VAL_PER_CLASS = 80

EPOCHS = 14
BATCH_SIZE = 64
BASE_LR = 0.2
MIN_LR = 1e-4
MOMENTUM = 0.9
WEIGHT_DECAY = 5e-4
T_0, T_MULT = 2, 2
PRINT_EVERY = 8


# ------------------------------------------------------------------ synthetic crops
def _blob(yy, xx, cy, cx, sy, sx, theta):
    c, s = np.cos(theta), np.sin(theta)
    dy, dx = yy - cy, xx - cx
    u = c * dx + s * dy
    v = -s * dx + c * dy
    return np.exp(-0.5 * ((u / sx) ** 2 + (v / sy) ** 2))


def _cell(rng, cls):
    yy, xx = np.mgrid[0:IMG, 0:IMG].astype(np.float32)
    cy, cx = IMG / 2 + rng.normal(0, 1.5, 2)
    th = rng.uniform(0, np.pi)
    nuc = np.zeros((IMG, IMG), np.float32)
    act = np.zeros((IMG, IMG), np.float32)
    r = rng.uniform(0.85, 1.15)
    if cls == 0:      # interphase: round nucleus, moderate cytoplasm
        nuc += _blob(yy, xx, cy, cx, 2.6 * r, 2.8 * r, th)
        act += 0.6 * _blob(yy, xx, cy, cx, 5.0 * r, 5.5 * r, th)
    elif cls == 1:    # spindle: elongated cell and nucleus
        nuc += _blob(yy, xx, cy, cx, 1.9 * r, 3.6 * r, th)
        act += 0.6 * _blob(yy, xx, cy, cx, 2.8 * r, 8.0 * r, th)
    elif cls == 2:    # multinucleate: 2-3 nuclei in one cell
        k = rng.integers(2, 4)
        for j in range(k):
            a = th + 2 * np.pi * j / k
            nuc += 0.9 * _blob(yy, xx, cy + 2.8 * np.sin(a), cx + 2.8 * np.cos(a), 1.9, 2.0, a)
        act += 0.6 * _blob(yy, xx, cy, cx, 6.0 * r, 6.5 * r, th)
    elif cls == 3:    # apoptotic: fragmented nucleus, shrunken cell
        for _ in range(rng.integers(3, 6)):
            nuc += 1.1 * _blob(yy, xx, cy + rng.normal(0, 2.0), cx + rng.normal(0, 2.0), 0.9, 0.9, 0)
        act += 0.5 * _blob(yy, xx, cy, cx, 3.8 * r, 4.2 * r, th)
    elif cls == 4:    # spread: normal nucleus, very large flat cytoplasm
        nuc += _blob(yy, xx, cy, cx, 2.6 * r, 2.8 * r, th)
        act += 0.45 * _blob(yy, xx, cy, cx, 7.5 * r, 8.5 * r, th)
    elif cls == 5:    # mitotic: condensed bright chromatin, rounded cell
        nuc += 1.6 * _blob(yy, xx, cy, cx, 1.0 * r, 2.6 * r, th)
        act += 0.8 * _blob(yy, xx, cy, cx, 4.0 * r, 4.0 * r, th)
    # neighbouring cell fragments at the crop border
    for _ in range(rng.integers(0, 3)):
        ny, nx = rng.choice([-3, IMG + 2], 2) + rng.normal(0, 4, 2)
        nuc += 0.8 * _blob(yy, xx, ny, nx, 2.5, 2.8, rng.uniform(0, np.pi))
        act += 0.5 * _blob(yy, xx, ny, nx, 5.0, 5.5, rng.uniform(0, np.pi))
    img = np.stack([nuc, act]) * rng.uniform(0.6, 1.4, (2, 1, 1))
    img += rng.uniform(0.02, 0.1, (2, 1, 1))
    img = rng.poisson(img * 60) / 60.0 + rng.normal(0, 0.08, img.shape)
    return img.astype(np.float32)


def load_data():
    if os.path.exists(CACHE):
        d = np.load(CACHE)
        return d["xtr"], d["ytr"], d["xva"], d["yva"]
    rng = np.random.default_rng(SEED)

    def make(n):
        ys = np.repeat(np.arange(len(PHENOTYPES)), n)
        xs = np.stack([_cell(rng, c) for c in ys])
        p = rng.permutation(len(ys))
        return xs[p], ys[p].astype(np.int64)

    xtr, ytr = make(N_TRAIN_PER_CLASS)
    xva, yva = make(N_VAL_PER_CLASS)
    np.savez_compressed(CACHE, xtr=xtr, ytr=ytr, xva=xva, yva=yva)
    return xtr, ytr, xva, yva


class BatchAugment:
    """Batch-level augmentation: random 90-degree rotations, flips, and 2-px shifted crops."""

    def __call__(self, x):
        b = x.size(0)
        k = torch.randint(0, 4, (b,))
        out = torch.empty_like(x)
        for r in range(4):
            m = k == r
            if m.any():
                out[m] = torch.rot90(x[m], r, dims=(2, 3))
        flip = torch.rand(b) < 0.5
        out[flip] = out[flip].flip(3)
        pad = F.pad(out, (2, 2, 2, 2), mode="reflect")
        dy, dx = np.random.randint(0, 5, 2)
        return pad[:, :, dy:dy + IMG, dx:dx + IMG].contiguous()


def build_loaders():
    xtr, ytr, xva, yva = load_data()
    mean = xtr.mean(axis=(0, 2, 3), keepdims=True)
    std = xtr.std(axis=(0, 2, 3), keepdims=True)
    xtr = (xtr - mean) / std
    xva = (xva - mean) / std
    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(TensorDataset(torch.from_numpy(xtr), torch.from_numpy(ytr)),
                              batch_size=BATCH_SIZE, shuffle=True, drop_last=True, generator=g)
    val_loader = DataLoader(TensorDataset(torch.from_numpy(xva), torch.from_numpy(yva)),
                            batch_size=256, shuffle=False)
    return train_loader, val_loader


# ------------------------------------------------------------------------- model
class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = nn.Sequential()
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.short(x))


class CellResNet(nn.Module):
    def __init__(self, in_ch=2, num_classes=len(PHENOTYPES)):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_ch, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.layer1 = BasicBlock(16, 32, 2)
        self.layer2 = BasicBlock(32, 64, 2)
        self.fc = nn.Linear(64, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = self.layer2(self.layer1(self.stem(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


augment = BatchAugment()


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(augment(x)), y)


def make_optimizer(params):
    return torch.optim.SGD(params, lr=BASE_LR, momentum=MOMENTUM, nesterov=True, weight_decay=WEIGHT_DECAY)


def make_target():
    torch.manual_seed(SEED)
    np.random.seed(SEED)
    train_loader, val_loader = build_loaders()
    model = CellResNet()
    return {
        "model": model,
        "data": train_loader,
        "val_data": val_loader,
        "loss_fn": loss_fn,
        "optimizer": make_optimizer(model.parameters()),
        "make_optimizer": make_optimizer,
        "num_classes": len(PHENOTYPES),
        "task": "classification",
    }


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    loss_sum, correct, n = 0.0, 0, 0
    for x, y in loader:
        out = model(x)
        loss_sum += F.cross_entropy(out, y, reduction="sum").item()
        correct += (out.argmax(1) == y).sum().item()
        n += y.numel()
    return loss_sum / n, 100.0 * correct / n


def main():
    torch.manual_seed(SEED)
    np.random.seed(SEED)
    torch.set_num_threads(1)
    t0 = time.time()
    train_loader, val_loader = build_loaders()
    model = CellResNet()
    optimizer = make_optimizer(model.parameters())
    scheduler = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(
        optimizer, T_0=T_0, T_mult=T_MULT, eta_min=MIN_LR)
    iters = len(train_loader)
    print(f"train={len(train_loader.dataset)} val={len(val_loader.dataset)} iters/epoch={iters} "
          f"params={sum(p.numel() for p in model.parameters()) / 1e3:.1f}k")

    best_acc, best_ep = 0.0, -1
    for epoch in range(EPOCHS):
        model.train()
        te = time.time()
        tl, tc, tn = 0.0, 0, 0
        for i, (x, y) in enumerate(train_loader):
            x = augment(x)
            out = model(x)
            loss = F.cross_entropy(out, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step(epoch + (i + 1) / iters)
            tl += loss.item() * y.numel()
            tc += (out.argmax(1) == y).sum().item()
            tn += y.numel()
            if i % PRINT_EVERY == 0:
                print(f"  ep {epoch:2d} it {i:3d}/{iters}  loss {loss.item():.4f}  lr {optimizer.param_groups[0]['lr']:.5f}")
        vl, va = evaluate(model, val_loader)
        if va > best_acc:
            best_acc, best_ep = va, epoch
            torch.save(model.state_dict(), os.path.join(HERE, "best.pt"))
        print(f"epoch {epoch:2d} | train_loss {tl / tn:.4f} train_acc {100.0 * tc / tn:5.1f} | "
              f"val_loss {vl:.4f} val_acc {va:5.1f} | lr {optimizer.param_groups[0]['lr']:.5f} | "
              f"{time.time() - te:.1f}s")
    print(f"best val_acc {best_acc:.1f} at epoch {best_ep}; total {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
