"""Small ResNet on a synthetic 10-class "shapes" dataset.

Images are 3x32x32 renders of simple glyphs (disk, ring, cross, ...) at a random
position / scale / colour on a noisy gradient background. Training uses
pad-and-crop + horizontal flip + gaussian noise, SGD w/ nesterov momentum and a
cosine schedule with a short linear warmup.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)

SEED = 1234
NUM_CLASSES = 10
IMG = 24
N_TRAIN = 2400
N_VAL = 1000
BATCH_SIZE = 64
EPOCHS = 7
BASE_LR = 0.1
WEIGHT_DECAY = 5e-4
WARMUP_EPOCHS = 1

CLASS_NAMES = ["disk", "ring", "square", "frame", "plus",
               "cross", "triangle", "hbars", "vbars", "checker"]


# ----------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------
def _shape_mask(cls, dx, dy, r, w):
    d = np.sqrt(dx ** 2 + dy ** 2)
    box = np.maximum(np.abs(dx), np.abs(dy))
    if cls == 0:
        return d < r
    if cls == 1:
        return np.abs(d - r) < w
    if cls == 2:
        return box < r
    if cls == 3:
        return np.abs(box - r) < w
    if cls == 4:
        return ((np.abs(dx) < w) & (np.abs(dy) < r)) | ((np.abs(dy) < w) & (np.abs(dx) < r))
    if cls == 5:
        u, v = (dx + dy) / math.sqrt(2), (dx - dy) / math.sqrt(2)
        return ((np.abs(u) < w) & (np.abs(v) < r)) | ((np.abs(v) < w) & (np.abs(u) < r))
    if cls == 6:
        return (dy > -r) & (dy < r) & (np.abs(dx) < (dy + r) / 2)
    if cls == 7:
        return (box < r) & (np.sin(dy * math.pi / (1.2 * w)) > 0)
    if cls == 8:
        return (box < r) & (np.sin(dx * math.pi / (1.2 * w)) > 0)
    if cls == 9:
        return (box < r) & (np.sin(dx * math.pi / (1.5 * w)) * np.sin(dy * math.pi / (1.5 * w)) > 0)
    raise ValueError(cls)


def make_shapes(n, seed):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:IMG, 0:IMG].astype(np.float32)
    images = np.empty((n, 3, IMG, IMG), dtype=np.float32)
    labels = rng.integers(0, NUM_CLASSES, size=n)
    for i in range(n):
        # smooth coloured background
        g = rng.normal(size=(3, 3)) * 0.15
        bg = (0.4 + g[:, 0, None, None] + g[:, 1, None, None] * (xx / IMG - 0.5)
              + g[:, 2, None, None] * (yy / IMG - 0.5))
        r = rng.uniform(4.5, 8.5)
        w = rng.uniform(1.2, 2.0)
        cx = rng.uniform(r + 1, IMG - r - 1)
        cy = rng.uniform(r + 1, IMG - r - 1)
        mask = _shape_mask(labels[i], xx - cx, yy - cy, r, w)
        color = rng.uniform(0.0, 1.0, size=3)
        color += np.sign(color - bg.mean(axis=(1, 2))) * 0.25
        img = np.where(mask[None], color[:, None, None], bg)
        img += rng.normal(scale=0.12, size=img.shape)
        images[i] = img
    return images, labels.astype(np.int64)


def build_datasets():
    x_tr, y_tr = make_shapes(N_TRAIN, SEED)
    x_va, y_va = make_shapes(N_VAL, SEED + 1)
    mean = x_tr.mean(axis=(0, 2, 3), keepdims=True)
    std = x_tr.std(axis=(0, 2, 3), keepdims=True)
    x_tr = (x_tr - mean) / std
    x_va = (x_va - mean) / std
    return (torch.from_numpy(x_tr), torch.from_numpy(y_tr)), (torch.from_numpy(x_va), torch.from_numpy(y_va))


def augment(x, gen):
    """pad 3 + random 24x24 crop, random h-flip, light gaussian noise."""
    n = x.shape[0]
    padded = F.pad(x, (3, 3, 3, 3), mode="reflect")
    ox = torch.randint(0, 7, (n,), generator=gen)
    oy = torch.randint(0, 7, (n,), generator=gen)
    out = torch.empty_like(x)
    for i in range(n):
        out[i] = padded[i, :, oy[i]:oy[i] + IMG, ox[i]:ox[i] + IMG]
    flip = torch.rand(n, generator=gen) < 0.5
    out[flip] = out[flip].flip(-1)
    out = out + 0.05 * torch.randn(out.shape, generator=gen)
    return out


def train_batches(x, y, gen):
    perm = torch.randperm(x.shape[0], generator=gen)
    for s in range(0, x.shape[0] - BATCH_SIZE + 1, BATCH_SIZE):
        idx = perm[s:s + BATCH_SIZE]
        yield augment(x[idx], gen), y[idx]


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
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNetSmall(nn.Module):
    def __init__(self, num_classes=NUM_CLASSES, widths=(16, 32, 64)):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, widths[0], 3, 1, 1, bias=False),
            nn.BatchNorm2d(widths[0]),
            nn.ReLU(inplace=True),
        )
        self.stages = []
        cin = widths[0]
        for i, w in enumerate(widths):
            stride = 1 if i == 0 else 2
            self.stages.append(BasicBlock(cin, w, stride))
            cin = w
        self.head = nn.Linear(cin, num_classes)
        self._init_weights()

    def _init_weights(self):
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        x = self.stem(x)
        for stage in self.stages:
            x = stage(x)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.head(x)


# ----------------------------------------------------------------------------
# training
# ----------------------------------------------------------------------------
def compute_loss(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def make_optimizer(params):
    return torch.optim.SGD(params, lr=BASE_LR, momentum=0.9, nesterov=True,
                           weight_decay=WEIGHT_DECAY)


def lr_at(step, total_steps, warmup_steps):
    if step < warmup_steps:
        return BASE_LR * (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return BASE_LR * 0.5 * (1.0 + math.cos(math.pi * progress))


@torch.no_grad()
def evaluate(model, x, y, bs=250):
    model.eval()
    tot_loss, correct = 0.0, 0
    for s in range(0, x.shape[0], bs):
        logits = model(x[s:s + bs])
        tot_loss += F.cross_entropy(logits, y[s:s + bs], reduction="sum").item()
        correct += (logits.argmax(1) == y[s:s + bs]).sum().item()
    model.train()
    return tot_loss / x.shape[0], correct / x.shape[0]


def make_target():
    torch.manual_seed(SEED)
    (x_tr, y_tr), _ = build_datasets()
    gen = torch.Generator().manual_seed(SEED)
    it = train_batches(x_tr, y_tr, gen)
    data = [next(it) for _ in range(4)]
    return {
        "model": ResNetSmall(),
        "data": data,
        "loss_fn": compute_loss,
        "make_optimizer": make_optimizer,
        "num_classes": NUM_CLASSES,
        "task": "classification",
    }


def main():
    torch.manual_seed(SEED)
    t0 = time.time()
    (x_tr, y_tr), (x_va, y_va) = build_datasets()
    print(f"data: train {tuple(x_tr.shape)} val {tuple(x_va.shape)} "
          f"classes={NUM_CLASSES} ({time.time() - t0:.1f}s)")

    model = ResNetSmall()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: ResNetSmall, {n_params / 1e3:.1f}K params")
    optimizer = make_optimizer(model.parameters())

    gen = torch.Generator().manual_seed(SEED)
    steps_per_epoch = N_TRAIN // BATCH_SIZE
    total_steps = EPOCHS * steps_per_epoch
    warmup_steps = WARMUP_EPOCHS * steps_per_epoch
    step = 0
    model.train()
    for epoch in range(1, EPOCHS + 1):
        t_ep = time.time()
        run_loss, run_correct, seen = 0.0, 0, 0
        for xb, yb in train_batches(x_tr, y_tr, gen):
            lr = lr_at(step, total_steps, warmup_steps)
            for g in optimizer.param_groups:
                g["lr"] = lr
            logits = model(xb)
            loss = F.cross_entropy(logits, yb)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            run_loss += loss.item() * xb.shape[0]
            run_correct += (logits.argmax(1) == yb).sum().item()
            seen += xb.shape[0]
            if step % 20 == 0:
                print(f"  step {step:4d}/{total_steps} | loss {loss.item():.4f} | lr {lr:.4f}")
        val_loss, val_acc = evaluate(model, x_va, y_va)
        print(f"epoch {epoch}/{EPOCHS} | train_loss {run_loss / seen:.4f} | "
              f"train_acc {100 * run_correct / seen:.1f}% | val_loss {val_loss:.4f} | "
              f"val_acc {100 * val_acc:.1f}% | {time.time() - t_ep:.1f}s")
    print(f"done in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
