#!/usr/bin/env python3
"""Bird species classification from 1-s log-mel clips.

Clips are cut from field recordings (one focal species per recording) and stored as
precomputed log-mel spectrograms in data/logmel.npz, one row per entry of
data/clips.csv. Clips without a vocalisation are discarded before training.
Train/val split is done by recording to avoid near-duplicate clips across splits.
"""
import os
import time
from collections import OrderedDict

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

ROOT = os.path.dirname(os.path.abspath(__file__))
DATA_DIR = os.path.join(ROOT, "data")
META_CSV = os.path.join(DATA_DIR, "clips.csv")
SPEC_NPZ = os.path.join(DATA_DIR, "logmel.npz")

SEED = 0
N_MELS = 32
N_FRAMES = 40
SPECIES = ["blackcap", "chiffchaff", "dunnock", "goldcrest",
           "reed_warbler", "robin", "wren", "yellowhammer"]
RECS_PER_SPECIES = 12
CLIPS_PER_REC = 28
VAL_RECS_PER_SPECIES = 3
MIN_EVENT_DB = 13.0      # peak above clip median, below this the clip is background only

EPOCHS = 8
BATCH_SIZE = 64
LR = 0.05
MOMENTUM = 0.9
WEIGHT_DECAY = 5e-4
WARMUP_EPOCHS = 1
LOG_INTERVAL = 15


# ----------------------------------------------------------------------------------
# synthetic field recordings -> log-mel clips (written once to data/)
# ----------------------------------------------------------------------------------
def _add_note(P, f, t0, dur, level, width=1.0):
    """Add a note with frequency track f (array of len dur, mel-bin units) to power P."""
    bins = np.arange(N_MELS)[:, None]
    for k in range(dur):
        t = t0 + k
        if 0 <= t < N_FRAMES:
            env = np.sin(np.pi * (k + 0.5) / dur) ** 0.5
            P[:, t] += level * env * np.exp(-0.5 * ((bins[:, 0] - f[k]) / width) ** 2)


def _call(P, sp, f0, t0, level, rng):
    if sp == 0:    # blackcap: rich warble
        d = 12
        f = f0 + 3 * np.sin(np.linspace(0, 3 * np.pi, d))
        _add_note(P, f, t0, d, level, 1.2)
    elif sp == 1:  # chiffchaff: alternating two-note
        for j in range(4):
            ff = f0 + (3 if j % 2 == 0 else -1)
            _add_note(P, np.full(3, ff), t0 + 4 * j, 3, level)
    elif sp == 2:  # dunnock: fast jingle, narrow downsweeps
        for j in range(3):
            _add_note(P, np.linspace(f0 + 4, f0, 3), t0 + 3 * j, 3, level)
    elif sp == 3:  # goldcrest: very high thin upsweeps
        for j in range(3):
            _add_note(P, np.linspace(f0, f0 + 3, 3), t0 + 4 * j, 3, level, 0.8)
    elif sp == 4:  # reed warbler: harmonic stack, repeated
        for j in range(2):
            _add_note(P, np.full(4, f0), t0 + 6 * j, 4, level)
            _add_note(P, np.full(4, f0 + 9), t0 + 6 * j, 4, 0.5 * level)
    elif sp == 5:  # robin: long descending whistle
        d = 10
        _add_note(P, np.linspace(f0 + 6, f0 - 2, d), t0, d, level, 1.0)
    elif sp == 6:  # wren: loud trill
        for j in range(6):
            _add_note(P, np.full(2, f0 + rng.normal(0, 0.4)), t0 + 2 * j, 1, level, 1.3)
    elif sp == 7:  # yellowhammer: trill then long flat note
        for j in range(4):
            _add_note(P, np.full(1, f0), t0 + 2 * j, 1, level)
        _add_note(P, np.full(6, f0 - 3), t0 + 8, 6, level, 1.5)


SPECIES_F0 = [14, 16, 12, 24, 10, 16, 18, 15]


def synthesize_dataset():
    rng = np.random.default_rng(SEED)
    rows, specs = [], []
    for sp, name in enumerate(SPECIES):
        for r in range(RECS_PER_SPECIES):
            bg_db = rng.uniform(-62, -46)
            tilt = rng.uniform(-0.4, 0.0)
            shift = rng.normal(0, 1.0)
            snr_db = rng.uniform(14, 30)
            p_silent = rng.uniform(0.0, 0.12)
            for c in range(CLIPS_PER_REC):
                floor = 10 ** ((bg_db + tilt * np.arange(N_MELS)) / 10)
                P = floor[:, None] * rng.gamma(4.0, 0.25, size=(N_MELS, N_FRAMES))
                if rng.random() > p_silent:
                    level = 10 ** ((bg_db + snr_db) / 10)
                    for _ in range(rng.integers(1, 3)):
                        f0 = SPECIES_F0[sp] + shift + rng.normal(0, 0.7)
                        t0 = rng.integers(-6, N_FRAMES - 6)
                        _call(P, sp, f0, t0, level * rng.uniform(0.3, 1.0), rng)
                # a bit of other-species chatter in the background
                if rng.random() < 0.3:
                    other = rng.integers(len(SPECIES))
                    _call(P, other, SPECIES_F0[other] + rng.normal(0, 1), rng.integers(0, N_FRAMES - 6),
                          10 ** ((bg_db + rng.uniform(0, 8)) / 10), rng)
                specs.append(10 * np.log10(P + 1e-10))
                rows.append({"clip_id": f"{name}/rec{r:02d}_{c:03d}", "species": name,
                             "recording": f"{name}_rec{r:02d}", "offset_s": float(c)})
    meta = pd.DataFrame(rows)
    order = np.argsort(meta.clip_id.values, kind="stable")
    meta = meta.iloc[order].reset_index(drop=True)
    specs = np.stack(specs).astype(np.float32)[order]
    os.makedirs(DATA_DIR, exist_ok=True)
    meta.to_csv(META_CSV, index=False)
    np.savez_compressed(SPEC_NPZ, logmel=specs)


