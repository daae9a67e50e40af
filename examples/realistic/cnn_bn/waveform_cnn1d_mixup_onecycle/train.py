"""1-D CNN for waveform-type classification (8 classes) on synthetic sensor traces.

Conv1d/BatchNorm stack, AdamW + OneCycle, augmentation = random crop,
amplitude jitter, additive noise and mixup on every batch.
Log format mimics Keras' model.fit progress output.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)

SEED = 7
NUM_CLASSES = 8
RAW_LEN = 320          # generated length
WIN = 256              # model input length (random crop in train, centre crop in val)
N_TRAIN = 3000
N_VAL = 1000
BATCH_SIZE = 64
EPOCHS = 10
MAX_LR = 3e-3
WEIGHT_DECAY = 1e-2
MIXUP_ALPHA = 0.4

CLASSES = ["sine", "square", "sawtooth", "triangle", "am_sine",
           "pulse_train", "chirp", "sine_2h"]


# ----------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------
def _waveform(cls, t, f, phase, rng):
    ph = 2 * math.pi * f * t + phase
    if cls == 0:
        return np.sin(ph)
    if cls == 1:
        return np.sign(np.sin(ph))
    if cls == 2:
        return 2 * ((ph / (2 * math.pi)) % 1.0) - 1
    if cls == 3:
        return 2 * np.abs(2 * ((ph / (2 * math.pi)) % 1.0) - 1) - 1
    if cls == 4:
        env = 0.55 + 0.45 * np.sin(2 * math.pi * rng.uniform(0.6, 1.5) * t + rng.uniform(0, 6.28))
        return env * np.sin(3 * ph)
    if cls == 5:
        centers = (np.arange(-1, 12) + (phase / 6.28)) / f
        width = rng.uniform(0.006, 0.015)
        return np.exp(-0.5 * ((t[:, None] - centers[None]) / width) ** 2).sum(1) * 2 - 0.5
    if cls == 6:
        k = rng.uniform(4, 10)
        return np.sin(2 * math.pi * (f * t + 0.5 * k * t ** 2) + phase)
    if cls == 7:
        return np.sin(ph) + rng.uniform(0.35, 0.6) * np.sin(2 * ph + rng.uniform(0, 6.28))
    raise ValueError(cls)


def make_signals(n, seed):
    rng = np.random.default_rng(seed)
    t = np.linspace(0, RAW_LEN / WIN, RAW_LEN, endpoint=False)
    labels = rng.integers(0, NUM_CLASSES, size=n)
    x = np.empty((n, 1, RAW_LEN), dtype=np.float32)
    for i in range(n):
        f = rng.uniform(2.0, 7.0)
        sig = _waveform(labels[i], t, f, rng.uniform(0, 2 * math.pi), rng)
        amp = rng.uniform(0.5, 2.0)
        drift = rng.normal(0, 0.3) * t + rng.normal(0, 0.3)
        x[i, 0] = amp * sig + drift + rng.normal(0, 0.35, size=RAW_LEN)
    return x, labels.astype(np.int64)


def build_datasets():
    x_tr, y_tr = make_signals(N_TRAIN, SEED)
    x_va, y_va = make_signals(N_VAL, SEED + 100)
    mu, sd = x_tr.mean(), x_tr.std()
    x_tr = torch.from_numpy((x_tr - mu) / sd)
    x_va = torch.from_numpy((x_va - mu) / sd)
    off = (RAW_LEN - WIN) // 2
    x_va = x_va[..., off:off + WIN].contiguous()
    return (x_tr, torch.from_numpy(y_tr)), (x_va, torch.from_numpy(y_va))


def augment(x, gen):
    n = x.shape[0]
    starts = torch.randint(0, RAW_LEN - WIN + 1, (n,), generator=gen)
    idx = starts[:, None] + torch.arange(WIN)[None]
    out = torch.gather(x[:, 0], 1, idx).unsqueeze(1)
    scale = 0.8 + 0.4 * torch.rand(n, 1, 1, generator=gen)
    out = out * scale + 0.05 * torch.randn(out.shape, generator=gen)
    return out


def mixup(x, y, gen, alpha=MIXUP_ALPHA):
    """Batch mixup against the reversed batch (as in timm); returns soft targets."""
    lam = float(torch.distributions.Beta(alpha, alpha).sample()) if alpha > 0 else 1.0
    x_mix = lam * x + (1.0 - lam) * x.flip(0)
    t = F.one_hot(y, NUM_CLASSES).float()
    t_mix = (1.0 - lam) * t + lam * t.flip(0)
    return x_mix, t_mix


def train_batches(x, y, gen):
    perm = torch.randperm(x.shape[0], generator=gen)
    for s in range(0, x.shape[0] - BATCH_SIZE + 1, BATCH_SIZE):
        idx = perm[s:s + BATCH_SIZE]
        xb = augment(x[idx], gen)
        yield mixup(xb, y[idx], gen)


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
def conv_bn(cin, cout, k):
    return nn.Sequential(
        nn.Conv1d(cin, cout, k, padding=k // 2, bias=False),
        nn.BatchNorm1d(cout),
        nn.ReLU(inplace=True),
    )


class WaveNet1D(nn.Module):
    def __init__(self, num_classes=NUM_CLASSES):
        super().__init__()
        self.features = nn.Sequential(
            conv_bn(1, 24, 9), nn.MaxPool1d(2),
            conv_bn(24, 48, 7), nn.MaxPool1d(2),
            conv_bn(48, 64, 5), nn.MaxPool1d(2),
            conv_bn(64, 96, 3),
        )
        self.dropout = nn.Dropout(0.2)
        self.fc = nn.Linear(96, num_classes)

    def forward(self, x):
        h = self.features(x)
        h = h.mean(-1)
        return self.fc(self.dropout(h))


# ----------------------------------------------------------------------------
# training
# ----------------------------------------------------------------------------
def soft_cross_entropy(logits, target):
    return torch.sum(-target * F.log_softmax(logits, dim=-1), dim=-1).mean()


def compute_loss(model, batch):
    x, t = batch
    return soft_cross_entropy(model(x), t)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=MAX_LR, weight_decay=WEIGHT_DECAY)


@torch.no_grad()
def evaluate(model, x, y, bs=500):
    model.eval()
    loss, correct = 0.0, 0
    for s in range(0, x.shape[0], bs):
        logits = model(x[s:s + bs])
        loss += F.cross_entropy(logits, y[s:s + bs], reduction="sum").item()
        correct += (logits.argmax(1) == y[s:s + bs]).sum().item()
    model.train()
    return loss / x.shape[0], correct / x.shape[0]


def make_target():
    torch.manual_seed(SEED)
    (x_tr, y_tr), _ = build_datasets()
    gen = torch.Generator().manual_seed(SEED)
    it = train_batches(x_tr, y_tr, gen)
    data = [next(it) for _ in range(4)]
    return {
        "model": WaveNet1D(),
        "data": data,
        "loss_fn": compute_loss,
        "make_optimizer": make_optimizer,
        "num_classes": NUM_CLASSES,
        "task": "classification",
    }


def progress_bar(done, total, width=30):
    filled = int(width * done / total)
    if filled >= width:
        return "=" * width
    return "=" * filled + ">" + "." * (width - filled - 1)


def main():
    torch.manual_seed(SEED)
    (x_tr, y_tr), (x_va, y_va) = build_datasets()
    print(f"Train on {x_tr.shape[0]} samples, validate on {x_va.shape[0]} samples")

    model = WaveNet1D()
    optimizer = make_optimizer(model.parameters())
    steps_per_epoch = N_TRAIN // BATCH_SIZE
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=MAX_LR, epochs=EPOCHS, steps_per_epoch=steps_per_epoch,
        pct_start=0.25)
    gen = torch.Generator().manual_seed(SEED)

    t_start = time.time()
    model.train()
    for epoch in range(1, EPOCHS + 1):
        print(f"Epoch {epoch}/{EPOCHS}")
        t0 = time.time()
        tot_loss, tot_acc, n = 0.0, 0.0, 0
        for xb, tb in train_batches(x_tr, y_tr, gen):
            logits = model(xb)
            loss = soft_cross_entropy(logits, tb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            bs = xb.shape[0]
            tot_loss += loss.item() * bs
            tot_acc += (logits.argmax(1) == tb.argmax(1)).float().sum().item()
            n += bs
        val_loss, val_acc = evaluate(model, x_va, y_va)
        dt = time.time() - t0
        lr = optimizer.param_groups[0]["lr"]
        print(f"{steps_per_epoch}/{steps_per_epoch} [{progress_bar(1, 1)}] - {dt:.0f}s "
              f"{1000 * dt / steps_per_epoch:.0f}ms/step - loss: {tot_loss / n:.4f} - "
              f"accuracy: {tot_acc / n:.4f} - val_loss: {val_loss:.4f} - "
              f"val_accuracy: {val_acc:.4f} - lr: {lr:.2e}")
    print(f"Training finished in {time.time() - t_start:.1f}s")


if __name__ == "__main__":
    main()
