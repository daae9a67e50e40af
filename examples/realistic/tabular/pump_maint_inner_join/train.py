"""Pump failure classifier: weekly sensor summary joined with the maintenance history (CMMS)."""
import csv
import logging
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

DATA_DIR = Path(__file__).resolve().parent
NUMERIC = ["run_hours", "vib_rms_mm_s", "bearing_temp_c", "discharge_bar", "flow_m3h",
           "days_since_service", "repairs_12m", "seal_replaced"]
SITES = ["north", "river", "plant2", "east"]
LABEL = "failed_30d"

CFG = dict(seed=1, epochs=20, batch_size=64, lr=2e-3, weight_decay=1e-3, hidden=48, val_frac=0.2)

logger = logging.getLogger("pumps")


def load_csv(path):
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    return {name: np.array([r[name] for r in rows]) for name in reader.fieldnames}


def inner_join(left, right, on):
    """Inner join of two column dicts on a unique key column."""
    keys, li, ri = np.intersect1d(left[on], right[on], assume_unique=True, return_indices=True)
    out = {on: keys}
    for name, col in left.items():
        if name != on:
            out[name] = col[li]
    for name, col in right.items():
        if name != on:
            out[name] = col[ri]
    return out


def build_features(table):
    num = np.column_stack([table[c].astype(np.float64) for c in NUMERIC])
    num[:, 0] = np.log1p(num[:, 0])
    num[:, 1] = np.log(num[:, 1])
    site = np.stack([table["site"] == s for s in SITES], axis=1).astype(np.float64)
    return np.concatenate([num, site], axis=1).astype(np.float32)


def load_dataset():
    sensors = load_csv(DATA_DIR / "sensors.csv")
    maintenance = load_csv(DATA_DIR / "maintenance.csv")
    y = sensors.pop(LABEL).astype(np.float32)
    table = inner_join(sensors, maintenance, on="asset_id")
    X = build_features(table)
    return X, y


def make_splits(X, y):
    rng = np.random.default_rng(CFG["seed"])
    idx = rng.permutation(len(X))
    n_val = int(CFG["val_frac"] * len(X))
    val_idx, train_idx = idx[:n_val], idx[n_val:]
    mean = X[train_idx].mean(axis=0)
    std = X[train_idx].std(axis=0) + 1e-6
    norm = lambda a: torch.tensor((a - mean) / std, dtype=torch.float32)
    train_ds = TensorDataset(norm(X[train_idx]), torch.tensor(y[train_idx]))
    val_ds = TensorDataset(norm(X[val_idx]), torch.tensor(y[val_idx]))
    return train_ds, val_ds


def build_model(n_features):
    h = CFG["hidden"]
    return nn.Sequential(
        nn.Linear(n_features, h), nn.ReLU(),
        nn.Linear(h, h), nn.ReLU(),
        nn.Linear(h, 1),
    )


loss_fn_bce = nn.BCEWithLogitsLoss()


def compute_loss(model, batch):
    x, y = batch
    return loss_fn_bce(model(x).squeeze(1), y)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=CFG["lr"], weight_decay=CFG["weight_decay"])


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    losses, n, correct, tp, fp, fn = 0.0, 0, 0, 0, 0, 0
    for x, y in loader:
        logits = model(x).squeeze(1)
        losses += loss_fn_bce(logits, y).item() * len(y)
        pred = (logits > 0).float()
        correct += (pred == y).sum().item()
        tp += ((pred == 1) & (y == 1)).sum().item()
        fp += ((pred == 1) & (y == 0)).sum().item()
        fn += ((pred == 0) & (y == 1)).sum().item()
        n += len(y)
    model.train()
    f1 = 2 * tp / max(2 * tp + fp + fn, 1)
    return losses / n, correct / n, f1


def make_target():
    torch.manual_seed(CFG["seed"])
    X, y = load_dataset()
    train_ds, _ = make_splits(X, y)
    model = build_model(X.shape[1])
    loader = DataLoader(train_ds, batch_size=CFG["batch_size"], shuffle=False)
    data = [batch for _, batch in zip(range(3), loader)]
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
    torch.manual_seed(CFG["seed"])
    X, y = load_dataset()
    train_ds, val_ds = make_splits(X, y)
    logger.info("loaded %d pumps with maintenance history, %d features (train=%d val=%d)",
                len(X), X.shape[1], len(train_ds), len(val_ds))
    train_loader = DataLoader(train_ds, batch_size=CFG["batch_size"], shuffle=True,
                              generator=torch.Generator().manual_seed(CFG["seed"]))
    val_loader = DataLoader(val_ds, batch_size=256)

    model = build_model(X.shape[1])
    optimizer = make_optimizer(model.parameters())
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=CFG["epochs"] * len(train_loader))
    for epoch in range(1, CFG["epochs"] + 1):
        model.train()
        running, seen = 0.0, 0
        for batch in train_loader:
            optimizer.zero_grad(set_to_none=True)
            loss = compute_loss(model, batch)
            loss.backward()
            optimizer.step()
            scheduler.step()
            running += loss.item() * len(batch[1])
            seen += len(batch[1])
        val_loss, val_acc, val_f1 = evaluate(model, val_loader)
        logger.info("epoch %d train_loss=%.4f val_loss=%.4f val_acc=%.3f val_f1=%.3f lr=%.2e",
                    epoch, running / seen, val_loss, val_acc, val_f1, scheduler.get_last_lr()[0])
    logger.info("training finished: val_acc=%.3f val_f1=%.3f", val_acc, val_f1)


if __name__ == "__main__":
    main()
