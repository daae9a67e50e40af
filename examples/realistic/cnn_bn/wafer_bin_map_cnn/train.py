"""Wafer-map failure-pattern classification (WM-811K style bin maps, 26x26).

Small CNN with BatchNorm2d, AdamW, warmup + cosine, mixup + label smoothing,
dihedral (rot90/flip) augmentation. timm-style console logging.
"""
import math
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

SEED = 5
S = 26
PATTERNS = ["none", "center", "donut", "edge_loc", "edge_ring", "loc", "scratch", "random"]
N_TRAIN, N_VAL = 1800, 480
BATCH_SIZE = 64
EPOCHS = 12
LR = 3e-3
WEIGHT_DECAY = 0.05
WARMUP_EPOCHS = 1
MIXUP_ALPHA = 0.8
SMOOTHING = 0.1
LOG_INTERVAL = 10


# ----------------------------------------------------------------------------- data
def render_wafer(pattern, rng):
    yy, xx = np.mgrid[0:S, 0:S].astype(np.float32)
    c = (S - 1) / 2
    r = np.sqrt((yy - c) ** 2 + (xx - c) ** 2) / (S / 2)
    ang = np.arctan2(yy - c, xx - c)
    on_wafer = r <= 1.0
    p_fail = np.full((S, S), rng.uniform(0.02, 0.08), np.float32)
    if pattern == "center":
        p_fail += 0.8 * (r < rng.uniform(0.25, 0.45))
    elif pattern == "donut":
        r0 = rng.uniform(0.4, 0.6)
        p_fail += 0.75 * (np.abs(r - r0) < rng.uniform(0.1, 0.18))
    elif pattern == "edge_loc":
        a0 = rng.uniform(-np.pi, np.pi)
        da = np.abs(np.angle(np.exp(1j * (ang - a0))))
        p_fail += 0.8 * ((r > 0.75) & (da < rng.uniform(0.4, 0.9)))
    elif pattern == "edge_ring":
        p_fail += 0.75 * (r > rng.uniform(0.8, 0.88))
    elif pattern == "loc":
        cy, cx = rng.uniform(6, S - 6, size=2)
        rad = rng.uniform(2.0, 4.0)
        p_fail += 0.8 * (np.sqrt((yy - cy) ** 2 + (xx - cx) ** 2) < rad)
    elif pattern == "scratch":
        th = rng.uniform(0, np.pi)
        off = rng.uniform(-5, 5)
        d = (xx - c) * np.sin(th) - (yy - c) * np.cos(th) - off
        along = (xx - c) * np.cos(th) + (yy - c) * np.sin(th)
        p_fail += 0.85 * ((np.abs(d) < 0.9) & (np.abs(along - rng.uniform(-3, 3)) < rng.uniform(5, 10)))
    elif pattern == "random":
        p_fail += rng.uniform(0.2, 0.35)
    fail = rng.random((S, S)) < np.clip(p_fail, 0, 1)
    # WM-811K encoding: 0 = off-wafer, 1 = pass, 2 = fail
    return np.where(on_wafer, np.where(fail, 2, 1), 0).astype(np.uint8)


def make_split(n, rng):
    y = rng.integers(0, len(PATTERNS), size=n)
    x = np.stack([render_wafer(PATTERNS[k], rng) for k in y])
    return x, y.astype(np.int64)


def encode(maps):
    # two channels: wafer mask and fail mask
    maps = torch.as_tensor(maps)
    return torch.stack([(maps > 0).float(), (maps == 2).float()], dim=-3)


class WaferMaps(Dataset):
    def __init__(self, maps, labels, train):
        self.x = encode(maps)
        self.y = torch.as_tensor(labels)
        self.train = train

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        x = self.x[i]
        if self.train:
            x = torch.rot90(x, int(torch.randint(4, (1,))), dims=(1, 2))
            if torch.rand(1).item() < 0.5:
                x = x.flip(-1)
            # simulate probe-card dropouts: a few random dies read as pass
            drop = (torch.rand(S, S) < 0.05) & (x[0] > 0)
            x = torch.stack([x[0], x[1] * (~drop)])
        return x, self.y[i]


def build_loaders():
    rng = np.random.default_rng(SEED)
    x_tr, y_tr = make_split(N_TRAIN, rng)
    x_va, y_va = make_split(N_VAL, rng)
    g = torch.Generator().manual_seed(SEED)
    train_dl = DataLoader(WaferMaps(x_tr, y_tr, True), batch_size=BATCH_SIZE, shuffle=True, drop_last=True, generator=g)
    val_dl = DataLoader(WaferMaps(x_va, y_va, False), batch_size=160)
    return train_dl, val_dl


# ----------------------------------------------------------------------------- model
def conv_bn_act(cin, cout, stride=1):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class WaferNet(nn.Module):
    def __init__(self, n_classes=len(PATTERNS), w=16, drop=0.3):
        super().__init__()
        self.features = nn.Sequential(
            conv_bn_act(2, w), conv_bn_act(w, w),
            conv_bn_act(w, 2 * w, 2), conv_bn_act(2 * w, 2 * w),
            conv_bn_act(2 * w, 4 * w, 2), conv_bn_act(4 * w, 4 * w),
        )
        self.drop = nn.Dropout(drop)
        self.head = nn.Linear(4 * w, n_classes)

    def forward(self, x):
        x = F.adaptive_avg_pool2d(self.features(x), 1).flatten(1)
        return self.head(self.drop(x))


