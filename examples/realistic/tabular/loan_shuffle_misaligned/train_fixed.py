"""Loan default model (tabular MLP) trained on loans.csv.

    python train.py [--epochs 15] [--lr 2e-3]
"""
import argparse
import csv
import logging
import os

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

HERE = os.path.dirname(os.path.abspath(__file__))

CONFIG = {
    "csv": os.path.join(HERE, "loans.csv"),
    "label": "defaulted",
    "numeric": ["age", "employment_years", "loan_amount", "term_months", "interest_rate",
                "debt_to_income", "credit_score", "open_accounts"],
    "categorical": ["home_ownership", "purpose"],
    "val_frac": 0.2,
    "batch_size": 128,
    "hidden": [64, 32],
    "lr": 2e-3,
    "weight_decay": 1e-4,
    "epochs": 10,
    "seed": 42,
}

logger = logging.getLogger(__name__)


def load_rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def encode(rows, cfg):
    """Numeric columns as float, categoricals one-hot (vocabulary fixed from the full file)."""
    vocab = {c: sorted({r[c] for r in rows}) for c in cfg["categorical"]}
    num = np.array([[float(r[c]) for c in cfg["numeric"]] for r in rows], dtype=np.float32)
    cats = []
    for c in cfg["categorical"]:
        idx = np.array([vocab[c].index(r[c]) for r in rows])
        cats.append(np.eye(len(vocab[c]), dtype=np.float32)[idx])
    X = np.concatenate([num] + cats, axis=1)
    y = np.array([int(r[cfg["label"]]) for r in rows], dtype=np.float32)
    return X, y


def shuffle_split(X, y, val_frac, seed):
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(X))
    X, y = X[perm], y[perm]
    n_val = int(len(X) * val_frac)
    return X[n_val:], y[n_val:], X[:n_val], y[:n_val]


class Standardizer:
    def __init__(self, n_numeric):
        self.n = n_numeric

    def fit(self, X):
        self.mu = X[:, :self.n].mean(0)
        self.sigma = X[:, :self.n].std(0) + 1e-6
        return self

    def __call__(self, X):
        X = X.copy()
        X[:, :self.n] = (X[:, :self.n] - self.mu) / self.sigma
        return X


class LoanDataset(Dataset):
    def __init__(self, X, y):
        self.X, self.y = torch.tensor(X), torch.tensor(y)

    def __len__(self):
        return len(self.X)

    def __getitem__(self, idx):
        return self.X[idx], self.y[idx]


def mlp(n_in, hidden):
    layers, d = [], n_in
    for h in hidden:
        layers += [nn.Linear(d, h), nn.BatchNorm1d(h), nn.ReLU()]
        d = h
    layers.append(nn.Linear(d, 1))
    return nn.Sequential(*layers)


bce = nn.BCEWithLogitsLoss()


def loss_fn(model, batch):
    x, y = batch
    return bce(model(x).squeeze(1), y)


def auc_score(y_true, y_score):
    pos, neg = y_score[y_true == 1], y_score[y_true == 0]
    # Mann-Whitney U over all pairs; small val set so the O(n_pos * n_neg) matrix is fine
    return ((pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean())


def get_loaders(cfg):
    X, y = encode(load_rows(cfg["csv"]), cfg)
    X_tr, y_tr, X_va, y_va = shuffle_split(X, y, cfg["val_frac"], cfg["seed"])
    scaler = Standardizer(len(cfg["numeric"])).fit(X_tr)
    train_ds, val_ds = LoanDataset(scaler(X_tr), y_tr), LoanDataset(scaler(X_va), y_va)
    g = torch.Generator().manual_seed(cfg["seed"])
    return (DataLoader(train_ds, batch_size=cfg["batch_size"], shuffle=True, drop_last=True, generator=g),
            DataLoader(val_ds, batch_size=512))


def build_optimizer(params, cfg=CONFIG):
    return torch.optim.AdamW(params, lr=cfg["lr"], weight_decay=cfg["weight_decay"])


def make_target():
    torch.manual_seed(CONFIG["seed"])
    train_loader, _ = get_loaders(CONFIG)
    model = mlp(train_loader.dataset.X.shape[1], CONFIG["hidden"])
    data = [b for _, b in zip(range(4), train_loader)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": build_optimizer(model.parameters()), "make_optimizer": build_optimizer,
            "num_classes": 2, "task": "classification"}


def validate(model, loader):
    model.eval()
    total, n, scores, labels = 0.0, 0, [], []
    with torch.no_grad():
        for x, y in loader:
            logit = model(x).squeeze(1)
            total += bce(logit, y).item() * len(y)
            n += len(y)
            scores.append(torch.sigmoid(logit))
            labels.append(y)
    model.train()
    s, l = torch.cat(scores).numpy(), torch.cat(labels).numpy()
    return total / n, auc_score(l, s), ((s > 0.5) == l).mean()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=CONFIG["epochs"])
    ap.add_argument("--lr", type=float, default=CONFIG["lr"])
    args = ap.parse_args()
    cfg = dict(CONFIG, epochs=args.epochs, lr=args.lr)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(message)s", level=logging.INFO)
    logger.info("config %s", {k: v for k, v in cfg.items() if k != "csv"})

    torch.manual_seed(cfg["seed"])
    train_loader, val_loader = get_loaders(cfg)
    n_in = train_loader.dataset.X.shape[1]
    logger.info("train rows=%d val rows=%d n_features=%d default_rate=%.3f", len(train_loader.dataset),
                len(val_loader.dataset), n_in, train_loader.dataset.y.mean().item())
    model = mlp(n_in, cfg["hidden"])
    opt = build_optimizer(model.parameters(), cfg)

    step = 0
    for epoch in range(cfg["epochs"]):
        for x, y in train_loader:
            opt.zero_grad()
            loss = loss_fn(model, (x, y))
            loss.backward()
            opt.step()
            step += 1
            if step % 10 == 0:
                logger.info("epoch=%d step=%d train_loss=%.4f lr=%g", epoch, step, loss.item(),
                            opt.param_groups[0]["lr"])
        val_loss, val_auc, val_acc = validate(model, val_loader)
        logger.info("epoch=%d val_loss=%.4f val_auc=%.3f val_acc=%.2f", epoch, val_loss, val_auc, val_acc)


if __name__ == "__main__":
    main()
