"""Synthetic accelerometer windows (deterministic).

Two tasks share the same physics:
  * "fleet"  - fault classes recorded on the motor fleet (used to pretrain the encoder)
  * "pump"   - a small labelled set from a new pump site (the fine-tuning task)
Each window is 256 samples: shaft rotation tone + class-dependent harmonics,
bearing impulses and broadband noise.
"""
import numpy as np

WIN = 256
FLEET_CLASSES = ["healthy", "imbalance", "misalignment", "bearing_outer", "looseness"]
PUMP_CLASSES = ["normal", "cavitation", "impeller_wear", "bearing"]


def _window(rng, kind):
    t = np.arange(WIN) / WIN
    f0 = rng.uniform(5.0, 8.0)
    ph = rng.uniform(0, 2 * np.pi, 8)
    x = np.sin(2 * np.pi * f0 * t + ph[0])
    noise = 0.35
    if kind in ("imbalance",):
        x = 2.2 * x
    if kind in ("misalignment", "impeller_wear"):
        x += 1.3 * np.sin(2 * np.pi * 2 * f0 * t + ph[1])
    if kind == "impeller_wear":
        x += 0.9 * np.sin(2 * np.pi * 5 * f0 * t + ph[2])      # blade-pass
    if kind in ("looseness",):
        for h in range(2, 7):
            x += (0.9 / h) * np.sin(2 * np.pi * h * f0 * t + ph[h])
    if kind in ("bearing_outer", "bearing"):
        period = int(rng.uniform(14, 22))
        start = rng.integers(0, period)
        imp = np.zeros(WIN)
        imp[start::period] = rng.uniform(2.0, 3.0)
        ring = np.exp(-np.arange(12) / 2.5) * np.cos(np.arange(12) * 1.9)
        x += np.convolve(imp, ring)[:WIN]
    if kind == "cavitation":
        noise = 1.1                                             # broadband hiss
        x += 0.8 * rng.standard_normal(WIN) * (np.sin(2 * np.pi * f0 * t) > 0.3)
    x += noise * rng.standard_normal(WIN)
    return x.astype(np.float32)


def make_split(task, n, seed):
    classes = FLEET_CLASSES if task == "fleet" else PUMP_CLASSES
    rng = np.random.default_rng(seed)
    y = rng.integers(0, len(classes), n)
    X = np.stack([_window(rng, classes[k]) for k in y])[:, None, :]
    return X, y.astype(np.int64)
