"""Remaining-useful-life regression for spindle bearings (run-to-failure rig).

Every 30 minutes the DAQ records a short vibration snapshot; the feature
extractor writes one `clip_<id>.npy` per snapshot (frames x [rms, kurtosis,
crest factor, BPFO band energy, HF band energy], variable number of frames) and
the rig log gives `metadata.csv` (clip_id, bearing, rpm, load, rul_hours).
A GRU over the frames regresses RUL (piecewise-linear, capped at 60 h).
Validation is on held-out bearings. Keras-style logs.
"""
import argparse
import glob
import os
import tempfile
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_sequence

CONFIG = dict(
    seed=21,
    n_bearings=12,
    val_bearings=("B03", "B09"),
    rul_cap=60.0,
    batch_size=32,
    epochs=12,
    lr=0.02,
    momentum=0.9,
    hidden=48,
)
N_FEAT = 5


def simulate_rig(out_dir, cfg):
    rng = np.random.default_rng(cfg["seed"])
    clip_dir = os.path.join(out_dir, "clips")
    os.makedirs(clip_dir)
    meta, clip_id = [], 0
    for b in range(cfg["n_bearings"]):
        n_clips = int(rng.integers(110, 180))
        life_h = n_clips * 0.5
        onset = rng.uniform(0.35, 0.7) * n_clips
        base = rng.normal(0, 0.15, N_FEAT)  # mounting / sensor placement offsets
        rpm = rng.choice([1800, 2400, 3000])
        for k in range(n_clips):
            h = 0.0 if k < onset else np.expm1(3.0 * (k - onset) / (n_clips - onset)) / np.expm1(3.0)
            n_frames = int(rng.integers(16, 48))
            impulses = rng.random(n_frames) < 0.05 + 0.5 * h  # defect impacts
            frames = np.stack([
                0.2 + 1.2 * h + 0.15 * rng.normal(size=n_frames) + 0.4 * impulses,
                3.0 + 4.0 * h * impulses + 0.6 * rng.normal(size=n_frames),
                1.5 + 0.8 * impulses * (0.3 + h) + 0.3 * rng.normal(size=n_frames),
                0.1 + 2.0 * h + 0.5 * impulses * h + 0.4 * rng.normal(size=n_frames),
                0.3 + 0.4 * (rpm / 3000) + 0.3 * rng.normal(size=n_frames),
            ], 1) + base
            np.save(os.path.join(clip_dir, f"clip_{clip_id}.npy"), frames.astype(np.float32))
            meta.append((clip_id, f"B{b + 1:02d}", rpm, round(rng.uniform(2.0, 6.0), 2),
                         round(life_h - 0.5 * k, 1)))
            clip_id += 1
    meta_path = os.path.join(out_dir, "metadata.csv")
    pd.DataFrame(meta, columns=["clip_id", "bearing", "rpm", "load_kn", "rul_hours"]).to_csv(meta_path, index=False)
    return clip_dir, meta_path


def load_dataset(clip_dir, meta_path, cfg):
    meta = pd.read_csv(meta_path).sort_values("clip_id").reset_index(drop=True)
    files = sorted(glob.glob(os.path.join(clip_dir, "clip_*.npy")))
    assert len(files) == len(meta), "clip files and metadata out of sync"
    clips = [np.log1p(np.clip(np.load(f), 0, None)) for f in files]
    rul = np.minimum(meta["rul_hours"].to_numpy(), cfg["rul_cap"]) / cfg["rul_cap"]

    is_val = meta["bearing"].isin(cfg["val_bearings"]).to_numpy()
    stacked = np.concatenate([c for c, v in zip(clips, is_val) if not v])
    mu, sd = stacked.mean(0), stacked.std(0) + 1e-6
    xs = [torch.tensor((c - mu) / sd, dtype=torch.float32) for c in clips]
    ys = torch.tensor(rul, dtype=torch.float32)
    train = [(xs[i], ys[i]) for i in np.flatnonzero(~is_val)]
    val = [(xs[i], ys[i]) for i in np.flatnonzero(is_val)]
    return train, val


