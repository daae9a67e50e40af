#!/usr/bin/env python3
"""Defect classification on synthetic 24x24 inspection patches.

Small BN conv net trained with timm-like recipe: mixup/cutmix (switching per batch),
label smoothing 0.2, SGD nesterov + warmup/cosine. Validation uses plain CE on
clean images.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 0
IMG = 24
CLASSES = ["scratch_h", "scratch_v", "spot", "ring", "crack_diag", "clean"]
NUM_CLASSES = len(CLASSES)
N_TRAIN, N_VAL = 3840, 960
BATCH_SIZE = 64
EPOCHS = 8
LR = 0.05
WARMUP_EPOCHS = 1
WEIGHT_DECAY = 5e-4
SMOOTHING = 0.2
MIXUP_ALPHA = 0.8
CUTMIX_ALPHA = 1.0
SWITCH_PROB = 0.5
LOG_INTERVAL = 25


def render(cls, rng):
    yy, xx = np.mgrid[0:IMG, 0:IMG].astype(np.float32)
    img = rng.normal(0.0, 0.35, (IMG, IMG)).astype(np.float32)
    img += 0.3 * np.sin(xx / rng.uniform(3, 8) + rng.uniform(0, 6.28)).astype(np.float32)  # texture
    cy, cx = rng.uniform(6, IMG - 6, size=2)
    amp = rng.uniform(0.9, 1.6)
    name = CLASSES[cls]
    if name == "scratch_h":
        img += amp * (np.abs(yy - cy) < 1.0) * (np.abs(xx - cx) < rng.uniform(5, 10))
    elif name == "scratch_v":
        img += amp * (np.abs(xx - cx) < 1.0) * (np.abs(yy - cy) < rng.uniform(5, 10))
    elif name == "spot":
        img += amp * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * rng.uniform(1.2, 2.2) ** 2))
    elif name == "ring":
        r = np.sqrt((yy - cy) ** 2 + (xx - cx) ** 2)
        img += amp * (np.abs(r - rng.uniform(3.5, 5.5)) < 0.9)
    elif name == "crack_diag":
        s = rng.choice([-1.0, 1.0])
        d = (yy - cy) - s * (xx - cx)
        img += amp * (np.abs(d) < 1.0) * (np.abs(xx - cx) < rng.uniform(4, 8))
    return img


def make_split(n, seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, NUM_CLASSES, size=n)
    x = np.stack([render(c, rng) for c in y])[:, None]
    return torch.from_numpy(x), torch.from_numpy(y).long()


def conv_bn(cin, cout, stride=1):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class DefectNet(nn.Module):
    def __init__(self, num_classes=NUM_CLASSES, width=24):
        super().__init__()
        self.features = nn.Sequential(
            conv_bn(1, width),
            conv_bn(width, width),
            conv_bn(width, 2 * width, stride=2),
            conv_bn(2 * width, 2 * width),
            conv_bn(2 * width, 4 * width, stride=2),
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.drop = nn.Dropout(0.1)
        self.fc = nn.Linear(4 * width, num_classes)

    def forward(self, x):
        return self.fc(self.drop(torch.flatten(self.pool(self.features(x)), 1)))


class MixupCutmix:
    """Batch-wise mixup or cutmix with label smoothing folded into the soft targets."""

    def __init__(self, num_classes, smoothing, mixup_alpha, cutmix_alpha, switch_prob, seed):
        self.num_classes = num_classes
        self.smoothing = smoothing
        self.mixup_alpha = mixup_alpha
        self.cutmix_alpha = cutmix_alpha
        self.switch_prob = switch_prob
        self.rng = np.random.default_rng(seed)

    def smooth_one_hot(self, y):
        off = self.smoothing / self.num_classes
        t = torch.full((y.size(0), self.num_classes), off)
        t.scatter_(1, y.unsqueeze(1), 1.0 - self.smoothing + off)
        return t

    def __call__(self, x, y):
        x_flip = x.flip(0)
        if self.rng.random() < self.switch_prob:
            lam = float(self.rng.beta(self.cutmix_alpha, self.cutmix_alpha))
            H, W = x.shape[-2:]
            cut = math.sqrt(1.0 - lam)
            ch, cw = int(H * cut), int(W * cut)
            cy, cx = int(self.rng.integers(H)), int(self.rng.integers(W))
            y0, y1 = max(cy - ch // 2, 0), min(cy + ch // 2, H)
            x0, x1 = max(cx - cw // 2, 0), min(cx + cw // 2, W)
            x = x.clone()
            x[:, :, y0:y1, x0:x1] = x_flip[:, :, y0:y1, x0:x1]
            lam = 1.0 - (y1 - y0) * (x1 - x0) / float(H * W)
        else:
            lam = float(self.rng.beta(self.mixup_alpha, self.mixup_alpha))
            x = x * lam + x_flip * (1.0 - lam)
        t = self.smooth_one_hot(y)
        return x, t * lam + t.flip(0) * (1.0 - lam)


def soft_target_ce(logits, target):
    return torch.sum(-target * F.log_softmax(logits, dim=-1), dim=-1).mean()


_mixer = MixupCutmix(NUM_CLASSES, SMOOTHING, MIXUP_ALPHA, CUTMIX_ALPHA, SWITCH_PROB, SEED)


def train_loss(model, batch):
    x, y = batch
    x, target = _mixer(x, y)
    return soft_target_ce(model(x), target)


def make_optimizer(params):
    return torch.optim.SGD(params, lr=LR, momentum=0.9, nesterov=True, weight_decay=WEIGHT_DECAY)


def lr_at(step, steps_per_epoch):
    warm = WARMUP_EPOCHS * steps_per_epoch
    total = EPOCHS * steps_per_epoch
    if step < warm:
        return LR * (step + 1) / warm
    return 1e-4 + 0.5 * (LR - 1e-4) * (1 + math.cos(math.pi * (step - warm) / (total - warm)))


def loader(x, y, bs, shuffle, gen=None):
    idx = torch.randperm(len(x), generator=gen) if shuffle else torch.arange(len(x))
    for s in range(0, len(x) - (bs - 1 if shuffle else 0), bs):
        j = idx[s:s + bs]
        xb = x[j]
        if shuffle:
            flip = torch.rand(len(j), generator=gen) < 0.5
            xb = torch.where(flip[:, None, None, None], xb.flip(-1).flip(-2), xb)
        yield xb, y[j]


def validate(model, x, y):
    model.eval()
    n_batches = math.ceil(len(x) / 128)
    loss_sum, correct, n = 0.0, 0, 0
    t0 = time.time()
    with torch.no_grad():
        for i, (xb, yb) in enumerate(loader(x, y, 128, shuffle=False)):
            out = model(xb)
            loss_sum += F.cross_entropy(out, yb, reduction="sum").item()
            correct += (out.argmax(1) == yb).sum().item()
            n += len(yb)
            if i == n_batches - 1:
                dt = time.time() - t0
                print(f"Test: [{i + 1:>4d}/{n_batches}]  Time: {dt / n_batches:.3f} ({dt / n_batches:.3f})  "
                      f"Loss: {loss_sum / n:>6.4f} ({loss_sum / n:>6.4f})  "
                      f"Acc@1: {100.0 * correct / n:>7.3f} ({100.0 * correct / n:>7.3f})")
    model.train()
    return loss_sum / n, 100.0 * correct / n


def make_target():
    torch.manual_seed(SEED)
    x, y = make_split(512, SEED + 1)
    model = DefectNet()
    g = torch.Generator().manual_seed(SEED)
    data = list(loader(x, y, BATCH_SIZE, shuffle=True, gen=g))[:3]
    return {
        "model": model,
        "batch": data[0],
        "data": data,
        "loss_fn": train_loss,
        "optimizer": make_optimizer(model.parameters()),
        "make_optimizer": make_optimizer,
        "num_classes": NUM_CLASSES,
        "task": "classification",
    }


def main():
    torch.manual_seed(SEED)
    x_tr, y_tr = make_split(N_TRAIN, SEED + 1)
    x_va, y_va = make_split(N_VAL, SEED + 2)
    model = DefectNet()
    print(f"Model DefectNet created, param count:{sum(p.numel() for p in model.parameters())}")
    print(f"Using mixup/cutmix (mixup_alpha={MIXUP_ALPHA}, cutmix_alpha={CUTMIX_ALPHA}, "
          f"switch_prob={SWITCH_PROB}), label_smoothing={SMOOTHING}")
    optimizer = make_optimizer(model.parameters())
    steps_per_epoch = N_TRAIN // BATCH_SIZE
    print(f"Scheduled epochs: {EPOCHS}. LR warmup 1 epoch, cosine to 1e-4.")
    g = torch.Generator().manual_seed(SEED)
    step = 0
    best = (0.0, -1)
    for epoch in range(EPOCHS):
        model.train()
        loss_sum, n_seen = 0.0, 0
        t_epoch = time.time()
        t_last = time.time()
        for i, batch in enumerate(loader(x_tr, y_tr, BATCH_SIZE, shuffle=True, gen=g)):
            lr = lr_at(step, steps_per_epoch)
            for pg in optimizer.param_groups:
                pg["lr"] = lr
            loss = train_loss(model, batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            loss_sum += loss.item() * len(batch[1])
            n_seen += len(batch[1])
            last = i == steps_per_epoch - 1
            if i % LOG_INTERVAL == 0 or last:
                dt = (time.time() - t_last) / (LOG_INTERVAL if i else 1)
                t_last = time.time()
                avg = (time.time() - t_epoch) / (i + 1)
                print(f"Train: {epoch} [{i:>4d}/{steps_per_epoch} ({100.0 * i / (steps_per_epoch - 1):>3.0f}%)]  "
                      f"Loss: {loss.item():#.3g} ({loss_sum / n_seen:#.3g})  "
                      f"Time: {dt:.3f}s, {BATCH_SIZE / max(dt, 1e-9):>7.2f}/s  "
                      f"({avg:.3f}s, {BATCH_SIZE / avg:>7.2f}/s)  LR: {lr:.3e}")
        val_loss, val_acc = validate(model, x_va, y_va)
        if val_acc > best[0]:
            best = (val_acc, epoch)
    print(f"*** Best metric: {best[0]:.3f} (epoch {best[1]})")


if __name__ == "__main__":
    main()
