"""Network intrusion classifier: MLP over per-host flow aggregates (netflow_windows.csv)."""
import csv
import logging
import os
import sys

import numpy as np
import torch
import torch.nn as nn

logging.basicConfig(format="%(asctime)s %(levelname)s %(message)s", level=logging.INFO, stream=sys.stdout)
log = logging.getLogger(__name__)

HERE = os.path.dirname(os.path.abspath(__file__))
CSV_PATH = os.path.join(HERE, "netflow_windows.csv")
LOG_COLS = {"flows", "mean_duration_s", "bytes_out_kb", "bytes_in_kb", "pkts_per_flow",
            "distinct_dst_ports", "distinct_dst_hosts"}

SEED = 0
VAL_FRAC = 0.2
BATCH_SIZE = 64
EPOCHS = 25
LR = 1e-3
WEIGHT_DECAY = 1e-4


def load_table(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    feat_cols = [c for c in rows[0].keys() if c != "label"]
    classes = sorted({r["label"] for r in rows})
    X = np.array([[float(r[c]) for c in feat_cols] for r in rows], dtype=np.float32)
    y = np.array([classes.index(r["label"]) for r in rows], dtype=np.int64)
    for j, c in enumerate(feat_cols):
        if c in LOG_COLS:
            X[:, j] = np.log1p(X[:, j])
    return X, y, feat_cols, classes


def shuffle_split(X, y, val_frac, seed):
    # the export is grouped by scenario, so shuffle before cutting off the validation rows
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(X))
    X, y = X[perm], y[perm]
    n_val = int(len(X) * val_frac)
    return X[n_val:], y[n_val:], X[:n_val], y[:n_val]


def standardize(X_tr, X_va):
    mu = X_tr.mean(axis=0)
    sd = X_tr.std(axis=0) + 1e-6
    return (X_tr - mu) / sd, (X_va - mu) / sd


def prepare():
    X, y, feat_cols, classes = load_table(CSV_PATH)
    X_tr, y_tr, X_va, y_va = shuffle_split(X, y, VAL_FRAC, SEED)
    X_tr, X_va = standardize(X_tr, X_va)
    return (torch.from_numpy(X_tr), torch.from_numpy(y_tr),
            torch.from_numpy(X_va), torch.from_numpy(y_va), feat_cols, classes)


class FlowMLP(nn.Module):
    def __init__(self, n_in, n_classes, hidden=64, p_drop=0.1):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(n_in, hidden), nn.ReLU(), nn.Dropout(p_drop),
            nn.Linear(hidden, hidden), nn.ReLU(), nn.Dropout(p_drop),
            nn.Linear(hidden, n_classes),
        )

    def forward(self, x):
        return self.net(x)


loss_fn_ce = nn.CrossEntropyLoss()


def compute_loss(model, batch):
    xb, yb = batch
    return loss_fn_ce(model(xb), yb)


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR, weight_decay=WEIGHT_DECAY)


def iterate(X, y, batch_size, gen=None):
    idx = torch.randperm(len(X), generator=gen) if gen is not None else torch.arange(len(X))
    for i in range(0, len(X), batch_size):
        j = idx[i:i + batch_size]
        yield X[j], y[j]


@torch.no_grad()
def evaluate(model, X, y):
    model.eval()
    logits = model(X)
    loss = loss_fn_ce(logits, y).item()
    acc = (logits.argmax(1) == y).float().mean().item()
    model.train()
    return loss, acc


def make_target():
    X_tr, y_tr, _, _, feat_cols, classes = prepare()
    torch.manual_seed(SEED)
    model = FlowMLP(X_tr.shape[1], len(classes))
    data = list(iterate(X_tr, y_tr, BATCH_SIZE, torch.Generator().manual_seed(SEED)))[:3]
    return {
        "model": model,
        "batch": data[0],
        "data": data,
        "loss_fn": compute_loss,
        "optimizer": make_optimizer(model.parameters()),
        "make_optimizer": make_optimizer,
        "num_classes": len(classes),
        "task": "classification",
    }


def main():
    torch.manual_seed(SEED)
    X_tr, y_tr, X_va, y_va, feat_cols, classes = prepare()
    log.info("loaded %s: train=%d val=%d features=%d classes=%s",
             os.path.basename(CSV_PATH), len(X_tr), len(X_va), len(feat_cols), classes)
    counts = np.bincount(y_va.numpy(), minlength=len(classes))
    log.info("val class counts %s (majority baseline %.3f)", counts.tolist(), counts.max() / counts.sum())

    model = FlowMLP(X_tr.shape[1], len(classes))
    opt = make_optimizer(model.parameters())
    gen = torch.Generator().manual_seed(SEED)
    for epoch in range(1, EPOCHS + 1):
        total, n = 0.0, 0
        for batch in iterate(X_tr, y_tr, BATCH_SIZE, gen):
            loss = compute_loss(model, batch)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(batch[1])
            n += len(batch[1])
        val_loss, val_acc = evaluate(model, X_va, y_va)
        log.info("epoch %d train_loss=%.4f val_loss=%.4f val_acc=%.3f", epoch, total / n, val_loss, val_acc)
    log.info("final val_acc=%.3f", val_acc)


if __name__ == "__main__":
    main()
