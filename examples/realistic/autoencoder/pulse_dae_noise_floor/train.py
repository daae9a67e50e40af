"""1-D convolutional denoising autoencoder for ultrasonic echo traces.

Each clean trace (128 samples) holds one or two Gabor echoes with random arrival time,
width, carrier frequency and amplitude.  During training a fresh Gaussian corruption
(sigma = NOISE_STD) is added to the input; the target is the clean trace.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 3
N = 128
N_TRAIN = 4000
N_VAL = 500
NOISE_STD = 0.3
BATCH = 64
EPOCHS = 14
LR = 2e-3


def make_traces(n, rng):
    t = np.arange(N, dtype=np.float32)
    out = np.zeros((n, N), dtype=np.float32)
    for i in range(n):
        for _ in range(rng.integers(1, 3)):
            t0 = rng.uniform(15, N - 15)
            w = rng.uniform(3.0, 8.0)
            f = rng.uniform(0.06, 0.16)
            a = rng.uniform(0.5, 1.2) * rng.choice([-1.0, 1.0])
            out[i] += a * np.exp(-0.5 * ((t - t0) / w) ** 2) * np.cos(2 * math.pi * f * (t - t0))
    return torch.from_numpy(out).unsqueeze(1)


class ConvDAE(nn.Module):
    def __init__(self, ch=32):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv1d(1, ch, 7, stride=2, padding=3), nn.GELU(),
            nn.Conv1d(ch, ch, 5, stride=2, padding=2), nn.GELU(),
            nn.Conv1d(ch, ch, 5, stride=2, padding=2), nn.GELU(),
        )
        self.decoder = nn.Sequential(
            nn.ConvTranspose1d(ch, ch, 4, stride=2, padding=1), nn.GELU(),
            nn.ConvTranspose1d(ch, ch, 4, stride=2, padding=1), nn.GELU(),
            nn.ConvTranspose1d(ch, ch, 4, stride=2, padding=1), nn.GELU(),
            nn.Conv1d(ch, 1, 5, padding=2),
        )

    def forward(self, x):
        return self.decoder(self.encoder(x))


def corrupt(x, gen=None):
    return x + NOISE_STD * torch.randn(x.shape, generator=gen)


def dae_loss(model, batch):
    noisy, clean = batch
    return F.mse_loss(model(noisy), clean)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=LR, weight_decay=1e-4)


def build():
    torch.manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    x_tr = make_traces(N_TRAIN, rng)
    x_va = make_traces(N_VAL, rng)
    return ConvDAE(), x_tr, x_va


def make_target():
    model, x_tr, _ = build()
    g = torch.Generator().manual_seed(0)
    data = []
    for i in range(3):
        clean = x_tr[i * BATCH:(i + 1) * BATCH]
        data.append((corrupt(clean, g), clean))
    return {
        "model": model,
        "batch": data[0],
        "data": data,
        "loss_fn": dae_loss,
        "optimizer": make_optimizer(model.parameters()),
        "make_optimizer": make_optimizer,
        "task": "regression",
    }


def main():
    model, x_tr, x_va = build()
    opt = make_optimizer(model.parameters())
    n_batches = math.ceil(N_TRAIN / BATCH)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=EPOCHS * n_batches, eta_min=LR * 0.05)
    gen = torch.Generator().manual_seed(SEED)
    val_gen = torch.Generator().manual_seed(999)
    val_noisy = corrupt(x_va, val_gen)
    input_mse = F.mse_loss(val_noisy, x_va).item()
    print(f"  | Name  | Type    | Params\n0 | model | ConvDAE | {sum(p.numel() for p in model.parameters())/1e3:.1f} K")
    print(f"noise_std={NOISE_STD}  val input mse (noisy vs clean)={input_mse:.4f}  signal power={x_va.pow(2).mean().item():.4f}")
    for epoch in range(EPOCHS):
        t0 = time.time()
        model.train()
        perm = torch.randperm(N_TRAIN, generator=gen)
        tot = 0.0
        for i in range(n_batches):
            clean = x_tr[perm[i * BATCH:(i + 1) * BATCH]]
            loss = dae_loss(model, (corrupt(clean, gen), clean))
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            tot += loss.item()
        model.eval()
        with torch.no_grad():
            val_loss = dae_loss(model, (val_noisy, x_va)).item()
        el = time.time() - t0
        snr_gain = 10 * math.log10(input_mse / val_loss)
        print(f"Epoch {epoch}: 100%|{chr(9608) * 10}| {n_batches}/{n_batches} [00:{int(el):02d}<00:00, "
              f"{n_batches / el:.2f}it/s, v_num=0, train_loss={tot / n_batches:.4f}, val_loss={val_loss:.4f}, "
              f"val_snr_gain_db={snr_gain:.2f}, lr={sched.get_last_lr()[0]:.2e}]")
    print(f"`Trainer.fit` stopped: `max_epochs={EPOCHS}` reached.")


if __name__ == "__main__":
    main()
