"""Small CNN classifier for synthetic oriented-grating patches (think texture /
fringe-pattern inspection). 10 classes = 5 orientations x 2 spatial frequencies.

Micro-batches of 32 with 4-step gradient accumulation (effective batch 128),
bf16 autocast on CPU, SGD (Nesterov) + OneCycle, gradient clipping.
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
IMG = 20
NUM_CLASSES = 10
N_TRAIN = 8192
N_VAL = 2048
MICRO_BATCH = 32
ACCUM_STEPS = 4
EPOCHS = 5
MAX_LR = 0.1
WEIGHT_DECAY = 5e-4
MOMENTUM = 0.9
CLIP_NORM = 2.0


def make_gratings(n, rng):
    labels = rng.integers(0, NUM_CLASSES, size=n)
    orient = (labels % 5) * (math.pi / 5) + rng.normal(0, 0.12, size=n)
    freq = np.where(labels < 5, 1.0, 1.35) * (1 + rng.normal(0, 0.05, size=n))
    phase = rng.uniform(0, 2 * math.pi, size=n)
    contrast = rng.uniform(0.3, 1.0, size=n)
    coords = np.arange(IMG) - (IMG - 1) / 2
    yy, xx = np.meshgrid(coords, coords, indexing="ij")
    proj = (np.cos(orient)[:, None, None] * xx + np.sin(orient)[:, None, None] * yy)
    img = contrast[:, None, None] * np.sin(freq[:, None, None] * proj + phase[:, None, None])
    # illumination gradient + sensor noise
    gx, gy = rng.normal(0, 0.04, size=(2, n))
    img = img + gx[:, None, None] * xx + gy[:, None, None] * yy
    img = img + rng.normal(0, 1.4, size=img.shape)
    return img.astype(np.float32)[:, None], labels.astype(np.int64)


def build_loaders():
    rng = np.random.default_rng(SEED)
    x_tr, y_tr = make_gratings(N_TRAIN, rng)
    x_va, y_va = make_gratings(N_VAL, rng)
    mean, std = x_tr.mean(), x_tr.std()
    x_tr = (x_tr - mean) / std
    x_va = (x_va - mean) / std
    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(TensorDataset(torch.from_numpy(x_tr), torch.from_numpy(y_tr)),
                              batch_size=MICRO_BATCH, shuffle=True, drop_last=True, generator=g)
    val_loader = DataLoader(TensorDataset(torch.from_numpy(x_va), torch.from_numpy(y_va)),
                            batch_size=256)
    return train_loader, val_loader


def conv_block(c_in, c_out):
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False),
                         nn.BatchNorm2d(c_out), nn.ReLU(inplace=True))


class GratingNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            conv_block(1, 16), nn.MaxPool2d(2),   # 10x10
            conv_block(16, 32), nn.MaxPool2d(2),  # 5x5
            conv_block(32, 64),
        )
        self.head = nn.Linear(64, NUM_CLASSES)

    def forward(self, x):
        x = self.features(x)
        return self.head(x.mean(dim=(2, 3)))


def compute_loss(model, batch):
    x, y = batch
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        logits = model(x)
    return F.cross_entropy(logits.float(), y)


def make_optimizer(params):
    return torch.optim.SGD(params, lr=MAX_LR, momentum=MOMENTUM, nesterov=True, weight_decay=WEIGHT_DECAY)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    tot_loss, correct, n = 0.0, 0, 0
    for x, y in loader:
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            logits = model(x).float()
        tot_loss += F.cross_entropy(logits, y, reduction="sum").item()
        correct += (logits.argmax(1) == y).sum().item()
        n += y.numel()
    return tot_loss / n, correct / n


def make_target():
    torch.manual_seed(SEED)
    train_loader, _ = build_loaders()
    it = iter(train_loader)
    data = [next(it) for _ in range(ACCUM_STEPS * 2)]
    return {
        "model": GratingNet(),
        "data": data,
        "loss_fn": compute_loss,
        "make_optimizer": make_optimizer,
        "num_classes": NUM_CLASSES,
        "task": "classification",
    }


def main():
    torch.manual_seed(SEED)
    train_loader, val_loader = build_loaders()
    model = GratingNet()
    optimizer = make_optimizer(model.parameters())
    steps_per_epoch = len(train_loader) // ACCUM_STEPS
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=MAX_LR, epochs=EPOCHS, steps_per_epoch=steps_per_epoch, pct_start=0.25)

    print(f"Train on {len(train_loader.dataset)} samples, validate on {len(val_loader.dataset)} samples")
    print(f"micro_batch={MICRO_BATCH} accum_steps={ACCUM_STEPS} effective_batch={MICRO_BATCH * ACCUM_STEPS}")
    for epoch in range(EPOCHS):
        model.train()
        t0 = time.time()
        seen, loss_sum, correct = 0, 0.0, 0
        optimizer.zero_grad(set_to_none=True)
        for i, (x, y) in enumerate(train_loader):
            with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
                logits = model(x)
            loss = F.cross_entropy(logits.float(), y)
            (loss / ACCUM_STEPS).backward()

            loss_sum += loss.item() * y.size(0)
            correct += (logits.argmax(1) == y).sum().item()
            seen += y.size(0)

            if (i + 1) % ACCUM_STEPS == 0:
                grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP_NORM)
                optimizer.step()
                scheduler.step()

        val_loss, val_acc = evaluate(model, val_loader)
        dt = time.time() - t0
        print(f"Epoch {epoch + 1}/{EPOCHS}")
        print(f"{steps_per_epoch}/{steps_per_epoch} - {dt:.0f}s - loss: {loss_sum / seen:.4f} - "
              f"accuracy: {correct / seen:.4f} - val_loss: {val_loss:.4f} - val_accuracy: {val_acc:.4f} - "
              f"grad_norm: {grad_norm.item():.3f} - lr: {scheduler.get_last_lr()[0]:.2e}")


if __name__ == "__main__":
    main()
