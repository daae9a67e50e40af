# Human activity recognition from a waist-worn IMU (acc + gyro + mag + barometer).
# 1-D CNN with BatchNorm on 2.56 s windows (50 Hz, 50% overlap), subject-wise split.
import os
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

SEED = 7
FS = 50
WIN = 128
HOP = 64
N_SUBJECTS = 24
VAL_SUBJECTS = 6
BATCH_SIZE = 64
EPOCHS = 12
LR = 0.05
MOMENTUM = 0.9
WEIGHT_DECAY = 1e-4
LR_STEP = 5
LR_GAMMA = 0.2

ACTIVITIES = ["walking", "walking_upstairs", "walking_downstairs", "sitting", "standing", "lying"]
CHANNELS = ["acc_x", "acc_y", "acc_z", "gyro_x", "gyro_y", "gyro_z", "mag_x", "mag_y", "mag_z", "baro"]
DATA_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "imu_sessions.npz")


# ----------------------------------------------------------------------------- data
def _rot(pitch, roll, yaw):
    cp, sp, cr, sr, cy, sy = np.cos(pitch), np.sin(pitch), np.cos(roll), np.sin(roll), np.cos(yaw), np.sin(yaw)
    ry = np.array([[cp, 0, sp], [0, 1, 0], [-sp, 0, cp]])
    rx = np.array([[1, 0, 0], [0, cr, -sr], [0, sr, cr]])
    rz = np.array([[cy, -sy, 0], [sy, cy, 0], [0, 0, 1]])
    return rz @ ry @ rx


def simulate_sessions(seed=SEED):
    """One continuous recording per subject, a sequence of labelled activity bouts."""
    rng = np.random.default_rng(seed)
    g_world = np.array([9.81, 0.0, 0.0])            # device x axis points up when standing
    b_world = np.array([-38.0, 22.0, 0.0])          # local geomagnetic field, uT
    rows = []
    for subj in range(N_SUBJECTS):
        mount = rng.normal(0, np.deg2rad(6), 2)     # how the belt clip sits on this subject
        gyro_bias = rng.normal(0, 0.8, 3)
        p0 = rng.normal(1008, 6)                    # weather / building
        alt = 0.0
        cadence0 = rng.normal(1.9, 0.12)
        stride_amp = rng.normal(1.0, 0.12)
        order = np.concatenate([rng.permutation(6) for _ in range(2)])
        t_global = 0
        for act in order:
            n = int(rng.uniform(14, 26) * FS)
            t = np.arange(n) / FS
            yaw = rng.uniform(0, 2 * np.pi)
            if act <= 2:
                pitch, roll = 0.0, 0.0
                cad = cadence0 * [1.0, 0.88, 1.08][act] * rng.normal(1, 0.03)
                ph = 2 * np.pi * cad * t + rng.uniform(0, 6.3)
                vert_amp = stride_amp * [2.6, 3.4, 3.0][act]
                fwd_amp = stride_amp * [1.6, 1.2, 2.0][act]
                impact = [0.6, 0.4, 1.6][act]
                dyn_acc = np.stack([
                    vert_amp * np.sin(ph) + impact * np.maximum(np.sin(ph - 0.9), 0) ** 8 * 4,
                    fwd_amp * np.sin(ph / 2 + 0.4),
                    fwd_amp * 0.8 * np.sin(ph + 1.1),
                ], 1)
                pitch_rate = stride_amp * [25, 32, 22][act]
                dyn_gyro = np.stack([
                    12 * np.sin(ph / 2 + 0.3),
                    pitch_rate * np.sin(ph + [0.0, 0.5, -0.4][act]),
                    18 * np.sin(ph / 2 + 1.2),
                ], 1)
                climb = [0.0, 0.17, -0.19][act] * rng.normal(1, 0.1)   # m/s vertical
            else:
                pitch = {3: np.deg2rad(rng.normal(28, 7)), 4: np.deg2rad(rng.normal(4, 4)), 5: np.deg2rad(rng.normal(84, 5))}[act]
                roll = rng.normal(0, np.deg2rad(5)) if act != 5 else rng.uniform(-0.6, 0.6)
                sway = 0.15 if act == 4 else 0.05
                dyn_acc = sway * np.cumsum(rng.normal(0, 0.05, (n, 3)), 0) % 1.0 - sway / 2
                dyn_gyro = rng.normal(0, [1.2, 0.6, 0.3][act - 3], (n, 3))
                climb = 0.0
            R = _rot(pitch + mount[0], roll + mount[1], 0.0)
            acc = dyn_acc + (R.T @ g_world)[None, :] + rng.normal(0, 0.25, (n, 3))
            gyro = dyn_gyro + gyro_bias + rng.normal(0, 0.6, (n, 3))
            Rh = _rot(pitch + mount[0], roll + mount[1], yaw)
            mag = (Rh.T @ b_world)[None, :] + rng.normal(0, 1.2, (n, 3))
            if act <= 2:
                mag += 3.0 * np.sin(ph / 2)[:, None] * np.array([[0.3, 1.0, -0.6]])
            alt_t = alt + climb * t
            alt = alt_t[-1]
            baro = p0 - 0.12 * alt_t + rng.normal(0, 0.02, n)
            frame = pd.DataFrame(np.column_stack([acc, gyro, mag, baro]), columns=CHANNELS)
            frame.insert(0, "subject", subj)
            frame.insert(1, "t", t_global + np.arange(n))
            frame["activity"] = ACTIVITIES[act]
            rows.append(frame)
            t_global += n
    return pd.concat(rows, ignore_index=True)


