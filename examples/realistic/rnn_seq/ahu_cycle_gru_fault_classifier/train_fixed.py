"""Fault classification of air-handling-unit (AHU) run cycles with a GRU.

Every sample is one compressor/fan run cycle logged once a minute (variable duration),
6 BMS channels. Cycles are stored zero-padded in an npz next to this script.
"""
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

SEED = 7
DATA_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ahu_cycles.npz")

CHANNELS = ["supply_temp_c", "return_temp_c", "duct_static_pa", "fan_rpm", "chw_valve_pct", "fan_power_kw"]
CLASSES = ["normal", "stuck_valve", "belt_slip", "filter_clog", "sat_sensor_bias"]
N_CYCLES = 1600
MIN_LEN, MAX_LEN = 24, 150

BATCH_SIZE = 64
EPOCHS = 12
LR = 2e-3
HIDDEN = 64

torch.set_num_threads(1)


# --------------------------------------------------------------------------------------
# synthetic BMS export
# --------------------------------------------------------------------------------------
def simulate_cycle(rng, label, length, unit):
    t = np.arange(length)
    load = np.cumsum(rng.normal(0, 0.06, length))
    load = 0.5 + 0.25 * np.tanh(load) + 0.1 * np.sin(2 * np.pi * t / rng.uniform(40, 90) + rng.uniform(0, 6))
    sat_sp = unit["sat_sp"]
    valve = 20 + 60 * load + rng.normal(0, 1.5, length)
    supply = sat_sp + rng.normal(0, 0.15, length)
    rpm = unit["rpm"] + 40 * (load - 0.5) + rng.normal(0, 6, length)
    dp_gain = unit["dp_gain"]
    if label == 1:  # valve stuck: no modulation, supply air temp follows the load
        valve = np.full(length, rng.uniform(30, 60)) + rng.normal(0, 0.3, length)
        supply = sat_sp + 2.0 * (load - (valve - 20) / 60) + rng.normal(0, 0.15, length)
    if label == 2:  # belt slip: intermittent rpm sags, power does not follow
        slip = (rng.random(length) < 0.12).astype(float)
        slip = np.convolve(slip, np.ones(4), mode="same").clip(0, 1)
        rpm_true = rpm.copy()
        rpm = rpm - 70 * slip
        dp = dp_gain * (rpm / 1000.0) ** 2 + rng.normal(0, 2.0, length)
        power = unit["kw"] * (rpm_true / unit["rpm"]) ** 3 + rng.normal(0, 0.15, length)
    else:
        dp = dp_gain * (rpm / 1000.0) ** 2 + rng.normal(0, 2.0, length)
        power = unit["kw"] * (rpm / unit["rpm"]) ** 3 + rng.normal(0, 0.15, length)
    if label == 3:  # clogged filter: more static for the same speed, more power
        dp = dp + rng.uniform(18, 30)
        power = power + rng.uniform(0.8, 1.4)
    if label == 4:  # supply-air sensor reads high -> controller over-opens the valve
        bias = rng.uniform(0.8, 1.5)
        supply = supply + bias
        valve = valve + 12 * bias
    ret = supply + 9.5 + 1.5 * load + rng.normal(0, 0.2, length)
    return np.stack([supply, ret, dp, rpm, valve.clip(0, 100), power], axis=1).astype(np.float32)


def generate_npz(path, seed=SEED):
    rng = np.random.default_rng(seed)
    units = [dict(sat_sp=rng.uniform(12.0, 14.0), rpm=rng.uniform(1350, 1450),
                  dp_gain=rng.uniform(118, 132), kw=rng.uniform(16, 20)) for _ in range(30)]
    lengths = np.clip(rng.lognormal(np.log(52), 0.5, N_CYCLES), MIN_LEN, MAX_LEN).astype(np.int64)
    labels = rng.choice(len(CLASSES), size=N_CYCLES, p=[0.36, 0.16, 0.16, 0.16, 0.16])
    X = np.zeros((N_CYCLES, MAX_LEN, len(CHANNELS)), dtype=np.float32)
    for i in range(N_CYCLES):
        unit = units[rng.integers(len(units))]
        X[i, :lengths[i]] = simulate_cycle(rng, labels[i], lengths[i], unit)
    np.savez_compressed(path, X=X, lengths=lengths, labels=labels)


# --------------------------------------------------------------------------------------
# data pipeline
# --------------------------------------------------------------------------------------
def stratified_split(labels, val_frac, rng):
    train_idx, val_idx = [], []
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        n_val = int(round(len(idx) * val_frac))
        val_idx.extend(idx[:n_val])
        train_idx.extend(idx[n_val:])
    return np.array(sorted(train_idx)), np.array(sorted(val_idx))


