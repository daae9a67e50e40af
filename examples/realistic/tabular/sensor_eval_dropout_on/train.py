"""Predictive maintenance: flag machine failures from one sensor reading (machine_readings.csv).

Preprocessing: infer numeric vs categorical columns, one-hot the categoricals,
standardise the numerics with train-split statistics, then train an MLP with BCE
and a cosine learning-rate schedule.

    python train.py [--epochs 15] [--batch-size 64] [--lr 3e-3]
"""
import argparse
import csv
import logging
import os

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

HERE = os.path.dirname(os.path.abspath(__file__))
CSV_PATH = os.path.join(HERE, "machine_readings.csv")
TARGET = "failure"
DROP_COLS = ["reading_id"]
SEED = 1

log = logging.getLogger("maintenance")


def read_csv(path):
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        return reader.fieldnames, list(reader)


def is_number(s):
    try:
        float(s)
        return True
    except ValueError:
        return False


def train_val_split(rows, val_frac=0.2, seed=SEED):
    idx = np.random.default_rng(seed).permutation(len(rows))
    n_val = int(len(rows) * val_frac)
    return [rows[i] for i in idx[n_val:]], [rows[i] for i in idx[:n_val]]


class Preprocessor:
    """One-hot for categoricals, z-score for numerics; fit on the train split only."""

    def __init__(self, header):
        self.features = [c for c in header if c != TARGET and c not in DROP_COLS]

    def fit(self, rows):
        self.numeric = [c for c in self.features if all(is_number(r[c]) for r in rows)]
        self.categorical = [c for c in self.features if c not in self.numeric]
        self.categories = {c: sorted({r[c] for r in rows}) for c in self.categorical}
        num = np.array([[float(r[c]) for c in self.numeric] for r in rows], dtype=np.float64)
        self.mean = num.mean(axis=0)
        self.std = num.std(axis=0) + 1e-8
        return self

    def transform(self, rows):
        num = np.array([[float(r[c]) for c in self.numeric] for r in rows], dtype=np.float64)
        num = (num - self.mean) / self.std
        onehots = []
        for c in self.categorical:
            cats = self.categories[c]
            oh = np.zeros((len(rows), len(cats)))
            for i, r in enumerate(rows):
                if r[c] in cats:
                    oh[i, cats.index(r[c])] = 1.0
            onehots.append(oh)
        X = np.concatenate([num] + onehots, axis=1).astype(np.float32)
        y = np.array([float(r[TARGET]) for r in rows], dtype=np.float32)
        return X, y

    @property
    def n_features(self):
        return len(self.numeric) + sum(len(v) for v in self.categories.values())


class TabularDataset(Dataset):
    def __init__(self, X, y):
        self.X = torch.from_numpy(X)
        self.y = torch.from_numpy(y)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.X[i], self.y[i]


class FailureMLP(nn.Module):
    def __init__(self, n_in, hidden=64, dropout=0.3):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(n_in, hidden), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden, hidden // 2), nn.ReLU(),
            nn.Linear(hidden // 2, 1),
        )

    def forward(self, x):
        return self.net(x).squeeze(-1)


criterion = nn.BCEWithLogitsLoss()


def loss_fn(model, batch):
    x, y = batch
    return criterion(model(x), y)


def roc_auc(scores, labels):
    order = np.argsort(scores)
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    pos = labels == 1
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return (ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def build_data(batch_size=64):
    header, rows = read_csv(CSV_PATH)
    train_rows, val_rows = train_val_split(rows)
    prep = Preprocessor(header).fit(train_rows)
    train_ds = TabularDataset(*prep.transform(train_rows))
    val_ds = TabularDataset(*prep.transform(val_rows))
    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(train_ds, batch_size=batch_size, shuffle=True, generator=g)
    val_loader = DataLoader(val_ds, batch_size=256)
    return prep, train_loader, val_loader


def make_optimizer(params, lr=3e-3):
    return torch.optim.Adam(params, lr=lr, weight_decay=1e-5)


def make_target():
    torch.manual_seed(SEED)
    prep, train_loader, _ = build_data()
    model = FailureMLP(prep.n_features)
    data = [b for _, b in zip(range(4), train_loader)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model.parameters()), "make_optimizer": make_optimizer,
            "num_classes": 2, "task": "classification"}


@torch.no_grad()
def evaluate(model, loader):
    losses, scores, labels = [], [], []
    for x, y in loader:
        logits = model(x)
        losses.append(criterion(logits, y).item() * len(y))
        scores.append(torch.sigmoid(logits).numpy())
        labels.append(y.numpy())
    scores, labels = np.concatenate(scores), np.concatenate(labels)
    acc = ((scores > 0.5) == (labels == 1)).mean()
    return sum(losses) / len(labels), roc_auc(scores, labels), acc


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--log-every", type=int, default=15)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")

    torch.manual_seed(SEED)
    prep, train_loader, val_loader = build_data(args.batch_size)
    log.info("features: %d numeric %s, %d categorical %s -> %d inputs",
             len(prep.numeric), prep.numeric, len(prep.categorical), prep.categorical, prep.n_features)
    log.info("train=%d val=%d positive_rate=%.3f", len(train_loader.dataset), len(val_loader.dataset),
             train_loader.dataset.y.mean().item())
    model = FailureMLP(prep.n_features)
    optimizer = make_optimizer(model.parameters(), args.lr)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs * len(train_loader))
    log.info("model params=%d", sum(p.numel() for p in model.parameters()))

    step = 0
    for epoch in range(1, args.epochs + 1):
        for batch in train_loader:
            loss = loss_fn(model, batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            step += 1
            if step % args.log_every == 0:
                log.info("epoch=%d step=%d train_loss=%.4f lr=%g", epoch, step, loss.item(),
                         optimizer.param_groups[0]["lr"])
        val_loss, val_auc, val_acc = evaluate(model, val_loader)
        log.info("epoch=%d val_loss=%.4f val_auc=%.3f val_acc=%.3f", epoch, val_loss, val_auc, val_acc)

    os.makedirs(os.path.join(HERE, "out"), exist_ok=True)
    torch.save(model.state_dict(), os.path.join(HERE, "out", "failure_mlp.pt"))
    log.info("saved out/failure_mlp.pt")


if __name__ == "__main__":
    main()
