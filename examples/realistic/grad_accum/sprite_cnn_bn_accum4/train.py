"""Small BN-CNN on synthetic 24x24 "shapes" images.

Micro-batches of 16, 4 micro-batches per optimizer step (effective 64),
bf16 autocast on CPU, AdamW + cosine decay per optimizer step, grad clipping.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)

SEED = 0
IMG = 24
CLASSES = ["square", "circle", "cross", "triangle", "ring", "bar"]
N_TRAIN = 800
N_VAL = 600
MICRO_BS = 16
ACCUM_STEPS = 4
EPOCHS = 20
LR = 2e-3
WEIGHT_DECAY = 0.05
CLIP = 2.0


# --------------------------------------------------------------------------- data

def _draw(cls, rng):
    yy, xx = np.mgrid[0:IMG, 0:IMG].astype(np.float32)
    cx, cy = rng.uniform(7, IMG - 7, size=2)
    r = rng.uniform(3.5, 6.5)
    dx, dy = xx - cx, yy - cy
    if cls == 0:    # square
        m = (np.abs(dx) < r) & (np.abs(dy) < r)
    elif cls == 1:  # filled circle
        m = dx ** 2 + dy ** 2 < r ** 2
    elif cls == 2:  # plus-shaped cross
        w = max(1.0, r / 3)
        m = ((np.abs(dx) < w) & (np.abs(dy) < r)) | ((np.abs(dy) < w) & (np.abs(dx) < r))
    elif cls == 3:  # upward triangle
        m = (dy < r) & (dy > -r) & (np.abs(dx) < (dy + r) / 2)
    elif cls == 4:  # ring
        d = np.sqrt(dx ** 2 + dy ** 2)
        m = (d < r) & (d > r - 1.8)
    else:           # horizontal bar
        m = (np.abs(dx) < r) & (np.abs(dy) < 1.2)
    img = m.astype(np.float32) * rng.uniform(0.6, 1.4)
    img += rng.normal(0, 0.55, size=img.shape).astype(np.float32)   # sensor noise
    img += rng.uniform(-0.3, 0.3)                                    # exposure offset
    return img


def make_split(n, seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, len(CLASSES), size=n)
    images = np.stack([_draw(int(c), rng) for c in labels])[:, None]
    return torch.from_numpy(images), torch.from_numpy(labels).long()


def build_loaders():
    x_tr, y_tr = make_split(N_TRAIN, SEED)
    x_va, y_va = make_split(N_VAL, SEED + 1)
    mean, std = x_tr.mean(), x_tr.std()
    x_tr = (x_tr - mean) / std
    x_va = (x_va - mean) / std
    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(TensorDataset(x_tr, y_tr), batch_size=MICRO_BS, shuffle=True,
                              drop_last=True, generator=g)
    val_loader = DataLoader(TensorDataset(x_va, y_va), batch_size=200)
    return train_loader, val_loader


# --------------------------------------------------------------------------- model

def conv_bn(c_in, c_out):
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, 3, padding=1, bias=False),
        nn.BatchNorm2d(c_out),
        nn.ReLU(inplace=True),
    )


class ShapeNet(nn.Module):
    def __init__(self, n_classes=len(CLASSES)):
        super().__init__()
        self.features = nn.Sequential(
            conv_bn(1, 32), conv_bn(32, 32), nn.MaxPool2d(2),   # 12x12
            conv_bn(32, 64), conv_bn(64, 64), nn.MaxPool2d(2),  # 6x6
            conv_bn(64, 128), nn.MaxPool2d(2),                  # 3x3
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Dropout(0.5),
            nn.Linear(128 * 9, 256),
            nn.ReLU(inplace=True),
            nn.Dropout(0.5),
            nn.Linear(256, n_classes),
        )

    def forward(self, x):
        return self.classifier(self.features(x))


def build_model():
    torch.manual_seed(SEED)
    return ShapeNet()


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY)


def forward_loss(model, x, y):
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        logits = model(x)
    return F.cross_entropy(logits.float(), y), logits


def compute_loss(model, batch):
    x, y = batch
    return forward_loss(model, x, y)[0]


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    loss_sum, correct, n = 0.0, 0, 0
    for x, y in loader:
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            logits = model(x)
        logits = logits.float()
        loss_sum += F.cross_entropy(logits, y, reduction="sum").item()
        correct += (logits.argmax(1) == y).sum().item()
        n += y.numel()
    return loss_sum / n, correct / n


def make_target():
    train_loader, _ = build_loaders()
    data = []
    for batch in train_loader:
        data.append(batch)
        if len(data) == ACCUM_STEPS:
            break
    return {
        "model": build_model(),
        "data": data,
        "loss_fn": compute_loss,
        "make_optimizer": make_optimizer,
        "num_classes": len(CLASSES),
        "task": "classification",
    }


# --------------------------------------------------------------------------- train

def main():
    torch.manual_seed(SEED)
    train_loader, val_loader = build_loaders()
    model = build_model()
    optimizer = make_optimizer(model.parameters())
    steps_per_epoch = len(train_loader) // ACCUM_STEPS
    total_steps = steps_per_epoch * EPOCHS
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, total_steps) / total_steps)))

    print(f"Train on {N_TRAIN} samples, validate on {N_VAL} samples "
          f"(micro batch {MICRO_BS} x {ACCUM_STEPS} accumulation steps)")
    model.train()
    val_loss, val_acc = evaluate(model, val_loader)
    print(f"Sanity check - val_loss: {val_loss:.4f} - val_accuracy: {val_acc:.4f}")
    for epoch in range(EPOCHS):
        t0 = time.time()
        seen, loss_sum, correct = 0, 0.0, 0
        optimizer.zero_grad(set_to_none=True)
        for i, (x, y) in enumerate(train_loader):
            loss, logits = forward_loss(model, x, y)
            (loss / ACCUM_STEPS).backward()
            loss_sum += loss.item() * y.numel()
            correct += (logits.argmax(1) == y).sum().item()
            seen += y.numel()
            if (i + 1) % ACCUM_STEPS == 0:
                nn.utils.clip_grad_norm_(model.parameters(), CLIP)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)

        val_loss, val_acc = evaluate(model, val_loader)
        dt = time.time() - t0
        print(f"Epoch {epoch + 1}/{EPOCHS}")
        print(f"{steps_per_epoch}/{steps_per_epoch} - {dt:.0f}s - loss: {loss_sum / seen:.4f} - "
              f"accuracy: {correct / seen:.4f} - val_loss: {val_loss:.4f} - val_accuracy: {val_acc:.4f} - "
              f"lr: {scheduler.get_last_lr()[0]:.2e}")


if __name__ == "__main__":
    main()
