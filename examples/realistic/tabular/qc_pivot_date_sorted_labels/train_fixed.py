"""Batch release classifier: predict QC pass/fail from in-process lab results.

lab_measurements.csv is the long-format LIMS export (one row per batch x analyte),
qc_results.csv holds the release decision for each batch. Validation is
chronological: the last 20% of batches by release date.
"""
import csv
import logging
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

HERE = Path(__file__).resolve().parent
ANALYTES = ["moisture_pct", "viscosity_cp", "ph", "impurity_ppm", "density_gml", "particle_um"]

logger = logging.getLogger("qc_release")


@dataclass
class Config:
    seed: int = 1
    val_frac: float = 0.2
    batch_size: int = 64
    epochs: int = 40
    lr: float = 2e-3
    weight_decay: float = 1e-4
    hidden: int = 64


CFG = Config()


def pivot_measurements(path):
    """Long (batch_id, analyte, value) rows -> {batch_id: {analyte: value}}."""
    wide = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            wide.setdefault(row["batch_id"], {})[row["analyte"]] = float(row["value"])
    return wide


def load_results(path):
    with open(path, newline="") as f:
        results = list(csv.DictReader(f))
    results.sort(key=lambda r: r["release_date"])
    return results


def build_dataset(data_dir=HERE):
    wide = pivot_measurements(data_dir / "lab_measurements.csv")
    results = load_results(data_dir / "qc_results.csv")
    X = np.array([[wide[b].get(a, math.nan) for a in ANALYTES] for b in (r["batch_id"] for r in results)], dtype=np.float32)
    y = np.array([float(r["passed"]) for r in results], dtype=np.float32)
    return X, y


def time_split(X, y, val_frac):
    n_val = int(round(len(X) * val_frac))
    Xtr, ytr, Xva, yva = X[:-n_val], y[:-n_val], X[-n_val:], y[-n_val:]
    # impute missing analytes with the training median, then standardise
    med = np.nanmedian(Xtr, axis=0)
    Xtr = np.where(np.isnan(Xtr), med, Xtr)
    Xva = np.where(np.isnan(Xva), med, Xva)
    mu, sd = Xtr.mean(0), Xtr.std(0) + 1e-8
    Xtr, Xva = (Xtr - mu) / sd, (Xva - mu) / sd
    to_t = lambda a: torch.tensor(a, dtype=torch.float32)
    return to_t(Xtr), to_t(ytr), to_t(Xva), to_t(yva)


def build_model(d_in, hidden):
    return nn.Sequential(
        nn.Linear(d_in, hidden), nn.ReLU(),
        nn.Linear(hidden, hidden), nn.ReLU(),
        nn.Linear(hidden, 1),
    )


bce = nn.BCEWithLogitsLoss()


def loss_fn(model, batch):
    x, y = batch
    return bce(model(x).squeeze(1), y)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=CFG.lr, weight_decay=CFG.weight_decay)


def make_loaders():
    X, y = build_dataset()
    Xtr, ytr, Xva, yva = time_split(X, y, CFG.val_frac)
    g = torch.Generator().manual_seed(CFG.seed)
    train_dl = DataLoader(TensorDataset(Xtr, ytr), batch_size=CFG.batch_size, shuffle=True, generator=g)
    val_dl = DataLoader(TensorDataset(Xva, yva), batch_size=256)
    return train_dl, val_dl


@torch.no_grad()
def validate(model, loader):
    model.eval()
    tot_loss, correct, n = 0.0, 0, 0
    for x, y in loader:
        logits = model(x).squeeze(1)
        tot_loss += bce(logits, y).item() * len(y)
        correct += ((logits > 0).float() == y).sum().item()
        n += len(y)
    model.train()
    return tot_loss / n, correct / n


def make_target():
    torch.manual_seed(CFG.seed)
    train_dl, _ = make_loaders()
    model = build_model(len(ANALYTES), CFG.hidden)
    it = iter(train_dl)
    data = [next(it) for _ in range(3)]
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
    torch.manual_seed(CFG.seed)
    train_dl, val_dl = make_loaders()
    n_tr, n_va = len(train_dl.dataset), len(val_dl.dataset)
    logger.info("batches: train=%d val=%d analytes=%d, train pass rate %.3f, val pass rate %.3f",
                n_tr, n_va, len(ANALYTES), train_dl.dataset.tensors[1].mean().item(),
                val_dl.dataset.tensors[1].mean().item())

    model = build_model(len(ANALYTES), CFG.hidden)
    opt = make_optimizer(model.parameters())
    for epoch in range(1, CFG.epochs + 1):
        running, seen = 0.0, 0
        for batch in train_dl:
            opt.zero_grad()
            loss = loss_fn(model, batch)
            loss.backward()
            opt.step()
            running += loss.item() * len(batch[1])
            seen += len(batch[1])
        val_loss, val_acc = validate(model, val_dl)
        logger.info("epoch %d train_loss=%.4f val_loss=%.4f val_acc=%.3f", epoch, running / seen, val_loss, val_acc)
    logger.info("finished %d epochs", CFG.epochs)


if __name__ == "__main__":
    main()
