"""Denoising 1-D conv autoencoder for 3-axis sensor traces.

Clean traces are mixtures of sinusoids with slow drift and occasional bursts;
the network sees traces corrupted with fresh Gaussian + impulse noise every
batch and is trained to reconstruct the clean signal.
"""
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)

SEED = 7
N_CHANNELS = 3
SEQ_LEN = 128
N_TRAIN = 3072
N_VAL = 512
BATCH_SIZE = 32
EPOCHS = 8
LR = 2e-3
WEIGHT_DECAY = 1e-5
NOISE_STD = 0.35
IMPULSE_PROB = 0.02


# ---------------------------------------------------------------- data
def synth_traces(n, seed):
    rng = np.random.default_rng(seed)
    t = np.linspace(0.0, 1.0, SEQ_LEN, dtype=np.float32)[None, None, :]
    n_comp = 3
    freqs = rng.uniform(1.0, 12.0, size=(n, 1, n_comp, 1)).astype(np.float32)
    phases = rng.uniform(0, 2 * np.pi, size=(n, N_CHANNELS, n_comp, 1)).astype(np.float32)
    amps = rng.uniform(0.2, 1.0, size=(n, N_CHANNELS, n_comp, 1)).astype(np.float32)
    x = (amps * np.sin(2 * np.pi * freqs * t[..., None, :] + phases)).sum(axis=2)
    drift = rng.normal(0, 0.3, size=(n, N_CHANNELS, 1)).astype(np.float32) * t
    x = x + drift
    # short bursts on some traces (e.g. a bump / knock)
    has_burst = rng.random(n) < 0.3
    centers = rng.integers(10, SEQ_LEN - 10, size=n)
    burst = np.exp(-0.5 * ((np.arange(SEQ_LEN)[None, :] - centers[:, None]) / 2.0) ** 2)
    x = x + (has_burst[:, None] * burst)[:, None, :] * rng.uniform(1.0, 2.0, size=(n, N_CHANNELS, 1))
    return x.astype(np.float32)


def load_splits():
    train = synth_traces(N_TRAIN, SEED)
    val = synth_traces(N_VAL, SEED + 100)
    # per-channel standardisation with training statistics
    mean = train.mean(axis=(0, 2), keepdims=True)
    std = train.std(axis=(0, 2), keepdims=True)
    train = (train - mean) / std
    val = (val - mean) / std
    return torch.from_numpy(train), torch.from_numpy(val)


def corrupt(clean, generator):
    noise = torch.randn(clean.shape, generator=generator) * NOISE_STD
    impulses = (torch.rand(clean.shape, generator=generator) < IMPULSE_PROB).float()
    spikes = impulses * torch.randn(clean.shape, generator=generator) * 3.0
    return clean + noise + spikes


def batches(clean, batch_size, shuffle, generator):
    n = clean.size(0)
    order = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
    for i in range(0, n, batch_size):
        c = clean[order[i:i + batch_size]]
        yield corrupt(c, generator), c


# ---------------------------------------------------------------- model
def conv_block(c_in, c_out, stride):
    return nn.Sequential(
        nn.Conv1d(c_in, c_out, kernel_size=5, stride=stride, padding=2),
        nn.GELU(),
    )


def deconv_block(c_in, c_out):
    return nn.Sequential(
        nn.ConvTranspose1d(c_in, c_out, kernel_size=4, stride=2, padding=1),
        nn.GELU(),
    )


class DenoisingAE(nn.Module):
    def __init__(self, channels=N_CHANNELS, width=24, bottleneck=16):
        super().__init__()
        self.encoder = nn.Sequential(
            conv_block(channels, width, 1),
            conv_block(width, width, 2),        # 64
            conv_block(width, 2 * width, 2),    # 32
            conv_block(2 * width, 2 * width, 2),  # 16
            nn.Conv1d(2 * width, bottleneck, kernel_size=1),
        )
        self.decoder = nn.Sequential(
            nn.Conv1d(bottleneck, 2 * width, kernel_size=1), nn.GELU(),
            deconv_block(2 * width, 2 * width),  # 32
            deconv_block(2 * width, width),      # 64
            deconv_block(width, width),          # 128
            nn.Conv1d(width, channels, kernel_size=5, padding=2),
        )

    def forward(self, x):
        return self.decoder(self.encoder(x))


def loss_fn(model, batch):
    noisy, clean = batch
    return F.mse_loss(model(noisy), clean)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY)


@torch.no_grad()
def evaluate(model, val_clean):
    model.eval()
    g = torch.Generator().manual_seed(SEED + 999)  # same corruption every epoch
    se, se_in, n = 0.0, 0.0, 0
    for noisy, clean in batches(val_clean, 256, False, g):
        se += F.mse_loss(model(noisy), clean, reduction="sum").item()
        se_in += F.mse_loss(noisy, clean, reduction="sum").item()
        n += clean.numel()
    model.train()
    mse, mse_in = se / n, se_in / n
    snr_gain = 10 * np.log10(mse_in / mse)
    return mse, snr_gain


def make_target():
    torch.manual_seed(SEED)
    train_clean, _ = load_splits()
    g = torch.Generator().manual_seed(SEED)
    data = [b for _, b in zip(range(5), batches(train_clean, BATCH_SIZE, True, g))]
    return {
        "model": DenoisingAE(),
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "task": "regression",
    }


def main():
    torch.manual_seed(SEED)
    train_clean, val_clean = load_splits()
    model = DenoisingAE()
    optimizer = make_optimizer(model.parameters())
    g = torch.Generator().manual_seed(SEED)
    steps_per_epoch = (N_TRAIN + BATCH_SIZE - 1) // BATCH_SIZE

    for epoch in range(1, EPOCHS + 1):
        t0 = time.time()
        running, seen = 0.0, 0
        model.train()
        for noisy, clean in batches(train_clean, BATCH_SIZE, True, g):
            optimizer.zero_grad()
            recon = model(noisy)
            loss = F.mse_loss(recon, clean)
            loss.backward()
            optimizer.step()
            running += loss.item() * clean.size(0)
            seen += clean.size(0)
        val_mse, snr_gain = evaluate(model, val_clean)
        elapsed = time.time() - t0
        print(f"Epoch {epoch}/{EPOCHS}")
        print(f"{steps_per_epoch}/{steps_per_epoch} - {elapsed:.0f}s - {1000 * elapsed / steps_per_epoch:.0f}ms/step "
              f"- loss: {running / seen:.4f} - val_loss: {val_mse:.4f} - val_snr_gain_db: {snr_gain:.2f}")

    torch.save(model.state_dict(), "denoiser.pt")


if __name__ == "__main__":
    main()
