"""Pump fault classifier (normal / bearing wear / cavitation) from a snapshot of 8 sensor channels."""
import csv
import logging
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
log = logging.getLogger("pump")

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pump_readings.csv")
SENTINEL = -999.0
CLASSES = ["normal", "bearing", "cavitation"]

SEED = 7
BATCH_SIZE = 128
EPOCHS = 30
LR = 1e-3
HIDDEN = 64
DROPOUT = 0.1


def load_dataset(path=DATA):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header, body = rows[0], rows[1:]
    table = np.array(body, dtype=np.float64)
    X = table[:, :-1].astype(np.float32)
    y = table[:, -1].astype(np.int64)
    valid = (X != SENTINEL).all(axis=1)
    X, y = X[valid], y[valid]
    log.info("read %d rows x %d channels from %s, dropped %d with a missing channel",
             len(table), X.shape[1], os.path.basename(path), int((~valid).sum()))
    return header[:-1], X, y


def train_val_split(X, y, val_frac=0.2, seed=SEED):
    rng = np.random.default_rng(seed)
    idx = rng.permutation(len(X))
    n_val = int(round(val_frac * len(X)))
    va, tr = idx[:n_val], idx[n_val:]
    return (X[tr], y[tr]), (X[va], y[va])


class Standardizer:
    def fit(self, X):
        self.mean = X.mean(axis=0)
        self.std = X.std(axis=0) + 1e-6
        return self

    def __call__(self, X):
        return ((X - self.mean) / self.std).astype(np.float32)


class FaultNet(nn.Module):
    def __init__(self, n_in, n_classes, hidden=HIDDEN, dropout=DROPOUT):
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(n_in, hidden), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden, hidden), nn.ReLU(), nn.Dropout(dropout),
        )
        self.head = nn.Linear(hidden, n_classes)

    def forward(self, x):
        return self.head(self.body(x))


def iterate(X, y, batch_size, shuffle=False, gen=None):
    X, y = torch.from_numpy(X), torch.from_numpy(y)
    order = torch.randperm(len(X), generator=gen) if shuffle else torch.arange(len(X))
    for s in range(0, len(X), batch_size):
        j = order[s:s + batch_size]
        yield X[j], y[j]


def compute_loss(model, batch):
    xb, yb = batch
    return F.cross_entropy(model(xb), yb)


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR)


def get_data():
    _, X, y = load_dataset()
    (Xtr, ytr), (Xva, yva) = train_val_split(X, y)
    scaler = Standardizer().fit(Xtr)
    return (scaler(Xtr), ytr), (scaler(Xva), yva)


@torch.no_grad()
def evaluate(model, X, y):
    model.eval()
    tot_loss, correct = 0.0, 0
    for xb, yb in iterate(X, y, 1024):
        logits = model(xb)
        tot_loss += F.cross_entropy(logits, yb, reduction="sum").item()
        correct += (logits.argmax(1) == yb).sum().item()
    model.train()
    return tot_loss / len(X), correct / len(X)


def make_target():
    torch.manual_seed(SEED)
    (Xtr, ytr), _ = get_data()
    model = FaultNet(Xtr.shape[1], len(CLASSES))
    gen = torch.Generator().manual_seed(SEED)
    data = []
    for b in iterate(Xtr, ytr, BATCH_SIZE, shuffle=True, gen=gen):
        data.append(b)
        if len(data) == 3:
            break
    return {"model": model, "batch": data[0], "data": data, "loss_fn": compute_loss,
            "optimizer": make_optimizer(model.parameters()), "make_optimizer": make_optimizer,
            "num_classes": len(CLASSES), "task": "classification"}


def main():
    torch.manual_seed(SEED)
    (Xtr, ytr), (Xva, yva) = get_data()
    counts = np.bincount(ytr, minlength=len(CLASSES))
    log.info("train=%d val=%d class counts %s", len(Xtr), len(Xva),
             dict(zip(CLASSES, counts.tolist())))
    model = FaultNet(Xtr.shape[1], len(CLASSES))
    opt = make_optimizer(model.parameters())
    gen = torch.Generator().manual_seed(SEED)
    best = (float("inf"), 0)
    for epoch in range(1, EPOCHS + 1):
        model.train()
        run_loss, n = 0.0, 0
        for xb, yb in iterate(Xtr, ytr, BATCH_SIZE, shuffle=True, gen=gen):
            opt.zero_grad()
            loss = compute_loss(model, (xb, yb))
            loss.backward()
            opt.step()
            run_loss += loss.item() * len(xb)
            n += len(xb)
        val_loss, val_acc = evaluate(model, Xva, yva)
        if val_loss < best[0]:
            best = (val_loss, epoch)
        log.info("epoch %d train_loss=%.4f val_loss=%.4f val_acc=%.3f", epoch, run_loss / n, val_loss, val_acc)
    log.info("best val_loss=%.4f at epoch %d", *best)


if __name__ == "__main__":
    main()
