"""Activity recognition from 3-axis IMU windows.

Stage 1 (pretext): a 1D-CNN encoder is pretrained on unlabeled windows to recognise
which signal transformation was applied (identity / reversed / negated / axis-swapped /
time-warped). The encoder weights are cached in encoder_pretrained.pt.

Stage 2 (fine-tune): new linear head on a small labeled set, ULMFiT-style gradual
unfreezing of the encoder from the top block down, discriminative learning rates.
"""
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)

HERE = os.path.dirname(os.path.abspath(__file__))
CKPT_PATH = os.path.join(HERE, "encoder_pretrained.pt")

SEED = 1234
FS = 25.0             # Hz
WINDOW = 128          # ~5 s windows
N_AXES = 3
NUM_CLASSES = 6
N_TRANSFORMS = 5

# pretext
N_UNLABELED = 3000
PRETRAIN_EPOCHS = 3
PRETRAIN_LR = 2e-3

# fine-tune
N_TRAIN = 300
N_VAL = 600
BATCH_SIZE = 32
EPOCHS = 14
HEAD_LR = 2e-3
LR_DECAY_PER_BLOCK = 0.5   # discriminative LR: each block down gets half the LR
WEIGHT_DECAY = 1e-4
# epoch -> encoder modules to unfreeze at the start of that epoch
UNFREEZE_SCHEDULE = {2: ["block3"], 4: ["block2"], 6: ["block1", "stem"]}


# ----------------------------------------------------------------------------
# synthetic IMU data
# ----------------------------------------------------------------------------
def synth_windows(n, rng):
    """Simulated accelerometer windows.

    Activity = cadence band (3 levels) x gait style (smooth / impact-heavy).
    Each window gets a random subject gain, gravity orientation and sensor noise.
    """
    t = np.arange(WINDOW) / FS
    y = rng.integers(0, NUM_CLASSES, size=n)
    band = y // 2
    impact = (y % 2).astype(np.float32)

    lo = np.array([0.8, 1.5, 2.3])[band]
    hi = np.array([1.3, 2.1, 3.0])[band]
    f0 = rng.uniform(lo, hi)
    phase = rng.uniform(0, 2 * np.pi, size=n)
    gain = rng.lognormal(0.0, 0.3, size=n)

    arg = 2 * np.pi * f0[:, None] * t[None, :] + phase[:, None]
    smooth = np.sin(arg)
    # impact-heavy gait: sharp periodic peaks (von Mises shaped), zero mean
    spikes = np.exp(3.0 * (np.cos(arg) - 1.0))
    spikes = (spikes - spikes.mean(axis=1, keepdims=True)) * 2.5
    vertical = np.where(impact[:, None] > 0, 0.4 * smooth + spikes, smooth)

    x = np.zeros((n, N_AXES, WINDOW), dtype=np.float32)
    x[:, 0] = gain[:, None] * vertical
    x[:, 1] = gain[:, None] * 0.5 * np.sin(arg / 2 + rng.uniform(0, 2 * np.pi, size=(n, 1)))
    x[:, 2] = gain[:, None] * 0.3 * np.cos(arg + 0.7)
    # gravity leaks in with a random device orientation
    grav = rng.normal(0, 1, size=(n, N_AXES))
    grav = grav / np.linalg.norm(grav, axis=1, keepdims=True)
    x += grav[:, :, None].astype(np.float32)
    x += rng.normal(0, 0.35, size=x.shape).astype(np.float32)
    return x.astype(np.float32), y.astype(np.int64)


def apply_transform(x, k, rng):
    """Pretext transformations on a single window (C, T)."""
    if k == 0:
        return x
    if k == 1:
        return x[:, ::-1].copy()
    if k == 2:
        return -x
    if k == 3:
        return x[rng.permutation(N_AXES)].copy()
    # time warp: resample at a random speed
    speed = rng.uniform(1.4, 1.8)
    src = np.arange(WINDOW) * speed
    src = np.mod(src, WINDOW - 1)
    idx = np.floor(src).astype(int)
    frac = src - idx
    return ((1 - frac) * x[:, idx] + frac * x[:, idx + 1]).astype(np.float32)


