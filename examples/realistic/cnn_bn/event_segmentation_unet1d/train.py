"""Per-sample event segmentation on 1-D sensor traces with a small 1-D U-Net.

Classes per time step: 0 = background, 1 = spike, 2 = oscillatory burst.
AdamW + OneCycle, label-smoothed weighted cross-entropy, signal-level
augmentations applied jointly to trace and mask.
"""
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)

CLASSES = ["background", "spike", "burst"]
SEQ_LEN = 512
N_TRAIN = 800
N_VAL = 200
BATCH_SIZE = 32
EPOCHS = 8
MAX_LR = 3e-3
WEIGHT_DECAY = 1e-4
LABEL_SMOOTHING = 0.1
SEED = 7


# ----------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------
def simulate_trace(rng):
    t = np.arange(SEQ_LEN, dtype=np.float32)
    x = np.zeros(SEQ_LEN, dtype=np.float32)
    y = np.zeros(SEQ_LEN, dtype=np.int64)
    # bursts: gaussian-windowed oscillation, 30-70 samples long
    for _ in range(rng.integers(0, 3)):
        length = int(rng.integers(30, 70))
        start = int(rng.integers(0, SEQ_LEN - length))
        f = rng.uniform(0.12, 0.22)
        seg = t[start:start + length] - start
        env = np.sin(np.pi * seg / length) ** 2
        x[start:start + length] += rng.uniform(0.8, 1.5) * env * np.sin(2 * np.pi * f * seg)
        y[start:start + length][env > 0.2] = 2
    # spikes: short biphasic transients, ~8 samples
    for _ in range(rng.integers(1, 6)):
        c = int(rng.integers(6, SEQ_LEN - 6))
        seg = np.arange(-5, 6, dtype=np.float32)
        amp = rng.uniform(1.5, 3.0) * rng.choice([-1.0, 1.0])
        x[c - 5:c + 6] += amp * (-seg / 2.0) * np.exp(-(seg ** 2) / 4.0)
        y[c - 3:c + 4] = 1
    # slow drift + pink-ish noise
    drift = rng.uniform(-0.5, 0.5) * np.sin(2 * np.pi * t / rng.uniform(300, 900) + rng.uniform(0, 6.28))
    noise = np.convolve(rng.normal(0, 0.35, SEQ_LEN + 4), np.ones(5) / 5 ** 0.5, mode="valid")
    x = x + drift + noise.astype(np.float32)
    return x.astype(np.float32), y


def make_split(n, seed):
    rng = np.random.default_rng(seed)
    xs, ys = zip(*(simulate_trace(rng) for _ in range(n)))
    x = torch.from_numpy(np.stack(xs))[:, None, :]
    y = torch.from_numpy(np.stack(ys))
    return x, y


def augment(x, y, g):
    """Joint augmentation of traces (B,1,L) and masks (B,L)."""
    B, _, L = x.shape
    # circular time shift, same offset for trace and mask
    shift = torch.randint(0, L, (B,), generator=g)
    idx = (torch.arange(L).view(1, L) + shift.view(B, 1)) % L
    x = torch.gather(x, 2, idx.unsqueeze(1))
    y = torch.gather(y, 1, idx)
    # time reversal (events are symmetric enough)
    rev = torch.rand(B, generator=g) < 0.5
    x = torch.where(rev.view(B, 1, 1), x.flip(-1), x)
    y = torch.where(rev.view(B, 1), y.flip(-1), y)
    # amplitude scaling, polarity, baseline wander, extra noise
    gain = torch.exp(0.3 * torch.randn(B, 1, 1, generator=g))
    sign = torch.where(torch.rand(B, 1, 1, generator=g) < 0.5, -1.0, 1.0)
    tt = torch.linspace(0, 1, L).view(1, 1, L)
    wander = 0.6 * torch.randn(B, 1, 1, generator=g) * torch.sin(
        2 * torch.pi * (tt * torch.rand(B, 1, 1, generator=g) * 2 + torch.rand(B, 1, 1, generator=g)))
    sigma = 0.4 * torch.rand(B, 1, 1, generator=g)
    x = sign * gain * x + wander + sigma * torch.randn(x.shape, generator=g)
    return x, y


class TraceLoader:
    def __init__(self, x, y, batch_size, shuffle, train_aug, seed):
        self.x, self.y = x, y
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.train_aug = train_aug
        self.g = torch.Generator().manual_seed(seed)

    def __len__(self):
        return (len(self.y) + self.batch_size - 1) // self.batch_size

    def __iter__(self):
        n = len(self.y)
        order = torch.randperm(n, generator=self.g) if self.shuffle else torch.arange(n)
        for i in range(0, n, self.batch_size):
            sel = order[i:i + self.batch_size]
            xb, yb = self.x[sel], self.y[sel]
            if self.train_aug:
                xb, yb = augment(xb, yb, self.g)
            yield xb, yb


