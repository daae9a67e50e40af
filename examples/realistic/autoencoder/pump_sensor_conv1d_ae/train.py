"""1D convolutional autoencoder on multichannel pump sensor windows.

The recordings are a single long (T, C) stream per pump. We standardise each
channel with train statistics, cut the stream into non-overlapping windows and
train the autoencoder to reconstruct them. The reconstruction error is later
used as an anomaly score.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 7
N_CHANNELS = 6
WINDOW = 64
BATCH_SIZE = 64
EPOCHS = 25
LR = 2e-3
WEIGHT_DECAY = 1e-5
LATENT_CHANNELS = 16

CHANNEL_NAMES = ["vib_x", "vib_y", "vib_z", "motor_current", "pressure", "temp"]


def simulate_pump(n_steps, rng):
    """Simulated pump telemetry: shaft rotation drives vibration, current and
    pressure; temperature drifts slowly. Speed changes between duty cycles."""
    t = np.arange(n_steps)
    # piecewise-constant operating speed (rad / sample), changed every ~400 samples
    n_seg = n_steps // 400 + 1
    speeds = rng.uniform(0.15, 0.45, size=n_seg)
    speed = np.repeat(speeds, 400)[:n_steps]
    # smooth the speed transitions a little
    kernel = np.ones(25) / 25
    speed = np.convolve(speed, kernel, mode="same")
    phase = np.cumsum(speed)

    vib_x = np.sin(phase) + 0.3 * np.sin(2 * phase + 0.4)
    vib_y = np.cos(phase) + 0.3 * np.cos(2 * phase + 0.4)
    vib_z = 0.5 * np.sin(3 * phase + 1.0)
    current = 2.0 + 1.5 * speed / 0.45 + 0.2 * np.sin(phase)
    pressure = 1.0 + 0.8 * np.sin(0.5 * phase) * (speed / 0.45)
    temp = 40 + 3 * np.sin(2 * math.pi * t / 5000) + 2 * speed / 0.45

    x = np.stack([vib_x, vib_y, vib_z, current, pressure, temp], axis=1)
    x = x + rng.normal(0, 0.05, size=x.shape) * x.std(axis=0, keepdims=True)
    return x.astype(np.float32)


def load_streams(seed=SEED):
    rng = np.random.default_rng(seed)
    train_stream = simulate_pump(60_000, rng)
    val_stream = simulate_pump(12_000, rng)
    return train_stream, val_stream


def standardise(train_stream, val_stream):
    mean = train_stream.mean(axis=0, keepdims=True)
    std = train_stream.std(axis=0, keepdims=True) + 1e-6
    return (train_stream - mean) / std, (val_stream - mean) / std


def make_windows(stream, window=WINDOW):
    """(T, C) stream -> (N, C, window) tensor for Conv1d."""
    n_windows = stream.shape[0] // window
    stream = stream[: n_windows * window]
    windows = stream.reshape(n_windows, stream.shape[1], window)
    return torch.from_numpy(np.ascontiguousarray(windows))


def build_datasets(seed=SEED):
    train_stream, val_stream = load_streams(seed)
    train_stream, val_stream = standardise(train_stream, val_stream)
    return make_windows(train_stream), make_windows(val_stream)


def iterate_batches(windows, batch_size, shuffle, generator=None):
    n = windows.shape[0]
    if shuffle:
        idx = torch.randperm(n, generator=generator)
    else:
        idx = torch.arange(n)
    for start in range(0, n, batch_size):
        yield windows[idx[start : start + batch_size]]


class ConvAutoencoder(nn.Module):
    def __init__(self, in_channels=N_CHANNELS, latent_channels=LATENT_CHANNELS):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv1d(in_channels, 32, kernel_size=5, stride=2, padding=2),  # 64 -> 32
            nn.GELU(),
            nn.Conv1d(32, 64, kernel_size=5, stride=2, padding=2),  # 32 -> 16
            nn.GELU(),
            nn.Conv1d(64, latent_channels, kernel_size=3, stride=2, padding=1),  # 16 -> 8
        )
        self.decoder = nn.Sequential(
            nn.ConvTranspose1d(latent_channels, 64, kernel_size=4, stride=2, padding=1),  # 8 -> 16
            nn.GELU(),
            nn.ConvTranspose1d(64, 32, kernel_size=4, stride=2, padding=1),  # 16 -> 32
            nn.GELU(),
            nn.ConvTranspose1d(32, in_channels, kernel_size=4, stride=2, padding=1),  # 32 -> 64
        )

    def forward(self, x):
        return self.decoder(self.encoder(x))


def reconstruction_loss(model, batch):
    recon = model(batch)
    return F.mse_loss(recon, batch)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY)


@torch.no_grad()
def evaluate(model, windows):
    model.eval()
    total, count = 0.0, 0
    for batch in iterate_batches(windows, 256, shuffle=False):
        total += reconstruction_loss(model, batch).item() * batch.shape[0]
        count += batch.shape[0]
    model.train()
    return total / count


def make_target():
    torch.manual_seed(SEED)
    train_windows, _ = build_datasets()
    g = torch.Generator().manual_seed(SEED)
    data = []
    for i, batch in enumerate(iterate_batches(train_windows, BATCH_SIZE, shuffle=True, generator=g)):
        if i == 6:
            break
        data.append(batch)
    return {
        "model": ConvAutoencoder(),
        "data": data,
        "loss_fn": reconstruction_loss,
        "make_optimizer": make_optimizer,
        "task": "regression",
    }


def main():
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    train_windows, val_windows = build_datasets()
    print(f"train windows: {tuple(train_windows.shape)}  val windows: {tuple(val_windows.shape)}")

    model = ConvAutoencoder()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"ConvAutoencoder: {n_params/1e3:.1f}K parameters")
    optimizer = make_optimizer(model.parameters())
    steps_per_epoch = math.ceil(train_windows.shape[0] / BATCH_SIZE)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=LR, total_steps=EPOCHS * steps_per_epoch, pct_start=0.15
    )
    g = torch.Generator().manual_seed(SEED)

    for epoch in range(1, EPOCHS + 1):
        t0 = time.time()
        running, n_seen = 0.0, 0
        for batch in iterate_batches(train_windows, BATCH_SIZE, shuffle=True, generator=g):
            loss = reconstruction_loss(model, batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            running += loss.item() * batch.shape[0]
            n_seen += batch.shape[0]
        train_loss = running / n_seen
        val_loss = evaluate(model, val_windows)
        dt = time.time() - t0
        print(
            f"Epoch {epoch}/{EPOCHS} - {dt:.1f}s - loss: {train_loss:.4f} - val_loss: {val_loss:.4f}"
            f" - lr: {scheduler.get_last_lr()[0]:.2e}"
        )

    # per-channel reconstruction error on the validation stream
    model.eval()
    with torch.no_grad():
        recon = model(val_windows)
        per_channel = ((recon - val_windows) ** 2).mean(dim=(0, 2))
    print("val MSE per channel: " + ", ".join(f"{n}={v:.4f}" for n, v in zip(CHANNEL_NAMES, per_channel.tolist())))


if __name__ == "__main__":
    main()
