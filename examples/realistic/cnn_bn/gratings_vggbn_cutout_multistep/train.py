"""VGG-style CNN (conv-BN-ReLU) on synthetic grayscale grating/texture patches.

8 classes: six grating orientations (0..150 deg), concentric rings, checkerboard.
Augmentation: random crop w/ zero pad, brightness/contrast jitter, gaussian
noise, cutout. Loss: label-smoothed CE. SGD + MultiStepLR.
Log mimics the Lightning progress bar (one line per epoch).
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)

SEED = 2024
NUM_CLASSES = 8
IMG = 28
N_TRAIN = 2560
N_VAL = 800
BATCH_SIZE = 64
EPOCHS = 12
LR = 0.05
MOMENTUM = 0.9
WEIGHT_DECAY = 5e-4
MILESTONES = [7, 10]
LABEL_SMOOTHING = 0.1
CUTOUT = 12


# ----------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------
def make_patches(n, seed):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:IMG, 0:IMG].astype(np.float32)
    yy -= IMG / 2
    xx -= IMG / 2
    labels = rng.integers(0, NUM_CLASSES, size=n)
    out = np.empty((n, 1, IMG, IMG), dtype=np.float32)
    for i in range(n):
        c = labels[i]
        period = rng.uniform(4.0, 8.0)
        phase = rng.uniform(0, 2 * math.pi)
        if c < 6:
            theta = math.radians(30 * c + rng.normal(0, 6))
            u = xx * math.cos(theta) + yy * math.sin(theta)
            tex = np.sin(2 * math.pi * u / period + phase)
        elif c == 6:
            cx, cy = rng.uniform(-6, 6, size=2)
            r = np.sqrt((xx - cx) ** 2 + (yy - cy) ** 2)
            tex = np.sin(2 * math.pi * r / period + phase)
        else:
            theta = rng.uniform(0, math.pi / 2)
            u = xx * math.cos(theta) + yy * math.sin(theta)
            v = -xx * math.sin(theta) + yy * math.cos(theta)
            tex = np.sign(np.sin(2 * math.pi * u / period)) * np.sign(np.sin(2 * math.pi * v / period + phase))
        # illumination gradient + sensor noise
        g = rng.normal(0, 0.4, size=2)
        img = rng.uniform(0.3, 1.0) * tex + g[0] * xx / IMG + g[1] * yy / IMG
        img += rng.normal(0, 0.6, size=img.shape)
        out[i, 0] = img
    return out, labels.astype(np.int64)


def build_datasets():
    x_tr, y_tr = make_patches(N_TRAIN, SEED)
    x_va, y_va = make_patches(N_VAL, SEED + 1)
    mean, std = x_tr.mean(), x_tr.std()
    x_tr = torch.from_numpy((x_tr - mean) / std)
    x_va = torch.from_numpy((x_va - mean) / std)
    return (x_tr, torch.from_numpy(y_tr)), (x_va, torch.from_numpy(y_va))


def augment(x, gen):
    n = x.shape[0]
    # random crop from a zero-padded image
    padded = F.pad(x, (3, 3, 3, 3))
    ox = torch.randint(0, 7, (n,), generator=gen)
    oy = torch.randint(0, 7, (n,), generator=gen)
    out = torch.stack([padded[i, :, oy[i]:oy[i] + IMG, ox[i]:ox[i] + IMG] for i in range(n)])
    # brightness / contrast jitter
    contrast = 0.75 + 0.5 * torch.rand(n, 1, 1, 1, generator=gen)
    bright = 0.2 * (torch.rand(n, 1, 1, 1, generator=gen) - 0.5)
    out = out * contrast + bright
    out = out + 0.1 * torch.randn(out.shape, generator=gen)
    # cutout
    cy = torch.randint(0, IMG, (n,), generator=gen)
    cx = torch.randint(0, IMG, (n,), generator=gen)
    ar = torch.arange(IMG)
    my = (ar[None] - cy[:, None]).abs() <= CUTOUT // 2
    mx = (ar[None] - cx[:, None]).abs() <= CUTOUT // 2
    hole = (my[:, :, None] & mx[:, None, :]).unsqueeze(1)
    return out.masked_fill(hole, 0.0)


def train_batches(x, y, gen):
    perm = torch.randperm(x.shape[0], generator=gen)
    for s in range(0, x.shape[0], BATCH_SIZE):
        idx = perm[s:s + BATCH_SIZE]
        yield augment(x[idx], gen), y[idx]


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
def conv_bn_relu(cin, cout):
    return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]


class VGGBN(nn.Module):
    def __init__(self, num_classes=NUM_CLASSES):
        super().__init__()
        self.features = nn.Sequential(
            *conv_bn_relu(1, 16), nn.MaxPool2d(2),                            # 14x14
            *conv_bn_relu(16, 32), nn.MaxPool2d(2),                           # 7x7
            *conv_bn_relu(32, 64), *conv_bn_relu(64, 64), nn.MaxPool2d(2),    # 3x3
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Dropout(0.3),
            nn.Linear(64 * 3 * 3, 128),
            nn.BatchNorm1d(128),
            nn.ReLU(inplace=True),
            nn.Dropout(0.3),
            nn.Linear(128, num_classes),
        )

    def forward(self, x):
        return self.classifier(self.features(x))


# ----------------------------------------------------------------------------
# training
# ----------------------------------------------------------------------------
def compute_loss(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y, label_smoothing=LABEL_SMOOTHING)


def make_optimizer(params):
    return torch.optim.SGD(params, lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)


@torch.no_grad()
def validate(model, x, y, bs=200):
    model.eval()
    loss, correct = 0.0, 0
    for s in range(0, x.shape[0], bs):
        logits = model(x[s:s + bs])
        loss += F.cross_entropy(logits, y[s:s + bs], reduction="sum").item()
        correct += (logits.argmax(1) == y[s:s + bs]).sum().item()
    model.train()
    return loss / x.shape[0], correct / x.shape[0]


def make_target():
    torch.manual_seed(SEED)
    (x_tr, y_tr), _ = build_datasets()
    gen = torch.Generator().manual_seed(SEED)
    it = train_batches(x_tr, y_tr, gen)
    data = [next(it) for _ in range(4)]
    return {
        "model": VGGBN(),
        "data": data,
        "loss_fn": compute_loss,
        "make_optimizer": make_optimizer,
        "num_classes": NUM_CLASSES,
        "task": "classification",
    }


def fmt_time(s):
    return f"{int(s) // 60:02d}:{int(s) % 60:02d}"


def main():
    torch.manual_seed(SEED)
    (x_tr, y_tr), (x_va, y_va) = build_datasets()
    model = VGGBN()
    n_params = sum(p.numel() for p in model.parameters())
    print("  | Name       | Type       | Params")
    print("-----------------------------------------")
    print(f"0 | features   | Sequential | {sum(p.numel() for p in model.features.parameters()) / 1e3:.1f} K")
    print(f"1 | classifier | Sequential | {sum(p.numel() for p in model.classifier.parameters()) / 1e3:.1f} K")
    print("-----------------------------------------")
    print(f"{n_params / 1e3:.1f} K    Trainable params")

    optimizer = make_optimizer(model.parameters())
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=MILESTONES, gamma=0.1)
    gen = torch.Generator().manual_seed(SEED)
    n_batches = math.ceil(N_TRAIN / BATCH_SIZE)

    t_all = time.time()
    model.train()
    for epoch in range(EPOCHS):
        t0 = time.time()
        ep_loss, ep_n = 0.0, 0
        for xb, yb in train_batches(x_tr, y_tr, gen):
            loss = compute_loss(model, (xb, yb))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            ep_loss += loss.item() * xb.shape[0]
            ep_n += xb.shape[0]
        scheduler.step()
        val_loss, val_acc = validate(model, x_va, y_va)
        dt = time.time() - t0
        print(f"Epoch {epoch}: 100%|██████████| {n_batches}/{n_batches} "
              f"[{fmt_time(dt)}<00:00, {n_batches / dt:.2f}it/s, v_num=0, "
              f"train_loss_step={loss.item():.3f}, val_loss={val_loss:.3f}, "
              f"val_acc={val_acc:.3f}, train_loss_epoch={ep_loss / ep_n:.3f}]")
    print(f"`Trainer.fit` stopped: `max_epochs={EPOCHS}` reached. ({time.time() - t_all:.1f}s)")


if __name__ == "__main__":
    main()
