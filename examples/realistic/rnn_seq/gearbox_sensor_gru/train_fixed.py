"""Fault classification for gearbox test-rig recordings.

Each recording is a variable-length multichannel trace (vibration, bearing
temperature, motor current) sampled at 10 Hz. A packed GRU reads the trace and
classifies it into one of five rig states.
"""
import time

import numpy as np
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_sequence
from torch.utils.data import DataLoader, Dataset

SEED = 7
CLASSES = ["normal", "imbalance", "misalignment", "overload", "overheating"]
N_RECORDINGS = 1200
MIN_LEN, MAX_LEN = 30, 60
BATCH_SIZE = 64
EPOCHS = 12
LR = 5e-3
HIDDEN = 32

torch.manual_seed(SEED)
np.random.seed(SEED)
torch.set_num_threads(1)


def simulate_recording(rng, label):
    T = rng.integers(MIN_LEN, MAX_LEN + 1)
    t = np.arange(T) / 10.0
    rpm = rng.uniform(0.9, 1.3)
    phase = rng.uniform(0, 2 * np.pi)

    vib_amp = rng.uniform(0.8, 1.2)
    harmonic = 0.0
    current_level = rng.uniform(9.0, 11.0)
    temp0 = rng.uniform(38.0, 46.0)
    temp_slope = rng.normal(0.0, 0.01)

    if label == 1:
        vib_amp *= rng.uniform(1.7, 2.3)
    elif label == 2:
        harmonic = rng.uniform(0.5, 0.8)
    elif label == 3:
        current_level *= rng.uniform(1.25, 1.4)
    elif label == 4:
        temp_slope = rng.uniform(0.04, 0.08)

    w = 2 * np.pi * rpm * t
    vib = vib_amp * (np.sin(w + phase) + harmonic * np.sin(2 * w + 2 * phase))
    vib = vib * (1 + 0.05 * rng.standard_normal(T)) + 0.15 * vib_amp * rng.standard_normal(T)
    temp = temp0 + temp_slope * np.arange(T) + 0.3 * rng.standard_normal(T)
    current = current_level * (1 + 0.03 * np.sin(w + phase) + 0.02 * rng.standard_normal(T))
    return np.stack([vib, temp, current], axis=1).astype(np.float32)


def generate_recordings(n, seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, len(CLASSES), size=n)
    recs = [simulate_recording(rng, int(y)) for y in labels]
    return recs, labels.astype(np.int64)


class RecordingDataset(Dataset):
    def __init__(self, recordings, labels, mean, std):
        self.recordings = recordings
        self.labels = labels
        self.mean = mean
        self.std = std

    def __len__(self):
        return len(self.recordings)

    def __getitem__(self, idx):
        x = self.recordings[idx]
        x = (x - self.mean) / self.std
        return torch.from_numpy(x), int(self.labels[idx])


def pad_collate(batch):
    seqs, labels = zip(*batch)
    lengths = torch.tensor([len(s) for s in seqs], dtype=torch.long)
    padded = pad_sequence(seqs, batch_first=True)
    return padded, lengths, torch.tensor(labels, dtype=torch.long)


class FaultGRU(nn.Module):
    def __init__(self, n_features=3, hidden=HIDDEN, n_classes=len(CLASSES)):
        super().__init__()
        self.gru = nn.GRU(n_features, hidden, num_layers=1, batch_first=True)
        self.head = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Dropout(0.1),
                                  nn.Linear(hidden, n_classes))

    def forward(self, x, lengths):
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        _, h_n = self.gru(packed)
        return self.head(h_n[-1])


def build_loaders():
    recs, labels = generate_recordings(N_RECORDINGS, SEED)
    rng = np.random.default_rng(SEED + 1)
    perm = rng.permutation(len(recs))
    n_val = int(0.2 * len(recs))
    val_idx, train_idx = perm[:n_val], perm[n_val:]
    stacked = np.concatenate([recs[i] for i in train_idx], axis=0)
    mean, std = stacked.mean(axis=0), stacked.std(axis=0) + 1e-6
    train_ds = RecordingDataset([recs[i] for i in train_idx], labels[train_idx], mean, std)
    val_ds = RecordingDataset([recs[i] for i in val_idx], labels[val_idx], mean, std)
    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True,
                              collate_fn=pad_collate, generator=g)
    val_loader = DataLoader(val_ds, batch_size=256, shuffle=False, collate_fn=pad_collate)
    return train_loader, val_loader


criterion = nn.CrossEntropyLoss()


def loss_fn(model, batch):
    x, lengths, y = batch
    logits = model(x, lengths)
    return criterion(logits, y)


def make_target():
    torch.manual_seed(SEED)
    train_loader, val_loader = build_loaders()
    model = FaultGRU()
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    return {
        "model": model,
        "data": train_loader,
        "val_data": val_loader,
        "loss_fn": loss_fn,
        "optimizer": optimizer,
        "num_classes": len(CLASSES),
        "task": "classification",
    }


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    total_loss, correct, n = 0.0, 0, 0
    for x, lengths, y in loader:
        logits = model(x, lengths)
        total_loss += criterion(logits, y).item() * len(y)
        correct += (logits.argmax(1) == y).sum().item()
        n += len(y)
    return total_loss / n, correct / n


def main():
    target = make_target()
    model, optimizer = target["model"], target["optimizer"]
    train_loader, val_loader = target["data"], target["val_data"]
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=EPOCHS)
    steps = len(train_loader)
    t_start = time.time()
    for epoch in range(1, EPOCHS + 1):
        model.train()
        t0 = time.time()
        run_loss, run_correct, n = 0.0, 0, 0
        for batch in train_loader:
            x, lengths, y = batch
            optimizer.zero_grad()
            logits = model(x, lengths)
            loss = criterion(logits, y)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            run_loss += loss.item() * len(y)
            run_correct += (logits.argmax(1) == y).sum().item()
            n += len(y)
        scheduler.step()
        val_loss, val_acc = evaluate(model, val_loader)
        dt = time.time() - t0
        print(f"Epoch {epoch}/{EPOCHS}")
        print(f"{steps}/{steps} - {dt:.0f}s - {1000 * dt / steps:.0f}ms/step - loss: {run_loss / n:.4f}"
              f" - accuracy: {run_correct / n:.4f} - val_loss: {val_loss:.4f} - val_accuracy: {val_acc:.4f}")
    print(f"Training finished in {time.time() - t_start:.1f}s")


if __name__ == "__main__":
    main()