def make_pretext_dataset(rng):
    x, _ = synth_windows(N_UNLABELED, rng)  # labels are never used for pretraining
    k = rng.integers(0, N_TRANSFORMS, size=N_UNLABELED)
    xt = np.stack([apply_transform(x[i], int(k[i]), rng) for i in range(N_UNLABELED)])
    return torch.from_numpy(xt), torch.from_numpy(k.astype(np.int64))


def make_labeled_splits():
    rng = np.random.default_rng(SEED + 1)
    xtr, ytr = synth_windows(N_TRAIN, rng)
    xva, yva = synth_windows(N_VAL, rng)
    return (torch.from_numpy(xtr), torch.from_numpy(ytr)), (torch.from_numpy(xva), torch.from_numpy(yva))


def iterate_batches(x, y, batch_size, shuffle, generator=None):
    n = x.shape[0]
    order = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
    for i in range(0, n, batch_size):
        idx = order[i:i + batch_size]
        yield x[idx], y[idx]


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class ConvBlock(nn.Module):
    def __init__(self, c_in, c_out, stride):
        super().__init__()
        self.conv1 = nn.Conv1d(c_in, c_out, 5, stride=stride, padding=2, bias=False)
        self.bn1 = nn.BatchNorm1d(c_out)
        self.conv2 = nn.Conv1d(c_out, c_out, 5, padding=2, bias=False)
        self.bn2 = nn.BatchNorm1d(c_out)
        self.skip = nn.Conv1d(c_in, c_out, 1, stride=stride, bias=False) if (stride != 1 or c_in != c_out) else nn.Identity()

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        return F.relu(h + self.skip(x))


class IMUEncoder(nn.Module):
    def __init__(self, width=32):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv1d(N_AXES, width, 7, padding=3, bias=False), nn.BatchNorm1d(width), nn.ReLU())
        self.block1 = ConvBlock(width, width, 2)
        self.block2 = ConvBlock(width, 2 * width, 2)
        self.block3 = ConvBlock(2 * width, 2 * width, 2)
        self.out_dim = 2 * width

    def forward(self, x):
        h = self.block3(self.block2(self.block1(self.stem(x))))
        return h.mean(dim=-1)


class ActivityClassifier(nn.Module):
    def __init__(self, encoder, num_classes):
        super().__init__()
        self.encoder = encoder
        self.dropout = nn.Dropout(0.2)
        self.head = nn.Linear(encoder.out_dim, num_classes)

    def forward(self, x):
        return self.head(self.dropout(self.encoder(x)))