# ----------------------------------------------------------------------------------
# dataset
# ----------------------------------------------------------------------------------
class LogMelDataset(Dataset):
    def __init__(self, specs, labels, mean, std, train):
        self.specs = torch.from_numpy(specs)
        self.labels = torch.from_numpy(labels)
        self.mean, self.std = mean, std
        self.train = train

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        x = self.specs[i].clone()
        if self.train:
            x = x + float(np.random.uniform(-6, 6))                       # gain
            x = torch.roll(x, int(np.random.randint(-8, 9)), dims=1)      # time shift
            fw = np.random.randint(0, 5)
            f0 = np.random.randint(0, N_MELS - fw + 1)
            tw = np.random.randint(0, 7)
            t0 = np.random.randint(0, N_FRAMES - tw + 1)
            x = (x - self.mean) / self.std
            x[f0:f0 + fw, :] = 0.0
            x[:, t0:t0 + tw] = 0.0
        else:
            x = (x - self.mean) / self.std
        return x.unsqueeze(0), self.labels[i]


def load_splits():
    if not (os.path.exists(META_CSV) and os.path.exists(SPEC_NPZ)):
        synthesize_dataset()
    meta = pd.read_csv(META_CSV)
    specs = np.load(SPEC_NPZ)["logmel"]
    assert len(meta) == len(specs)

    meta["peak_db"] = specs.max(axis=(1, 2)) - np.median(specs, axis=(1, 2))
    meta = meta[meta.peak_db > MIN_EVENT_DB]

    classes = sorted(meta.species.unique())
    meta["label"] = meta.species.map({c: i for i, c in enumerate(classes)})

    rng = np.random.default_rng(SEED)
    val_recs = []
    for sp, g in meta.groupby("species"):
        recs = sorted(g.recording.unique())
        val_recs += list(rng.choice(recs, VAL_RECS_PER_SPECIES, replace=False))
    is_val = meta.recording.isin(val_recs)
    tr, va = meta[~is_val], meta[is_val]

    X_tr, y_tr = specs[tr.index.values], tr.label.values.astype(np.int64)
    X_va, y_va = specs[va.index.values], va.label.values.astype(np.int64)
    mean, std = float(X_tr.mean()), float(X_tr.std())
    return (X_tr, y_tr), (X_va, y_va), mean, std, classes, len(meta), len(specs)


def build_loaders():
    (X_tr, y_tr), (X_va, y_va), mean, std, classes, n_kept, n_total = load_splits()
    train_ds = LogMelDataset(X_tr, y_tr, mean, std, train=True)
    val_ds = LogMelDataset(X_va, y_va, mean, std, train=False)
    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True, drop_last=True, generator=g)
    val_loader = DataLoader(val_ds, batch_size=128, shuffle=False)
    return train_loader, val_loader, classes, n_kept, n_total


# ----------------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------------
def conv_bn(cin, cout):
    return nn.Sequential(OrderedDict([
        ("conv", nn.Conv2d(cin, cout, 3, padding=1, bias=False)),
        ("bn", nn.BatchNorm2d(cout)),
        ("act", nn.ReLU(inplace=True)),
    ]))


class BirdCNN(nn.Module):
    def __init__(self, num_classes=len(SPECIES), drop_rate=0.3):
        super().__init__()
        self.stem = conv_bn(1, 16)
        self.stage1 = nn.Sequential(nn.MaxPool2d(2), conv_bn(16, 32))
        self.stage2 = nn.Sequential(nn.MaxPool2d(2), conv_bn(32, 48))
        self.stage3 = nn.Sequential(nn.MaxPool2d(2), conv_bn(48, 64))
        self.drop = nn.Dropout(drop_rate)
        self.fc = nn.Linear(2 * 64, num_classes)

    def forward(self, x):
        x = self.stage3(self.stage2(self.stage1(self.stem(x))))
        x = torch.cat([x.mean(dim=(2, 3)), x.amax(dim=(2, 3))], dim=1)
        return self.fc(self.drop(x))


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def make_optimizer(params):
    return torch.optim.SGD(params, lr=LR, momentum=MOMENTUM, nesterov=True, weight_decay=WEIGHT_DECAY)


