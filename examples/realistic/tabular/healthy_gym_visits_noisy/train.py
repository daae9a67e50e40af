"""Membership renewal model.

Visit-level check-ins (visits.csv) are rolled up per member and joined onto the
member table (members.csv); an MLP predicts whether the membership was renewed
at the end of the 12-week window.
"""
import csv
import itertools
import logging
import operator
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

DATA = Path(__file__).resolve().parent
SEED = 3
WINDOW_DAYS = 84
PLANS = ("monthly", "annual", "offpeak")
AREAS = ("gym", "class", "pool")
N_VISIT_FEATS = 7
HPARAMS = dict(hidden=64, dropout=0.2, lr=2e-3, weight_decay=1e-3, batch_size=128, epochs=25)

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
logger = logging.getLogger("renewal")


def visit_features(rows):
    days = np.array([int(r["day"]) for r in rows])
    minutes = np.array([float(r["minutes"]) for r in rows])
    areas = [r["area"] for r in rows]
    per_area = [sum(a == k for a in areas) for k in AREAS]
    weeks_active = len(set(days // 7))
    recency = WINDOW_DAYS - 1 - days.max()
    return [np.log1p(len(rows)), minutes.mean(), *np.log1p(per_area), weeks_active, recency]


def aggregate_visits(path):
    with open(path, newline="") as f:
        rows = sorted(csv.DictReader(f), key=operator.itemgetter("member_id"))
    return {mid: visit_features(list(grp))
            for mid, grp in itertools.groupby(rows, key=operator.itemgetter("member_id"))}


def build_table():
    per_member = aggregate_visits(DATA / "visits.csv")
    no_visits = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, float(WINDOW_DAYS)]
    X, y = [], []
    with open(DATA / "members.csv", newline="") as f:
        for m in csv.DictReader(f):
            usage = per_member.get(m["member_id"], no_visits)
            static = [float(m["age"]), np.log(float(m["tenure_days"]))] + [float(m["plan"] == p) for p in PLANS]
            X.append(usage + static)
            y.append(float(m["renewed"]))
    return np.array(X, dtype=np.float32), np.array(y, dtype=np.float32)


def prepare(seed=SEED):
    X, y = build_table()
    rng = np.random.default_rng(seed)
    idx = rng.permutation(len(X))
    n_val = len(X) // 5
    va, tr = idx[:n_val], idx[n_val:]
    mu, sd = X[tr].mean(0), X[tr].std(0) + 1e-6
    X = (X - mu) / sd
    t = torch.from_numpy
    return t(X[tr]), t(y[tr]), t(X[va]), t(y[va])


def make_model(n_in):
    h, p = HPARAMS["hidden"], HPARAMS["dropout"]
    return nn.Sequential(nn.Linear(n_in, h), nn.ReLU(), nn.Dropout(p),
                         nn.Linear(h, h), nn.ReLU(), nn.Dropout(p),
                         nn.Linear(h, 1))


loss_bce = nn.BCEWithLogitsLoss()


def loss_fn(model, batch):
    x, y = batch
    return loss_bce(model(x).view(-1), y)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=HPARAMS["lr"], weight_decay=HPARAMS["weight_decay"])


def iter_batches(X, y, bs, gen):
    perm = torch.randperm(len(X), generator=gen)
    for k in range(0, len(X), bs):
        sel = perm[k:k + bs]
        yield X[sel], y[sel]


def make_target():
    torch.manual_seed(SEED)
    Xtr, ytr, _, _ = prepare()
    model = make_model(Xtr.shape[1])
    data = list(itertools.islice(iter_batches(Xtr, ytr, HPARAMS["batch_size"], torch.Generator().manual_seed(SEED)), 3))
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
    torch.manual_seed(SEED)
    Xtr, ytr, Xva, yva = prepare()
    logger.info("members train=%d val=%d features=%d renewal rate train=%.3f val=%.3f",
                len(Xtr), len(Xva), Xtr.shape[1], ytr.mean(), yva.mean())
    model = make_model(Xtr.shape[1])
    opt = make_optimizer(model.parameters())
    gen = torch.Generator().manual_seed(SEED)
    for epoch in range(1, HPARAMS["epochs"] + 1):
        model.train()
        tot, cnt = 0.0, 0
        for xb, yb in iter_batches(Xtr, ytr, HPARAMS["batch_size"], gen):
            opt.zero_grad()
            loss = loss_fn(model, (xb, yb))
            loss.backward()
            opt.step()
            tot += loss.item() * len(yb)
            cnt += len(yb)
        model.eval()
        with torch.no_grad():
            out = model(Xva).view(-1)
            vl = loss_bce(out, yva).item()
            va = ((out > 0).float() == yva).float().mean().item()
        logger.info("epoch %d train_loss=%.4f val_loss=%.4f val_acc=%.3f", epoch, tot / cnt, vl, va)


if __name__ == "__main__":
    main()
