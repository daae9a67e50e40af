"""Early-warning model: first-6h labs and vitals of an ICU stay -> deterioration within 48h."""
import csv
import logging
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent
TESTS = ["lactate", "wbc", "creatinine", "platelets", "map", "heart_rate", "resp_rate", "spo2"]
LOG_TESTS = {"lactate", "wbc", "creatinine"}
SEED = 3
EPOCHS = 30
BATCH = 32
LR = 0.01
MOMENTUM = 0.9

log = logging.getLogger("ews")


def read_rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def pivot_labs(rows):
    """Long (stay, test, value) rows -> one row per stay, one column per test (mean of repeats)."""
    sums = defaultdict(lambda: defaultdict(float))
    counts = defaultdict(lambda: defaultdict(int))
    for r in rows:
        sums[r["stay_id"]][r["test"]] += float(r["value"])
        counts[r["stay_id"]][r["test"]] += 1
    stays = sorted(sums)
    wide = np.full((len(stays), len(TESTS)), np.nan)
    for i, stay in enumerate(stays):
        for j, test in enumerate(TESTS):
            if counts[stay][test]:
                wide[i, j] = sums[stay][test] / counts[stay][test]
    for j, test in enumerate(TESTS):
        if test in LOG_TESTS:
            wide[:, j] = np.log(wide[:, j])
    return stays, wide


def load_dataset():
    labs = read_rows(ROOT / "labs.csv")
    admissions = read_rows(ROOT / "admissions.csv")
    stays, wide = pivot_labs(labs)
    age = np.array([float(a["age"]) for a in admissions])
    y = np.array([int(a["deteriorated_48h"]) for a in admissions], dtype=np.int64)
    X = np.column_stack([wide, np.isnan(wide).astype(np.float64), age])
    return X, y


def prepare(X, y, val_frac=0.25):
    rng = np.random.default_rng(SEED)
    order = rng.permutation(len(X))
    n_val = int(round(val_frac * len(X)))
    tr, va = order[n_val:], order[:n_val]
    Xtr, Xva = X[tr].copy(), X[va].copy()
    med = np.nanmedian(Xtr, axis=0)
    for A in (Xtr, Xva):
        r, c = np.where(np.isnan(A))
        A[r, c] = med[c]
    mu, sd = Xtr.mean(0), Xtr.std(0) + 1e-6
    Xtr, Xva = (Xtr - mu) / sd, (Xva - mu) / sd
    to_t = lambda a: torch.tensor(a, dtype=torch.float32)
    return (to_t(Xtr), torch.tensor(y[tr])), (to_t(Xva), torch.tensor(y[va]))


class EWSNet(nn.Module):
    def __init__(self, d_in, d_hidden=32):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.fc2 = nn.Linear(d_hidden, d_hidden)
        self.out = nn.Linear(d_hidden, 2)

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.out(x)


def compute_loss(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def make_optimizer(params):
    return torch.optim.SGD(params, lr=LR, momentum=MOMENTUM, nesterov=True, weight_decay=1e-3)


def iterate(x, y, batch_size, perm=None):
    idx = perm if perm is not None else torch.arange(len(x))
    for s in range(0, len(idx), batch_size):
        b = idx[s:s + batch_size]
        yield x[b], y[b]


@torch.no_grad()
def validate(model, x, y):
    model.eval()
    logits = model(x)
    loss = F.cross_entropy(logits, y).item()
    pred = logits.argmax(1)
    acc = (pred == y).float().mean().item()
    recall = ((pred == 1) & (y == 1)).sum().item() / max((y == 1).sum().item(), 1)
    model.train()
    return loss, acc, recall


def make_target():
    torch.manual_seed(SEED)
    X, y = load_dataset()
    (xtr, ytr), _ = prepare(X, y)
    model = EWSNet(xtr.shape[1])
    data = list(iterate(xtr, ytr, BATCH))[:3]
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
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stdout)
    torch.manual_seed(SEED)
    X, y = load_dataset()
    (xtr, ytr), (xva, yva) = prepare(X, y)
    log.info("stays=%d features=%d train=%d val=%d positive_rate=%.3f",
             len(X), X.shape[1], len(xtr), len(xva), y.mean())
    model = EWSNet(xtr.shape[1])
    opt = make_optimizer(model.parameters())
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.5)
    g = torch.Generator().manual_seed(SEED)
    for epoch in range(1, EPOCHS + 1):
        tot, n = 0.0, 0
        for batch in iterate(xtr, ytr, BATCH, perm=torch.randperm(len(xtr), generator=g)):
            opt.zero_grad()
            loss = compute_loss(model, batch)
            loss.backward()
            opt.step()
            tot += loss.item() * len(batch[1])
            n += len(batch[1])
        sched.step()
        val_loss, val_acc, val_recall = validate(model, xva, yva)
        if epoch % 2 == 0 or epoch == 1:
            log.info("epoch %d train_loss=%.4f val_loss=%.4f val_acc=%.3f val_recall=%.3f lr=%.4f",
                     epoch, tot / n, val_loss, val_acc, val_recall, sched.get_last_lr()[0])
    log.info("final val_acc=%.3f val_recall=%.3f", val_acc, val_recall)


if __name__ == "__main__":
    main()
