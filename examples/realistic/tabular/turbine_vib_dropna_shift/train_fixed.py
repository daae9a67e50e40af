"""Turbine condition classifier: MLP over 10-minute SCADA summaries -> normal / bearing_wear / blade_imbalance."""
import csv
import logging
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
CSV_PATH = os.path.join(HERE, "turbine_log.csv")
FEATURES = ["rotor_rpm", "power_kw", "ambient_c", "vib_x", "vib_y", "bearing_temp_c", "oil_bar"]
CLASSES = ["normal", "bearing_wear", "blade_imbalance"]

CFG = dict(seed=0, val_frac=0.2, batch_size=128, epochs=25, lr=3e-3, weight_decay=1e-4, hidden=64)

log = logging.getLogger("turbine")


def read_log(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    feats = np.array([[float(r[c]) if r[c] != "" else np.nan for c in FEATURES] for r in rows],
                     dtype=np.float32)
    labels = np.array([CLASSES.index(r["status"]) for r in rows], dtype=np.int64)
    return feats, labels


def drop_incomplete(X, y):
    keep = ~np.isnan(X).any(axis=1)
    log.info("dropping %d rows with missing sensor values (%d left)", int((~keep).sum()), int(keep.sum()))
    return X[keep], y[keep]


def split(X, y, val_frac, seed):
    idx = np.random.default_rng(seed).permutation(len(X))
    n_val = int(len(X) * val_frac)
    va, tr = idx[:n_val], idx[n_val:]
    return (X[tr], y[tr]), (X[va], y[va])


class Standardizer:
    def fit(self, X):
        self.mu = X.mean(0)
        self.sd = X.std(0) + 1e-6
        return self

    def __call__(self, X):
        return (X - self.mu) / self.sd


def load_data(cfg=CFG):
    X, y = read_log(CSV_PATH)
    X, y = drop_incomplete(X, y)
    (Xtr, ytr), (Xva, yva) = split(X, y, cfg["val_frac"], cfg["seed"])
    scaler = Standardizer().fit(Xtr)
    Xtr, Xva = scaler(Xtr), scaler(Xva)
    return (torch.from_numpy(Xtr), torch.from_numpy(ytr)), (torch.from_numpy(Xva), torch.from_numpy(yva))


def build_model(cfg=CFG):
    h = cfg["hidden"]
    return nn.Sequential(
        nn.Linear(len(FEATURES), h), nn.ReLU(),
        nn.Linear(h, h), nn.ReLU(),
        nn.Linear(h, len(CLASSES)),
    )


def make_optimizer(params, cfg=CFG):
    return torch.optim.AdamW(params, lr=cfg["lr"], weight_decay=cfg["weight_decay"])


def loss_fn(model, batch):
    xb, yb = batch
    return F.cross_entropy(model(xb), yb)


def batches(X, y, bs, shuffle, gen=None):
    idx = torch.randperm(len(X), generator=gen) if shuffle else torch.arange(len(X))
    for i in range(0, len(X), bs):
        j = idx[i:i + bs]
        yield X[j], y[j]


@torch.no_grad()
def evaluate(model, X, y):
    model.eval()
    logits = model(X)
    loss = F.cross_entropy(logits, y).item()
    acc = (logits.argmax(1) == y).float().mean().item()
    model.train()
    return loss, acc


def make_target():
    torch.manual_seed(CFG["seed"])
    (Xtr, ytr), _ = load_data()
    model = build_model()
    gen = torch.Generator().manual_seed(CFG["seed"])
    data = [b for _, b in zip(range(3), batches(Xtr, ytr, CFG["batch_size"], True, gen))]
    return {
        "model": model,
        "batch": data[0],
        "data": data,
        "loss_fn": loss_fn,
        "optimizer": make_optimizer(model.parameters()),
        "make_optimizer": make_optimizer,
        "num_classes": len(CLASSES),
        "task": "classification",
    }


def main():
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    torch.manual_seed(CFG["seed"])
    (Xtr, ytr), (Xva, yva) = load_data()
    log.info("train=%d val=%d features=%d classes=%s", len(Xtr), len(Xva), Xtr.shape[1], CLASSES)
    log.info("train class counts: %s", torch.bincount(ytr, minlength=len(CLASSES)).tolist())

    model = build_model()
    opt = make_optimizer(model.parameters())
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=CFG["epochs"])
    gen = torch.Generator().manual_seed(CFG["seed"])
    log.info("model params=%d", sum(p.numel() for p in model.parameters()))

    best = 0.0
    for epoch in range(1, CFG["epochs"] + 1):
        model.train()
        tot, n = 0.0, 0
        for xb, yb in batches(Xtr, ytr, CFG["batch_size"], True, gen):
            loss = loss_fn(model, (xb, yb))
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += loss.item() * len(xb)
            n += len(xb)
        sched.step()
        tr_loss, tr_acc = evaluate(model, Xtr, ytr)
        va_loss, va_acc = evaluate(model, Xva, yva)
        best = max(best, va_acc)
        log.info("epoch %d train_loss=%.4f train_acc=%.3f val_loss=%.4f val_acc=%.3f lr=%.2e",
                 epoch, tot / n, tr_acc, va_loss, va_acc, sched.get_last_lr()[0])
    log.info("done best_val_acc=%.3f", best)


if __name__ == "__main__":
    main()
