"""Early-warning model: predict clinical deterioration within the next 12 h
from the hourly vital-sign history of an ICU stay (GRU over packed sequences)."""
import math
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_sequence
from torch.utils.data import DataLoader, Dataset

SEED = 7
N_STAYS = 2000
MIN_HOURS, MAX_HOURS = 12, 60
VITALS = ["heart_rate", "resp_rate", "spo2", "temp_c", "map_mmhg", "lactate"]
BATCH_SIZE = 64
EPOCHS = 10
LR = 2e-3
HIDDEN = 64
NOISE_STD = 0.1

torch.set_num_threads(1)


def simulate_stays(n, seed=SEED):
    """Hourly vitals per stay; label = deterioration event in the next 12 h."""
    rng = np.random.default_rng(seed)
    base = np.array([84.0, 17.0, 0.965, 37.0, 82.0, 1.6])
    between = np.array([10.0, 2.5, 0.008, 0.35, 8.0, 0.45])
    within = np.array([5.0, 1.5, 0.006, 0.15, 5.0, 0.15])
    frames = []
    for sid in range(n):
        T = int(rng.integers(MIN_HOURS, MAX_HOURS + 1))
        label = int(rng.random() < 0.4)
        mu = base + between * rng.standard_normal(6)
        eps = within * rng.standard_normal((T, 6))
        ar = np.zeros((T, 6))
        ar[0] = eps[0]
        for t in range(1, T):
            ar[t] = 0.7 * ar[t - 1] + eps[t]
        x = mu + ar
        # onset of physiological decline: hours before the end of the record
        onset = int(rng.integers(6, 12))
        ramp = np.clip((np.arange(T) - (T - onset)) / onset, 0.0, 1.0)
        if label:
            sev = rng.uniform(0.6, 1.4)
            x[:, 2] -= sev * 0.030 * ramp            # desaturation
            x[:, 0] += sev * 6.0 * ramp              # mild tachycardia
            x[:, 1] += sev * 1.5 * ramp
            x[:, 5] += sev * 0.25 * ramp
        else:
            # non-deteriorating stays also have transient HR/RR excursions
            if rng.random() < 0.5:
                x[:, 0] += rng.uniform(4, 9) * ramp
                x[:, 1] += rng.uniform(1, 2) * ramp
        x[:, 2] = np.clip(x[:, 2], 0.70, 1.0)
        frames.append(np.column_stack([np.full(T, sid), np.arange(T), x, np.full(T, label)]))
    df = pd.DataFrame(np.concatenate(frames), columns=["stay_id", "hour", *VITALS, "label"])
    return df.astype({"stay_id": int, "hour": int, "label": int})


def to_sequences(df):
    df = df.sort_values(["stay_id", "hour"])
    values = df[VITALS].to_numpy(dtype=np.float32)
    ids = df["stay_id"].to_numpy()
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    seqs = np.split(values, starts[1:])
    labels = df["label"].to_numpy()[starts]
    return seqs, labels


class VitalsDataset(Dataset):
    def __init__(self, seqs, labels, mean, std, train=False):
        self.seqs = seqs
        self.labels = labels
        self.mean = mean.astype(np.float32)
        self.std = std.astype(np.float32)
        self.train = train

    def __len__(self):
        return len(self.seqs)

    def augment(self, x):
        x = x + np.random.normal(0.0, NOISE_STD, size=x.shape).astype(np.float32)
        scale = np.random.uniform(0.95, 1.05)
        return (x * scale).astype(np.float32)

    def __getitem__(self, i):
        x = self.seqs[i]
        if self.train:
            x = self.augment(x)
        x = (x - self.mean) / self.std
        return torch.from_numpy(x.astype(np.float32)), int(self.labels[i])


def collate(batch):
    xs, ys = zip(*batch)
    lengths = torch.tensor([len(x) for x in xs])
    padded = pad_sequence(xs, batch_first=True)
    return padded, lengths, torch.tensor(ys)


class VitalsGRU(nn.Module):
    def __init__(self, n_features, hidden=HIDDEN, n_classes=2):
        super().__init__()
        self.gru = nn.GRU(n_features, hidden, batch_first=True)
        self.head = nn.Sequential(nn.Dropout(0.2), nn.Linear(hidden, n_classes))

    def forward(self, x, lengths):
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        _, h_n = self.gru(packed)
        return self.head(h_n[-1])


def build_data():
    np.random.seed(SEED)
    torch.manual_seed(SEED)
    df = simulate_stays(N_STAYS)
    stay_ids = np.random.permutation(df["stay_id"].unique())
    n_val = int(0.2 * len(stay_ids))
    val_df = df[df["stay_id"].isin(stay_ids[:n_val])]
    tr_df = df[df["stay_id"].isin(stay_ids[n_val:])]
    mean = tr_df[VITALS].mean().to_numpy()
    std = tr_df[VITALS].std().to_numpy()
    tr_seqs, tr_y = to_sequences(tr_df)
    va_seqs, va_y = to_sequences(val_df)
    train_ds = VitalsDataset(tr_seqs, tr_y, mean, std, train=True)
    val_ds = VitalsDataset(va_seqs, va_y, mean, std, train=False)
    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True,
                              collate_fn=collate, generator=g)
    val_loader = DataLoader(val_ds, batch_size=256, shuffle=False, collate_fn=collate)
    return train_loader, val_loader


criterion = nn.CrossEntropyLoss()


def loss_fn(model, batch):
    x, lengths, y = batch
    return criterion(model(x, lengths), y)


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR)


def make_target():
    train_loader, val_loader = build_data()
    model = VitalsGRU(len(VITALS))
    return {
        "model": model,
        "data": train_loader,
        "val_data": val_loader,
        "loss_fn": loss_fn,
        "optimizer": make_optimizer(model.parameters()),
        "num_classes": 2,
        "task": "classification",
    }


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    tot, correct, n = 0.0, 0, 0
    for x, lengths, y in loader:
        logits = model(x, lengths)
        tot += criterion(logits, y).item() * len(y)
        correct += (logits.argmax(1) == y).sum().item()
        n += len(y)
    model.train()
    return tot / n, correct / n


if __name__ == "__main__":
    t0 = time.time()
    train_loader, val_loader = build_data()
    model = VitalsGRU(len(VITALS))
    optimizer = make_optimizer(model.parameters())
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=EPOCHS)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"train stays: {len(train_loader.dataset)}  val stays: {len(val_loader.dataset)}  params: {n_params}")
    steps = len(train_loader)
    for epoch in range(1, EPOCHS + 1):
        print(f"Epoch {epoch}/{EPOCHS}")
        ep_t = time.time()
        model.train()
        run_loss, run_correct, seen = 0.0, 0, 0
        for x, lengths, y in train_loader:
            optimizer.zero_grad()
            logits = model(x, lengths)
            loss = criterion(logits, y)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            run_loss += loss.item() * len(y)
            run_correct += (logits.argmax(1) == y).sum().item()
            seen += len(y)
        scheduler.step()
        val_loss, val_acc = evaluate(model, val_loader)
        dt = time.time() - ep_t
        print(f"{steps}/{steps} - {dt:.0f}s {1000 * dt / steps:.0f}ms/step - loss: {run_loss / seen:.4f}"
              f" - accuracy: {run_correct / seen:.4f} - val_loss: {val_loss:.4f} - val_accuracy: {val_acc:.4f}")
    print(f"total time: {time.time() - t0:.1f}s")
