"""Small CNN on synthetic sign glyphs (arrows / ring / cross), 24x24 grayscale.

SGD + Nesterov, step LR schedule, standard augmentation pipeline.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)

CLASSES = ["arrow_left", "arrow_right", "arrow_up", "arrow_down", "ring", "cross"]
IMG = 24
N_TRAIN_PER_CLASS = 320
N_VAL_PER_CLASS = 100
BATCH_SIZE = 64
EPOCHS = 9
LR = 0.03
MOMENTUM = 0.9
WEIGHT_DECAY = 5e-4
SEED = 0


# ----------------------------------------------------------------------------
# synthetic glyphs
# ----------------------------------------------------------------------------
def _draw_segment(img, x0, y0, x1, y1, width):
    yy, xx = np.mgrid[0:IMG, 0:IMG].astype(np.float32)
    dx, dy = x1 - x0, y1 - y0
    L2 = dx * dx + dy * dy + 1e-6
    t = np.clip(((xx - x0) * dx + (yy - y0) * dy) / L2, 0.0, 1.0)
    d = np.hypot(xx - (x0 + t * dx), yy - (y0 + t * dy))
    np.maximum(img, np.clip(width - d + 0.5, 0.0, 1.0), out=img)


def draw_glyph(label, rng):
    img = np.zeros((IMG, IMG), dtype=np.float32)
    cx = IMG / 2 + rng.uniform(-2.5, 2.5)
    cy = IMG / 2 + rng.uniform(-2.5, 2.5)
    s = rng.uniform(6.0, 8.5)
    w = rng.uniform(0.9, 1.6)
    name = CLASSES[label]
    if name.startswith("arrow"):
        # arrow drawn pointing right, then rotated into place
        ang = {"arrow_right": 0.0, "arrow_up": -math.pi / 2,
               "arrow_left": math.pi, "arrow_down": math.pi / 2}[name]
        ang += rng.uniform(-0.2, 0.2)
        c, si = math.cos(ang), math.sin(ang)

        def P(u, v):
            return cx + u * c - v * si, cy + u * si + v * c

        tail, tip = P(-s, 0), P(s, 0)
        h1, h2 = P(s - 0.6 * s, 0.55 * s), P(s - 0.6 * s, -0.55 * s)
        _draw_segment(img, *tail, *tip, w)
        _draw_segment(img, *tip, *h1, w)
        _draw_segment(img, *tip, *h2, w)
    elif name == "ring":
        yy, xx = np.mgrid[0:IMG, 0:IMG].astype(np.float32)
        r = np.hypot(xx - cx, yy - cy)
        img = np.clip(w - np.abs(r - 0.8 * s) + 0.5, 0.0, 1.0).astype(np.float32)
    else:  # cross
        a = rng.uniform(-0.3, 0.3)
        for ang in (a + math.pi / 4, a - math.pi / 4):
            c, si = math.cos(ang), math.sin(ang)
            _draw_segment(img, cx - s * c, cy - s * si, cx + s * c, cy + s * si, w)
    contrast = rng.uniform(0.6, 1.0)
    bg = rng.uniform(0.0, 0.3)
    img = bg + contrast * img + rng.normal(0, 0.08, img.shape).astype(np.float32)
    return img.astype(np.float32)


def make_split(n_per_class, seed):
    rng = np.random.default_rng(seed)
    xs, ys = [], []
    for label in range(len(CLASSES)):
        for _ in range(n_per_class):
            xs.append(draw_glyph(label, rng))
            ys.append(label)
    x = np.stack(xs)[:, None]  # N,1,H,W
    y = np.array(ys, dtype=np.int64)
    return x, y


# ----------------------------------------------------------------------------
# augmentation (applied on the whole batch, on CPU)
# ----------------------------------------------------------------------------
class BatchAugment:
    """Random shift + flips + brightness/contrast jitter + noise + cutout."""

    def __init__(self, max_shift=2, p_flip=0.5, cutout=6, seed=0):
        self.max_shift = max_shift
        self.p_flip = p_flip
        self.cutout = cutout
        self.g = torch.Generator().manual_seed(seed)

    def __call__(self, x):
        # x: (B, 1, H, W)
        B = x.shape[0]
        g = self.g
        s = self.max_shift
        padded = F.pad(x, (s, s, s, s), mode="replicate")
        offs = torch.randint(0, 2 * s + 1, (B, 2), generator=g)
        x = torch.stack([padded[i, :, oy:oy + IMG, ox:ox + IMG]
                         for i, (oy, ox) in enumerate(offs.tolist())])
        flip_h = (torch.rand(B, generator=g) < self.p_flip).view(B, 1, 1, 1)
        x = torch.where(flip_h, x.flip(-1), x)
        flip_v = (torch.rand(B, generator=g) < self.p_flip).view(B, 1, 1, 1)
        x = torch.where(flip_v, x.flip(-2), x)
        gain = 0.8 + 0.4 * torch.rand(B, 1, 1, 1, generator=g)
        bias = 0.2 * (torch.rand(B, 1, 1, 1, generator=g) - 0.5)
        x = x * gain + bias + 0.05 * torch.randn(x.shape, generator=g)
        # cutout on half of the batch
        cy = torch.randint(0, IMG, (B, 1, 1, 1), generator=g)
        cx = torch.randint(0, IMG, (B, 1, 1, 1), generator=g)
        yy = torch.arange(IMG).view(1, 1, IMG, 1)
        xx = torch.arange(IMG).view(1, 1, 1, IMG)
        h = self.cutout // 2
        hole = ((yy - cy).abs() < h) & ((xx - cx).abs() < h)
        hole &= (torch.rand(B, 1, 1, 1, generator=g) < 0.5)
        return x.masked_fill(hole, 0.0)


class BatchIterator:
    """Minimal in-memory loader: normalise, shuffle, batch, augment."""

    def __init__(self, x, y, mean, std, batch_size, shuffle, augment=None,
                 drop_last=False, seed=0):
        self.x = (torch.from_numpy(x) - mean) / std
        self.y = torch.from_numpy(y)
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.augment = augment
        self.drop_last = drop_last
        self.g = torch.Generator().manual_seed(seed)

    def __len__(self):
        n = len(self.y)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def __iter__(self):
        n = len(self.y)
        idx = torch.randperm(n, generator=self.g) if self.shuffle else torch.arange(n)
        for b in range(len(self)):
            sel = idx[b * self.batch_size:(b + 1) * self.batch_size]
            xb, yb = self.x[sel], self.y[sel]
            if self.augment is not None:
                xb = self.augment(xb)
            yield xb, yb


def build_loaders():
    x_tr, y_tr = make_split(N_TRAIN_PER_CLASS, SEED)
    x_va, y_va = make_split(N_VAL_PER_CLASS, SEED + 1)
    mean, std = float(x_tr.mean()), float(x_tr.std())
    train_dl = BatchIterator(x_tr, y_tr, mean, std, BATCH_SIZE, shuffle=True,
                             augment=BatchAugment(seed=SEED), drop_last=True,
                             seed=SEED)
    val_dl = BatchIterator(x_va, y_va, mean, std, 256, shuffle=False)
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


class GlyphNet(nn.Module):
    def __init__(self, num_classes=len(CLASSES)):
        super().__init__()
        self.features = nn.Sequential(
            conv_bn(1, 12), nn.MaxPool2d(2),          # 12x12
            conv_bn(12, 24), nn.MaxPool2d(2),         # 6x6
            conv_bn(24, 48), nn.MaxPool2d(2),         # 3x3
        )
        self.head = nn.Sequential(
            nn.Flatten(), nn.Dropout(0.2), nn.Linear(48 * 3 * 3, num_classes)
        )

    def forward(self, x):
        return self.head(self.features(x))


def compute_loss(model, batch):
    x, y = batch
    logits = model(x)
    return F.cross_entropy(logits, y)


def make_optimizer(params):
    return torch.optim.SGD(params, lr=LR, momentum=MOMENTUM, nesterov=True,
                           weight_decay=WEIGHT_DECAY)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    tot_loss, correct, n = 0.0, 0, 0
    for x, y in loader:
        logits = model(x)
        tot_loss += F.cross_entropy(logits, y, reduction="sum").item()
        correct += (logits.argmax(1) == y).sum().item()
        n += len(y)
    return tot_loss / n, correct / n


def make_target():
    torch.manual_seed(SEED)
    train_dl, _ = build_loaders()
    it = iter(train_dl)
    data = [next(it) for _ in range(4)]
    model = GlyphNet()
    return {
        "model": model,
        "data": data,
        "loss_fn": compute_loss,
        "make_optimizer": make_optimizer,
        "num_classes": len(CLASSES),
        "task": "classification",
    }


def main():
    torch.manual_seed(SEED)
    train_dl, val_dl = build_loaders()
    model = GlyphNet()
    opt = make_optimizer(model.parameters())
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.2)
    steps = len(train_dl)
    for epoch in range(EPOCHS):
        model.train()
        t0 = time.time()
        run_loss, run_correct, seen = 0.0, 0, 0
        for x, y in train_dl:
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            run_loss += loss.item() * len(y)
            run_correct += (logits.argmax(1) == y).sum().item()
            seen += len(y)
        val_loss, val_acc = evaluate(model, val_dl)
        dt = time.time() - t0
        print(f"Epoch {epoch + 1}/{EPOCHS}")
        print(f"{steps}/{steps} - {dt:.0f}s {1000 * dt / steps:.0f}ms/step - "
              f"loss: {run_loss / seen:.4f} - accuracy: {run_correct / seen:.4f} - "
              f"val_loss: {val_loss:.4f} - val_accuracy: {val_acc:.4f} - "
              f"lr: {sched.get_last_lr()[0]:.4g}")
        sched.step()


if __name__ == "__main__":
    main()