def collate(batch):
    xs, ys = zip(*batch)
    lengths = torch.tensor([len(x) for x in xs])
    return pad_sequence(xs, batch_first=True), lengths, torch.stack(ys)


class RULNet(nn.Module):
    def __init__(self, n_in, hidden):
        super().__init__()
        self.gru = nn.GRU(n_in, hidden, batch_first=True)
        self.head = nn.Sequential(nn.Linear(hidden, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, x, lengths):
        _, h = self.gru(pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False))
        return self.head(h[-1]).squeeze(-1)


mse = nn.MSELoss()


def loss_fn(model, batch):
    x, lengths, y = batch
    return mse(model(x, lengths), y)


def build_optimizer(model, cfg):
    return torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=cfg["momentum"], nesterov=True)


def make_target():
    cfg = dict(CONFIG)
    torch.manual_seed(cfg["seed"])
    with tempfile.TemporaryDirectory() as tmp:
        train, _ = load_dataset(*simulate_rig(tmp, cfg), cfg)
    bs = cfg["batch_size"]
    perm = np.random.default_rng(cfg["seed"]).permutation(len(train))
    data = [collate([train[j] for j in perm[i * bs:(i + 1) * bs]]) for i in range(4)]
    model = RULNet(N_FEAT, cfg["hidden"])
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": build_optimizer(model, cfg), "task": "regression"}


@torch.no_grad()
def evaluate(model, dl, cap):
    model.eval()
    se, ae, n = 0.0, 0.0, 0
    for x, lengths, y in dl:
        pred = model(x, lengths)
        se += ((pred - y) ** 2).sum().item()
        ae += (pred - y).abs().sum().item() * cap
        n += len(y)
    model.train()
    return se / n, ae / n


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=CONFIG["epochs"])
    p.add_argument("--lr", type=float, default=CONFIG["lr"])
    cli = p.parse_args()
    cfg = dict(CONFIG, epochs=cli.epochs, lr=cli.lr)

    np.random.seed(cfg["seed"])
    torch.manual_seed(cfg["seed"])
    with tempfile.TemporaryDirectory() as tmp:
        train, val = load_dataset(*simulate_rig(tmp, cfg), cfg)
    print(f"Train on {len(train)} clips, validate on {len(val)} clips (bearings {', '.join(cfg['val_bearings'])})")

    train_dl = torch.utils.data.DataLoader(train, batch_size=cfg["batch_size"], shuffle=True, collate_fn=collate,
                                           generator=torch.Generator().manual_seed(cfg["seed"]))
    val_dl = torch.utils.data.DataLoader(val, batch_size=128, shuffle=False, collate_fn=collate)
    model = RULNet(N_FEAT, cfg["hidden"])
    opt = build_optimizer(model, cfg)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=cfg["epochs"] * len(train_dl))
    steps = len(train_dl)

    for epoch in range(cfg["epochs"]):
        t0 = time.time()
        tot, tot_ae, n = 0.0, 0.0, 0
        for x, lengths, y in train_dl:
            pred = model(x, lengths)
            loss = mse(pred, y)
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            tot += loss.item() * len(y)
            tot_ae += (pred.detach() - y).abs().sum().item() * cfg["rul_cap"]
            n += len(y)
        val_loss, val_mae = evaluate(model, val_dl, cfg["rul_cap"])
        dt = time.time() - t0
        print(f"Epoch {epoch + 1}/{cfg['epochs']}")
        print(f"{steps}/{steps} [==============================] - {dt:.0f}s {1000 * dt / steps:.0f}ms/step"
              f" - loss: {tot / n:.4f} - mae_hours: {tot_ae / n:.2f}"
              f" - val_loss: {val_loss:.4f} - val_mae_hours: {val_mae:.2f}")


if __name__ == "__main__":
    main()
