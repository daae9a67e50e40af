"""Multi-label attribute classifier for small rendered badges.

Each 28x28 RGB badge can carry any subset of six attributes (ring, bar, dot
cluster, red accent, hatched background, border). Trained timm-style: a small
BatchNorm CNN, AdamW, cosine schedule with a short warmup, one sigmoid per
attribute.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

ATTRS = ["ring", "bar", "dots", "red", "hatch", "border"]
NUM_ATTRS = len(ATTRS)
IMG = 28

CFG = dict(
    n_train=2000,
    n_val=600,
    batch_size=64,
    epochs=10,
    lr=2e-3,
    weight_decay=0.05,
    warmup_epochs=1,
    log_interval=15,
    seed=0,
)


def _render(rng, attrs):
    img = np.zeros((3, IMG, IMG), dtype=np.float32)
    yy, xx = np.mgrid[0:IMG, 0:IMG]
    base = rng.uniform(0.05, 0.25, size=3).astype(np.float32)
    img += base[:, None, None]
    # faint attributes are what make this a non-trivial task
    def strength():
        return rng.uniform(0.2, 0.9)

    if attrs[4]:
        period = rng.integers(3, 6)
        phase = rng.integers(0, period)
        hatch = ((xx + yy + phase) % period == 0).astype(np.float32)
        img += strength() * 0.6 * hatch[None]
    if attrs[5]:
        w = rng.integers(1, 3)
        border = np.zeros((IMG, IMG), dtype=np.float32)
        border[:w, :] = border[-w:, :] = 1.0
        border[:, :w] = border[:, -w:] = 1.0
        img += strength() * border[None]
    fg = np.array([0.8, 0.8, 0.8], dtype=np.float32)
    if attrs[3]:
        fg = np.array([1.0, 0.25, 0.2], dtype=np.float32) * rng.uniform(0.5, 1.0)
    else:
        fg = fg * rng.uniform(0.5, 1.0)
        fg[0] *= rng.uniform(0.4, 1.0)
    if attrs[0]:
        cy, cx = rng.uniform(8, 20, size=2)
        r = rng.uniform(4, 7)
        d = np.sqrt((yy - cy) ** 2 + (xx - cx) ** 2)
        ring = (np.abs(d - r) < 1.0).astype(np.float32)
        img += strength() * fg[:, None, None] * ring[None]
    if attrs[1]:
        y0 = rng.integers(4, 22)
        x0 = rng.integers(3, 10)
        ln = rng.integers(9, 16)
        bar = np.zeros((IMG, IMG), dtype=np.float32)
        bar[y0:y0 + 2, x0:x0 + ln] = 1.0
        if rng.random() < 0.5:
            bar = bar.T.copy()
        img += strength() * fg[:, None, None] * bar[None]
    if attrs[2]:
        dots = np.zeros((IMG, IMG), dtype=np.float32)
        cy, cx = rng.integers(6, 22, size=2)
        for _ in range(rng.integers(3, 6)):
            py = int(np.clip(cy + rng.integers(-4, 5), 0, IMG - 2))
            px = int(np.clip(cx + rng.integers(-4, 5), 0, IMG - 2))
            dots[py:py + 2, px:px + 2] = 1.0
        img += strength() * fg[:, None, None] * dots[None]
    img += rng.normal(0, 0.12, size=img.shape).astype(np.float32)
    return np.clip(img, 0.0, 1.5)


def make_split(n, seed):
    rng = np.random.default_rng(seed)
    x = np.empty((n, 3, IMG, IMG), dtype=np.float32)
    y = (rng.random((n, NUM_ATTRS)) < 0.4).astype(np.float32)
    for i in range(n):
        x[i] = _render(rng, y[i].astype(bool))
    return torch.from_numpy(x), torch.from_numpy(y)


def normalize(x):
    mean = torch.tensor([0.32, 0.30, 0.30]).view(1, 3, 1, 1)
    std = torch.tensor([0.22, 0.20, 0.20]).view(1, 3, 1, 1)
    return (x - mean) / std


def conv_bn(cin, cout, stride=1):
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class BadgeNet(nn.Module):
    def __init__(self, num_attrs=NUM_ATTRS, width=16):
        super().__init__()
        self.features = nn.Sequential(
            conv_bn(3, width),
            conv_bn(width, 2 * width, stride=2),
            conv_bn(2 * width, 2 * width),
            conv_bn(2 * width, 4 * width, stride=2),
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(4 * width, num_attrs)

    def forward(self, x):
        x = self.features(x)
        x = self.pool(x).flatten(1)
        return self.head(x)


def build_optimizer(params, cfg=CFG):
    return torch.optim.AdamW(params, lr=cfg["lr"], weight_decay=cfg["weight_decay"])


def lr_at(step, total_steps, warmup_steps, base_lr):
    if step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    t = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return 1e-5 + 0.5 * (base_lr - 1e-5) * (1 + math.cos(math.pi * t))


def batches(x, y, bs, shuffle, gen=None):
    idx = torch.randperm(len(x), generator=gen) if shuffle else torch.arange(len(x))
    for i in range(0, len(x), bs):
        j = idx[i:i + bs]
        yield normalize(x[j]), y[j]


def augment(x, gen):
    flip = torch.rand(x.size(0), generator=gen) < 0.5
    x = torch.where(flip.view(-1, 1, 1, 1), x.flip(-1), x)
    return x


criterion = nn.BCEWithLogitsLoss()


def compute_loss(model, batch):
    images, targets = batch
    output = model(images)
    return criterion(output, targets)


def validate(model, x, y, bs=100):
    model.eval()
    n_batches = math.ceil(len(x) / bs)
    tot_loss, preds, scores = 0.0, [], []
    t0 = time.time()
    with torch.no_grad():
        for i, (images, targets) in enumerate(batches(x, y, bs, shuffle=False)):
            output = model(images)
            loss = criterion(output, targets)
            tot_loss += loss.item() * images.size(0)
            probs = torch.sigmoid(output)
            scores.append(probs)
            preds.append((probs > 0.5).float())
            if i == n_batches - 1:
                print(f"Test: [{i + 1:>4d}/{n_batches}]  Time: {time.time() - t0:.3f}  "
                      f"Loss: {tot_loss / len(x):.4f}")
    preds = torch.cat(preds)
    scores = torch.cat(scores)
    acc = (preds == y).float().mean().item() * 100
    exact = (preds == y).all(1).float().mean().item() * 100
    tp = (preds * y).sum(0)
    f1 = (2 * tp / (preds.sum(0) + y.sum(0)).clamp(min=1)).mean().item() * 100
    model.train()
    return dict(loss=tot_loss / len(x), acc=acc, exact=exact, f1=f1)


_DATA = {}


def get_data(cfg=CFG):
    if "train" not in _DATA:
        _DATA["train"] = make_split(cfg["n_train"], cfg["seed"] + 1)
        _DATA["val"] = make_split(cfg["n_val"], cfg["seed"] + 2)
    return _DATA["train"], _DATA["val"]


def make_target():
    torch.manual_seed(CFG["seed"])
    (xtr, ytr), _ = get_data()
    model = BadgeNet()
    gen = torch.Generator().manual_seed(CFG["seed"])
    it = batches(xtr, ytr, CFG["batch_size"], shuffle=True, gen=gen)
    data = [next(it) for _ in range(3)]
    return {
        "model": model,
        "batch": data[0],
        "data": data,
        "loss_fn": compute_loss,
        "optimizer": build_optimizer(model.parameters()),
        "make_optimizer": build_optimizer,
        "num_classes": NUM_ATTRS,
        "task": "classification",
    }


def main():
    cfg = CFG
    torch.manual_seed(cfg["seed"])
    (xtr, ytr), (xva, yva) = get_data(cfg)
    model = BadgeNet()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"Model badgenet created, param count: {n_params}")
    print(f"Attributes: {', '.join(ATTRS)}  train={len(xtr)} val={len(xva)}")
    optimizer = build_optimizer(model.parameters(), cfg)
    steps_per_epoch = math.ceil(cfg["n_train"] / cfg["batch_size"])
    total = steps_per_epoch * cfg["epochs"]
    warmup = steps_per_epoch * cfg["warmup_epochs"]
    gen = torch.Generator().manual_seed(cfg["seed"])
    step = 0
    best = None
    for epoch in range(cfg["epochs"]):
        model.train()
        loss_sum, loss_n = 0.0, 0
        t_end = time.time()
        for i, (images, targets) in enumerate(batches(xtr, ytr, cfg["batch_size"], True, gen)):
            images = augment(images, gen)
            lr = lr_at(step, total, warmup, cfg["lr"])
            for g in optimizer.param_groups:
                g["lr"] = lr
            loss = compute_loss(model, (images, targets))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            loss_sum += loss.item() * images.size(0)
            loss_n += images.size(0)
            bt = time.time() - t_end
            t_end = time.time()
            last = i == steps_per_epoch - 1
            if i % cfg["log_interval"] == 0 or last:
                print(f"Train: {epoch} [{i:>4d}/{steps_per_epoch} ({100.0 * i / (steps_per_epoch - 1):>3.0f}%)]  "
                      f"Loss: {loss.item():#.4g} ({loss_sum / loss_n:#.4g})  "
                      f"Time: {bt:.3f}s, {images.size(0) / bt:>7.2f}/s  "
                      f"LR: {lr:.3e}")
        metrics = validate(model, xva, yva)
        print(f"Test: Loss: {metrics['loss']:.4f}  Acc@attr: {metrics['acc']:.2f}  "
              f"Exact: {metrics['exact']:.2f}  F1: {metrics['f1']:.2f}")
        if best is None or metrics["f1"] > best[1]:
            best = (epoch, metrics["f1"])
    print(f"*** Best F1: {best[1]:.2f} (epoch {best[0]})")


if __name__ == "__main__":
    main()
