"""Human activity recognition from a wrist-worn IMU (3-axis accelerometer + 3-axis gyro).

1-D CNN with BatchNorm on 2.56 s windows (128 samples @ 50 Hz), subject-wise split.
"""
import math
import os
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

CFG = dict(
    seed=7,
    fs=50,
    win=128,
    n_subjects=30,
    val_subjects=8,
    windows_per_subject_class=16,
    batch_size=64,
    epochs=12,
    lr=3e-3,
    weight_decay=1e-2,
    max_shift=24,
    shift_p=0.5,
    noise_std=0.05,
)
ACTIVITIES = ["walking", "upstairs", "downstairs", "sitting", "standing", "lying"]
CHANNELS = ["acc_x", "acc_y", "acc_z", "gyro_x", "gyro_y", "gyro_z"]
DATA_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "har_windows.npz")


# ----------------------------------------------------------------------------- data
def _simulate_window(rng, activity, subj):
    """One (T, C) window in sensor units (m/s^2 for acc, rad/s for gyro)."""
    T, fs = CFG["win"], CFG["fs"]
    t = np.arange(T) / fs
    g = 9.81
    # posture -> direction of gravity in the device frame
    tilt = subj["tilt"] + rng.normal(0, 0.08, size=3)
    if activity in ("walking", "upstairs", "downstairs", "standing"):
        grav = np.array([g, 0.0, 0.0])          # arm hanging
    elif activity == "sitting":
        grav = np.array([0.25 * g, 0.1 * g, 0.96 * g])  # forearm on desk / lap
    else:  # lying
        grav = np.array([0.2 * g, 0.97 * g, 0.15 * g])  # arm along the body, on its side
    grav = grav + tilt * g * 0.3
    acc = np.tile(grav, (T, 1))
    gyro = np.zeros((T, 3))
    if activity in ("walking", "upstairs", "downstairs"):
        f = {"walking": 1.9, "upstairs": 1.5, "downstairs": 2.2}[activity] * subj["cadence"]
        f *= rng.uniform(0.93, 1.07)
        ph = rng.uniform(0, 2 * np.pi)
        amp = {"walking": 2.4, "upstairs": 2.0, "downstairs": 3.3}[activity] * subj["vigour"]
        step = np.sin(2 * np.pi * f * t + ph)
        acc[:, 0] += amp * step + 0.4 * amp * np.sin(4 * np.pi * f * t + 2 * ph)
        vert = {"walking": 0.4, "upstairs": 1.3, "downstairs": -0.9}[activity]
        acc[:, 2] += vert * amp * 0.5 * np.sin(2 * np.pi * f * t + ph + 0.6)
        acc[:, 1] += 0.5 * amp * np.sin(np.pi * f * t + ph)
        gyro[:, 1] += 0.9 * amp / 3 * np.cos(2 * np.pi * f * t + ph)
        gyro[:, 2] += {"walking": 0.3, "upstairs": 0.7, "downstairs": 0.15}[activity] * np.sin(np.pi * f * t)
        gyro[:, 0] += 0.25 * np.sin(2 * np.pi * f * t + ph + 1.0)
    else:
        # small postural sway / fidgeting
        sway = {"sitting": 0.15, "standing": 0.2, "lying": 0.1}[activity]
        acc += sway * np.cumsum(rng.normal(0, 0.1, size=(T, 3)), axis=0) / np.sqrt(T) * 3
        gyro += sway * rng.normal(0, 0.3, size=(T, 3))
    acc += rng.normal(0, 0.9, size=acc.shape)
    gyro += rng.normal(0, 0.25, size=gyro.shape)
    return np.concatenate([acc, gyro], axis=1).astype(np.float32)


def build_dataset(path=DATA_PATH):
    if os.path.exists(path):
        d = np.load(path, allow_pickle=False)
        return d["x"], d["y"], d["subject"]
    rng = np.random.default_rng(CFG["seed"])
    xs, ys, subs = [], [], []
    for s in range(CFG["n_subjects"]):
        subj = dict(
            tilt=rng.normal(0, 1.0, size=3),
            cadence=rng.uniform(0.85, 1.15),
            vigour=rng.uniform(0.7, 1.3),
        )
        for k, act in enumerate(ACTIVITIES):
            for _ in range(CFG["windows_per_subject_class"]):
                xs.append(_simulate_window(rng, act, subj))
                ys.append(k)
                subs.append(s)
    x = np.stack(xs)  # (N, T, C)
    y = np.array(ys, dtype=np.int64)
    subject = np.array(subs, dtype=np.int64)
    np.savez_compressed(path, x=x, y=y, subject=subject)
    return x, y, subject


def subject_split(subject, n_val, seed):
    rng = np.random.default_rng(seed)
    subs = np.unique(subject)
    val_subs = rng.choice(subs, size=n_val, replace=False)
    val_mask = np.isin(subject, val_subs)
    return np.where(~val_mask)[0], np.where(val_mask)[0]


def fit_scaler(x):
    # x: (N, T, C) -> per-channel statistics
    flat = x.reshape(-1, x.shape[-1])
    return flat.mean(0), flat.std(0) + 1e-6


def random_time_shift(x, max_shift, p):
    """Circularly shift windows in time by up to max_shift samples."""
    if torch.rand(1).item() >= p:
        return x
    s = int(torch.randint(-max_shift, max_shift + 1, (1,)))
    return torch.roll(x, shifts=s, dims=1)


