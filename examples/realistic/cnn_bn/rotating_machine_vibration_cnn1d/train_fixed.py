"""Fault classification from tri-axial accelerometer windows on rotating machines.

Data: synthetic condition-monitoring recordings (one fault state per test rig run),
cut into fixed-length windows. Rigs are split between train and validation so that
no machine appears in both.
"""
import math
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

SEED = 7
FS = 1024            # Hz
RAW_LEN = 320        # samples stored per window
WIN = 256            # samples fed to the network (random crop in training)
CLASSES = [
    "normal",
    "imbalance_minor", "imbalance_severe",
    "misalign_minor", "misalign_severe",
    "bearing_minor", "bearing_severe",
]
N_RIGS = 20          # rig runs per class
WINDOWS_PER_RIG = 12
VAL_RIGS = 5         # rig runs per class kept for validation

BATCH_SIZE = 64
EPOCHS = 12
LR = 2e-3
WEIGHT_DECAY = 1e-2
DATA_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vibration_windows.npz")


# --------------------------------------------------------------------------- data
def _rig_windows(rng, label):
    """Simulate WINDOWS_PER_RIG windows of one rig run in a given fault state."""
    kind = CLASSES[label].split("_")[0]
    severity = 1.0
    if CLASSES[label].endswith("severe"):
        severity = 2.6
    f0 = rng.uniform(20.0, 40.0)                      # shaft speed (Hz)
    mount_gain = rng.uniform(0.8, 1.25, size=3)       # per-axis transfer
    noise_sd = np.exp(rng.uniform(np.log(0.01), np.log(0.15)))  # environment / sensor noise
    base = rng.uniform(0.0, 0.15)                     # residual imbalance of the rig
    offset = np.array([0.0, 0.0, 1.0]) + rng.normal(0, 0.02, 3)  # gravity on z + bias
    out = np.empty((WINDOWS_PER_RIG, 3, RAW_LEN), dtype=np.float32)
    for w in range(WINDOWS_PER_RIG):
        t = (np.arange(RAW_LEN) + rng.integers(0, 10 * FS)) / FS
        f = f0 * rng.uniform(0.985, 1.015)
        ph = rng.uniform(0, 2 * np.pi)
        sig = np.zeros((3, RAW_LEN))
        sig[0] += base * np.sin(2 * np.pi * f * t + ph)
        sig[1] += base * np.cos(2 * np.pi * f * t + ph)
        if kind == "imbalance":
            a = 0.5 * severity
            sig[0] += a * np.sin(2 * np.pi * f * t + ph)
            sig[1] += a * np.cos(2 * np.pi * f * t + ph)
            sig[2] += 0.1 * a * np.sin(2 * np.pi * f * t + ph)
        elif kind == "misalign":
            a = 0.45 * severity
            sig[2] += a * np.sin(2 * np.pi * 2 * f * t + ph) + 0.5 * a * np.sin(2 * np.pi * f * t)
            sig[0] += 0.4 * a * np.sin(2 * np.pi * 2 * f * t + ph + 0.6)
            sig[1] += 0.3 * a * np.sin(2 * np.pi * 3 * f * t + ph)
        elif kind == "bearing":
            a = 0.6 * severity
            bpfo = 3.57 * f
            fres = rng.uniform(280, 340)
            period = FS / bpfo
            start = rng.uniform(0, period)
            for k in range(int(RAW_LEN / period) + 1):
                n0 = int(start + k * period)
                if n0 >= RAW_LEN:
                    break
                tt = np.arange(RAW_LEN - n0) / FS
                burst = a * np.exp(-tt * 180.0) * np.sin(2 * np.pi * fres * tt)
                sig[0, n0:] += burst
                sig[1, n0:] += 0.6 * burst
                sig[2, n0:] += 0.3 * burst
        sig *= mount_gain[:, None]
        sig += offset[:, None]
        sig += rng.normal(0, noise_sd, size=sig.shape)
        out[w] = sig
    return out


def build_dataset(path=DATA_PATH):
    if os.path.exists(path):
        d = np.load(path)
        return d["X"], d["y"], d["rig"]
    rng = np.random.default_rng(SEED)
    X, y, rig = [], [], []
    rig_id = 0
    for label in range(len(CLASSES)):
        for _ in range(N_RIGS):
            X.append(_rig_windows(rng, label))
            y.append(np.full(WINDOWS_PER_RIG, label))
            rig.append(np.full(WINDOWS_PER_RIG, rig_id))
            rig_id += 1
    X = np.concatenate(X).astype(np.float32)
    y = np.concatenate(y).astype(np.int64)
    rig = np.concatenate(rig).astype(np.int64)
    np.savez_compressed(path, X=X, y=y, rig=rig)
    return X, y, rig


def split_by_rig(y, rig, seed=SEED):
    rng = np.random.default_rng(seed + 1)
    val_rigs = []
    for label in np.unique(y):
        rigs = np.unique(rig[y == label])
        val_rigs.extend(rng.choice(rigs, size=VAL_RIGS, replace=False).tolist())
    is_val = np.isin(rig, val_rigs)
    return np.where(~is_val)[0], np.where(is_val)[0]


