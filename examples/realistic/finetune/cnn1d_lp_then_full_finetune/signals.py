"""Synthetic vibration-like signals: 1-2 tones + noise, optionally with a short transient burst."""
import numpy as np

SEQ_LEN = 128
N_FREQ_BINS = 8  # pretext classes
FREQS = np.linspace(2.0, 30.0, N_FREQ_BINS)


def make_signals(n, seed):
    """Returns x [n, 1, SEQ_LEN] float32 and a dict of generating factors."""
    rng = np.random.default_rng(seed)
    t = np.arange(SEQ_LEN) / SEQ_LEN
    freq_bin = rng.integers(0, N_FREQ_BINS, size=n)
    f0 = FREQS[freq_bin] + rng.uniform(-0.8, 0.8, size=n)
    x = np.sin(2 * np.pi * f0[:, None] * t + rng.uniform(0, 2 * np.pi, size=(n, 1)))
    # weaker secondary tone
    f1 = rng.uniform(1.0, 32.0, size=n)
    x += 0.4 * np.sin(2 * np.pi * f1[:, None] * t + rng.uniform(0, 2 * np.pi, size=(n, 1)))
    # transient burst (e.g. bearing impact) in about half of the recordings
    has_burst = rng.random(n) < 0.5
    center = rng.integers(16, SEQ_LEN - 16, size=n)
    idx = np.arange(SEQ_LEN)[None, :]
    env = np.exp(-0.5 * ((idx - center[:, None]) / 3.0) ** 2)
    burst = env * np.sin(2 * np.pi * 45.0 * t)[None, :] * rng.uniform(0.8, 1.4, size=(n, 1))
    x += has_burst[:, None] * burst
    x += 0.3 * rng.normal(size=x.shape)
    return x[:, None, :].astype(np.float32), {"freq_bin": freq_bin, "has_burst": has_burst}