def make_target():
    torch.manual_seed(SEED)
    np.random.seed(SEED)
    train_loader, val_loader, classes, _, _ = build_loaders()
    model = BirdCNN(num_classes=len(classes))
    return {
        "model": model,
        "data": train_loader,
        "val_data": val_loader,
        "loss_fn": loss_fn,
        "optimizer": make_optimizer(model.parameters()),
        "make_optimizer": make_optimizer,
        "num_classes": len(classes),
        "task": "classification",
    }


# ----------------------------------------------------------------------------------
# train / validate (timm-style logging)
# ----------------------------------------------------------------------------------
class AverageMeter:
    def __init__(self):
        self.val = self.sum = self.count = self.avg = 0.0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


def lr_at(step, total, warmup):
    if step < warmup:
        return LR * (0.1 + 0.9 * step / warmup)
    p = (step - warmup) / max(1, total - warmup)
    return 1e-5 + 0.5 * (LR - 1e-5) * (1 + np.cos(np.pi * p))


def train_one_epoch(epoch, model, loader, optimizer, step0, total_steps, warmup_steps):
    model.train()
    losses, batch_time, data_time = AverageMeter(), AverageMeter(), AverageMeter()
    last_idx = len(loader) - 1
    end = time.time()
    for batch_idx, (x, y) in enumerate(loader):
        data_time.update(time.time() - end)
        step = step0 + batch_idx
        for gr in optimizer.param_groups:
            gr["lr"] = lr_at(step, total_steps, warmup_steps)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.update(loss.item(), x.size(0))
        batch_time.update(time.time() - end)
        if batch_idx == last_idx or batch_idx % LOG_INTERVAL == 0:
            lr = optimizer.param_groups[0]["lr"]
            print(f"Train: {epoch} [{batch_idx:>4d}/{len(loader)} ({100. * batch_idx / last_idx:>3.0f}%)]  "
                  f"Loss: {losses.val:#.3g} ({losses.avg:#.3g})  "
                  f"Time: {batch_time.val:.3f}s, {x.size(0) / batch_time.val:>7.2f}/s  "
                  f"({batch_time.avg:.3f}s, {x.size(0) / batch_time.avg:>7.2f}/s)  "
                  f"LR: {lr:.3e}  Data: {data_time.val:.3f} ({data_time.avg:.3f})")
        end = time.time()
    return OrderedDict([("loss", losses.avg)])


@torch.no_grad()
def validate(model, loader):
    model.eval()
    losses, top1, top3, batch_time = AverageMeter(), AverageMeter(), AverageMeter(), AverageMeter()
    last_idx = len(loader) - 1
    end = time.time()
    for batch_idx, (x, y) in enumerate(loader):
        out = model(x)
        loss = F.cross_entropy(out, y)
        _, pred = out.topk(3, 1)
        acc1 = (pred[:, 0] == y).float().mean().item() * 100
        acc3 = (pred == y[:, None]).any(1).float().mean().item() * 100
        losses.update(loss.item(), x.size(0))
        top1.update(acc1, x.size(0))
        top3.update(acc3, x.size(0))
        batch_time.update(time.time() - end)
        end = time.time()
        if batch_idx == last_idx:
            print(f"Test: [{batch_idx:>4d}/{last_idx}]  Time: {batch_time.val:.3f} ({batch_time.avg:.3f})  "
                  f"Loss: {losses.val:>7.4f} ({losses.avg:>6.4f})  "
                  f"Acc@1: {top1.val:>7.4f} ({top1.avg:>7.4f})  Acc@3: {top3.val:>7.4f} ({top3.avg:>7.4f})")
    return OrderedDict([("loss", losses.avg), ("top1", top1.avg), ("top3", top3.avg)])


def main():
    torch.manual_seed(SEED)
    np.random.seed(SEED)
    torch.set_num_threads(1)
    t_start = time.time()
    train_loader, val_loader, classes, n_kept, n_total = build_loaders()
    print(f"Loaded {n_total} clips, kept {n_kept} with vocal activity; "
          f"train {len(train_loader.dataset)}, val {len(val_loader.dataset)}, {len(classes)} classes")
    model = BirdCNN(num_classes=len(classes))
    print(f"Model BirdCNN created, param count: {sum(p.numel() for p in model.parameters())}")
    optimizer = make_optimizer(model.parameters())
    total_steps = EPOCHS * len(train_loader)
    warmup_steps = WARMUP_EPOCHS * len(train_loader)
    print(f"Scheduled epochs: {EPOCHS}")

    best_metric, best_epoch = None, None
    for epoch in range(EPOCHS):
        train_metrics = train_one_epoch(epoch, model, train_loader, optimizer,
                                        epoch * len(train_loader), total_steps, warmup_steps)
        eval_metrics = validate(model, val_loader)
        if best_metric is None or eval_metrics["top1"] > best_metric:
            best_metric, best_epoch = eval_metrics["top1"], epoch
    print(f"*** Best metric: {best_metric:.4f} (epoch {best_epoch})")
    print(f"Total time: {time.time() - t_start:.1f}s")


if __name__ == "__main__":
    main()
