"""Steel strip surface defect classification (NEU-style, 5 classes).

Grayscale 40x40 crops from a line-scan camera over hot-rolled strip. Each crop
is either clean or shows one small defect (scratch, pit, crack, inclusion).
Small VGG-style CNN with BatchNorm, AdamW + warmup/cosine, random-resized-crop
and flip augmentation.
"""
import math
import random
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

SEED = 1234
IMG = 40
CLASSES = ["clean", "scratch", "pit", "crack", "inclusion"]
NUM_CLASSES = len(CLASSES)

CFG = dict(
    n_train=1200,
    n_val=400,
    batch_size=64,
    epochs=16,
    lr=2e-3,
    weight_decay=5e-4,
    warmup_iters=50,
    log_interval=25,
    eval_interval=72,
)


def seed_everything(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


# ----------------------------------------------------------------------------
# synthetic "camera" data
# ----------------------------------------------------------------------------
_YY, _XX = np.mgrid[0:IMG, 0:IMG].astype(np.float32)


def _seg_dist(y0, x0, y1, x1):
    dy, dx = y1 - y0, x1 - x0
    l2 = dy * dy + dx * dx + 1e-6
    t = np.clip(((_YY - y0) * dy + (_XX - x0) * dx) / l2, 0.0, 1.0)
    return np.hypot(_YY - (y0 + t * dy), _XX - (x0 + t * dx))


def render_surface(rng, label):
    base = rng.uniform(0.40, 0.60)
    rows = np.convolve(rng.standard_normal(IMG + 4), np.ones(5) / 5, mode="valid")
    shade = 0.04 * np.sin(2 * np.pi * (_XX * rng.uniform(0.3, 1.0) / IMG + rng.uniform()))
    img = base + 0.05 * rows[:, None] + shade
    img = img + 0.05 * rng.standard_normal((IMG, IMG))
    cy, cx = rng.uniform(7, IMG - 7, size=2)
    if label == 1:  # scratch: thin bright line, any direction
        ang, half = rng.uniform(0, np.pi), rng.uniform(4, 7)
        d = _seg_dist(cy - half * np.sin(ang), cx - half * np.cos(ang),
                      cy + half * np.sin(ang), cx + half * np.cos(ang))
        img = img + rng.uniform(0.22, 0.32) * np.exp(-d ** 2 / (2 * 0.6 ** 2))
    elif label == 2:  # pit: small dark spot
        s = rng.uniform(1.0, 1.7)
        img = img - rng.uniform(0.25, 0.35) * np.exp(-((_YY - cy) ** 2 + (_XX - cx) ** 2) / (2 * s * s))
    elif label == 3:  # crack: jagged dark polyline
        pts, ang = [(cy, cx)], rng.uniform(0, 2 * np.pi)
        for _ in range(4):
            ang += rng.uniform(-1.1, 1.1)
            y, x = pts[-1]
            pts.append((y + 2.8 * np.sin(ang), x + 2.8 * np.cos(ang)))
        d = np.min([_seg_dist(*pts[k], *pts[k + 1]) for k in range(len(pts) - 1)], axis=0)
        img = img - rng.uniform(0.22, 0.32) * np.exp(-d ** 2 / (2 * 0.55 ** 2))
    elif label == 4:  # inclusion: bright patch stretched along the rolling direction
        sy, sx = rng.uniform(1.0, 1.6), rng.uniform(3.0, 4.5)
        img = img + rng.uniform(0.18, 0.26) * np.exp(-((_YY - cy) ** 2 / (2 * sy * sy) + (_XX - cx) ** 2 / (2 * sx * sx)))
    return np.clip(img, 0.0, 1.0)


def make_split(n, seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, NUM_CLASSES, size=n)
    imgs = np.stack([render_surface(rng, int(c)) for c in labels])
    return (imgs * 255).round().astype(np.uint8), labels.astype(np.int64)


# ----------------------------------------------------------------------------
# dataset / transforms
# ----------------------------------------------------------------------------
PIX_MEAN, PIX_STD = 0.5, 0.1


def random_resized_crop(img, size, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    _, h_img, w_img = img.shape
    area = h_img * w_img
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target_area = area * random.uniform(*scale)
        ar = math.exp(random.uniform(*log_ratio))
        w = int(round(math.sqrt(target_area * ar)))
        h = int(round(math.sqrt(target_area / ar)))
        if 0 < w <= w_img and 0 < h <= h_img:
            i = random.randint(0, h_img - h)
            j = random.randint(0, w_img - w)
            break
    else:
        i, j, h, w = 0, 0, h_img, w_img
    crop = img[:, i:i + h, j:j + w]
    return F.interpolate(crop[None], size=(size, size), mode="bilinear", align_corners=False)[0]


class SurfaceDataset(Dataset):
    def __init__(self, images_u8, labels, train):
        self.images = torch.from_numpy(images_u8).float().div_(255.0).unsqueeze(1)
        self.labels = torch.from_numpy(labels)
        self.train = train

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, idx):
        x = self.images[idx]
        if self.train:
            x = random_resized_crop(x, IMG, scale=(0.08, 1.0))
            if random.random() < 0.5:
                x = x.flip(-1)
            if random.random() < 0.5:
                x = x.flip(-2)
        x = (x - PIX_MEAN) / PIX_STD
        return x, self.labels[idx]


def build_loaders():
    tr_x, tr_y = make_split(CFG["n_train"], seed=SEED)
    va_x, va_y = make_split(CFG["n_val"], seed=SEED + 1)
    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(SurfaceDataset(tr_x, tr_y, train=True), batch_size=CFG["batch_size"],
                              shuffle=True, drop_last=True, generator=g, num_workers=0)
    val_loader = DataLoader(SurfaceDataset(va_x, va_y, train=False), batch_size=200, shuffle=False)
    return train_loader, val_loader


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
def conv_bn(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class DefectNet(nn.Module):
    def __init__(self, num_classes=NUM_CLASSES, width=8):
        super().__init__()
        w = width
        self.features = nn.Sequential(
            conv_bn(1, w), conv_bn(w, w), nn.MaxPool2d(2),            # 20
            conv_bn(w, 2 * w), conv_bn(2 * w, 2 * w), nn.MaxPool2d(2),  # 10
            conv_bn(2 * w, 4 * w), conv_bn(4 * w, 4 * w), nn.MaxPool2d(2),  # 5
        )
        self.head = nn.Sequential(nn.Dropout(0.2), nn.Linear(4 * w, num_classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = self.features(x)
        x = F.adaptive_max_pool2d(x, 1).flatten(1)
        return self.head(x)


def compute_loss(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=CFG["lr"], weight_decay=CFG["weight_decay"])


def lr_at(it, total):
    if it < CFG["warmup_iters"]:
        return CFG["lr"] * (it + 1) / CFG["warmup_iters"]
    p = (it - CFG["warmup_iters"]) / max(1, total - CFG["warmup_iters"])
    return CFG["lr"] * (0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * p)))


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
    seed_everything(SEED)
    train_loader, _ = build_loaders()
    data = []
    for i, batch in enumerate(train_loader):
        data.append(batch)
        if i == 3:
            break
    return dict(model=DefectNet(), data=data, loss_fn=compute_loss, make_optimizer=make_optimizer,
                task="classification", num_classes=NUM_CLASSES)


def main():
    torch.set_num_threads(1)
    seed_everything(SEED)
    t0 = time.time()
    train_loader, val_loader = build_loaders()
    print(f"train crops: {len(train_loader.dataset)}  val crops: {len(val_loader.dataset)}  classes: {CLASSES}")
    model = DefectNet()
    print(f"number of parameters: {sum(p.numel() for p in model.parameters()) / 1e3:.1f}K")
    optimizer = make_optimizer(model.parameters())
    total = CFG["epochs"] * len(train_loader)
    it = 0
    model.train()
    for epoch in range(CFG["epochs"]):
        for batch in train_loader:
            lr = lr_at(it, total)
            for g in optimizer.param_groups:
                g["lr"] = lr
            t_it = time.time()
            loss = compute_loss(model, batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if it % CFG["log_interval"] == 0:
                print(f"iter {it}: loss {loss.item():.4f}, lr {lr:.2e}, time {(time.time() - t_it) * 1000:.1f}ms")
            if (it + 1) % CFG["eval_interval"] == 0 or it + 1 == total:
                vl, va = evaluate(model, val_loader)
                print(f"step {it + 1}: epoch {epoch}, val loss {vl:.4f}, val acc {va:.4f}")
            it += 1
    vl, va = evaluate(model, val_loader)
    print(f"final: val loss {vl:.4f}, val acc {va:.4f}, wall {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
