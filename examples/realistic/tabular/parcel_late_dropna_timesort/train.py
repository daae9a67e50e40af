"""Late-delivery classifier for parcel shipments (shipments.csv).

Rows with gaps are dropped (about 15% of the export), then everything is put in
time order and the most recent 20% of shipments is held out, so validation looks
like "train on the past, score next month's parcels".
"""
import csv
import datetime as dt
import logging
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn

logging.basicConfig(format="%(asctime)s %(levelname)s %(message)s", level=logging.INFO, stream=sys.stdout)
log = logging.getLogger("late_delivery")

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shipments.csv")
HUBS = ["AMS", "EIN", "RTM"]
NUMERIC = ["distance_km", "weight_kg", "n_stops", "network_load", "weather_severity",
           "hub_delay_min", "is_weekend"]
LOG1P = {"distance_km", "weight_kg"}
FEATURES = NUMERIC + ["hour_sin", "hour_cos"] + [f"hub_{h}" for h in HUBS]

cfg = {
    "seed": 3,
    "val_frac": 0.2,
    "batch_size": 128,
    "epochs": 20,
    "lr": 2e-3,
    "weight_decay": 1e-4,
    "hidden": 48,
}


def _num(s):
    return float(s) if s.strip() != "" else math.nan


def read_shipments(path):
    """One float table: [created_at (unix s), *FEATURES, late]; blanks become NaN."""
    table = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            ts = dt.datetime.strptime(r["created_at"], "%Y-%m-%d %H:%M:%S")
            hour = ts.hour + ts.minute / 60.0
            feats = [_num(r[c]) for c in NUMERIC]
            feats += [math.sin(2 * math.pi * hour / 24), math.cos(2 * math.pi * hour / 24)]
            feats += [1.0 if r["hub"] == h else 0.0 for h in HUBS]
            table.append([ts.timestamp()] + feats + [_num(r["late"])])
    return np.array(table, dtype=np.float64)


def temporal_split(table, val_frac):
    n_raw = len(table)
    table = table[~np.isnan(table).any(axis=1)]
    table = table[np.argsort(table[:, 0], kind="stable")]
    X = table[:, 1:-1].astype(np.float32)
    y = table[:, -1].astype(np.float32)
    for j, name in enumerate(FEATURES):
        if name in LOG1P:
            X[:, j] = np.log1p(X[:, j])
    cut = int(len(table) * (1 - val_frac))
    log.info("rows: %d read, %d complete, train %d (until %s), val %d (from %s)",
             n_raw, len(table), cut,
             dt.datetime.fromtimestamp(table[cut - 1, 0]).date(), len(table) - cut,
             dt.datetime.fromtimestamp(table[cut, 0]).date())
    return X[:cut], y[:cut], X[cut:], y[cut:]


def load_data():
    X_tr, y_tr, X_va, y_va = temporal_split(read_shipments(DATA), cfg["val_frac"])
    mu, sd = X_tr.mean(0), X_tr.std(0) + 1e-6
    X_tr, X_va = (X_tr - mu) / sd, (X_va - mu) / sd
    t = torch.from_numpy
    return t(X_tr), t(y_tr), t(X_va), t(y_va)


def build_model(n_in):
    h = cfg["hidden"]
    return nn.Sequential(nn.Linear(n_in, h), nn.ReLU(), nn.Dropout(0.1),
                         nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 1))


bce = nn.BCEWithLogitsLoss()


def compute_loss(model, batch):
    xb, yb = batch
    return bce(model(xb).squeeze(-1), yb)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=cfg["lr"], weight_decay=cfg["weight_decay"])


def batches(X, y, bs, gen):
    perm = torch.randperm(len(X), generator=gen)
    return [(X[perm[i:i + bs]], y[perm[i:i + bs]]) for i in range(0, len(X), bs)]


def roc_auc(scores, labels):
    order = np.argsort(scores)
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    pos = labels == 1
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return (ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


@torch.no_grad()
def evaluate(model, X, y):
    model.eval()
    logits = model(X).squeeze(-1)
    loss = bce(logits, y).item()
    acc = ((logits > 0).float() == y).float().mean().item()
    auc = roc_auc(logits.numpy(), y.numpy())
    model.train()
    return loss, auc, acc


def make_target():
    X_tr, y_tr, _, _ = load_data()
    torch.manual_seed(cfg["seed"])
    model = build_model(X_tr.shape[1])
    data = batches(X_tr, y_tr, cfg["batch_size"], torch.Generator().manual_seed(cfg["seed"]))[:3]
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
    torch.manual_seed(cfg["seed"])
    X_tr, y_tr, X_va, y_va = load_data()
    log.info("late rate: train %.3f val %.3f", y_tr.mean().item(), y_va.mean().item())
    model = build_model(X_tr.shape[1])
    opt = make_optimizer(model.parameters())
    gen = torch.Generator().manual_seed(cfg["seed"])
    for epoch in range(1, cfg["epochs"] + 1):
        tot, n = 0.0, 0
        for xb, yb in batches(X_tr, y_tr, cfg["batch_size"], gen):
            loss = compute_loss(model, (xb, yb))
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += loss.item() * len(yb)
            n += len(yb)
        val_loss, val_auc, val_acc = evaluate(model, X_va, y_va)
        log.info("epoch %d train_loss=%.4f val_loss=%.4f val_auc=%.3f val_acc=%.3f",
                 epoch, tot / n, val_loss, val_auc, val_acc)


if __name__ == "__main__":
    main()
