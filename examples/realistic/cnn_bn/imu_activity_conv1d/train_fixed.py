"""Human-activity recognition from 3-axis accelerometer windows.

Small Conv1d + BatchNorm network trained with SGD (nesterov) and a cosine
schedule. The recordings are simulated here so the script is self-contained:
each activity has its own stride frequency, harmonic content and axis profile.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)

SEED = 1234
CLASS_NAMES = ["walk", "run", "stairs_up", "stairs_down", "sit", "cycle"]
N_CLASSES = len(CLASS_NAMES)
SAMPLE_RATE = 50.0          # Hz
RAW_LEN = 160               # recorded window, random-cropped to WINDOW for training
WINDOW = 128
N_TRAIN_PER_CLASS = 450
N_VAL_PER_CLASS = 120
BATCH_SIZE = 64
EPOCHS = 12
LR = 0.05
MOMENTUM = 0.9
WEIGHT_DECAY = 5e-4

# (stride freq Hz, amplitude, 2nd-harmonic ratio, axis weights x/y/z)
ACTIVITY_PROFILES = {
    "walk":        (1.8, 1.0, 0.35, (0.6, 0.4, 1.0)),
    "run":         (2.6, 1.7, 0.50, (0.7, 0.5, 1.0)),
    "stairs_up":   (1.6, 1.1, 0.65, (0.4, 0.5, 1.0)),
    "stairs_down": (2.0, 1.3, 0.20, (0.5, 0.6, 1.0)),
    "sit":         (0.4, 0.15, 0.10, (0.3, 0.3, 0.3)),
    "cycle":       (1.3, 0.8, 0.15, (1.0, 0.5, 0.4)),
}


def simulate_window(rng, activity):
    f0, amp, harm, axis_w = ACTIVITY_PROFILES[activity]
    f = f0 * rng.uniform(0.85, 1.15)
    a = amp * rng.lognormal(0.0, 0.25)
    t = np.arange(RAW_LEN) / SAMPLE_RATE
    sig = np.empty((3, RAW_LEN), dtype=np.float32)
    for ax in range(3):
        phase = rng.uniform(0, 2 * math.pi)
        w = axis_w[ax] * rng.uniform(0.8, 1.2)
        sig[ax] = a * w * (np.sin(2 * math.pi * f * t + phase)
                           + harm * np.sin(4 * math.pi * f * t + 2 * phase))
    sig[2] += 1.0                                   # gravity on the vertical axis
    sig += rng.normal(0.0, 0.35, size=sig.shape)    # sensor noise
    return sig


def build_split(n_per_class, seed):
    """Simulate a labelled split: n_per_class windows for every activity."""
    rng = np.random.default_rng(seed)
    xs, ys = [], []
    for label, name in enumerate(CLASS_NAMES):
        for _ in range(n_per_class):
            xs.append(simulate_window(rng, name))
            ys.append(label)
    return np.stack(xs), np.asarray(ys, dtype=np.int64)


def load_data():
    x_train, y_train = build_split(N_TRAIN_PER_CLASS, SEED)
    x_val, y_val = build_split(N_VAL_PER_CLASS, SEED + 1)
    # per-channel standardisation with training statistics
    mean = x_train.mean(axis=(0, 2), keepdims=True)
    std = x_train.std(axis=(0, 2), keepdims=True) + 1e-6
    x_train = (x_train - mean) / std
    x_val = (x_val - mean) / std
    return x_train, y_train, x_val, y_val


def augment(xb, rng):
    """Random temporal crop, per-window gain and additive jitter."""
    n = xb.shape[0]
    offs = rng.integers(0, RAW_LEN - WINDOW + 1, size=n)
    out = np.stack([xb[i, :, o:o + WINDOW] for i, o in enumerate(offs)])
    out = out * rng.uniform(0.8, 1.2, size=(n, 1, 1)).astype(np.float32)
    out = out + rng.normal(0.0, 0.05, size=out.shape).astype(np.float32)
    return out


def center_crop(xb):
    o = (RAW_LEN - WINDOW) // 2
    return xb[:, :, o:o + WINDOW]


def iterate_batches(x, y, batch_size, train, rng=None):
    n = len(x)
    order = rng.permutation(n) if train else np.arange(n)
    for s in range(0, n, batch_size):
        idx = order[s:s + batch_size]
        xb, yb = x[idx], y[idx]
        xb = augment(xb, rng) if train else center_crop(xb)
        yield torch.from_numpy(np.ascontiguousarray(xb, dtype=np.float32)), torch.from_numpy(yb)


class ConvBlock(nn.Module):
    def __init__(self, c_in, c_out, k, pool):
        super().__init__()
        self.conv = nn.Conv1d(c_in, c_out, k, padding=k // 2, bias=False)
        self.bn = nn.BatchNorm1d(c_out)
        self.pool = nn.MaxPool1d(2) if pool else nn.Identity()

    def forward(self, x):
        return self.pool(F.relu(self.bn(self.conv(x))))


class ActivityNet(nn.Module):
    def __init__(self, n_classes=N_CLASSES):
        super().__init__()
        self.features = nn.Sequential(
            ConvBlock(3, 32, 7, pool=True),
            ConvBlock(32, 64, 5, pool=True),
            ConvBlock(64, 96, 3, pool=False),
        )
        self.dropout = nn.Dropout(0.2)
        self.head = nn.Linear(96, n_classes)

    def forward(self, x):
        h = self.features(x).mean(dim=-1)
        return self.head(self.dropout(h))


def compute_loss(model, batch):
    xb, yb = batch
    return F.cross_entropy(model(xb), yb)


def make_optimizer(params):
    return torch.optim.SGD(params, lr=LR, momentum=MOMENTUM, nesterov=True,
                           weight_decay=WEIGHT_DECAY)


@torch.no_grad()
def evaluate(model, x, y):
    model.eval()
    tot_loss, correct, n = 0.0, 0, 0
    for xb, yb in iterate_batches(x, y, 256, train=False):
        logits = model(xb)
        tot_loss += F.cross_entropy(logits, yb, reduction="sum").item()
        correct += (logits.argmax(1) == yb).sum().item()
        n += len(yb)
    return tot_loss / n, correct / n


def make_target():
    torch.manual_seed(SEED)
    x_train, y_train, _, _ = load_data()
    rng = np.random.default_rng(SEED)
    data = []
    for i, batch in enumerate(iterate_batches(x_train, y_train, BATCH_SIZE, train=True, rng=rng)):
        data.append(batch)
        if i == 5:
            break
    return {
        "model": ActivityNet(),
        "data": data,
        "loss_fn": compute_loss,
        "make_optimizer": make_optimizer,
        "num_classes": N_CLASSES,
        "task": "classification",
    }


def main():
    torch.manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    x_train, y_train, x_val, y_val = load_data()
    print(f"train windows: {len(x_train)}  val windows: {len(x_val)}  classes: {N_CLASSES}")

    model = ActivityNet()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"ActivityNet: {n_params / 1e3:.1f}k parameters")
    optimizer = make_optimizer(model.parameters())
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=EPOCHS)

    for epoch in range(EPOCHS):
        t0 = time.time()
        model.train()
        run_loss, run_correct, seen = 0.0, 0, 0
        for batch in iterate_batches(x_train, y_train, BATCH_SIZE, train=True, rng=rng):
            optimizer.zero_grad(set_to_none=True)
            xb, yb = batch
            logits = model(xb)
            loss = F.cross_entropy(logits, yb)
            loss.backward()
            optimizer.step()
            run_loss += loss.item() * len(yb)
            run_correct += (logits.argmax(1) == yb).sum().item()
            seen += len(yb)
        lr = optimizer.param_groups[0]["lr"]
        scheduler.step()
        val_loss, val_acc = evaluate(model, x_val, y_val)
        print(f"Epoch {epoch + 1}/{EPOCHS} - {time.time() - t0:.1f}s - loss: {run_loss / seen:.4f} "
              f"- acc: {run_correct / seen:.4f} - val_loss: {val_loss:.4f} - val_acc: {val_acc:.4f} "
              f"- lr: {lr:.4f}")


if __name__ == "__main__":
    main()