def load_sessions():
    if not os.path.exists(DATA_PATH):
        df = simulate_sessions()
        np.savez(DATA_PATH, subject=df["subject"].to_numpy(np.int16), t=df["t"].to_numpy(np.int32),
                 signals=df[CHANNELS].to_numpy(np.float32),
                 activity_code=df["activity"].map(ACTIVITIES.index).to_numpy(np.int8), activity_names=np.array(ACTIVITIES))
    z = np.load(DATA_PATH)
    df = pd.DataFrame(z["signals"], columns=CHANNELS)
    df.insert(0, "subject", z["subject"])
    df.insert(1, "t", z["t"])
    df["activity"] = z["activity_names"][z["activity_code"]]
    return df


def make_windows(df):
    xs, ys, subj = [], [], []
    label_ids = {a: i for i, a in enumerate(ACTIVITIES)}
    for s, g in df.groupby("subject", sort=True):
        sig = g[CHANNELS].to_numpy(np.float32)
        lab = g["activity"].map(label_ids).to_numpy()
        w = np.lib.stride_tricks.sliding_window_view(sig, WIN, axis=0)[::HOP]
        l = np.lib.stride_tricks.sliding_window_view(lab, WIN)[::HOP]
        pure = (l == l[:, :1]).all(1)               # drop windows spanning two activities
        xs.append(w[pure])
        ys.append(l[pure, 0])
        subj.append(np.full(pure.sum(), s))
    return np.concatenate(xs), np.concatenate(ys), np.concatenate(subj)


def fit_standardizer(x):
    mean = x.mean(axis=(0, 2), keepdims=True)
    std = x.std(axis=(0, 2), keepdims=True) + 1e-6
    return mean, std


def build_datasets():
    df = load_sessions()
    x, y, subj = make_windows(df)
    val_mask = subj >= N_SUBJECTS - VAL_SUBJECTS
    mean, std = fit_standardizer(x[~val_mask])
    x = ((x - mean) / std).astype(np.float32)
    train_ds = TensorDataset(torch.from_numpy(np.ascontiguousarray(x[~val_mask])), torch.from_numpy(y[~val_mask]).long())
    val_ds = TensorDataset(torch.from_numpy(np.ascontiguousarray(x[val_mask])), torch.from_numpy(y[val_mask]).long())
    return train_ds, val_ds


def augment(xb):
    # amplitude scaling + small time shift, applied per batch on the fly
    scale = 1.0 + 0.1 * torch.randn(xb.size(0), 1, 1)
    shift = int(torch.randint(-8, 9, (1,)))
    return torch.roll(xb * scale, shifts=shift, dims=2)


# ----------------------------------------------------------------------------- model
def conv_bn(cin, cout, k):
    return nn.Sequential(nn.Conv1d(cin, cout, k, padding=k // 2, bias=False), nn.BatchNorm1d(cout), nn.ReLU(inplace=True))


class HARNet(nn.Module):
    def __init__(self, in_ch, n_classes):
        super().__init__()
        self.features = nn.Sequential(
            conv_bn(in_ch, 32, 7), nn.MaxPool1d(2),
            conv_bn(32, 64, 5), nn.MaxPool1d(2),
            conv_bn(64, 64, 5), nn.MaxPool1d(2),
            conv_bn(64, 96, 3),
        )
        self.drop = nn.Dropout(0.3)
        self.fc = nn.Linear(96, n_classes)

    def forward(self, x):
        x = self.features(x)
        x = x.mean(dim=2)
        return self.fc(self.drop(x))


def loss_fn(model, batch):
    xb, yb = batch
    return F.cross_entropy(model(augment(xb)), yb)


def make_target():
    torch.manual_seed(SEED)
    train_ds, val_ds = build_datasets()
    train_loader = DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True, drop_last=True)
    val_loader = DataLoader(val_ds, batch_size=256)
    model = HARNet(len(CHANNELS), len(ACTIVITIES))
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
    return {"model": model, "data": train_loader, "val_data": val_loader, "loss_fn": loss_fn,
            "optimizer": optimizer, "num_classes": len(ACTIVITIES), "task": "classification"}


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    tot, correct, loss_sum = 0, 0, 0.0
    for xb, yb in loader:
        out = model(xb)
        loss_sum += F.cross_entropy(out, yb, reduction="sum").item()
        correct += (out.argmax(1) == yb).sum().item()
        tot += len(yb)
    return loss_sum / tot, correct / tot


def main():
    torch.set_num_threads(1)
    t = make_target()
    model, train_loader, val_loader, optimizer = t["model"], t["data"], t["val_data"], t["optimizer"]
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=LR_STEP, gamma=LR_GAMMA)
    print(f"train windows: {len(train_loader.dataset)}  val windows: {len(val_loader.dataset)}  "
          f"channels: {len(CHANNELS)}  classes: {len(ACTIVITIES)}")
    steps = len(train_loader)
    for epoch in range(1, EPOCHS + 1):
        t0 = time.time()
        model.train()
        run_loss, run_correct, seen = 0.0, 0, 0
        for xb, yb in train_loader:
            xa = augment(xb)
            out = model(xa)
            loss = F.cross_entropy(out, yb)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            run_loss += loss.item() * len(yb)
            run_correct += (out.argmax(1) == yb).sum().item()
            seen += len(yb)
        scheduler.step()
        val_loss, val_acc = evaluate(model, val_loader)
        dt = time.time() - t0
        print(f"Epoch {epoch}/{EPOCHS}")
        print(f"{steps}/{steps} - {dt:.0f}s - {1000 * dt / steps:.0f}ms/step - loss: {run_loss / seen:.4f} - "
              f"accuracy: {run_correct / seen:.4f} - val_loss: {val_loss:.4f} - val_accuracy: {val_acc:.4f} - "
              f"lr: {optimizer.param_groups[0]['lr']:.4g}")


if __name__ == "__main__":
    main()