# ----------------------------------------------------------------------------
# stage 1: pretext pretraining
# ----------------------------------------------------------------------------
def pretrain_encoder():
    torch.manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    x, k = make_pretext_dataset(rng)
    encoder = IMUEncoder()
    pretext_head = nn.Linear(encoder.out_dim, N_TRANSFORMS)
    params = list(encoder.parameters()) + list(pretext_head.parameters())
    opt = torch.optim.Adam(params, lr=PRETRAIN_LR)
    g = torch.Generator().manual_seed(SEED)
    step = 0
    for epoch in range(PRETRAIN_EPOCHS):
        encoder.train()
        for xb, kb in iterate_batches(x, k, 128, shuffle=True, generator=g):
            loss = F.cross_entropy(pretext_head(encoder(xb)), kb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            if step % 20 == 0:
                print(f"[pretext] epoch {epoch + 1} step {step}: loss {loss.item():.4f}")
    torch.save(encoder.state_dict(), CKPT_PATH)
    print(f"[pretext] saved encoder to {os.path.basename(CKPT_PATH)}")


def load_pretrained_encoder():
    if not os.path.exists(CKPT_PATH):
        pretrain_encoder()
    encoder = IMUEncoder()
    encoder.load_state_dict(torch.load(CKPT_PATH, map_location="cpu"))
    return encoder


# ----------------------------------------------------------------------------
# stage 2: fine-tuning
# ----------------------------------------------------------------------------
def build_model():
    encoder = load_pretrained_encoder()
    torch.manual_seed(SEED + 2)
    model = ActivityClassifier(encoder, NUM_CLASSES)
    # start as a linear probe; encoder blocks are unfrozen on schedule
    for p in model.encoder.parameters():
        p.requires_grad = False
    return model


def param_groups(model):
    enc = model.encoder
    return [
        {"params": model.head.parameters(), "lr": HEAD_LR},
        {"params": enc.block3.parameters(), "lr": HEAD_LR * LR_DECAY_PER_BLOCK},
        {"params": enc.block2.parameters(), "lr": HEAD_LR * LR_DECAY_PER_BLOCK ** 2},
        {"params": list(enc.block1.parameters()) + list(enc.stem.parameters()), "lr": HEAD_LR * LR_DECAY_PER_BLOCK ** 3},
    ]


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=HEAD_LR, weight_decay=WEIGHT_DECAY)


def loss_fn(model, batch):
    xb, yb = batch
    return F.cross_entropy(model(xb), yb)


@torch.no_grad()
def evaluate(model, x, y):
    model.eval()
    tot_loss, correct = 0.0, 0
    for xb, yb in iterate_batches(x, y, 256, shuffle=False):
        logits = model(xb)
        tot_loss += F.cross_entropy(logits, yb, reduction="sum").item()
        correct += (logits.argmax(-1) == yb).sum().item()
    return tot_loss / len(y), correct / len(y)


def make_target():
    model = build_model()
    (xtr, ytr), _ = make_labeled_splits()
    g = torch.Generator().manual_seed(SEED)
    data = [b for _, b in zip(range(5), iterate_batches(xtr, ytr, BATCH_SIZE, shuffle=True, generator=g))]
    return {
        "model": model,
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "num_classes": NUM_CLASSES,
        "task": "classification",
    }


def main():
    t_start = time.time()
    model = build_model()
    (xtr, ytr), (xva, yva) = make_labeled_splits()
    optimizer = make_optimizer(param_groups(model))
    n_trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print(f"Fine-tuning: {N_TRAIN} train / {N_VAL} val windows, trainable params: {n_trainable}")

    g = torch.Generator().manual_seed(SEED)
    steps_per_epoch = (N_TRAIN + BATCH_SIZE - 1) // BATCH_SIZE
    for epoch in range(EPOCHS):
        for name in UNFREEZE_SCHEDULE.get(epoch, []):
            getattr(model.encoder, name).requires_grad = True
            print(f"Unfreezing encoder.{name}")

        t0 = time.time()
        model.train()
        run_loss, run_correct, seen = 0.0, 0, 0
        for xb, yb in iterate_batches(xtr, ytr, BATCH_SIZE, shuffle=True, generator=g):
            logits = model(xb)
            loss = F.cross_entropy(logits, yb)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            run_loss += loss.item() * len(yb)
            run_correct += (logits.argmax(-1) == yb).sum().item()
            seen += len(yb)
        val_loss, val_acc = evaluate(model, xva, yva)
        print(f"Epoch {epoch + 1}/{EPOCHS}\n{steps_per_epoch}/{steps_per_epoch} - {time.time() - t0:.0f}s - "
              f"loss: {run_loss / seen:.4f} - accuracy: {run_correct / seen:.4f} - "
              f"val_loss: {val_loss:.4f} - val_accuracy: {val_acc:.4f}")
    print(f"Done in {time.time() - t_start:.1f}s")


if __name__ == "__main__":
    main()