def build_loaders():
    x_tr, y_tr = make_split(N_TRAIN, SEED)
    x_va, y_va = make_split(N_VAL, SEED + 100)
    train_dl = TraceLoader(x_tr, y_tr, BATCH_SIZE, shuffle=True, train_aug=True, seed=SEED)
    val_dl = TraceLoader(x_va, y_va, 100, shuffle=False, train_aug=False, seed=SEED)
    return train_dl, val_dl, y_tr


def class_weights(y, num_classes=len(CLASSES)):
    counts = torch.bincount(y.flatten(), minlength=num_classes).float()
    w = (counts.sum() / counts) ** 0.5
    return w / w.mean()


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
def double_conv(cin, cout):
    return nn.Sequential(
        nn.Conv1d(cin, cout, 5, padding=2, bias=False), nn.BatchNorm1d(cout), nn.ReLU(inplace=True),
        nn.Conv1d(cout, cout, 5, padding=2, bias=False), nn.BatchNorm1d(cout), nn.ReLU(inplace=True),
    )


class UNet1d(nn.Module):
    def __init__(self, num_classes=len(CLASSES), base=16):
        super().__init__()
        c1, c2, c3 = base, base * 2, base * 4
        self.enc1 = double_conv(1, c1)
        self.enc2 = double_conv(c1, c2)
        self.mid = double_conv(c2, c3)
        self.up2 = nn.ConvTranspose1d(c3, c2, 2, stride=2)
        self.dec2 = double_conv(c2 * 2, c2)
        self.up1 = nn.ConvTranspose1d(c2, c1, 2, stride=2)
        self.dec1 = double_conv(c1 * 2, c1)
        self.out = nn.Conv1d(c1, num_classes, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(F.max_pool1d(e1, 2))
        m = self.mid(F.max_pool1d(e2, 2))
        d2 = self.dec2(torch.cat([self.up2(m), e2], dim=1))
        d1 = self.dec1(torch.cat([self.up1(d2), e1], dim=1))
        return self.out(d1)  # (B, C, L)


def make_criterion(weights):
    return nn.CrossEntropyLoss(weight=weights, label_smoothing=LABEL_SMOOTHING)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=MAX_LR, weight_decay=WEIGHT_DECAY)


@torch.no_grad()
def evaluate(model, loader, num_classes=len(CLASSES)):
    model.eval()
    tot, n = 0.0, 0
    inter = torch.zeros(num_classes)
    union = torch.zeros(num_classes)
    for x, y in loader:
        logits = model(x)
        tot += F.cross_entropy(logits, y, reduction="sum").item()
        n += y.numel()
        pred = logits.argmax(1)
        for c in range(num_classes):
            inter[c] += ((pred == c) & (y == c)).sum()
            union[c] += ((pred == c) | (y == c)).sum()
    iou = inter / union.clamp(min=1)
    return tot / n, iou


def make_target():
    torch.manual_seed(SEED)
    train_dl, _, y_tr = build_loaders()
    criterion = make_criterion(class_weights(y_tr))
    it = iter(train_dl)
    data = [next(it) for _ in range(4)]

    def loss_fn(model, batch):
        x, y = batch
        return criterion(model(x), y)

    return {
        "model": UNet1d(),
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "num_classes": len(CLASSES),
        "task": "classification",
    }


def main():
    torch.manual_seed(SEED)
    train_dl, val_dl, y_tr = build_loaders()
    weights = class_weights(y_tr)
    criterion = make_criterion(weights)
    model = UNet1d()
    opt = make_optimizer(model.parameters())
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=MAX_LR, total_steps=EPOCHS * len(train_dl), pct_start=0.25)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"  | Name  | Type   | Params\n-------------------------------\n0 | model | UNet1d | {n_params / 1e3:.1f} K")
    print(f"class weights: {[round(w, 3) for w in weights.tolist()]}")
    for epoch in range(EPOCHS):
        model.train()
        t0 = time.time()
        run, cnt = 0.0, 0
        for x, y in train_dl:
            loss = criterion(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            run += loss.item()
            cnt += 1
        val_loss, iou = evaluate(model, val_dl)
        el = time.time() - t0
        print(f"Epoch {epoch}: 100%|##########| {len(train_dl)}/{len(train_dl)} "
              f"[{el:.0f}s, {len(train_dl) / el:.2f}it/s, train_loss={run / cnt:.4f}, "
              f"val_loss={val_loss:.4f}, val_mIoU={iou.mean():.3f}, "
              f"val_IoU_spike={iou[1]:.3f}, val_IoU_burst={iou[2]:.3f}, "
              f"lr={sched.get_last_lr()[0]:.2e}]")
    print(f"`Trainer.fit` stopped: `max_epochs={EPOCHS}` reached.")


if __name__ == "__main__":
    main()
