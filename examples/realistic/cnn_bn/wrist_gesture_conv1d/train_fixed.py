"""Activity recognition from 3-axis IMU windows with a small 1-D ConvNet.

Synthetic stand-in for the wrist-sensor dataset: each recording is a
(time, axis) array sampled at 50 Hz, the way the logger writes it.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 7
FS = 50.0
RAW_LEN = 160          # samples per recorded window
CROP_LEN = 128         # samples fed to the network
N_AXES = 3
N_CLASSES = 6
N_TRAIN = 800
N_VAL = 400
BATCH_SIZE = 64
EPOCHS = 14
LR = 3e-3
WEIGHT_DECAY = 1e-2
WARMUP_EPOCHS = 1

ACTIVITIES = ["walk", "run", "stairs_up", "stairs_down", "cycle", "sit"]


# ----------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------
def synth_recordings(n, rng):
    """Return x: (n, RAW_LEN, N_AXES) float32 in g, y: (n,) int64."""
    t = np.arange(RAW_LEN) / FS
    # per-activity cadence (Hz), dominant axis and phase lag between axes
    cadence = np.array([1.8, 2.2, 1.8, 1.8, 1.5, 0.0])
    lag = np.array([0.0, 0.0, 0.5, -0.5, 1.5, 0.0]) * math.pi
    dominant = np.array([2, 2, 1, 1, 0, 0])
    y = rng.integers(0, N_CLASSES, size=n)
    x = np.zeros((n, RAW_LEN, N_AXES), dtype=np.float32)
    for i in range(n):
        c = y[i]
        f = cadence[c] * rng.uniform(0.85, 1.15)
        ph = rng.uniform(0, 2 * math.pi)
        amp = rng.uniform(0.6, 1.2)
        sig = np.zeros((RAW_LEN, N_AXES))
        for a in range(N_AXES):
            gain = 1.0 if a == dominant[c] else 0.6
            sig[:, a] = gain * amp * np.sin(2 * math.pi * f * t + ph + a * lag[c])
        # harmonics from heel strike
        sig[:, dominant[c]] += 0.3 * amp * np.sin(4 * math.pi * f * t + ph)
        # gravity on the z axis plus slow wrist orientation drift
        sig[:, 2] += 1.0 + 0.1 * np.sin(2 * math.pi * 0.1 * t + rng.uniform(0, 6.28))
        sig += rng.normal(0, 0.8, size=sig.shape)
        x[i] = sig
    return x, y.astype(np.int64)


def load_splits():
    rng = np.random.default_rng(SEED)
    x_tr, y_tr = synth_recordings(N_TRAIN, rng)
    x_va, y_va = synth_recordings(N_VAL, rng)
    # per-axis standardisation with training statistics
    mean = x_tr.mean(axis=(0, 1), keepdims=True)
    std = x_tr.std(axis=(0, 1), keepdims=True) + 1e-6
    x_tr = (x_tr - mean) / std
    x_va = (x_va - mean) / std
    return (x_tr, y_tr), (x_va, y_va)


def to_channels_first(x):
    # (batch, time, axis) -> (batch, axis, time) for Conv1d
    n = x.shape[0]
    return x.transpose(0, 2, 1)


def augment(x, rng):
    """Random crop in time, amplitude jitter and sensor noise. x: (B, T, C)."""
    b = x.shape[0]
    starts = rng.integers(0, RAW_LEN - CROP_LEN + 1, size=b)
    out = np.stack([x[i, s:s + CROP_LEN] for i, s in enumerate(starts)])
    out = out * rng.uniform(0.8, 1.2, size=(b, 1, N_AXES))
    out = out + rng.normal(0, 0.05, size=out.shape)
    return out.astype(np.float32)


def center_crop(x):
    s = (RAW_LEN - CROP_LEN) // 2
    return x[:, s:s + CROP_LEN]


def train_batches(x, y, rng):
    idx = rng.permutation(len(x))
    for i in range(0, len(idx) - BATCH_SIZE + 1, BATCH_SIZE):
        b = idx[i:i + BATCH_SIZE]
        xb = torch.from_numpy(to_channels_first(augment(x[b], rng)))
        yb = torch.from_numpy(y[b])
        yield xb, yb


def eval_batches(x, y, batch_size=200):
    for i in range(0, len(x), batch_size):
        xb = torch.from_numpy(np.ascontiguousarray(to_channels_first(center_crop(x[i:i + batch_size]))))
        yb = torch.from_numpy(y[i:i + batch_size])
        yield xb, yb


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class ConvBlock(nn.Module):
    def __init__(self, c_in, c_out, k, stride=1):
        super().__init__()
        self.conv = nn.Conv1d(c_in, c_out, k, stride=stride, padding=k // 2, bias=False)
        self.bn = nn.BatchNorm1d(c_out)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


class IMUNet(nn.Module):
    def __init__(self, n_axes=N_AXES, n_classes=N_CLASSES, width=32):
        super().__init__()
        self.features = nn.Sequential(
            ConvBlock(n_axes, width, 7),
            ConvBlock(width, width, 5, stride=2),
            ConvBlock(width, 2 * width, 5),
            ConvBlock(2 * width, 2 * width, 3, stride=2),
            ConvBlock(2 * width, 2 * width, 3),
        )
        self.dropout = nn.Dropout(0.2)
        self.head = nn.Linear(2 * width, n_classes)

    def forward(self, x):
        h = self.features(x)
        h = h.mean(dim=-1)
        return self.head(self.dropout(h))


def compute_loss(model, batch):
    xb, yb = batch
    logits = model(xb)
    return F.cross_entropy(logits, yb, label_smoothing=0.05)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY)


def make_scheduler(optimizer, steps_per_epoch):
    warmup = WARMUP_EPOCHS * steps_per_epoch
    total = EPOCHS * steps_per_epoch

    def lr_lambda(step):
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)


@torch.no_grad()
def evaluate(model, x, y):
    model.eval()
    tot_loss, correct, n = 0.0, 0, 0
    for xb, yb in eval_batches(x, y):
        logits = model(xb)
        tot_loss += F.cross_entropy(logits, yb, reduction="sum").item()
        correct += (logits.argmax(-1) == yb).sum().item()
        n += len(yb)
    model.train()
    return tot_loss / n, correct / n


def make_target():
    torch.manual_seed(SEED)
    (x_tr, y_tr), _ = load_splits()
    rng = np.random.default_rng(SEED + 1)
    data = []
    for k, batch in enumerate(train_batches(x_tr, y_tr, rng)):
        data.append(batch)
        if k == 4:
            break
    return {
        "model": IMUNet(),
        "data": data,
        "loss_fn": compute_loss,
        "make_optimizer": make_optimizer,
        "num_classes": N_CLASSES,
        "task": "classification",
    }


def main():
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    (x_tr, y_tr), (x_va, y_va) = load_splits()
    rng = np.random.default_rng(SEED + 1)

    model = IMUNet()
    optimizer = make_optimizer(model.parameters())
    steps_per_epoch = len(x_tr) // BATCH_SIZE
    scheduler = make_scheduler(optimizer, steps_per_epoch)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"IMUNet: {n_params/1e3:.1f}k params | train {len(x_tr)} / val {len(x_va)} windows | {N_CLASSES} classes")

    for epoch in range(1, EPOCHS + 1):
        t0 = time.time()
        model.train()
        run_loss, run_correct, seen = 0.0, 0, 0
        for xb, yb in train_batches(x_tr, y_tr, rng):
            optimizer.zero_grad(set_to_none=True)
            logits = model(xb)
            loss = F.cross_entropy(logits, yb, label_smoothing=0.05)
            loss.backward()
            optimizer.step()
            scheduler.step()
            run_loss += loss.item() * len(yb)
            run_correct += (logits.argmax(-1) == yb).sum().item()
            seen += len(yb)
        val_loss, val_acc = evaluate(model, x_va, y_va)
        dt = time.time() - t0
        print(f"Epoch {epoch}/{EPOCHS} - {dt:.1f}s - loss: {run_loss/seen:.4f} - accuracy: {run_correct/seen:.4f}"
              f" - val_loss: {val_loss:.4f} - val_accuracy: {val_acc:.4f} - lr: {scheduler.get_last_lr()[0]:.2e}")


if __name__ == "__main__":
    main()
