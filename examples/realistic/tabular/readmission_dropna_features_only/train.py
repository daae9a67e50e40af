"""30-day readmission classifier (MLP on a tabular EHR extract)."""
import argparse
import csv
import math
import os
import time

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

import make_csv

HERE = os.path.dirname(os.path.abspath(__file__))
FEATURES = ["age", "bmi", "n_prior_admits", "los_days", "n_meds", "hba1c",
            "creatinine", "systolic_bp", "ed_visits_6m", "lives_alone"]
TARGET = "readmitted_30d"

parser = argparse.ArgumentParser()
parser.add_argument("--csv", default=os.path.join(HERE, "readmissions.csv"))
parser.add_argument("--epochs", type=int, default=25)
parser.add_argument("--batch-size", type=int, default=128)
parser.add_argument("--lr", type=float, default=1e-3)
parser.add_argument("--weight-decay", type=float, default=1e-4)
parser.add_argument("--val-frac", type=float, default=0.2)
parser.add_argument("--seed", type=int, default=0)


def load_table(path):
    with open(make_csv.ensure(path)) as f:
        rows = list(csv.DictReader(f))
    X = np.array([[float(r[c]) if r[c] != "" else np.nan for c in FEATURES] for r in rows],
                 dtype=np.float32)
    y = np.array([int(r[TARGET]) for r in rows], dtype=np.float32)
    return X, y


def drop_incomplete(X):
    """Patients with an incomplete lab panel are excluded from the cohort."""
    complete = ~np.isnan(X).any(axis=1)
    return X[complete]


def split_and_scale(X, y, val_frac, seed):
    rng = np.random.default_rng(seed)
    n = len(X)
    idx = rng.permutation(n)
    n_val = int(n * val_frac)
    va, tr = idx[:n_val], idx[n_val:]
    mu, sd = X[tr].mean(0), X[tr].std(0) + 1e-6
    Xs = (X - mu) / sd
    return (Xs[tr], y[tr]), (Xs[va], y[va])


class ReadmitMLP(nn.Module):
    def __init__(self, d_in, hidden=(64, 32), p_drop=0.1):
        super().__init__()
        layers, d = [], d_in
        for h in hidden:
            layers += [nn.Linear(d, h), nn.ReLU(), nn.Dropout(p_drop)]
            d = h
        layers.append(nn.Linear(d, 1))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x).squeeze(-1)


criterion = nn.BCEWithLogitsLoss()


def loss_fn(model, batch):
    xb, yb = batch
    return criterion(model(xb), yb)


def build(args):
    torch.manual_seed(args.seed)
    X, y = load_table(args.csv)
    X = drop_incomplete(X)
    (Xtr, ytr), (Xva, yva) = split_and_scale(X, y, args.val_frac, args.seed)
    train_ds = TensorDataset(torch.from_numpy(Xtr), torch.from_numpy(ytr))
    val_ds = TensorDataset(torch.from_numpy(Xva), torch.from_numpy(yva))
    g = torch.Generator().manual_seed(args.seed)
    train_dl = DataLoader(train_ds, batch_size=args.batch_size, shuffle=True, generator=g)
    val_dl = DataLoader(val_ds, batch_size=512)
    model = ReadmitMLP(len(FEATURES))
    opt = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    return model, opt, train_dl, val_dl


@torch.no_grad()
def evaluate(model, dl):
    model.eval()
    tot, correct, n = 0.0, 0, 0
    for xb, yb in dl:
        logits = model(xb)
        tot += criterion(logits, yb).item() * len(yb)
        correct += ((logits > 0).float() == yb).sum().item()
        n += len(yb)
    model.train()
    return tot / n, correct / n


def bar(done, total, width=30):
    k = int(width * done / total)
    return "[" + "=" * max(k - 1, 0) + (">" if k < width else "=") + "." * (width - k) + "]"


def main():
    args = parser.parse_args()
    model, opt, train_dl, val_dl = build(args)
    print(f"train samples: {len(train_dl.dataset)}, val samples: {len(val_dl.dataset)}, "
          f"positive rate: {train_dl.dataset.tensors[1].mean():.3f}")
    steps = len(train_dl)
    for epoch in range(1, args.epochs + 1):
        t0 = time.time()
        model.train()
        tot, correct, n = 0.0, 0, 0
        for xb, yb in train_dl:
            opt.zero_grad()
            logits = model(xb)
            loss = criterion(logits, yb)
            loss.backward()
            opt.step()
            tot += loss.item() * len(yb)
            correct += ((logits.detach() > 0).float() == yb).sum().item()
            n += len(yb)
        val_loss, val_acc = evaluate(model, val_dl)
        dt = time.time() - t0
        print(f"Epoch {epoch}/{args.epochs}")
        print(f"{steps}/{steps} {bar(steps, steps)} - {dt:.0f}s {1000 * dt / steps:.0f}ms/step"
              f" - loss: {tot / n:.4f} - accuracy: {correct / n:.4f}"
              f" - val_loss: {val_loss:.4f} - val_accuracy: {val_acc:.4f}")


def make_target():
    args = parser.parse_args([])
    model, opt, train_dl, _ = build(args)
    return {"model": model, "batch": next(iter(train_dl)), "loss_fn": loss_fn,
            "optimizer": opt, "num_classes": 2}


if __name__ == "__main__":
    main()
