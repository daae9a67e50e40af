"""Denoising 1-D conv autoencoder for accelerometer vibration snippets.

Clean snippets are synthesised as a few damped harmonics of a shaft frequency
plus an occasional bearing impulse train; training corrupts them on the fly
with additive Gaussian sensor noise and the network learns to remove it.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

SEED = 1234
SIGNAL_LEN = 128
N_TRAIN = 4096
N_VAL = 512
BATCH_SIZE = 64
EPOCHS = 12
LR = 2e-3
WEIGHT_DECAY = 1e-5
NOISE_STD = 0.3
LOG_EVERY = 32

torch.set_num_threads(1)


def synth_vibration(n, length=SIGNAL_LEN, seed=0):
    """Sum of shaft harmonics with random amplitude/phase + sparse impulses."""
    rng = np.random.default_rng(seed)
    t = np.arange(length) / length
    out = np.zeros((n, length), dtype=np.float32)
    for i in range(n):
        f0 = rng.uniform(2.0, 6.0)
        sig = np.zeros(length)
        for k in range(1, 4):
            amp = rng.uniform(0.2, 1.0) / k
            phase = rng.uniform(0, 2 * math.pi)
            sig += amp * np.sin(2 * math.pi * k * f0 * t + phase)
        if rng.random() < 0.5:
            # bearing defect: periodic decaying impulses
            period = rng.integers(16, 40)
            start = rng.integers(0, period)
            for p in range(start, length, period):
                tail = np.arange(length - p)
                sig[p:] += 0.8 * np.exp(-tail / 3.0) * np.cos(tail * 1.3)
        out[i] = sig
    # per-dataset scaling to roughly unit variance
    out /= out.std()
    return torch.from_numpy(out).unsqueeze(1)  # (n, 1, L)


def build_loaders(seed=SEED):
    train_x = synth_vibration(N_TRAIN, seed=seed)
    val_x = synth_vibration(N_VAL, seed=seed + 1)
    g = torch.Generator().manual_seed(seed)
    train_loader = DataLoader(TensorDataset(train_x), batch_size=BATCH_SIZE,
                              shuffle=True, drop_last=True, generator=g)
    val_loader = DataLoader(TensorDataset(val_x), batch_size=256, shuffle=False)
    return train_loader, val_loader


def corrupt(x, std=NOISE_STD):
    return x + std * torch.randn_like(x)


class ConvDenoiser(nn.Module):
    def __init__(self, ch=32):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv1d(1, ch, 7, padding=3), nn.GELU(),
            nn.Conv1d(ch, ch, 5, stride=2, padding=2), nn.GELU(),
            nn.Conv1d(ch, 2 * ch, 5, stride=2, padding=2), nn.GELU(),
        )
        self.decoder = nn.Sequential(
            nn.ConvTranspose1d(2 * ch, ch, 4, stride=2, padding=1), nn.GELU(),
            nn.ConvTranspose1d(ch, ch, 4, stride=2, padding=1), nn.GELU(),
            nn.Conv1d(ch, 1, 7, padding=3),
        )

    def forward(self, x):
        return self.decoder(self.encoder(x))


def loss_fn(model, batch):
    (x,) = batch
    x_noisy = corrupt(x)
    recon = model(x_noisy)
    return F.mse_loss(recon, x_noisy)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY)


@torch.no_grad()
def evaluate(model, loader, seed=0):
    model.eval()
    g = torch.Generator().manual_seed(seed)
    se, n, noisy_se = 0.0, 0, 0.0
    for (x,) in loader:
        x_noisy = x + NOISE_STD * torch.randn(x.shape, generator=g)
        recon = model(x_noisy)
        se += F.mse_loss(recon, x, reduction="sum").item()
        noisy_se += F.mse_loss(x_noisy, x, reduction="sum").item()
        n += x.numel()
    model.train()
    mse = se / n
    signal_power = 1.0
    return {"val_mse": mse, "input_mse": noisy_se / n,
            "val_snr_db": 10 * math.log10(signal_power / mse)}


def make_target():
    torch.manual_seed(SEED)
    train_loader, _ = build_loaders()
    it = iter(train_loader)
    data = [next(it) for _ in range(4)]
    return {
        "model": ConvDenoiser(),
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "task": "regression",
    }


def main():
    torch.manual_seed(SEED)
    np.random.seed(SEED)
    train_loader, val_loader = build_loaders()
    model = ConvDenoiser()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"ConvDenoiser: {n_params/1e3:.1f}K params, {len(train_loader)} steps/epoch, noise_std={NOISE_STD}")
    opt = make_optimizer(model.parameters())
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=EPOCHS * len(train_loader))

    m = evaluate(model, val_loader)
    print(f"init | val_mse {m['val_mse']:.4f} | noisy-input mse {m['input_mse']:.4f}")
    step = 0
    t0 = time.time()
    for epoch in range(1, EPOCHS + 1):
        model.train()
        running, cnt = 0.0, 0
        for batch in train_loader:
            loss = loss_fn(model, batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            running += loss.item()
            cnt += 1
            step += 1
            if step % LOG_EVERY == 0:
                print(f"step {step:5d} | loss {running/cnt:.4f} | lr {sched.get_last_lr()[0]:.2e}")
        m = evaluate(model, val_loader)
        print(f"epoch {epoch:2d} | train_loss {running/cnt:.4f} | val_mse {m['val_mse']:.4f} "
              f"| val_snr {m['val_snr_db']:.2f} dB | elapsed {time.time()-t0:.1f}s")
    torch.save(model.state_dict(), "denoiser.pt")
    print(f"done. final val_mse {m['val_mse']:.4f} (noisy input baseline {m['input_mse']:.4f})")


if __name__ == "__main__":
    main()