def load_splits(seed=SEED):
    if not os.path.exists(DATA_PATH):
        generate_npz(DATA_PATH, seed)
    d = np.load(DATA_PATH)
    X, lengths, labels = d["X"], d["lengths"], d["labels"]
    rng = np.random.default_rng(seed)
    tr, va = stratified_split(labels, 0.2, rng)

    X_tr = X[tr]
    flat = X_tr[np.arange(X.shape[1])[None, :] < lengths[tr][:, None]]
    mean, std = flat.mean(axis=0), flat.std(axis=0) + 1e-6
    Xn = (X - mean) / std
    Xn[np.arange(X.shape[1])[None, :] >= lengths[:, None]] = 0.0

    def to_ds(idx):
        return TensorDataset(torch.from_numpy(Xn[idx]).float(), torch.from_numpy(lengths[idx]),
                             torch.from_numpy(labels[idx]))
    return to_ds(tr), to_ds(va), labels[tr]


def collate(batch):
    x, lengths, y = map(torch.stack, zip(*batch))
    T = int(lengths.max())
    return x[:, :T].contiguous(), lengths, y


# --------------------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------------------
class CycleGRU(nn.Module):
    def __init__(self, n_in, n_classes, hidden=HIDDEN, dropout=0.2):
        super().__init__()
        self.gru = nn.GRU(n_in, hidden, batch_first=True)
        self.drop = nn.Dropout(dropout)
        self.head = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.ReLU(), nn.Linear(hidden, n_classes))

    def forward(self, x, lengths):
        out, _ = self.gru(x)  # unidirectional: outputs up to lengths-1 never see the padding
        idx = (lengths - 1).clamp_min(0)
        last = out[torch.arange(x.size(0)), idx]
        steps = torch.arange(x.size(1), device=x.device)[None, :, None]
        mask = (steps < lengths[:, None, None]).float()
        mean = (out * mask).sum(1) / lengths[:, None].float()
        return self.head(self.drop(torch.cat([last, mean], dim=-1)))


def loss_fn(model, batch):
    x, lengths, y = batch
    return F.cross_entropy(model(x, lengths), y)


def build(seed=SEED):
    torch.manual_seed(seed)
    train_ds, val_ds, _ = load_splits(seed)
    g = torch.Generator().manual_seed(seed)
    train_loader = DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True, collate_fn=collate, generator=g)
    val_loader = DataLoader(val_ds, batch_size=256, shuffle=False, collate_fn=collate)
    model = CycleGRU(len(CHANNELS), len(CLASSES))
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    return model, optimizer, train_loader, val_loader


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    tot, correct, n = 0.0, 0, 0
    conf = np.zeros((len(CLASSES), len(CLASSES)), dtype=np.int64)
    for x, lengths, y in loader:
        logits = model(x, lengths)
        tot += F.cross_entropy(logits, y, reduction="sum").item()
        pred = logits.argmax(-1)
        correct += (pred == y).sum().item()
        n += len(y)
        np.add.at(conf, (y.numpy(), pred.numpy()), 1)
    model.train()
    recall = conf.diagonal() / conf.sum(1).clip(1)
    precision = conf.diagonal() / conf.sum(0).clip(1)
    f1 = 2 * precision * recall / (precision + recall).clip(1e-9)
    return tot / n, correct / n, f1.mean()


def make_target():
    model, optimizer, train_loader, val_loader = build()
    return {
        "model": model,
        "data": train_loader,
        "loss_fn": loss_fn,
        "optimizer": optimizer,
        "val_data": val_loader,
        "num_classes": len(CLASSES),
        "task": "classification",
    }


def main():
    t_start = time.time()
    model, optimizer, train_loader, val_loader = build()
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=EPOCHS * len(train_loader), eta_min=LR * 0.05)
    print(f"train cycles: {len(train_loader.dataset)}  val cycles: {len(val_loader.dataset)}  "
          f"classes: {len(CLASSES)}  params: {sum(p.numel() for p in model.parameters())}")
    for epoch in range(1, EPOCHS + 1):
        t0 = time.time()
        tot, correct, n = 0.0, 0, 0
        for batch in train_loader:
            x, lengths, y = batch
            logits = model(x, lengths)
            loss = F.cross_entropy(logits, y)
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()
            scheduler.step()
            tot += loss.item() * len(y)
            correct += (logits.argmax(-1) == y).sum().item()
            n += len(y)
        val_loss, val_acc, val_f1 = evaluate(model, val_loader)
        print(f"Epoch {epoch}/{EPOCHS}: train_loss={tot / n:.4f} train_acc={correct / n:.4f} | "
              f"val_loss={val_loss:.4f} val_acc={val_acc:.4f} val_macro_f1={val_f1:.4f} | "
              f"lr={scheduler.get_last_lr()[0]:.2e} | {time.time() - t0:.1f}s")
    print(f"Training finished in {time.time() - t_start:.1f}s")


if __name__ == "__main__":
    main()
