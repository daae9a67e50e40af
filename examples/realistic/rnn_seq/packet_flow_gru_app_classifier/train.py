"""GRU traffic classifier: which application generated a network flow?

Each flow is a variable-length sequence of packets described by
(size, direction, inter-arrival time). Flows are synthesised from per-app
traffic profiles (fixed seed) and cached to flows.npz on first run.
"""
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence
from torch.utils.data import DataLoader, TensorDataset

HERE = os.path.dirname(os.path.abspath(__file__))
DATA_PATH = os.path.join(HERE, "flows.npz")

APPS = ["video", "web", "voip", "bulk_download", "gaming", "ssh"]
SEED = 7
N_FLOWS = 1800
MAX_LEN = 64
BATCH_SIZE = 64
EPOCHS = 12
LR = 2e-3
HIDDEN = 48

torch.set_num_threads(1)


# ----------------------------------------------------------------------------- data
def _handshake(rng):
    # SYN / SYN-ACK / ACK + TLS hello: the same for every app
    sizes = [60, 60, 54, rng.integers(300, 600), rng.integers(1200, 1500)]
    dirs = [1, -1, 1, 1, -1]
    iats = rng.exponential(15.0, size=5)
    return list(sizes), dirs, list(iats)


def _app_packets(app, n, rng):
    if app == "video":
        burst = rng.random(n) < 0.85
        sizes = np.where(burst, rng.normal(1380, 60, n), rng.normal(90, 20, n))
        dirs = np.where(burst, -1, 1)
        iats = np.where(rng.random(n) < 0.1, rng.exponential(400, n), rng.exponential(2, n))
    elif app == "web":
        up = rng.random(n) < 0.4
        sizes = np.where(up, rng.normal(450, 150, n), rng.normal(900, 400, n))
        dirs = np.where(up, 1, -1)
        iats = rng.exponential(60, n)
    elif app == "voip":
        dirs = np.where(np.arange(n) % 2 == 0, 1, -1)
        sizes = rng.normal(180, 15, n)
        iats = rng.normal(10, 2, n)
    elif app == "bulk_download":
        ack = np.arange(n) % 3 == 2
        sizes = np.where(ack, 54, rng.normal(1460, 20, n))
        dirs = np.where(ack, 1, -1)
        iats = rng.exponential(1.0, n)
    elif app == "gaming":
        up = rng.random(n) < 0.6
        sizes = np.where(up, rng.normal(110, 30, n), rng.normal(320, 120, n))
        dirs = np.where(up, 1, -1)
        iats = rng.normal(33, 10, n)
    else:  # ssh
        up = np.arange(n) % 2 == 0
        sizes = np.where(up, rng.normal(90, 10, n), rng.normal(110, 30, n))
        dirs = np.where(up, 1, -1)
        iats = np.where(up, rng.exponential(180, n), rng.exponential(5, n))
    return sizes, dirs, iats


def synthesize_flows(n_flows, rng):
    seqs, labels = [], []
    for _ in range(n_flows):
        y = int(rng.integers(len(APPS)))
        length = int(rng.integers(10, 91))
        s0, d0, i0 = _handshake(rng)
        s1, d1, i1 = _app_packets(APPS[y], length - len(s0), rng)
        sizes = np.clip(np.concatenate([s0, s1]), 40, 1514)
        dirs = np.concatenate([d0, d1]).astype(np.float32)
        iats = np.clip(np.concatenate([i0, i1]), 0.01, None)
        # capture noise: a few reordered / mis-sized packets
        noisy = rng.random(length) < 0.05
        sizes[noisy] = rng.uniform(40, 1514, noisy.sum())
        feats = np.stack([sizes, dirs, np.log1p(iats)], axis=1).astype(np.float32)
        seqs.append(feats)
        labels.append(y)
    return seqs, np.array(labels, dtype=np.int64)


def load_flows():
    if not os.path.exists(DATA_PATH):
        rng = np.random.default_rng(SEED)
        seqs, labels = synthesize_flows(N_FLOWS, rng)
        lengths = np.array([len(s) for s in seqs])
        tmp = DATA_PATH + f".{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            np.savez(f, packets=np.concatenate(seqs), lengths=lengths, labels=labels)
        os.replace(tmp, DATA_PATH)
    d = np.load(DATA_PATH)
    offsets = np.concatenate([[0], np.cumsum(d["lengths"])])
    seqs = [d["packets"][a:b] for a, b in zip(offsets[:-1], offsets[1:])]
    return seqs, d["labels"]


