"""Repeat-purchase churn model for the web shop.

Reads the CRM export (customers.csv) and the order log (orders.csv), builds
per-customer RFM-style features as of day 365 and trains a small MLP to
predict whether the customer churned.
"""
import csv
import logging
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

DATA_DIR = Path(__file__).resolve().parent
AS_OF_DAY = 365
SEED = 7
VAL_FRACTION = 0.2
BATCH_SIZE = 64
EPOCHS = 20
LR = 2e-3
WEIGHT_DECAY = 1e-4
PLANS = ["basic", "plus", "pro"]
REGIONS = ["north", "south", "east", "west"]

log = logging.getLogger("churn")


def read_csv(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return {k: np.array([r[k] for r in rows]) for k in rows[0]}


def order_features(orders):
    """Aggregate the order log to one row per customer (sorted by customer id)."""
    cid, inv = np.unique(orders["customer_id"], return_inverse=True)
    day = orders["day"].astype(np.float64)
    amount = orders["amount"].astype(np.float64)
    items = orders["items"].astype(np.float64)
    returned = orders["returned"].astype(np.float64)

    n_orders = np.bincount(inv).astype(np.float64)
    spend = np.bincount(inv, weights=amount)
    first_day = np.full(len(cid), np.inf)
    last_day = np.full(len(cid), -np.inf)
    np.minimum.at(first_day, inv, day)
    np.maximum.at(last_day, inv, day)

    feats = {
        "n_orders": n_orders,
        "log_spend": np.log1p(spend),
        "avg_basket": spend / n_orders,
        "items_per_order": np.bincount(inv, weights=items) / n_orders,
        "return_rate": np.bincount(inv, weights=returned) / n_orders,
        "recency": AS_OF_DAY - last_day,
        "active_span": last_day - first_day,
    }
    return cid, feats


def one_hot(values, categories):
    return np.stack([(values == c).astype(np.float64) for c in categories], axis=1)


def build_dataset():
    customers = read_csv(DATA_DIR / "customers.csv")
    orders = read_csv(DATA_DIR / "orders.csv")

    cid, feats = order_features(orders)
    row_of = {c: i for i, c in enumerate(customers["customer_id"])}
    idx = np.array([row_of[c] for c in cid])

    tenure_days = AS_OF_DAY - customers["signup_day"].astype(np.float64)[idx]
    feats["log_tenure"] = np.log1p(tenure_days)
    feats["orders_per_month"] = feats["n_orders"] / (tenure_days / 30.0)
    feats["n_orders"] = np.log1p(feats["n_orders"])
    feats["recency_frac"] = feats["recency"] / tenure_days

    X = np.column_stack(
        list(feats.values())
        + [one_hot(customers["plan"][idx], PLANS), one_hot(customers["region"][idx], REGIONS)]
    ).astype(np.float32)
    y = customers["churned"].astype(np.float32)
    return X, y, list(feats) + PLANS + REGIONS


def split_and_scale(X, y):
    rng = np.random.default_rng(SEED)
    perm = rng.permutation(len(X))
    n_val = int(len(X) * VAL_FRACTION)
    va, tr = perm[:n_val], perm[n_val:]
    mean = X[tr].mean(axis=0)
    std = X[tr].std(axis=0) + 1e-6
    Xs = (X - mean) / std
    return (
        torch.from_numpy(Xs[tr]), torch.from_numpy(y[tr]),
        torch.from_numpy(Xs[va]), torch.from_numpy(y[va]),
    )


class ChurnMLP(nn.Module):
    def __init__(self, n_in, hidden=64, dropout=0.1):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(n_in, hidden), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden, hidden), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden, 1),
        )

    def forward(self, x):
        return self.net(x).squeeze(-1)


def compute_loss(model, batch):
    x, y = batch
    return nn.functional.binary_cross_entropy_with_logits(model(x), y)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY)


def iterate_batches(x, y, batch_size, generator=None):
    order = torch.randperm(len(x), generator=generator) if generator is not None else torch.arange(len(x))
    for start in range(0, len(x), batch_size):
        sel = order[start:start + batch_size]
        yield x[sel], y[sel]


def roc_auc(scores, labels):
    order = np.argsort(scores)
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    pos = labels == 1
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return (ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


@torch.no_grad()
def evaluate(model, x, y):
    model.eval()
    logits = model(x)
    loss = nn.functional.binary_cross_entropy_with_logits(logits, y).item()
    acc = ((logits > 0).float() == y).float().mean().item()
    auc = roc_auc(logits.numpy(), y.numpy())
    model.train()
    return loss, acc, auc


def setup():
    torch.manual_seed(SEED)
    X, y, names = build_dataset()
    x_tr, y_tr, x_va, y_va = split_and_scale(X, y)
    model = ChurnMLP(X.shape[1])
    return model, names, x_tr, y_tr, x_va, y_va


def make_target():
    model, _, x_tr, y_tr, _, _ = setup()
    data = list(iterate_batches(x_tr, y_tr, BATCH_SIZE))[:3]
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
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    model, names, x_tr, y_tr, x_va, y_va = setup()
    log.info("features (%d): %s", len(names), ", ".join(names))
    log.info("train=%d val=%d churn_rate_train=%.3f churn_rate_val=%.3f",
             len(x_tr), len(x_va), y_tr.mean().item(), y_va.mean().item())
    optimizer = make_optimizer(model.parameters())
    gen = torch.Generator().manual_seed(SEED)
    t0 = time.time()
    for epoch in range(1, EPOCHS + 1):
        model.train()
        total, n = 0.0, 0
        for batch in iterate_batches(x_tr, y_tr, BATCH_SIZE, gen):
            loss = compute_loss(model, batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(batch[0])
            n += len(batch[0])
        if epoch % 2 == 0 or epoch == 1:
            val_loss, val_acc, val_auc = evaluate(model, x_va, y_va)
            log.info("epoch %d train_loss=%.4f val_loss=%.4f val_acc=%.3f val_auc=%.3f",
                     epoch, total / n, val_loss, val_acc, val_auc)
    log.info("done in %.1fs", time.time() - t0)


if __name__ == "__main__":
    main()
