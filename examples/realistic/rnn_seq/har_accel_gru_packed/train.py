"""Activity recognition from wrist accelerometer windows with a GRU.

Recordings are segmented into variable-length windows (one activity per window),
padded per batch and fed through pack_padded_sequence so the GRU's final hidden
state is taken at each window's true last sample.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

torch.set_num_threads(1)

SEED = 7
ACTIVITIES = ["walking", "jogging", "upstairs", "downstairs", "sitting", "standing"]
SAMPLE_RATE_HZ = 20.0
MIN_LEN, MAX_LEN = 32, 120
N_TRAIN, N_VAL = 1280, 300
BATCH_SIZE = 32
EPOCHS = 10
LR = 2e-3
HIDDEN = 64


# ---------------------------------------------------------------------------
# synthetic accelerometer data

# (step frequency Hz, amplitude g, vertical bias, noise std) per activity
_PROFILES = {
    0: (1.8, 0.35, 0.00, 0.06),   # walking
    1: (2.7, 0.90, 0.00, 0.10),   # jogging
    2: (1.4, 0.40, 0.12, 0.06),   # upstairs
    3: (1.9, 0.50, -0.12, 0.07),  # downstairs
    4: (0.0, 0.00, 0.00, 0.02),   # sitting
    5: (0.0, 0.00, 0.00, 0.035),  # standing
}


def synth_window(label, length, rng):
    t = np.arange(length) / SAMPLE_RATE_HZ
    freq, amp, bias, noise = _PROFILES[label]
    freq = freq * rng.uniform(0.85, 1.15)
    amp = amp * rng.uniform(0.8, 1.2)
    phase = rng.uniform(0, 2 * math.pi)
    x = amp * 0.6 * np.sin(2 * math.pi * freq * t + phase)
    y = amp * 0.3 * np.sin(2 * math.pi * freq * 0.5 * t + phase / 2)
    z = 1.0 + bias + amp * np.abs(np.sin(2 * math.pi * freq * t + phase))
    if label == 4:  # sitting: device tilted, gravity split across axes
        tilt = rng.uniform(0.5, 0.9)
        x, z = x + math.sin(tilt), z - 1.0 + math.cos(tilt)
    sig = np.stack([x, y, z], axis=1)
    sig += rng.normal(0, noise, size=sig.shape)
    # slow drift from the sensor
    sig += np.linspace(0, rng.normal(0, 0.03), length)[:, None]
    return sig.astype(np.float32)


def generate_split(n, rng):
    labels = rng.integers(0, len(ACTIVITIES), size=n)
    lengths = rng.integers(MIN_LEN, MAX_LEN + 1, size=n)
    windows = [synth_window(int(l), int(T), rng) for l, T in zip(labels, lengths)]
    return windows, labels.astype(np.int64)


class AccelWindows(Dataset):
    def __init__(self, windows, labels, mean, std):
        self.windows = [(w - mean) / std for w in windows]
        self.labels = labels

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return torch.from_numpy(self.windows[i]), int(self.labels[i])


def pad_collate(batch):
    seqs, labels = zip(*batch)
    lengths = torch.tensor([s.shape[0] for s in seqs])
    labels = torch.tensor(labels)
    # pack_padded_sequence wants the batch sorted by decreasing length
    lengths, order = lengths.sort(descending=True)
    seqs = [seqs[i] for i in order]
    padded = nn.utils.rnn.pad_sequence(seqs, batch_first=True)
    return padded, lengths, labels


def build_loaders():
    rng = np.random.default_rng(SEED)
    tr_w, tr_y = generate_split(N_TRAIN, rng)
    va_w, va_y = generate_split(N_VAL, rng)
    stacked = np.concatenate(tr_w, axis=0)
    mean, std = stacked.mean(0), stacked.std(0) + 1e-6
    train_ds = AccelWindows(tr_w, tr_y, mean, std)
    val_ds = AccelWindows(va_w, va_y, mean, std)
    g = torch.Generator().manual_seed(SEED)
    train_dl = DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True, collate_fn=pad_collate, generator=g)
    val_dl = DataLoader(val_ds, batch_size=128, shuffle=False, collate_fn=pad_collate)
    return train_dl, val_dl


# ---------------------------------------------------------------------------
# model

class GRUClassifier(nn.Module):
    def __init__(self, n_features=3, hidden=HIDDEN, n_classes=len(ACTIVITIES)):
        super().__init__()
        self.gru = nn.GRU(n_features, hidden, num_layers=1, batch_first=True)
        self.head = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, n_classes))

    def forward(self, x, lengths):
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True)
        _, h_n = self.gru(packed)
        return self.head(h_n[-1])


def loss_fn(model, batch):
    x, lengths, y = batch
    return F.cross_entropy(model(x, lengths), y)


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR)


def build_model():
    torch.manual_seed(SEED)
    return GRUClassifier()


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    tot_loss, correct, n = 0.0, 0, 0
    for x, lengths, y in loader:
        logits = model(x, lengths)
        tot_loss += F.cross_entropy(logits, y, reduction="sum").item()
        correct += (logits.argmax(-1) == y).sum().item()
        n += y.numel()
    model.train()
    return tot_loss / n, correct / n


def make_target():
    train_dl, _ = build_loaders()
    it = iter(train_dl)
    data = [next(it) for _ in range(5)]
    return {
        "model": build_model(),
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "num_classes": len(ACTIVITIES),
        "task": "classification",
    }


def main():
    train_dl, val_dl = build_loaders()
    print(f"train windows: {len(train_dl.dataset)}, val windows: {len(val_dl.dataset)}, classes: {len(ACTIVITIES)}")
    model = build_model()
    optimizer = make_optimizer(model.parameters())
    steps = len(train_dl)
    for epoch in range(1, EPOCHS + 1):
        t0 = time.time()
        model.train()
        run_loss, run_correct, run_n = 0.0, 0, 0
        for batch in train_dl:
            x, lengths, y = batch
            optimizer.zero_grad()
            logits = model(x, lengths)
            loss = F.cross_entropy(logits, y)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()
            run_loss += loss.item() * y.numel()
            run_correct += (logits.argmax(-1) == y).sum().item()
            run_n += y.numel()
        val_loss, val_acc = evaluate(model, val_dl)
        dt = time.time() - t0
        print(f"Epoch {epoch}/{EPOCHS}")
        print(f"{steps}/{steps} - {dt:.0f}s - loss: {run_loss / run_n:.4f} - accuracy: {run_correct / run_n:.4f}"
              f" - val_loss: {val_loss:.4f} - val_accuracy: {val_acc:.4f}")


if __name__ == "__main__":
    main()
