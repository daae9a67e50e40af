"""1D convolutional autoencoder for vibration-window anomaly detection.

Trained on healthy accelerometer windows only; at the end the reconstruction
error is used as an anomaly score on a held-out set that also contains
windows with bearing-fault impulses.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)

# -----------------------------------------------------------------------------
# config
seed = 1337
window = 128
fs = 2048.0
n_train = 4096
n_val_normal = 768
n_val_fault = 256
batch_size = 64
latent_dim = 16
learning_rate = 2e-3
min_lr = 1e-4
weight_decay = 1e-4
max_iters = 1200
warmup_iters = 100
eval_interval = 200
eval_iters = 10
log_interval = 50
grad_clip = 1.0
# -----------------------------------------------------------------------------


def synth_windows(n, rng, fault=False):
    """Accelerometer windows: shaft harmonics + gear mesh tone + sensor noise."""
    t = np.arange(window) / fs
    rpm = rng.uniform(1500, 3600, size=(n, 1))
    f0 = rpm / 60.0
    sig = np.zeros((n, window))
    for k in range(1, 4):
        amp = rng.uniform(0.2, 1.0, size=(n, 1)) / k
        phase = rng.uniform(0, 2 * np.pi, size=(n, 1))
        sig += amp * np.sin(2 * np.pi * k * f0 * t + phase)
    mesh = rng.uniform(0.05, 0.25, size=(n, 1))
    sig += mesh * np.sin(2 * np.pi * 23 * f0 * t + rng.uniform(0, 2 * np.pi, size=(n, 1)))
    sig += 0.05 * rng.normal(size=sig.shape)
    if fault:
        # outer-race defect: decaying impulses at the ball-pass frequency
        bpfo = 3.6 * f0
        period = np.maximum((fs / bpfo).astype(int), 4)
        start = rng.integers(0, 20, size=n)
        for i in range(n):
            for p in range(start[i], window, period[i, 0]):
                tail = np.arange(window - p)
                sig[i, p:] += 0.8 * np.exp(-tail / 3.0) * np.sin(2 * np.pi * 0.3 * tail)
    return sig.astype(np.float32)


def build_datasets():
    rng = np.random.default_rng(seed)
    train = synth_windows(n_train, rng)
    val_normal = synth_windows(n_val_normal, rng)
    val_fault = synth_windows(n_val_fault, rng, fault=True)
    # global scaling from the training windows
    scale = float(train.std())
    train = torch.from_numpy(train / scale).unsqueeze(1)
    val_normal = torch.from_numpy(val_normal / scale).unsqueeze(1)
    val_fault = torch.from_numpy(val_fault / scale).unsqueeze(1)
    return train, val_normal, val_fault


def get_batch(data, gen):
    ix = torch.randint(data.shape[0], (batch_size,), generator=gen)
    return data[ix]


class ConvAutoencoder(nn.Module):
    def __init__(self, latent_dim=latent_dim):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv1d(1, 16, 7, stride=2, padding=3),
            nn.GELU(),
            nn.Conv1d(16, 32, 5, stride=2, padding=2),
            nn.GELU(),
            nn.Conv1d(32, 32, 5, stride=2, padding=2),
            nn.GELU(),
        )
        self.to_latent = nn.Linear(32 * (window // 8), latent_dim)
        self.from_latent = nn.Linear(latent_dim, 32 * (window // 8))
        self.decoder = nn.Sequential(
            nn.GELU(),
            nn.ConvTranspose1d(32, 32, 4, stride=2, padding=1),
            nn.GELU(),
            nn.ConvTranspose1d(32, 16, 4, stride=2, padding=1),
            nn.GELU(),
            nn.ConvTranspose1d(16, 1, 4, stride=2, padding=1),
        )

    def encode(self, x):
        """Latent code for a batch of windows (also used for embeddings / scoring)."""
        h = self.encoder(x)
        return self.to_latent(h.flatten(1))

    def decode(self, z):
        h = self.from_latent(z).view(z.shape[0], 32, window // 8)
        return self.decoder(h)

    def forward(self, x):
        return self.decode(self.encode(x))


def loss_fn(model, batch):
    recon = model(batch)
    return F.mse_loss(recon, batch)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=learning_rate, betas=(0.9, 0.99), weight_decay=weight_decay)


def get_lr(it):
    if it < warmup_iters:
        return learning_rate * (it + 1) / warmup_iters
    ratio = (it - warmup_iters) / (max_iters - warmup_iters)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (learning_rate - min_lr)


@torch.no_grad()
def estimate_loss(model, splits, gen):
    model.eval()
    out = {}
    for name, data in splits.items():
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            losses[k] = loss_fn(model, get_batch(data, gen)).item()
        out[name] = losses.mean().item()
    model.train()
    return out


def roc_auc(scores, labels):
    order = np.argsort(scores)
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    n_pos = labels.sum()
    n_neg = len(labels) - n_pos
    return (ranks[labels == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


@torch.no_grad()
def anomaly_report(model, val_normal, val_fault):
    model.eval()
    x = torch.cat([val_normal, val_fault])
    err = ((model(x) - x) ** 2).mean(dim=(1, 2)).numpy()
    labels = np.r_[np.zeros(len(val_normal)), np.ones(len(val_fault))]
    model.train()
    return err[labels == 0].mean(), err[labels == 1].mean(), roc_auc(err, labels)


def make_target():
    torch.manual_seed(seed)
    train, _, _ = build_datasets()
    gen = torch.Generator().manual_seed(seed)
    batches = [get_batch(train, gen) for _ in range(4)]
    return {
        "model": ConvAutoencoder(),
        "data": batches,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "task": "regression",
    }


def main():
    torch.manual_seed(seed)
    train, val_normal, val_fault = build_datasets()
    print(f"train windows: {train.shape[0]}, val windows: {val_normal.shape[0]} normal + {val_fault.shape[0]} fault")
    model = ConvAutoencoder()
    print(f"number of parameters: {sum(p.numel() for p in model.parameters()) / 1e3:.1f}K")
    optimizer = make_optimizer(model.parameters())
    train_gen = torch.Generator().manual_seed(seed)
    eval_gen = torch.Generator().manual_seed(seed + 1)

    t0 = time.time()
    for it in range(max_iters + 1):
        lr = get_lr(it)
        for group in optimizer.param_groups:
            group["lr"] = lr

        if it % eval_interval == 0:
            losses = estimate_loss(model, {"train": train, "val": val_normal}, eval_gen)
            print(f"step {it}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
        if it == max_iters:
            break

        batch = get_batch(train, train_gen)
        loss = loss_fn(model, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if grad_clip > 0.0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()

        t1 = time.time()
        dt = t1 - t0
        t0 = t1
        if it % log_interval == 0:
            print(f"iter {it}: loss {loss.item():.4f}, lr {lr:.2e}, time {dt * 1000:.2f}ms")

    err_n, err_f, auc = anomaly_report(model, val_normal, val_fault)
    print(f"anomaly scoring: mean recon err normal {err_n:.4f}, fault {err_f:.4f}, ROC-AUC {auc:.4f}")


if __name__ == "__main__":
    main()
