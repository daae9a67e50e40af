"""Heartbeat morphology classifier (5 beat types) on single-lead ECG snippets.

Synthetic beats: sum of Gaussian P / QRS / T waves with class-dependent
shape, baseline wander and mains noise. 1-D ConvNet with BatchNorm,
mixup + time-shift + noise augmentation, SGD with a one-cycle schedule.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 2024
FS = 125
BEAT_LEN = 96
N_CLASSES = 5
N_TRAIN = 1500
N_VAL = 500
BATCH_SIZE = 50
EPOCHS = 12
MAX_LR = 0.08
MIXUP_ALPHA = 0.4
LOG_EVERY = 30

BEAT_TYPES = ["N", "S", "V", "F", "Q"]


def synth_beats(n, rng):
    t = np.arange(BEAT_LEN) / FS
    # (amplitude, centre [s], width [s]) of P, Q, R, S, T for each beat type
    proto = {
        0: [(0.15, 0.20, 0.020), (-0.10, 0.33, 0.008), (1.00, 0.36, 0.010), (-0.20, 0.39, 0.010), (0.30, 0.58, 0.040)],
        1: [(0.05, 0.12, 0.020), (-0.10, 0.30, 0.008), (0.95, 0.33, 0.010), (-0.20, 0.36, 0.010), (0.28, 0.54, 0.040)],
        2: [(0.00, 0.20, 0.020), (-0.05, 0.31, 0.015), (1.20, 0.36, 0.030), (-0.60, 0.43, 0.030), (-0.35, 0.60, 0.050)],
        3: [(0.10, 0.20, 0.020), (-0.10, 0.32, 0.012), (1.05, 0.36, 0.020), (-0.40, 0.41, 0.020), (0.05, 0.58, 0.045)],
        4: [(0.10, 0.20, 0.030), (-0.30, 0.32, 0.020), (0.60, 0.37, 0.025), (-0.30, 0.42, 0.020), (0.20, 0.60, 0.060)],
    }
    y = rng.integers(0, N_CLASSES, size=n)
    x = np.empty((n, BEAT_LEN), dtype=np.float32)
    for i in range(n):
        sig = np.zeros(BEAT_LEN)
        scale = rng.uniform(0.7, 1.3)
        shift = rng.normal(0, 0.012)
        for a, c, w in proto[y[i]]:
            a = a * rng.uniform(0.8, 1.2)
            w = w * rng.uniform(0.85, 1.15)
            sig += a * np.exp(-0.5 * ((t - c - shift) / w) ** 2)
        sig *= scale
        sig += 0.15 * np.sin(2 * math.pi * rng.uniform(0.2, 0.5) * t + rng.uniform(0, 6.28))
        sig += 0.03 * np.sin(2 * math.pi * 50 * t + rng.uniform(0, 6.28))
        sig += rng.normal(0, 0.05, size=BEAT_LEN)
        x[i] = sig
    return x, y.astype(np.int64)


def get_datasets():
    rng = np.random.default_rng(SEED)
    x_tr, y_tr = synth_beats(N_TRAIN, rng)
    x_va, y_va = synth_beats(N_VAL, rng)
    mu, sd = x_tr.mean(), x_tr.std()
    x_tr = torch.from_numpy((x_tr - mu) / sd).unsqueeze(1)
    x_va = torch.from_numpy((x_va - mu) / sd).unsqueeze(1)
    return (x_tr, torch.from_numpy(y_tr)), (x_va, torch.from_numpy(y_va))


def augment(x, gen):
    """Circular time shift of up to +-6 samples, amplitude scaling, additive noise."""
    b = x.shape[0]
    shifts = torch.randint(-6, 7, (b,), generator=gen)
    out = torch.stack([torch.roll(x[i], int(s), dims=-1) for i, s in enumerate(shifts)])
    out = out * (0.9 + 0.2 * torch.rand(b, 1, 1, generator=gen))
    return out + 0.05 * torch.randn(out.shape, generator=gen)


def mixup(x, y, gen):
    lam = float(np.random.default_rng(int(torch.randint(0, 2**31 - 1, (1,), generator=gen))).beta(MIXUP_ALPHA, MIXUP_ALPHA))
    perm = torch.randperm(x.shape[0], generator=gen)
    x_mix = lam * x + (1.0 - lam) * x[perm]
    return x_mix, y, y[perm], lam


def train_batches(x, y, gen):
    perm = torch.randperm(len(x), generator=gen)
    for i in range(0, len(x), BATCH_SIZE):
        idx = perm[i:i + BATCH_SIZE]
        xb = augment(x[idx], gen)
        yield mixup(xb, y[idx], gen)


class BeatNet(nn.Module):
    def __init__(self, n_classes=N_CLASSES):
        super().__init__()

        def block(ci, co, k, pool):
            layers = [nn.Conv1d(ci, co, k, padding=k // 2, bias=False), nn.BatchNorm1d(co), nn.ReLU(inplace=True)]
            if pool:
                layers.append(nn.MaxPool1d(2))
            return layers

        self.body = nn.Sequential(
            *block(1, 24, 9, True),
            *block(24, 48, 7, True),
            *block(48, 64, 5, True),
            *block(64, 64, 3, False),
        )
        self.classifier = nn.Sequential(nn.Dropout(0.3), nn.Linear(64, n_classes))

    def forward(self, x):
        h = self.body(x)
        return self.classifier(h.mean(-1))


def mixup_loss(model, batch):
    x, y_a, y_b, lam = batch
    logits = model(x)
    return lam * F.cross_entropy(logits, y_a) + (1.0 - lam) * F.cross_entropy(logits, y_b)


def make_optimizer(params):
    return torch.optim.SGD(params, lr=MAX_LR, momentum=0.9, weight_decay=5e-4, nesterov=True)


@torch.no_grad()
def evaluate(model, x, y):
    model.eval()
    logits = model(x)
    loss = F.cross_entropy(logits, y).item()
    acc = (logits.argmax(-1) == y).float().mean().item()
    model.train()
    return loss, acc


def make_target():
    torch.manual_seed(SEED)
    (x_tr, y_tr), _ = get_datasets()
    gen = torch.Generator().manual_seed(SEED)
    data = []
    for k, b in enumerate(train_batches(x_tr, y_tr, gen)):
        data.append(b)
        if k == 4:
            break
    return {
        "model": BeatNet(),
        "data": data,
        "loss_fn": mixup_loss,
        "make_optimizer": make_optimizer,
        "num_classes": N_CLASSES,
        "task": "classification",
    }


def main():
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    (x_tr, y_tr), (x_va, y_va) = get_datasets()
    gen = torch.Generator().manual_seed(SEED)
    model = BeatNet()
    optimizer = make_optimizer(model.parameters())
    steps_per_epoch = math.ceil(len(x_tr) / BATCH_SIZE)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=MAX_LR, epochs=EPOCHS, steps_per_epoch=steps_per_epoch, pct_start=0.25)
    print(f"***** Running training *****\n  Num examples = {len(x_tr)}\n  Num Epochs = {EPOCHS}\n"
          f"  Batch size = {BATCH_SIZE}\n  Total optimization steps = {EPOCHS * steps_per_epoch}")

    t_start = time.time()
    step, running = 0, []
    for epoch in range(EPOCHS):
        for batch in train_batches(x_tr, y_tr, gen):
            loss = mixup_loss(model, batch)
            optimizer.zero_grad()
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()
            scheduler.step()
            step += 1
            running.append(loss.item())
            if step % LOG_EVERY == 0:
                print({"loss": round(float(np.mean(running)), 4), "grad_norm": round(grad_norm.item(), 4),
                       "learning_rate": float(f"{scheduler.get_last_lr()[0]:.6g}"),
                       "epoch": round(step / steps_per_epoch, 2)})
                running = []
        val_loss, val_acc = evaluate(model, x_va, y_va)
        print({"eval_loss": round(val_loss, 4), "eval_accuracy": round(val_acc, 4), "epoch": float(epoch + 1)})
    runtime = time.time() - t_start
    print({"train_runtime": round(runtime, 2), "train_samples_per_second": round(EPOCHS * len(x_tr) / runtime, 1),
           "epoch": float(EPOCHS)})


if __name__ == "__main__":
    main()