class HARWindows(Dataset):
    """Returns standardised (T, C) windows; the collate function builds (B, C, T) batches."""

    def __init__(self, x, y, mean, std, train=False, seed=0):
        self.x = ((x - mean) / std).astype(np.float32)
        self.y = y
        self.train = train
        self.rng = np.random.default_rng(seed)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        x = self.x[i]
        if self.train:
            x = x * self.rng.uniform(0.9, 1.1)
            x = x + self.rng.normal(0, CFG["noise_std"], size=x.shape).astype(np.float32)
        return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)), int(self.y[i])


def collate_train(items):
    x = torch.stack([it[0] for it in items])
    y = torch.tensor([it[1] for it in items])
    x = random_time_shift(x, CFG["max_shift"], CFG["shift_p"])
    return x.transpose(1, 2).contiguous(), y


def collate_eval(items):
    x = torch.stack([it[0] for it in items])
    return x.transpose(1, 2).contiguous(), torch.tensor([it[1] for it in items])


def make_loaders():
    x, y, subject = build_dataset()
    tr_idx, va_idx = subject_split(subject, CFG["val_subjects"], CFG["seed"])
    mean, std = fit_scaler(x[tr_idx])
    train_ds = HARWindows(x[tr_idx], y[tr_idx], mean, std, train=True, seed=CFG["seed"])
    val_ds = HARWindows(x[va_idx], y[va_idx], mean, std, train=False)
    g = torch.Generator().manual_seed(CFG["seed"])
    train_dl = DataLoader(train_ds, batch_size=CFG["batch_size"], shuffle=True, drop_last=True, generator=g,
                          collate_fn=collate_train)
    val_dl = DataLoader(val_ds, batch_size=256, shuffle=False, collate_fn=collate_eval)
    return train_dl, val_dl


# ----------------------------------------------------------------------------- model
class ConvBlock(nn.Sequential):
    def __init__(self, cin, cout, k, pool=True):
        layers = [nn.Conv1d(cin, cout, k, padding=k // 2, bias=False), nn.BatchNorm1d(cout), nn.ReLU(inplace=True)]
        if pool:
            layers.append(nn.MaxPool1d(2))
        super().__init__(*layers)


class HARNet(nn.Module):
    def __init__(self, in_ch=6, n_classes=6, width=16):
        super().__init__()
        self.features = nn.Sequential(
            ConvBlock(in_ch, width, 7),
            ConvBlock(width, width * 2, 5),
            ConvBlock(width * 2, width * 2, 5),
            ConvBlock(width * 2, width * 4, 3, pool=False),
        )
        self.drop = nn.Dropout(0.2)
        self.fc = nn.Linear(width * 4, n_classes)

    def forward(self, x):
        x = self.features(x)
        x = x.mean(-1)
        return self.fc(self.drop(x))


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def make_target():
    torch.manual_seed(CFG["seed"])
    train_dl, val_dl = make_loaders()
    model = HARNet(len(CHANNELS), len(ACTIVITIES))
    optimizer = torch.optim.AdamW(model.parameters(), lr=CFG["lr"], weight_decay=CFG["weight_decay"])
    return dict(model=model, data=train_dl, val_data=val_dl, loss_fn=loss_fn, optimizer=optimizer,
                num_classes=len(ACTIVITIES), task="classification")


@torch.no_grad()
def evaluate(model, dl):
    model.eval()
    tot, correct, n = 0.0, 0, 0
    for x, y in dl:
        out = model(x)
        tot += F.cross_entropy(out, y, reduction="sum").item()
        correct += (out.argmax(1) == y).sum().item()
        n += len(y)
    return tot / n, correct / n


def progress_bar(done, total, width=30):
    filled = int(width * done / total)
    return "[" + "=" * max(filled - 1, 0) + (">" if filled < width else "=") + "." * (width - filled) + "]"


def main():
    torch.set_num_threads(1)
    t = make_target()
    model, train_dl, val_dl, opt = t["model"], t["data"], t["val_data"], t["optimizer"]
    steps_per_epoch = len(train_dl)
    total = CFG["epochs"] * steps_per_epoch
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=CFG["lr"], total_steps=total, pct_start=0.15)
    print(f"train windows: {len(train_dl.dataset)}  val windows: {len(val_dl.dataset)}  "
          f"params: {sum(p.numel() for p in model.parameters()):,}")
    history = []
    for epoch in range(CFG["epochs"]):
        print(f"Epoch {epoch + 1}/{CFG['epochs']}")
        model.train()
        t0 = time.time()
        run_loss, run_correct, seen = 0.0, 0, 0
        for x, y in train_dl:
            out = model(x)
            loss = F.cross_entropy(out, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            run_loss += loss.item() * len(y)
            run_correct += (out.argmax(1) == y).sum().item()
            seen += len(y)
        dt = time.time() - t0
        val_loss, val_acc = evaluate(model, val_dl)
        history.append(dict(epoch=epoch + 1, loss=run_loss / seen, accuracy=run_correct / seen,
                            val_loss=val_loss, val_accuracy=val_acc))
        print(f"{steps_per_epoch}/{steps_per_epoch} {progress_bar(1, 1)} - {dt:.0f}s "
              f"{1000 * dt / steps_per_epoch:.0f}ms/step - loss: {run_loss / seen:.4f} - "
              f"accuracy: {run_correct / seen:.4f} - val_loss: {val_loss:.4f} - "
              f"val_accuracy: {val_acc:.4f} - lr: {sched.get_last_lr()[0]:.4e}")
    pd.DataFrame(history).to_csv(os.path.join(os.path.dirname(os.path.abspath(__file__)), "history.csv"), index=False)


if __name__ == "__main__":
    main()
