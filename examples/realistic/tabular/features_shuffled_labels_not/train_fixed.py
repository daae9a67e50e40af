"""Pump fault classifier from SCADA sensor snapshots.

Each row is one 10-minute snapshot of a pump station (14 sensor readings);
the label is the fault code the technician later assigned to that snapshot
(0 = normal, 1 = cavitation, 2 = bearing wear, 3 = seal leak).
Snapshots are put in time order so that validation is strictly later than
training (no look-ahead).
"""
import argparse
import logging
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

log = logging.getLogger("pumpfault")
SENSORS = ["flow", "head", "power_kw", "rpm", "vib_x", "vib_y", "vib_z", "bearing_temp", "motor_temp",
           "suction_p", "discharge_p", "seal_flush_p", "current_a", "oil_level"]
FAULTS = ["normal", "cavitation", "bearing_wear", "seal_leak"]


def load_snapshots(n=12000, seed=17):
    g = torch.Generator().manual_seed(seed)
    # snapshots arrive from several stations, so the raw export is not in time order
    ts = torch.randint(1_700_000_000, 1_730_000_000, (n,), generator=g)
    y = torch.multinomial(torch.tensor([0.4, 0.2, 0.2, 0.2]), n, replacement=True, generator=g)
    x = torch.randn(n, len(SENSORS), generator=g)
    x[:, 1] += 0.5 * x[:, 0]
    x[:, 2] += 0.6 * x[:, 0] + 0.3 * x[:, 3]
    cav, bear, seal = (y == 1).float(), (y == 2).float(), (y == 3).float()
    x[:, 9] -= 1.6 * cav                     # low suction pressure
    x[:, 4] += 1.2 * cav + 1.4 * bear        # vibration
    x[:, 6] += 1.3 * bear
    x[:, 7] += 1.5 * bear                    # hot bearing
    x[:, 11] -= 1.5 * seal                   # seal flush pressure drop
    x[:, 13] -= 1.0 * seal
    x[:, 1] -= 0.7 * cav
    scale = torch.tensor([120, 40, 55, 1480, 2.5, 2.5, 2.5, 65, 70, 1.8, 6.0, 2.2, 90, 0.8])
    shift = torch.tensor([600, 80, 150, 1480, 4.0, 4.0, 4.0, 60, 75, 2.0, 9.0, 3.0, 250, 1.0])
    return ts, shift + 0.15 * scale * x * 4, y


def prepare(val_frac=0.2):
    ts, features, labels = load_snapshots()
    order = torch.argsort(ts)
    ts, features, labels = ts[order], features[order], labels[order]
    cut = int(len(ts) * (1 - val_frac))
    x_tr, x_va = features[:cut], features[cut:]
    y_tr, y_va = labels[:cut], labels[cut:]
    mu, sd = x_tr.mean(0), x_tr.std(0)
    return (x_tr - mu) / sd, y_tr, (x_va - mu) / sd, y_va, ts[cut]


class FaultMLP(nn.Module):
    def __init__(self, d_in=len(SENSORS), width=96, n_out=len(FAULTS)):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, width), nn.GELU(), nn.Dropout(0.1),
                                 nn.Linear(width, width), nn.GELU(), nn.Dropout(0.1),
                                 nn.Linear(width, n_out))

    def forward(self, x):
        return self.net(x)


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def make_optimizer(params, lr=1e-3):
    return torch.optim.Adam(params, lr=lr)


def macro_f1(pred, y, k):
    f1s = []
    for c in range(k):
        tp = ((pred == c) & (y == c)).sum().item()
        fp = ((pred == c) & (y != c)).sum().item()
        fn = ((pred != c) & (y == c)).sum().item()
        f1s.append(2 * tp / max(2 * tp + fp + fn, 1))
    return sum(f1s) / k


def parse_args(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=15)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=3)
    return p.parse_args(argv)


def make_target():
    args = parse_args([])
    torch.manual_seed(args.seed)
    x_tr, y_tr, _, _, _ = prepare()
    loader = DataLoader(TensorDataset(x_tr, y_tr), batch_size=args.batch_size, shuffle=True)
    model = FaultMLP()
    it = iter(loader)
    data = [next(it) for _ in range(4)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model.parameters(), args.lr),
            "make_optimizer": lambda params: make_optimizer(params, args.lr),
            "num_classes": len(FAULTS), "task": "classification"}


def main():
    torch.set_num_threads(1)  # single-threaded is fastest for this size
    logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(asctime)s | %(levelname)s | %(message)s")
    args = parse_args()
    torch.manual_seed(args.seed)
    x_tr, y_tr, x_va, y_va, cutoff = prepare()
    log.info("train %d snapshots, val %d snapshots (val starts at unix %d)", len(y_tr), len(y_va), cutoff)
    log.info("class balance train: %s", {FAULTS[c]: round((y_tr == c).float().mean().item(), 3) for c in range(4)})
    loader = DataLoader(TensorDataset(x_tr, y_tr), batch_size=args.batch_size, shuffle=True)
    model = FaultMLP()
    opt = make_optimizer(model.parameters(), args.lr)
    log.info("model: %s params, optimizer Adam(lr=%g)", sum(p.numel() for p in model.parameters()), args.lr)
    best = 0.0
    for epoch in range(1, args.epochs + 1):
        t0 = time.time()
        model.train()
        tot, n = 0.0, 0
        for xb, yb in loader:
            loss = loss_fn(model, (xb, yb))
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += loss.item() * len(yb)
            n += len(yb)
        model.eval()
        with torch.no_grad():
            logits = model(x_va)
            val_loss = F.cross_entropy(logits, y_va).item()
            pred = logits.argmax(1)
            acc = (pred == y_va).float().mean().item()
            f1 = macro_f1(pred, y_va, len(FAULTS))
        best = max(best, f1)
        log.info("[epoch %02d] train_loss=%.4f val_loss=%.4f val_acc=%.4f val_macro_f1=%.4f (%.1fs)",
                 epoch, tot / n, val_loss, acc, f1, time.time() - t0)
    log.info("best val_macro_f1=%.4f", best)


if __name__ == "__main__":
    main()