def mixup(x, y, num_classes, alpha=MIXUP_ALPHA, smoothing=SMOOTHING):
    off, on = smoothing / num_classes, 1.0 - smoothing + smoothing / num_classes
    t = torch.full((len(y), num_classes), off).scatter_(1, y[:, None], on)
    lam = float(np.random.beta(alpha, alpha))
    x = lam * x + (1 - lam) * x.flip(0)
    t = lam * t + (1 - lam) * t.flip(0)
    return x, t


def soft_target_ce(logits, target):
    return torch.sum(-target * F.log_softmax(logits, dim=-1), dim=-1).mean()


def loss_fn(model, batch):
    x, y = batch
    x, t = mixup(x, y, len(PATTERNS))
    return soft_target_ce(model(x), t)


def make_target():
    torch.manual_seed(SEED)
    np.random.seed(SEED)
    train_dl, val_dl = build_loaders()
    model = WaferNet()
    decay, no_decay = [], []
    for n_, p in model.named_parameters():
        (no_decay if p.ndim <= 1 else decay).append(p)
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=LR)
    return dict(model=model, data=train_dl, val_data=val_dl, loss_fn=loss_fn, optimizer=optimizer,
                num_classes=len(PATTERNS), task="classification")


class AverageMeter:
    def __init__(self):
        self.val = self.avg = self.sum = self.count = 0

    def update(self, val, n=1):
        self.val, self.sum, self.count = val, self.sum + val * n, self.count + n
        self.avg = self.sum / self.count


def validate(model, dl):
    model.eval()
    losses, top1, top3, bt = AverageMeter(), AverageMeter(), AverageMeter(), AverageMeter()
    end = time.time()
    last = len(dl) - 1
    with torch.no_grad():
        for i, (x, y) in enumerate(dl):
            out = model(x)
            loss = F.cross_entropy(out, y)
            top = out.topk(3, 1).indices
            a1 = (top[:, 0] == y).float().mean().item() * 100
            a3 = (top == y[:, None]).any(1).float().mean().item() * 100
            losses.update(loss.item(), len(y)); top1.update(a1, len(y)); top3.update(a3, len(y))
            bt.update(time.time() - end); end = time.time()
            if i == last:
                print(f"Test: [{i:>4d}/{last}]  Time: {bt.val:.3f} ({bt.avg:.3f})  Loss: {losses.val:>7.4f} ({losses.avg:>6.4f})  "
                      f"Acc@1: {top1.val:>7.4f} ({top1.avg:>7.4f})  Acc@3: {top3.val:>7.4f} ({top3.avg:>7.4f})")
    return dict(loss=losses.avg, top1=top1.avg, top3=top3.avg)


def main():
    torch.set_num_threads(1)
    t = make_target()
    model, train_dl, val_dl, optimizer = t["model"], t["data"], t["val_data"], t["optimizer"]
    n_iter = len(train_dl)
    total, warm = EPOCHS * n_iter, WARMUP_EPOCHS * n_iter
    sched = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: (s + 1) / warm if s < warm else 0.5 * (1 + math.cos(math.pi * (s - warm) / (total - warm))))
    print(f"Model WaferNet created, param count: {sum(p.numel() for p in model.parameters())}")
    print(f"Scheduled epochs: {EPOCHS}. LR stepped per update.")
    best = None
    for epoch in range(EPOCHS):
        model.train()
        losses, bt, dt = AverageMeter(), AverageMeter(), AverageMeter()
        end = time.time()
        for i, batch in enumerate(train_dl):
            dt.update(time.time() - end)
            loss = loss_fn(model, batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            sched.step()
            losses.update(loss.item(), len(batch[1]))
            bt.update(time.time() - end); end = time.time()
            if i % LOG_INTERVAL == 0 or i == n_iter - 1:
                print(f"Train: {epoch} [{i:>4d}/{n_iter} ({100.0 * i / (n_iter - 1):>3.0f}%)]  "
                      f"Loss: {losses.val:#.3g} ({losses.avg:#.3g})  "
                      f"Time: {bt.val:.3f}s, {BATCH_SIZE / bt.val:>7.2f}/s  ({bt.avg:.3f}s, {BATCH_SIZE / bt.avg:>7.2f}/s)  "
                      f"LR: {optimizer.param_groups[0]['lr']:.3e}  Data: {dt.val:.3f} ({dt.avg:.3f})")
        m = validate(model, val_dl)
        if best is None or m["top1"] > best[1]:
            best = (epoch, m["top1"])
        print(f"*** epoch {epoch}: train_loss {losses.avg:.4f}  eval_loss {m['loss']:.4f}  eval_top1 {m['top1']:.4f}")
    print(f"*** Best metric: {best[1]:.4f} (epoch {best[0]})")


if __name__ == "__main__":
    main()
