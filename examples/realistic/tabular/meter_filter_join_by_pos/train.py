"""Late-payment risk from smart-meter usage + account attributes.

meters.csv has one usage summary per meter; meters with poor read coverage are
dropped because their averages are unreliable. Usage is joined to the account
table (households.csv) on household_id.
"""
import csv
import logging
import random

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from pathlib import Path

ROOT = Path(__file__).resolve().parent
SEED = 7
MIN_COVERAGE = 0.85
REGIONS = ["north", "south", "east", "west"]
TARIFFS = ["fixed", "variable", "prepaid"]
BATCH = 128
EPOCHS = 25
LR = 2e-3

log = logging.getLogger(__name__)


def read_rows(name):
    with open(ROOT / name, newline="") as fh:
        return list(csv.DictReader(fh))


def onehot(value, vocab):
    return [1.0 if value == v else 0.0 for v in vocab]


def load_data():
    households = read_rows("households.csv")
    meters = [m for m in read_rows("meters.csv") if float(m["coverage"]) >= MIN_COVERAGE]
    log.info("meters kept: %d (dropped %d with coverage < %.2f)",
             len(meters), len(households) - len(meters), MIN_COVERAGE)

    by_id = {h["household_id"]: h for h in households}
    late = np.array([int(h["late_payment"]) for h in households])

    feats, labels = [], []
    for i, m in enumerate(meters):
        h = by_id[m["household_id"]]
        feats.append([
            np.log(float(m["avg_daily_kwh"])),
            float(m["peak_share"]),
            np.log1p(int(m["zero_days"])),
            float(h["occupants"]),
            *onehot(h["region"], REGIONS),
            *onehot(h["tariff"], TARIFFS),
        ])
        labels.append(late[i])
    return np.asarray(feats, dtype=np.float32), np.asarray(labels, dtype=np.int64)


def train_val_split(X, y, val_frac=0.2, seed=SEED):
    idx = list(range(len(X)))
    random.Random(seed).shuffle(idx)
    cut = int(len(idx) * (1 - val_frac))
    tr, va = np.array(idx[:cut]), np.array(idx[cut:])
    mean = X[tr].mean(axis=0)
    std = X[tr].std(axis=0)
    std[std == 0] = 1.0
    X = (X - mean) / std
    return (torch.tensor(X[tr]), torch.tensor(y[tr]), torch.tensor(X[va]), torch.tensor(y[va]))


class RiskNet(nn.Module):
    def __init__(self, n_in, n_hidden=48):
        super().__init__()
        self.fc1 = nn.Linear(n_in, n_hidden)
        self.fc2 = nn.Linear(n_hidden, n_hidden)
        self.out = nn.Linear(n_hidden, 2)

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.out(x)


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR)


def minibatches(X, y, size, rng):
    order = torch.randperm(len(X), generator=rng)
    for s in range(0, len(X), size):
        b = order[s:s + size]
        yield X[b], y[b]


def make_target():
    torch.manual_seed(SEED)
    Xtr, ytr, _, _ = train_val_split(*load_data())
    model = RiskNet(Xtr.shape[1])
    data = list(minibatches(Xtr, ytr, BATCH, torch.Generator().manual_seed(SEED)))[:4]
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
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    torch.manual_seed(SEED)
    X, y = load_data()
    Xtr, ytr, Xva, yva = train_val_split(X, y)
    log.info("train %s val %s, late-payment rate %.3f", tuple(Xtr.shape), tuple(Xva.shape), y.mean())

    model = RiskNet(Xtr.shape[1])
    opt = make_optimizer(model.parameters())
    rng = torch.Generator().manual_seed(SEED)
    for epoch in range(1, EPOCHS + 1):
        model.train()
        losses = []
        for batch in minibatches(Xtr, ytr, BATCH, rng):
            opt.zero_grad()
            loss = loss_fn(model, batch)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        model.eval()
        with torch.no_grad():
            logits = model(Xva)
            val_loss = F.cross_entropy(logits, yva).item()
            val_acc = (logits.argmax(1) == yva).float().mean().item()
        log.info("epoch %d train_loss=%.4f val_loss=%.4f val_acc=%.3f", epoch, np.mean(losses), val_loss, val_acc)


if __name__ == "__main__":
    main()
