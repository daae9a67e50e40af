"""Churn model for the streaming service: 90 days of activity events -> churned in the next month."""
import csv
import logging
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

HERE = Path(__file__).resolve().parent
SEED = 0
EPOCHS = 30
BATCH_SIZE = 64
LR = 1e-3
WEIGHT_DECAY = 1e-4
PLANS = ["basic", "standard", "premium"]

log = logging.getLogger("churn")


def read_table(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return {col: np.array([r[col] for r in rows]) for col in rows[0]}


def activity_features(events):
    """Aggregate the event log per customer (one row per customer_id)."""
    ids, row = np.unique(events["customer_id"], return_inverse=True)
    n = len(ids)
    kind = events["event"]
    minutes = events["minutes"].astype(np.float64)
    day = events["day"].astype(np.int64)

    def count(mask):
        return np.bincount(row, weights=mask.astype(np.float64), minlength=n)

    plays = count(kind == "play")
    skips = count(kind == "skip")
    support = count(kind == "support")
    pay_fail = count(kind == "payment_fail")
    play_minutes = np.bincount(row, weights=np.where(kind == "play", minutes, 0.0), minlength=n)
    last_day = np.full(n, -1, dtype=np.int64)
    np.maximum.at(last_day, row, day)
    first_day = np.full(n, 10**6, dtype=np.int64)
    np.minimum.at(first_day, row, day)

    feats = np.column_stack([
        np.log1p(plays),
        np.log1p(play_minutes),
        play_minutes / np.maximum(plays, 1),
        skips,
        skips / np.maximum(plays + skips, 1),
        support,
        pay_fail,
        89 - last_day,
        last_day - first_day,
    ])
    return ids, feats


def load_dataset():
    customers = read_table(HERE / "customers.csv")
    events = read_table(HERE / "events.csv")
    ids, activity = activity_features(events)
    activity = activity[np.searchsorted(ids, customers["customer_id"])]
    tenure = customers["tenure_months"].astype(np.float64)
    fee = customers["monthly_fee"].astype(np.float64)
    plan = np.stack([customers["plan"] == p for p in PLANS], axis=1).astype(np.float64)
    X = np.column_stack([activity, tenure, fee, plan]).astype(np.float32)
    y = customers["churned"].astype(np.float32)
    return X, y


def split_and_scale(X, y, val_frac=0.2, seed=SEED):
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(X))
    n_val = int(len(X) * val_frac)
    va, tr = perm[:n_val], perm[n_val:]
    mu = X[tr].mean(0)
    sd = X[tr].std(0) + 1e-6
    Xtr, Xva = (X[tr] - mu) / sd, (X[va] - mu) / sd
    return (torch.from_numpy(Xtr), torch.from_numpy(y[tr])), (torch.from_numpy(Xva), torch.from_numpy(y[va]))


class ChurnMLP(nn.Module):
    def __init__(self, n_in, hidden=64):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(n_in, hidden), nn.ReLU(), nn.Dropout(0.1),
            nn.Linear(hidden, hidden // 2), nn.ReLU(),
            nn.Linear(hidden // 2, 1),
        )

    def forward(self, x):
        return self.net(x).squeeze(-1)


criterion = nn.BCEWithLogitsLoss()


def compute_loss(model, batch):
    xb, yb = batch
    return criterion(model(xb), yb)


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR, weight_decay=WEIGHT_DECAY)


def batches(X, y, batch_size, shuffle, gen=None):
    idx = torch.randperm(len(X), generator=gen) if shuffle else torch.arange(len(X))
    for i in range(0, len(X), batch_size):
        j = idx[i:i + batch_size]
        yield X[j], y[j]


def auc(scores, labels):
    order = np.argsort(scores)
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    pos = labels == 1
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return (ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


@torch.no_grad()
def evaluate(model, X, y):
    model.eval()
    logits = model(X)
    loss = criterion(logits, y).item()
    acc = ((logits > 0).float() == y).float().mean().item()
    model.train()
    return loss, acc, auc(logits.numpy(), y.numpy())


def make_target():
    torch.manual_seed(SEED)
    X, y = load_dataset()
    (Xtr, ytr), _ = split_and_scale(X, y)
    model = ChurnMLP(Xtr.shape[1])
    data = [b for _, b in zip(range(3), batches(Xtr, ytr, BATCH_SIZE, shuffle=False))]
    return {
        "model": model,
        "batch": data[0],
        "data": data,
        "loss_fn": compute_loss,
        "optimizer": make_optimizer(model.parameters()),
        "make_optimizer": make_optimizer,
        "num_classes": 2,
        "task": "classification",
    }


def main():
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stdout)
    torch.manual_seed(SEED)
    X, y = load_dataset()
    (Xtr, ytr), (Xva, yva) = split_and_scale(X, y)
    log.info("customers=%d features=%d train=%d val=%d churn_rate=%.3f",
             len(X), X.shape[1], len(Xtr), len(Xva), float(y.mean()))

    model = ChurnMLP(Xtr.shape[1])
    optimizer = make_optimizer(model.parameters())
    gen = torch.Generator().manual_seed(SEED)
    best_auc = 0.0
    for epoch in range(1, EPOCHS + 1):
        model.train()
        total, seen = 0.0, 0
        for batch in batches(Xtr, ytr, BATCH_SIZE, shuffle=True, gen=gen):
            optimizer.zero_grad()
            loss = compute_loss(model, batch)
            loss.backward()
            optimizer.step()
            total += loss.item() * len(batch[1])
            seen += len(batch[1])
        val_loss, val_acc, val_auc = evaluate(model, Xva, yva)
        best_auc = max(best_auc, val_auc)
        log.info("epoch %d train_loss=%.4f val_loss=%.4f val_acc=%.3f val_auc=%.3f",
                 epoch, total / seen, val_loss, val_acc, val_auc)
    log.info("done best_val_auc=%.3f", best_auc)


if __name__ == "__main__":
    main()
