"""Courier attrition: per-courier delivery stats for the last quarter + HR table -> left within 90 days."""
import csv
import logging
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

HERE = Path(__file__).resolve().parent
VEHICLES = ["bike", "ebike", "scooter", "car"]
LATE_MIN = 35
SEED = 4
EPOCHS = 30
BATCH_SIZE = 128
LR = 1e-3

log = logging.getLogger("attrition")


def read_table(path):
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    return {c: np.array([r[c] for r in rows]) for c in reader.fieldnames}


def delivery_stats(deliveries):
    """Group the delivery log by courier_id -> one row per courier (sorted by id)."""
    ids, g = np.unique(deliveries["courier_id"], return_inverse=True)
    n = len(ids)
    km = deliveries["distance_km"].astype(float)
    minutes = deliveries["minutes"].astype(float)
    tip = deliveries["tip_eur"].astype(float)
    rating = deliveries["rating"].astype(float)
    day = deliveries["day"].astype(int)

    cnt = np.bincount(g, minlength=n).astype(float)
    mean = lambda v: np.bincount(g, weights=v, minlength=n) / cnt
    last = np.zeros(n, dtype=int)
    np.maximum.at(last, g, day)
    days_active = np.array([len(set(day[g == k])) for k in range(n)], dtype=float)
    return {
        "courier_id": ids,
        "n_deliveries": cnt,
        "mean_km": mean(km),
        "mean_minutes": mean(minutes),
        "late_rate": mean((minutes > LATE_MIN).astype(float)),
        "mean_tip": mean(tip),
        "mean_rating": mean(rating),
        "low_rating_rate": mean((rating <= 3).astype(float)),
        "days_active": days_active,
        "days_since_last": 90 - last.astype(float),
    }


def merge_on(left, right, key):
    keys, li, ri = np.intersect1d(left[key], right[key], assume_unique=True, return_indices=True)
    merged = {key: keys}
    merged.update({c: v[li] for c, v in left.items() if c != key})
    merged.update({c: v[ri] for c, v in right.items() if c != key})
    return merged


def load_dataset():
    stats = delivery_stats(read_table(HERE / "deliveries.csv"))
    couriers = read_table(HERE / "couriers.csv")
    df = merge_on(stats, couriers, key="courier_id")
    numeric = ["n_deliveries", "mean_km", "mean_minutes", "late_rate", "mean_tip", "mean_rating",
               "low_rating_rate", "days_active", "days_since_last"]
    X = np.column_stack([df[c].astype(float) for c in numeric]
                        + [df["tenure_months"].astype(float)]
                        + [(df["vehicle"] == v).astype(float) for v in VEHICLES])
    X[:, 0] = np.log1p(X[:, 0])
    y = df["left_within_90d"].astype(np.float32)
    return X.astype(np.float32), y


def split(X, y, val_frac=0.25):
    perm = np.random.default_rng(SEED).permutation(len(X))
    n_val = int(len(X) * val_frac)
    va, tr = perm[:n_val], perm[n_val:]
    mu, sd = X[tr].mean(0), X[tr].std(0) + 1e-6
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a))
    return (t((X[tr] - mu) / sd), t(y[tr])), (t((X[va] - mu) / sd), t(y[va]))


class AttritionNet(nn.Module):
    def __init__(self, n_in):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(n_in, 64), nn.ReLU(), nn.Dropout(0.2),
                                  nn.Linear(64, 32), nn.ReLU(), nn.Dropout(0.2))
        self.head = nn.Linear(32, 1)

    def forward(self, x):
        return self.head(self.body(x)).squeeze(-1)


bce = nn.BCEWithLogitsLoss()


def compute_loss(model, batch):
    x, y = batch
    return bce(model(x), y)


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR, weight_decay=1e-4)


def minibatches(x, y, bs, order=None):
    order = torch.arange(len(x)) if order is None else order
    for i in range(0, len(order), bs):
        j = order[i:i + bs]
        yield x[j], y[j]


def roc_auc(score, label):
    r = np.empty(len(score))
    r[np.argsort(score)] = np.arange(1, len(score) + 1)
    p = label == 1
    return (r[p].sum() - p.sum() * (p.sum() + 1) / 2) / (p.sum() * (~p).sum())


@torch.no_grad()
def evaluate(model, x, y):
    model.eval()
    logits = model(x)
    out = bce(logits, y).item(), ((logits > 0).float() == y).float().mean().item(), roc_auc(logits.numpy(), y.numpy())
    model.train()
    return out


def make_target():
    torch.manual_seed(SEED)
    X, y = load_dataset()
    (xtr, ytr), _ = split(X, y)
    model = AttritionNet(xtr.shape[1])
    data = list(minibatches(xtr, ytr, BATCH_SIZE))[:3]
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
    (xtr, ytr), (xva, yva) = split(X, y)
    log.info("couriers=%d features=%d train=%d val=%d attrition=%.3f (val majority acc %.3f)",
             len(X), X.shape[1], len(xtr), len(xva), y.mean(), max(yva.mean().item(), 1 - yva.mean().item()))
    model = AttritionNet(xtr.shape[1])
    opt = make_optimizer(model.parameters())
    g = torch.Generator().manual_seed(SEED)
    for epoch in range(1, EPOCHS + 1):
        run, n = 0.0, 0
        for batch in minibatches(xtr, ytr, BATCH_SIZE, torch.randperm(len(xtr), generator=g)):
            opt.zero_grad()
            loss = compute_loss(model, batch)
            loss.backward()
            opt.step()
            run += loss.item() * len(batch[1])
            n += len(batch[1])
        val_loss, val_acc, val_auc = evaluate(model, xva, yva)
        log.info("epoch %d train_loss=%.4f val_loss=%.4f val_acc=%.3f val_auc=%.3f",
                 epoch, run / n, val_loss, val_acc, val_auc)


if __name__ == "__main__":
    main()
