"""Bearing fault classification from raw vibration (1-D CNN with BatchNorm).

Synthetic accelerometer recordings from a test rig: shaft harmonics plus
fault-specific impulse trains excited at a structural resonance, random shaft
speed and load, sensor noise. Classes follow the usual bearing-fault taxonomy.
"""
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)

CLASSES = ["normal", "inner_race", "outer_race", "ball", "imbalance", "misalignment"]
FS = 2048          # Hz after decimation
RAW_LEN = 640      # recorded window
CROP_LEN = 512     # network input
BATCH_SIZE = 64
EPOCHS = 16
LR = 0.02
MOMENTUM = 0.9
WEIGHT_DECAY = 1e-4
SEED = 7


# ----------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------
def _impulse_train(t, rate, resonance, decay, jitter, rng):
    sig = np.zeros_like(t)
    period = 1.0 / rate
    t0 = rng.uniform(0, period)
    for k in range(int(t[-1] / period) + 2):
        tk = t0 + k * period + rng.normal(0, jitter * period)
        m = t >= tk
        dt = t[m] - tk
        sig[m] += rng.uniform(0.6, 1.0) * np.exp(-decay * dt) * np.sin(2 * np.pi * resonance * dt)
    return sig


def simulate_recording(label, rng):
    t = np.arange(RAW_LEN) / FS
    shaft = rng.uniform(22, 28)                       # Hz
    load = rng.uniform(0.7, 1.3)
    a1 = rng.uniform(0.6, 0.9) if label == 4 else rng.uniform(0.2, 0.35)   # 1x
    a2 = rng.uniform(0.3, 0.45) if label == 5 else rng.uniform(0.05, 0.12)  # 2x
    a3 = 0.12 if label == 5 else 0.02                                       # 3x
    x = a1 * np.sin(2 * np.pi * shaft * t + rng.uniform(0, 2 * np.pi))
    x += a2 * np.sin(2 * np.pi * 2 * shaft * t + rng.uniform(0, 2 * np.pi))
    x += a3 * np.sin(2 * np.pi * 3 * shaft * t + rng.uniform(0, 2 * np.pi))
    resonance = rng.uniform(550, 750)
    amp = 0.6 * load
    if label == 1:    # BPFI ~ 5.4x shaft
        x += amp * _impulse_train(t, 5.4 * shaft, resonance, 300, 0.02, rng)
    elif label == 2:  # BPFO ~ 3.6x shaft
        x += amp * _impulse_train(t, 3.6 * shaft, resonance, 300, 0.01, rng)
    elif label == 3:  # BSF ~ 2.3x shaft, weaker and more irregular
        x += 0.8 * amp * _impulse_train(t, 2.3 * shaft, resonance, 250, 0.05, rng)
    x += rng.normal(0, rng.uniform(0.1, 0.2), size=RAW_LEN)
    return x.astype(np.float32)


def make_split(n, seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, len(CLASSES), size=n)
    X = np.stack([simulate_recording(int(c), rng) for c in y])[:, None, :]
    return torch.from_numpy(X), torch.from_numpy(y.astype(np.int64))


def normalise(X, mean, std):
    return (X - mean) / std


def augment(x):
    """Random crop, polarity flip, gain jitter and additive noise on a batch."""
    n = x.shape[0]
    starts = torch.randint(0, RAW_LEN - CROP_LEN + 1, (n,))
    idx = starts[:, None] + torch.arange(CROP_LEN)[None, :]
    x = torch.gather(x, 2, idx[:, None, :])
    sign = torch.where(torch.rand(n, 1, 1) < 0.5, -1.0, 1.0)
    gain = torch.empty(n, 1, 1).uniform_(0.8, 1.25)
    return x * sign * gain + 0.05 * torch.randn_like(x)


def center_crop(x):
    s = (RAW_LEN - CROP_LEN) // 2
    return x[:, :, s:s + CROP_LEN]


def build_data(n_train=2400, n_val=600):
    X_tr, y_tr = make_split(n_train, SEED)
    X_va, y_va = make_split(n_val, SEED + 100)
    mean, std = X_tr.mean(), X_tr.std()
    X_tr, X_va = normalise(X_tr, mean, std), normalise(X_va, mean, std)
    g = torch.Generator().manual_seed(SEED)
    train_dl = DataLoader(TensorDataset(X_tr, y_tr), batch_size=BATCH_SIZE,
                          shuffle=True, drop_last=True, generator=g)
    val_dl = DataLoader(TensorDataset(X_va, y_va), batch_size=300)
    return train_dl, val_dl


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class ConvBlock(nn.Module):
    def __init__(self, cin, cout, k, stride=1, pool=True):
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, k, stride=stride, padding=k // 2, bias=False)
        self.bn = nn.BatchNorm1d(cout)
        self.pool = nn.MaxPool1d(2) if pool else nn.Identity()

    def forward(self, x):
        return self.pool(F.relu(self.bn(self.conv(x))))


class VibrationCNN(nn.Module):
    def __init__(self, num_classes=len(CLASSES)):
        super().__init__()
        # wide first kernel, WDCNN-style
        self.blocks = nn.Sequential(
            ConvBlock(1, 16, 33, stride=4),   # 128 -> 64
            ConvBlock(16, 32, 5),             # 32
            ConvBlock(32, 48, 3),             # 16
            ConvBlock(48, 64, 3, pool=False),
        )
        self.dropout = nn.Dropout(0.2)
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x):
        h = self.blocks(x).mean(dim=-1)
        return self.fc(self.dropout(h))


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(augment(x)), y)


def make_optimizer(params):
    return torch.optim.SGD(params, lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY, nesterov=True)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    tot, correct, n = 0.0, 0, 0
    for x, y in loader:
        logits = model(center_crop(x))
        tot += F.cross_entropy(logits, y, reduction="sum").item()
        correct += (logits.argmax(1) == y).sum().item()
        n += len(y)
    return tot / n, correct / n


def make_target():
    torch.manual_seed(SEED)
    train_dl, _ = build_data()
    data = []
    for i, batch in enumerate(train_dl):
        data.append(batch)
        if i == 5:
            break
    return {
        "model": VibrationCNN(),
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "num_classes": len(CLASSES),
        "task": "classification",
    }


def main():
    torch.manual_seed(SEED)
    t_data = time.time()
    train_dl, val_dl = build_data()
    print(f"loaded {len(train_dl.dataset)} train / {len(val_dl.dataset)} val recordings "
          f"in {time.time() - t_data:.1f}s")
    model = VibrationCNN()
    optimizer = make_optimizer(model.parameters())
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.1, patience=2)
    best_acc = 0.0
    for epoch in range(EPOCHS):
        model.train()
        t0 = time.time()
        tot, n = 0.0, 0
        for batch in train_dl:
            loss = loss_fn(model, batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            tot += loss.item() * len(batch[1])
            n += len(batch[1])
        val_loss, val_acc = evaluate(model, val_dl)
        scheduler.step(val_acc)
        best_acc = max(best_acc, val_acc)
        print(f"epoch {epoch:2d} | train_loss {tot / n:.4f} | val_loss {val_loss:.4f} | "
              f"val_acc {val_acc:.4f} | best {best_acc:.4f} | "
              f"lr {optimizer.param_groups[0]['lr']:.2e} | {1000 * (time.time() - t0):.0f}ms")


if __name__ == "__main__":
    main()
