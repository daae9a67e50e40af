"""Per-timestep activity recognition from a wrist wearable.

Each recording is a stream of 2-second feature frames (accelerometer magnitude /
std / dominant frequency, wrist pitch, barometric slope, heart rate, plus a few
housekeeping channels) exported to `frames.csv` with an annotated activity per
frame. Recordings are cut into chunks of at most `chunk_len` frames and a
bidirectional LSTM tags every frame as sitting / walking / running / stairs.
Validation uses held-out users.
"""
import argparse
import os
import tempfile
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pad_sequence

CONFIG = dict(
    seed=3,
    n_users=40,
    n_val_users=8,
    chunk_len=120,
    batch_size=32,
    epochs=12,
    lr=3e-3,
    weight_decay=1e-2,
    hidden=48,
)

ACTIVITIES = ["sitting", "walking", "running", "stairs"]
FEATURES = ["acc_mag", "acc_std", "dom_freq", "pitch", "baro_slope", "heart_rate", "skin_temp", "battery"]
IGNORE = -100

MEAN_DUR = np.array([30.0, 20.0, 12.0, 8.0])
NEXT = np.array([[0.0, 0.8, 0.0, 0.2],
                 [0.4, 0.0, 0.3, 0.3],
                 [0.1, 0.9, 0.0, 0.0],
                 [0.2, 0.8, 0.0, 0.0]])


def simulate_recording(rng, user, length):
    acts = np.empty(length, dtype=int)
    a, t = rng.integers(0, 4), 0
    while t < length:
        d = 1 + rng.geometric(1.0 / MEAN_DUR[a])
        acts[t:t + d] = a
        t += d
        a = rng.choice(4, p=NEXT[a])
    n = length
    acc_mag = np.array([1.0, 1.15, 1.5, 1.2])[acts] + rng.normal(0, 0.16, n)
    acc_std = np.array([0.05, 0.25, 0.55, 0.30])[acts] + rng.normal(0, 0.18, n)
    dom_freq = np.where(acts == 0, rng.uniform(0, 1.2, n), np.array([0.3, 1.8, 2.6, 1.6])[acts] + rng.normal(0, 0.7, n))
    pitch = np.where(acts == 0, user["sit_pitch"], user["walk_pitch"]) + rng.normal(0, 9.0, n)
    direction = np.sign(rng.normal(size=n)).cumsum() % 2 * 2 - 1  # up / down flights
    baro_slope = np.where(acts == 3, 0.45 * direction, 0.0) + rng.normal(0, 0.5, n)
    hr_target = np.array([70.0, 95.0, 140.0, 112.0])[acts] + user["hr_offset"]
    hr = np.empty(n)
    h = hr_target[0]
    for i in range(n):  # heart rate follows activity with a lag
        h += 0.12 * (hr_target[i] - h)
        hr[i] = h
    hr += rng.normal(0, 6.0, n)
    hr[rng.random(n) < 0.06] = np.nan  # optical sensor dropouts
    skin_temp = 32.0 + np.cumsum(rng.normal(0, 0.02, n)) + rng.normal(0, 0.1, n)
    battery = np.linspace(rng.uniform(40, 100), 0, n) * rng.uniform(0.05, 0.2) + rng.uniform(10, 60)
    return acts, np.stack([acc_mag, acc_std, dom_freq, pitch, baro_slope, hr, skin_temp, battery], 1)


def write_export(out_dir, cfg):
    rng = np.random.default_rng(cfg["seed"])
    frames = []
    rec_id = 0
    for u in range(cfg["n_users"]):
        user = dict(sit_pitch=rng.normal(40, 8), walk_pitch=rng.normal(10, 6), hr_offset=rng.normal(0, 8))
        for _ in range(rng.integers(3, 7)):
            length = int(rng.integers(60, 600))
            acts, feats = simulate_recording(rng, user, length)
            df = pd.DataFrame(feats, columns=FEATURES)
            df.insert(0, "frame", np.arange(length))
            df.insert(0, "recording_id", rec_id)
            df.insert(0, "user_id", f"u{u:03d}")
            df["activity"] = np.array(ACTIVITIES)[acts]
            frames.append(df)
            rec_id += 1
    path = os.path.join(out_dir, "frames.csv")
    pd.concat(frames).round(4).to_csv(path, index=False)
    return path