class VibrationWindows(Dataset):
    def __init__(self, X, y, train, scale):
        self.X = X
        self.y = y
        self.train = train
        self.scale = scale

    def __len__(self):
        return len(self.X)

    def __getitem__(self, i):
        x = self.X[i]
        if self.train:
            s = np.random.randint(0, RAW_LEN - WIN + 1)
            x = x[:, s:s + WIN]
            x = x * np.random.uniform(0.9, 1.1)
            x = x + np.random.normal(0, 0.01, size=x.shape)
        else:
            s = (RAW_LEN - WIN) // 2
            x = x[:, s:s + WIN]
        x = x - x.mean(axis=1, keepdims=True)
        x = x / self.scale
        return torch.from_numpy(x.astype(np.float32)), int(self.y[i])


def seed_worker(worker_id):
    np.random.seed(torch.initial_seed() % 2**32)


def make_loaders():
    X, y, rig = build_dataset()
    tr_idx, va_idx = split_by_rig(y, rig)
    Xc = X[tr_idx] - X[tr_idx].mean(axis=2, keepdims=True)
    scale = Xc.std(axis=(0, 2))[:, None].astype(np.float32)
    train_ds = VibrationWindows(X[tr_idx], y[tr_idx], train=True, scale=scale)
    val_ds = VibrationWindows(X[va_idx], y[va_idx], train=False, scale=scale)
    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True, drop_last=True,
                              generator=g, worker_init_fn=seed_worker)
    val_loader = DataLoader(val_ds, batch_size=256, shuffle=False)
    return train_loader, val_loader


# -------------------------------------------------------------------------- model
class ConvBlock(nn.Module):
    def __init__(self, cin, cout, k, stride=1):
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, k, stride=stride, padding=k // 2, bias=False)
        self.bn = nn.BatchNorm1d(cout)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


class VibNet(nn.Module):
    def __init__(self, in_ch=3, n_classes=len(CLASSES), width=24):
        super().__init__()
        self.features = nn.Sequential(
            ConvBlock(in_ch, width, 9, stride=2),
            ConvBlock(width, width, 5),
            nn.MaxPool1d(2),
            ConvBlock(width, 2 * width, 5),
            ConvBlock(2 * width, 2 * width, 3),
            nn.MaxPool1d(2),
            ConvBlock(2 * width, 4 * width, 3),
            ConvBlock(4 * width, 4 * width, 3),
        )
        self.drop = nn.Dropout(0.2)
        self.head = nn.Linear(4 * width, n_classes)

    def forward(self, x):
        h = self.features(x)
        h = h.mean(dim=-1)
        return self.head(self.drop(h))


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y, label_smoothing=0.05)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY)


def make_target():
    torch.manual_seed(SEED)
    np.random.seed(SEED)
    train_loader, val_loader = make_loaders()
    model = VibNet()
    return {
        "model": model,
        "data": train_loader,
        "val_data": val_loader,
        "loss_fn": loss_fn,
        "optimizer": make_optimizer(model.parameters()),
        "make_optimizer": make_optimizer,
        "num_classes": len(CLASSES),
        "task": "classification",
    }


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


def main():
    torch.manual_seed(SEED)
    np.random.seed(SEED)
    torch.set_num_threads(1)
    train_loader, val_loader = make_loaders()
    print(f"train windows: {len(train_loader.dataset)}  val windows: {len(val_loader.dataset)}  "
          f"classes: {len(CLASSES)}")
    model = VibNet()
    opt = make_optimizer(model.parameters())
    steps = EPOCHS * len(train_loader)
    warmup = len(train_loader)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))

    best = 0.0
    for epoch in range(1, EPOCHS + 1):
        model.train()
        t0 = time.time()
        run_loss, run_correct, seen = 0.0, 0, 0
        for x, y in train_loader:
            logits = model(x)
            loss = F.cross_entropy(logits, y, label_smoothing=0.05)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            run_loss += loss.item() * len(y)
            run_correct += (logits.argmax(1) == y).sum().item()
            seen += len(y)
        val_loss, val_acc = evaluate(model, val_loader)
        best = max(best, val_acc)
        n_steps = len(train_loader)
        dt = time.time() - t0
        print(f"Epoch {epoch}/{EPOCHS}")
        print(f"{n_steps}/{n_steps} - {dt:.0f}s - {1000 * dt / n_steps:.0f}ms/step - "
              f"loss: {run_loss / seen:.4f} - accuracy: {run_correct / seen:.4f} - "
              f"val_loss: {val_loss:.4f} - val_accuracy: {val_acc:.4f} - "
              f"learning_rate: {opt.param_groups[0]['lr']:.4e}")
    print(f"best val_accuracy: {best:.4f}")


if __name__ == "__main__":
    t_start = time.time()
    main()
    print(f"total time: {time.time() - t_start:.1f}s")
