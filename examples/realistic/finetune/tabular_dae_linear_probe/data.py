"""Synthetic sensor-panel data: 48 correlated readings driven by 8 hidden process factors.

The same "plant" (mixing weights) is used for the large unlabeled log used in
pretraining and for the small labeled set used for fine-tuning.
"""
import numpy as np

N_FACTORS = 8
N_FEATURES = 48
N_CLASSES = 4
_PLANT_SEED = 1234


def _plant():
    rng = np.random.default_rng(_PLANT_SEED)
    w_in = rng.normal(size=(N_FACTORS, 64)) * (2.0 / np.sqrt(N_FACTORS))
    b_in = rng.normal(size=64) * 0.5
    w_out = rng.normal(size=(64, N_FEATURES)) / np.sqrt(64)
    fault_dirs = rng.normal(size=(N_FACTORS, N_CLASSES))
    return w_in, b_in, w_out, fault_dirs


def sample_panel(n, seed):
    """Returns readings x [n, 48] (float32) and fault class y [n] (int64)."""
    w_in, b_in, w_out, fault_dirs = _plant()
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, N_FACTORS))
    x = np.tanh(z @ w_in + b_in) @ w_out + 0.1 * rng.normal(size=(n, N_FEATURES))
    y = np.argmax(z @ fault_dirs, axis=1)
    return x.astype(np.float32), y.astype(np.int64)
