"""Early-warning model for first-year student dropout.

Joins the registry export (students.csv, has the outcome) with the exam-office grades
export (grades.csv) on student_id and trains a small MLP with BCE-with-logits.
"""
import csv
import logging
import os
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

DATA_DIR = Path(os.path.dirname(os.path.abspath(__file__)))
SEED = 1234
BATCH_SIZE = 128
EPOCHS = 25
LR = 1e-3
VAL_SIZE = 600

PROFILE_COLS = ["age", "scholarship", "commute_km"]
GRADE_COLS = ["gpa_sem1", "gpa_sem2", "credits_passed", "attendance"]

logger = logging.getLogger(__name__)


def read_csv(name):
    with open(DATA_DIR / name, newline="") as fh:
        return list(csv.DictReader(fh))


def build_features(students, grades):
    profile = {r["student_id"]: [float(r[c]) for c in PROFILE_COLS] for r in students}
    by_student = {r["student_id"]: [float(r[c]) for c in GRADE_COLS] for r in grades}
    missing = set(profile) - set(by_student)
    if missing:
        raise ValueError(f"{len(missing)} students have no grade record")
    rows = []
    for sid in profile:
        rows.append(profile[sid] + by_student[sid])
    return np.asarray(rows, dtype=np.float32)


def load_dataset():
    students = read_csv("students.csv")
    grades = read_csv("grades.csv")
    X = build_features(students, grades)
    y = np.asarray([float(r["dropped_out"]) for r in students], dtype=np.float32)
    logger.info("joined %d students x %d features, dropout rate %.3f", X.shape[0], X.shape[1], y.mean())

    perm = np.random.default_rng(SEED).permutation(len(X))
    val_idx, train_idx = perm[:VAL_SIZE], perm[VAL_SIZE:]
    mean = X[train_idx].mean(axis=0)
    std = X[train_idx].std(axis=0) + 1e-6
    X = (X - mean) / std
    train = TensorDataset(torch.from_numpy(X[train_idx]), torch.from_numpy(y[train_idx]))
    val = TensorDataset(torch.from_numpy(X[val_idx]), torch.from_numpy(y[val_idx]))
    return train, val


class DropoutNet(nn.Module):
    def __init__(self, n_in, hidden=48, p_drop=0.1):
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(n_in, hidden), nn.GELU(), nn.Dropout(p_drop),
            nn.Linear(hidden, hidden), nn.GELU(), nn.Dropout(p_drop),
        )
        self.head = nn.Linear(hidden, 1)

    def forward(self, x):
        return self.head(self.body(x)).squeeze(-1)


criterion = nn.BCEWithLogitsLoss()


def loss_fn(model, batch):
    x, y = batch
    return criterion(model(x), y)


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR)


def roc_auc(scores, labels):
    order = torch.argsort(scores)
    ranks = torch.empty_like(scores)
    ranks[order] = torch.arange(1, len(scores) + 1, dtype=scores.dtype)
    pos = labels > 0.5
    n_pos, n_neg = pos.sum().item(), (~pos).sum().item()
    return ((ranks[pos].sum().item() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    scores, labels, total = [], [], 0.0
    for x, y in loader:
        logits = model(x)
        total += criterion(logits, y).item() * len(y)
        scores.append(logits)
        labels.append(y)
    model.train()
    scores, labels = torch.cat(scores), torch.cat(labels)
    acc = ((scores > 0).float() == labels).float().mean().item()
    return total / len(labels), acc, roc_auc(scores, labels)


def make_target():
    torch.manual_seed(SEED)
    train, _ = load_dataset()
    loader = DataLoader(train, batch_size=BATCH_SIZE, shuffle=True, generator=torch.Generator().manual_seed(SEED))
    data = []
    for batch in loader:
        data.append(batch)
        if len(data) == 3:
            break
    model = DropoutNet(len(PROFILE_COLS) + len(GRADE_COLS))
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
    logging.basicConfig(format="%(asctime)s %(levelname)s %(message)s", level=logging.INFO)
    torch.manual_seed(SEED)
    train, val = load_dataset()
    train_loader = DataLoader(train, batch_size=BATCH_SIZE, shuffle=True,
                              generator=torch.Generator().manual_seed(SEED))
    val_loader = DataLoader(val, batch_size=512)
    logger.info("train=%d val=%d", len(train), len(val))

    model = DropoutNet(len(PROFILE_COLS) + len(GRADE_COLS))
    optimizer = make_optimizer(model.parameters())

    for epoch in range(1, EPOCHS + 1):
        running, seen = 0.0, 0
        for x, y in train_loader:
            optimizer.zero_grad()
            loss = loss_fn(model, (x, y))
            loss.backward()
            optimizer.step()
            running += loss.item() * len(y)
            seen += len(y)
        val_loss, val_acc, val_auc = evaluate(model, val_loader)
        logger.info("epoch %d train_loss=%.4f val_loss=%.4f val_acc=%.3f val_auc=%.3f",
                    epoch, running / seen, val_loss, val_acc, val_auc)
    logger.info("finished: val_loss=%.4f val_acc=%.3f val_auc=%.3f", val_loss, val_acc, val_auc)


if __name__ == "__main__":
    main()
