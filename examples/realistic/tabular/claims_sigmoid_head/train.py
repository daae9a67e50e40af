"""Claim-review triage model: flags motor claims for manual review from policy/claim features."""
import csv
import logging
import os
import time

import numpy as np
import torch
import torch.nn as nn

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
log = logging.getLogger("claims")

HERE = os.path.dirname(os.path.abspath(__file__))
CSV_PATH = os.path.join(HERE, "motor_claims.csv")

CONFIG = dict(
    seed=1234,
    val_frac=0.2,
    batch_size=64,
    epochs=25,
    lr=2e-3,
    weight_decay=1e-4,
    hidden=64,
)


def load_table(path):
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        rows = [[float(v) for v in r] for r in reader]
    arr = np.asarray(rows, dtype=np.float64)
    return header, arr


def build_features(header, arr):
    col = {name: i for i, name in enumerate(header)}
    X = np.stack([
        arr[:, col["driver_age"]],
        np.log(arr[:, col["vehicle_value"]]),
        arr[:, col["annual_km"]] / 1000.0,
        arr[:, col["prior_claims"]],
        arr[:, col["policy_years"]],
        np.log1p(arr[:, col["claim_amount"]]),
        arr[:, col["claim_amount"]] / arr[:, col["vehicle_value"]],
        np.log1p(arr[:, col["days_to_report"]]),
        arr[:, col["night_incident"]],
    ], axis=1)
    y = arr[:, col["flagged"]]
    return X.astype(np.float32), y.astype(np.float32)


def split_and_scale(X, y, val_frac, seed):
    rng = np.random.default_rng(seed)
    idx = rng.permutation(len(X))
    n_val = int(len(X) * val_frac)
    val_idx, tr_idx = idx[:n_val], idx[n_val:]
    mu = X[tr_idx].mean(axis=0)
    sd = X[tr_idx].std(axis=0) + 1e-6
    Xs = (X - mu) / sd
    return (Xs[tr_idx], y[tr_idx]), (Xs[val_idx], y[val_idx])


def make_batches(X, y, batch_size, shuffle, generator=None):
    n = len(X)
    order = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
    Xt, yt = torch.from_numpy(X), torch.from_numpy(y)
    for i in range(0, n, batch_size):
        j = order[i:i + batch_size]
        yield Xt[j], yt[j]


def build_model(n_features, hidden):
    return nn.Sequential(
        nn.Linear(n_features, hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden // 2),
        nn.ReLU(),
        nn.Linear(hidden // 2, 1),
        nn.Sigmoid(),
    )


criterion = nn.BCEWithLogitsLoss()


def compute_loss(model, batch):
    xb, yb = batch
    out = model(xb).squeeze(-1)
    return criterion(out, yb)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=CONFIG["lr"], weight_decay=CONFIG["weight_decay"])


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
    losses, probs = [], []
    for xb, yb in make_batches(X, y, 512, shuffle=False):
        losses.append(compute_loss(model, (xb, yb)).item() * len(xb))
        probs.append(torch.sigmoid(model(xb).squeeze(-1)))
    model.train()
    p = torch.cat(probs).numpy()
    acc = float(((p > 0.5) == (y == 1)).mean())
    return sum(losses) / len(X), acc, roc_auc(p, y)


def prepare_data():
    header, arr = load_table(CSV_PATH)
    X, y = build_features(header, arr)
    return split_and_scale(X, y, CONFIG["val_frac"], CONFIG["seed"])


def make_target():
    torch.manual_seed(CONFIG["seed"])
    (Xtr, ytr), _ = prepare_data()
    model = build_model(Xtr.shape[1], CONFIG["hidden"])
    g = torch.Generator().manual_seed(CONFIG["seed"])
    data = [b for _, b in zip(range(3), make_batches(Xtr, ytr, CONFIG["batch_size"], True, g))]
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
    torch.manual_seed(CONFIG["seed"])
    (Xtr, ytr), (Xva, yva) = prepare_data()
    log.info("loaded %d train / %d val rows, %d features, positive rate %.3f",
             len(Xtr), len(Xva), Xtr.shape[1], ytr.mean())
    model = build_model(Xtr.shape[1], CONFIG["hidden"])
    optimizer = make_optimizer(model.parameters())
    g = torch.Generator().manual_seed(CONFIG["seed"])
    best_auc = 0.0
    for epoch in range(1, CONFIG["epochs"] + 1):
        t0 = time.time()
        model.train()
        total, seen = 0.0, 0
        for xb, yb in make_batches(Xtr, ytr, CONFIG["batch_size"], True, g):
            loss = compute_loss(model, (xb, yb))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(xb)
            seen += len(xb)
        val_loss, val_acc, val_auc = evaluate(model, Xva, yva)
        best_auc = max(best_auc, val_auc)
        log.info("epoch %d train_loss=%.4f val_loss=%.4f val_acc=%.3f val_auc=%.3f time=%.2fs",
                 epoch, total / seen, val_loss, val_acc, val_auc, time.time() - t0)
    log.info("done: best val_auc=%.3f final val_acc=%.3f", best_auc, val_acc)


if __name__ == "__main__":
    main()
