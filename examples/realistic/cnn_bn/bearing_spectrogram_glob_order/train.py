"""Rotating-machinery fault classifier from vibration spectrograms.

The condition-monitoring gateway writes one log-magnitude spectrogram per
recording (32 frequency bins x 32 frames, accelerometer on the bearing
housing) as `recordings/<rec_id>.npy`, and the maintenance team's fault
annotations go to `labels.csv` (rec_id, machine, rpm, fault). We train a
small Conv-BN network with SpecAugment-style time/frequency masking.
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
import torch.nn.functional as F

CONFIG = dict(
    seed=5,
    n_recordings=2400,
    val_frac=0.2,
    batch_size=48,
    epochs=10,
    max_lr=3e-3,
    weight_decay=0.05,
)

FAULTS = ["normal", "imbalance", "misalignment", "outer_race", "inner_race", "ball"]
FAULT_P = [0.35, 0.13, 0.13, 0.13, 0.13, 0.13]
NF, NT = 32, 32


def synth_spectrogram(fault, rng):
    f = np.arange(NF, dtype=np.float32)[:, None]
    t = np.arange(NT, dtype=np.float32)[None, :]
    spec = 1.2 * np.exp(-f / 9.0) + 0.05 * rng.standard_normal((NF, NT))  # coloured noise floor
    spec = np.broadcast_to(spec, (NF, NT)).copy()
    f0 = rng.uniform(1.6, 3.2)  # shaft speed in bins
    base = np.array([0.5, 0.15, 0.05])  # shaft harmonics 1x, 2x, 3x of a healthy machine
    faulty = {"imbalance": [1.3, 0.2, 0.05], "misalignment": [0.5, 1.1, 0.55]}
    sev = rng.uniform(0.2, 1.0)
    amps = base + (np.array(faulty[fault]) - base) * sev if fault in faulty else base
    for k, a in enumerate(amps, start=1):
        spec += a * rng.uniform(0.7, 1.3) * np.exp(-0.5 * ((f - k * f0) / 0.6) ** 2)
    if fault in ("outer_race", "inner_race", "ball"):
        period = {"outer_race": rng.uniform(3.8, 5.5), "inner_race": rng.uniform(2.4, 3.4),
                  "ball": rng.uniform(5.8, 8.5)}[fault]
        phase = rng.uniform(0, period)
        res = rng.uniform(18, 26)  # structural resonance excited by the impacts
        band = np.exp(-0.5 * ((f - res) / 3.0) ** 2)
        pulses = np.exp(-0.5 * (((t - phase) % period) / 0.45) ** 2)
        if fault == "inner_race":  # load-zone modulation at shaft rate
            pulses *= 0.6 + 0.4 * np.cos(2 * np.pi * t / (period * rng.uniform(4, 6)))
        if fault == "ball":
            pulses *= rng.uniform(0.3, 1.0, size=(1, NT))
        spec += 1.4 * sev * band * pulses
    spec += rng.uniform(0.0, 0.25) * rng.random((NF, NT)) ** 4  # broadband transients
    return np.log1p(np.maximum(spec, 0) * 4).astype(np.float32)


def write_recordings(root, n, seed):
    rng = np.random.default_rng(seed)
    os.makedirs(os.path.join(root, "recordings"))
    fault = rng.choice(len(FAULTS), size=n, p=FAULT_P)
    for rec_id in range(n):
        np.save(os.path.join(root, "recordings", f"{rec_id}.npy"), synth_spectrogram(FAULTS[fault[rec_id]], rng))
    labels = pd.DataFrame({"rec_id": np.arange(n), "machine": rng.choice(["P-101", "P-102", "C-201", "F-310"], size=n),
                           "rpm": rng.integers(900, 1800, size=n), "fault": np.array(FAULTS)[fault]})
    labels.sample(frac=1.0, random_state=seed).to_csv(os.path.join(root, "labels.csv"), index=False)


def load_dataset(root):
    paths = sorted(glob.glob(os.path.join(root, "recordings", "*.npy")))
    x = np.stack([np.load(p) for p in paths])
    labels = pd.read_csv(os.path.join(root, "labels.csv")).sort_values("rec_id")
    y = labels["fault"].map({name: i for i, name in enumerate(FAULTS)}).to_numpy()
    return torch.from_numpy(x).unsqueeze(1), torch.from_numpy(y.astype(np.int64))


def build_splits(cfg):
    with tempfile.TemporaryDirectory() as root:
        write_recordings(root, cfg["n_recordings"], cfg["seed"])
        x, y = load_dataset(root)
    perm = np.random.default_rng(cfg["seed"] + 1).permutation(len(y))
    n_val = int(len(y) * cfg["val_frac"])
    va, tr = torch.from_numpy(perm[:n_val]), torch.from_numpy(perm[n_val:])
    mu, sd = x[tr].mean(), x[tr].std()
    x = (x - mu) / sd
    return (x[tr], y[tr]), (x[va], y[va])


def spec_augment(x):
    # one random time mask and one random frequency mask per batch
    x = x.clone()
    t0 = np.random.randint(0, NT - 4)
    f0 = np.random.randint(0, NF - 4)
    x[:, :, :, t0:t0 + np.random.randint(1, 5)] = 0
    x[:, :, f0:f0 + np.random.randint(1, 5), :] = 0
    return x


class SpecCNN(nn.Module):
    def __init__(self, n_classes=len(FAULTS)):
        super().__init__()
        chans = [1, 12, 24, 48]
        layers = []
        for cin, cout in zip(chans[:-1], chans[1:]):
            layers += [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(), nn.MaxPool2d(2)]
        self.conv = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(48 * 4 * 4, 64), nn.ReLU(), nn.Dropout(0.3),
                                        nn.Linear(64, n_classes))

    def forward(self, x):
        return self.classifier(self.conv(x))


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def make_optimizer(model, cfg):
    return torch.optim.AdamW(model.parameters(), lr=cfg["max_lr"], weight_decay=cfg["weight_decay"])


def make_target():
    cfg = dict(CONFIG)
    np.random.seed(cfg["seed"])
    torch.manual_seed(cfg["seed"])
    (x_tr, y_tr), _ = build_splits(cfg)
    model = SpecCNN()
    bs = cfg["batch_size"]
    data = [(spec_augment(x_tr[i * bs:(i + 1) * bs]), y_tr[i * bs:(i + 1) * bs]) for i in range(4)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model, cfg), "task": "classification", "num_classes": len(FAULTS)}


@torch.no_grad()
def evaluate(model, x, y):
    model.eval()
    logits = model(x)
    model.train()
    return F.cross_entropy(logits, y).item(), (logits.argmax(1) == y).float().mean().item()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=CONFIG["epochs"])
    p.add_argument("--max-lr", type=float, default=CONFIG["max_lr"])
    cli = p.parse_args()
    cfg = dict(CONFIG, epochs=cli.epochs, max_lr=cli.max_lr)

    np.random.seed(cfg["seed"])
    torch.manual_seed(cfg["seed"])
    t_start = time.time()
    (x_tr, y_tr), (x_va, y_va) = build_splits(cfg)
    counts = torch.bincount(y_tr, minlength=len(FAULTS)).tolist()
    print(f"loaded {len(y_tr)} train / {len(y_va)} val spectrograms, train class counts {dict(zip(FAULTS, counts))}")

    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x_tr, y_tr), batch_size=cfg["batch_size"],
                                         shuffle=True, drop_last=True)
    model = SpecCNN()
    opt = make_optimizer(model, cfg)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=cfg["max_lr"], epochs=cfg["epochs"],
                                                steps_per_epoch=len(loader))
    for epoch in range(1, cfg["epochs"] + 1):
        tot, n = 0.0, 0
        for xb, yb in loader:
            loss = loss_fn(model, (spec_augment(xb), yb))
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            tot += loss.item() * len(yb)
            n += len(yb)
        val_loss, val_acc = evaluate(model, x_va, y_va)
        print(f"epoch {epoch:2d} | train loss {tot / n:.4f} | val loss {val_loss:.4f} | val acc {val_acc:.4f}")
    print(f"done in {time.time() - t_start:.1f}s")


if __name__ == "__main__":
    main()