def load_chunks(path, cfg):
    df = pd.read_csv(path).sort_values(["recording_id", "frame"])
    df["heart_rate"] = df.groupby("recording_id")["heart_rate"].ffill()
    df["heart_rate"] = df["heart_rate"].fillna(df["heart_rate"].median())

    users = sorted(df["user_id"].unique())
    rng = np.random.default_rng(cfg["seed"])
    val_users = set(rng.choice(users, size=cfg["n_val_users"], replace=False))
    is_val = df["user_id"].isin(val_users)
    mu = df.loc[~is_val, FEATURES].mean()
    sd = df.loc[~is_val, FEATURES].std()
    df[FEATURES] = (df[FEATURES] - mu) / sd
    df["y"] = df["activity"].map({a: i for i, a in enumerate(ACTIVITIES)})

    train, val = [], []
    for rid, rec in df.groupby("recording_id"):
        x = torch.tensor(rec[FEATURES].to_numpy(), dtype=torch.float32)
        y = torch.tensor(rec["y"].to_numpy(), dtype=torch.long)
        out = val if rec["user_id"].iloc[0] in val_users else train
        for s in range(0, len(rec), cfg["chunk_len"]):
            out.append((x[s:s + cfg["chunk_len"]], y[s:s + cfg["chunk_len"]]))
    return train, val


def collate(batch):
    feats, tags = zip(*batch)
    # left-pad so every chunk ends on its most recent frame (same layout as the streaming model)
    x = pad_sequence(feats, batch_first=True)
    y = pad_sequence(tags, batch_first=True, padding_value=IGNORE)
    return x, y


class ActivityTagger(nn.Module):
    def __init__(self, n_in, hidden, n_classes):
        super().__init__()
        self.proj = nn.Sequential(nn.Linear(n_in, hidden), nn.GELU())
        self.lstm = nn.LSTM(hidden, hidden, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * hidden, n_classes)

    def forward(self, x):
        out, _ = self.lstm(self.proj(x))
        return self.head(out)


criterion = nn.CrossEntropyLoss(ignore_index=IGNORE)


def loss_fn(model, batch):
    x, y = batch
    logits = model(x)
    return criterion(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def make_target():
    cfg = dict(CONFIG)
    torch.manual_seed(cfg["seed"])
    with tempfile.TemporaryDirectory() as tmp:
        train, _ = load_chunks(write_export(tmp, cfg), cfg)
    bs = cfg["batch_size"]
    data = [collate(train[i * bs:(i + 1) * bs]) for i in range(4)]
    model = ActivityTagger(len(FEATURES), cfg["hidden"], len(ACTIVITIES))
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=cfg["weight_decay"]),
            "task": "classification", "num_classes": len(ACTIVITIES)}


@torch.no_grad()
def evaluate(model, dl):
    model.eval()
    tot, correct, n = 0.0, 0, 0
    for x, y in dl:
        logits = model(x)
        mask = y != IGNORE
        k = mask.sum().item()
        tot += criterion(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item() * k
        correct += (logits.argmax(-1)[mask] == y[mask]).sum().item()
        n += k
    model.train()
    return tot / n, correct / n


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=CONFIG["epochs"])
    p.add_argument("--lr", type=float, default=CONFIG["lr"])
    cli = p.parse_args()
    cfg = dict(CONFIG, epochs=cli.epochs, lr=cli.lr)

    np.random.seed(cfg["seed"])
    torch.manual_seed(cfg["seed"])
    t_start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        train, val = load_chunks(write_export(tmp, cfg), cfg)
    print(f"{len(train)} train chunks / {len(val)} val chunks "
          f"({sum(len(c[1]) for c in train)} / {sum(len(c[1]) for c in val)} frames)")

    train_dl = torch.utils.data.DataLoader(train, batch_size=cfg["batch_size"], shuffle=True, collate_fn=collate,
                                           generator=torch.Generator().manual_seed(cfg["seed"]))
    val_dl = torch.utils.data.DataLoader(val, batch_size=64, shuffle=False, collate_fn=collate)
    model = ActivityTagger(len(FEATURES), cfg["hidden"], len(ACTIVITIES))
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=cfg["weight_decay"])
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.5)

    for epoch in range(1, cfg["epochs"] + 1):
        tot, n = 0.0, 0
        for x, y in train_dl:
            loss = loss_fn(model, (x, y))
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            opt.step()
            k = (y != IGNORE).sum().item()
            tot += loss.item() * k
            n += k
        sched.step()
        val_loss, val_acc = evaluate(model, val_dl)
        print(f"epoch {epoch:2d} | train loss {tot / n:.4f} | val loss {val_loss:.4f} | val acc {val_acc:.4f}"
              f" | lr {opt.param_groups[0]['lr']:.2e}")
    print(f"done in {time.time() - t_start:.1f}s")


if __name__ == "__main__":
    main()