def pad_sequences(sequences, maxlen=None, dtype="float32", padding="pre", truncating="pre", value=0.0):
    """Same semantics as keras.preprocessing.sequence.pad_sequences."""
    if maxlen is None:
        maxlen = max(len(s) for s in sequences)
    feat_shape = np.asarray(sequences[0]).shape[1:]
    out = np.full((len(sequences), maxlen) + feat_shape, value, dtype=dtype)
    for i, s in enumerate(sequences):
        if len(s) == 0:
            continue
        trunc = s[-maxlen:] if truncating == "pre" else s[:maxlen]
        if padding == "post":
            out[i, :len(trunc)] = trunc
        else:
            out[i, -len(trunc):] = trunc
    return out


def make_datasets():
    seqs, labels = load_flows()
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(seqs))
    n_val = int(0.2 * len(seqs))
    val_idx, train_idx = idx[:n_val], idx[n_val:]

    train_packets = np.concatenate([seqs[i] for i in train_idx])
    mean, std = train_packets.mean(0), train_packets.std(0) + 1e-6

    def build(ids):
        normed = [(seqs[i] - mean) / std for i in ids]
        lengths = np.minimum([len(s) for s in normed], MAX_LEN)
        X = pad_sequences(normed, maxlen=MAX_LEN, dtype="float32")
        return TensorDataset(torch.from_numpy(X), torch.as_tensor(lengths, dtype=torch.int64),
                             torch.from_numpy(labels[ids]))

    return build(train_idx), build(val_idx)


# ----------------------------------------------------------------------------- model
class FlowGRU(nn.Module):
    def __init__(self, n_features=3, hidden=HIDDEN, n_classes=len(APPS)):
        super().__init__()
        self.gru = nn.GRU(n_features, hidden, batch_first=True)
        self.head = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Dropout(0.2), nn.Linear(hidden, n_classes))

    def forward(self, x, lengths):
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        _, h_n = self.gru(packed)
        return self.head(h_n[-1])


def loss_fn(model, batch):
    x, lengths, y = batch
    return F.cross_entropy(model(x, lengths), y)


def make_target():
    torch.manual_seed(SEED)
    train_ds, val_ds = make_datasets()
    model = FlowGRU()
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    train_loader = DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True)
    val_loader = DataLoader(val_ds, batch_size=256)
    return {"model": model, "data": train_loader, "val_data": val_loader, "loss_fn": loss_fn,
            "optimizer": optimizer, "num_classes": len(APPS), "task": "classification"}


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    tot_loss, correct, n = 0.0, 0, 0
    for x, lengths, y in loader:
        logits = model(x, lengths)
        tot_loss += F.cross_entropy(logits, y, reduction="sum").item()
        correct += (logits.argmax(1) == y).sum().item()
        n += len(y)
    model.train()
    return tot_loss / n, correct / n


def main():
    t = make_target()
    model, optimizer = t["model"], t["optimizer"]
    train_loader, val_loader = t["data"], t["val_data"]
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=2)
    print(f"Train on {len(train_loader.dataset)} samples, validate on {len(val_loader.dataset)} samples")
    steps = len(train_loader)
    for epoch in range(1, EPOCHS + 1):
        t0 = time.time()
        model.train()
        run_loss, correct, n = 0.0, 0, 0
        for batch in train_loader:
            x, lengths, y = batch
            logits = model(x, lengths)
            loss = F.cross_entropy(logits, y)
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()
            run_loss += loss.item() * len(y)
            correct += (logits.argmax(1) == y).sum().item()
            n += len(y)
        val_loss, val_acc = evaluate(model, val_loader)
        scheduler.step(val_loss)
        dt = time.time() - t0
        print(f"Epoch {epoch}/{EPOCHS}")
        print(f"{steps}/{steps} - {dt:.0f}s - loss: {run_loss / n:.4f} - accuracy: {correct / n:.4f}"
              f" - val_loss: {val_loss:.4f} - val_accuracy: {val_acc:.4f} - lr: {optimizer.param_groups[0]['lr']:.1e}")


if __name__ == "__main__":
    main()
