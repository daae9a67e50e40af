"""Churn model for the self-serve SaaS plans.

Per-customer usage features are aggregated from the 90-day event log
(events.csv) and combined with the account table (customers.csv), then a
small MLP is trained to predict `churned`.
"""
import csv
import logging
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

DATA_DIR = Path(__file__).resolve().parent
SEED = 0
WINDOW_DAYS = 90
VAL_FRAC = 0.2
BATCH_SIZE = 64
EPOCHS = 25
LR = 2e-3
WEIGHT_DECAY = 1e-4
EVENT_TYPES = ("login", "export", "ticket", "payment")
PLANS = ("basic", "pro", "team")

log = logging.getLogger("churn")


def read_events(path):
    cust, day, kind, amount = [], [], [], []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            cust.append(row["customer_id"])
            day.append(int(row["day"]))
            kind.append(row["event"])
            amount.append(float(row["amount"]))
    return np.array(cust), np.array(day), np.array(kind), np.array(amount)


def aggregate_events(cust, day, kind, amount):
    """Group the event log by customer; returns (customer_ids, feature matrix)."""
    ids, inv = np.unique(cust, return_inverse=True)
    n = len(ids)
    cols = []
    for k in EVENT_TYPES:
        cols.append(np.bincount(inv[kind == k], minlength=n))
    cols.append(np.bincount(inv, weights=amount, minlength=n))
    last_seen = np.full(n, -1)
    np.maximum.at(last_seen, inv, day)
    first_seen = np.full(n, WINDOW_DAYS)
    np.minimum.at(first_seen, inv, day)
    cols.append(WINDOW_DAYS - 1 - last_seen)           # days since last activity
    cols.append(last_seen - first_seen)                 # active span
    n_days = np.array([len(set(day[inv == j])) for j in range(n)])
    cols.append(n_days)
    feats = np.stack(cols, axis=1).astype(np.float64)
    feats[:, :5] = np.log1p(feats[:, :5])
    return ids, feats


def read_customers(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def build_dataset(data_dir=DATA_DIR):
    cust_ids, usage = aggregate_events(*read_events(data_dir / "events.csv"))
    customers = read_customers(data_dir / "customers.csv")

    static, labels = [], []
    for c in customers:
        tenure = -int(c["signup_day"])
        onehot = [float(c["plan"] == p) for p in PLANS]
        static.append([np.log1p(tenure), np.log1p(int(c["seats"]))] + onehot)
        labels.append(float(c["churned"]))

    X = np.array([np.concatenate([u, s]) for u, s in zip(usage, static)], dtype=np.float32)
    y = np.array(labels, dtype=np.float32)
    return X, y


def split_and_scale(X, y, seed=SEED):
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(X))
    n_val = int(len(X) * VAL_FRAC)
    va, tr = perm[:n_val], perm[n_val:]
    mean, std = X[tr].mean(0), X[tr].std(0) + 1e-6
    Xtr, Xva = (X[tr] - mean) / std, (X[va] - mean) / std
    return (torch.from_numpy(Xtr), torch.from_numpy(y[tr]),
            torch.from_numpy(Xva), torch.from_numpy(y[va]))


class ChurnMLP(nn.Module):
    def __init__(self, d_in, hidden=64, p_drop=0.1):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_in, hidden), nn.ReLU(), nn.Dropout(p_drop),
            nn.Linear(hidden, hidden), nn.ReLU(), nn.Dropout(p_drop),
            nn.Linear(hidden, 1),
        )

    def forward(self, x):
        return self.net(x).squeeze(-1)


criterion = nn.BCEWithLogitsLoss()


def loss_fn(model, batch):
    xb, yb = batch
    return criterion(model(xb), yb)


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR, weight_decay=WEIGHT_DECAY)


def batches(X, y, batch_size, generator=None, shuffle=True):
    idx = torch.randperm(len(X), generator=generator) if shuffle else torch.arange(len(X))
    for i in range(0, len(X), batch_size):
        j = idx[i:i + batch_size]
        yield X[j], y[j]


@torch.no_grad()
def evaluate(model, X, y):
    model.eval()
    logits = model(X)
    loss = criterion(logits, y).item()
    acc = ((logits > 0).float() == y).float().mean().item()
    model.train()
    return loss, acc


def make_target():
    torch.manual_seed(SEED)
    Xtr, ytr, Xva, yva = split_and_scale(*build_dataset())
    model = ChurnMLP(Xtr.shape[1])
    g = torch.Generator().manual_seed(SEED)
    data = list(batches(Xtr, ytr, BATCH_SIZE, generator=g))[:3]
    return {
        "model": model,
        "batch": data[0],
        "data": data,
        "loss_fn": loss_fn,
        "optimizer": make_optimizer(model.parameters()),
        "make_optimizer": make_optimizer,
        "num_classes": 2,
        "task": "classification",
    }


def main():
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    torch.manual_seed(SEED)
    X, y = build_dataset()
    log.info("dataset: %d customers x %d features, churn rate %.3f", X.shape[0], X.shape[1], y.mean())
    Xtr, ytr, Xva, yva = split_and_scale(X, y)
    log.info("train=%d val=%d (val majority acc %.3f)", len(Xtr), len(Xva),
             max(yva.mean().item(), 1 - yva.mean().item()))

    model = ChurnMLP(Xtr.shape[1])
    optimizer = make_optimizer(model.parameters())
    g = torch.Generator().manual_seed(SEED)
    t0 = time.time()
    for epoch in range(1, EPOCHS + 1):
        model.train()
        total, n = 0.0, 0
        for batch in batches(Xtr, ytr, BATCH_SIZE, generator=g):
            optimizer.zero_grad()
            loss = loss_fn(model, batch)
            loss.backward()
            optimizer.step()
            total += loss.item() * len(batch[1])
            n += len(batch[1])
        val_loss, val_acc = evaluate(model, Xva, yva)
        log.info("epoch %d train_loss=%.4f val_loss=%.4f val_acc=%.3f", epoch, total / n, val_loss, val_acc)
    log.info("done in %.1fs", time.time() - t0)


if __name__ == "__main__":
    main()
