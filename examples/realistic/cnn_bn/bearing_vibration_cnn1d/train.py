"""1-D CNN fault classifier for (synthetic) bearing vibration windows.

Conv1d/BN/ReLU blocks -> global average pooling -> linear.
AdamW + cosine schedule with linear warmup, label smoothing 0.1.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)

FAULTS = ["normal", "inner_race", "outer_race", "imbalance", "misalignment"]
FS = 2048          # Hz
WIN = 512          # samples per window (0.25 s)
SHAFT_HZ = (20.0, 35.0)
N_TRAIN_PER_CLASS = 320
N_VAL_PER_CLASS = 80
BATCH_SIZE = 64
EPOCHS = 10
LR = 2e-3
WEIGHT_DECAY = 1e-2
WARMUP_STEPS = 25
LABEL_SMOOTHING = 0.1
SEED = 1234


# ----------------------------------------------------------------------------
# signal simulation
# ----------------------------------------------------------------------------
def _impulse_train(rate_hz, t, rng, resonance_hz, decay):
    """Periodic decaying resonance bursts, as produced by a rolling-element defect."""
    sig = np.zeros_like(t)
    period = 1.0 / rate_hz
    t0 = rng.uniform(0, period)
    for k in np.arange(t0, t[-1], period):
        tau = t - k
        m = tau >= 0
        amp = rng.uniform(0.7, 1.3)
        sig[m] += amp * np.exp(-decay * tau[m]) * np.sin(2 * np.pi * resonance_hz * tau[m])
    return sig


def simulate_window(fault, rng):
    t = np.arange(WIN) / FS
    f_shaft = rng.uniform(*SHAFT_HZ)
    phase = rng.uniform(0, 2 * np.pi, size=3)
    x = 0.4 * np.sin(2 * np.pi * f_shaft * t + phase[0])
    x += 0.1 * np.sin(2 * np.pi * 2 * f_shaft * t + phase[1])
    res = rng.uniform(350, 450)
    if fault == "inner_race":
        x += 0.8 * _impulse_train(5.4 * f_shaft, t, rng, res, decay=300.0)
    elif fault == "outer_race":
        x += 0.8 * _impulse_train(3.6 * f_shaft, t, rng, res, decay=300.0)
    elif fault == "imbalance":
        x += rng.uniform(0.5, 0.9) * np.sin(2 * np.pi * f_shaft * t + phase[2])
    elif fault == "misalignment":
        x += rng.uniform(0.35, 0.6) * np.sin(2 * np.pi * 2 * f_shaft * t + phase[2])
        x += 0.15 * np.sin(2 * np.pi * 3 * f_shaft * t + phase[1])
    x += rng.normal(0, rng.uniform(0.15, 0.35), size=WIN)
    x *= rng.uniform(0.7, 1.4)  # sensor gain / mounting variation
    return x.astype(np.float32)


def make_split(n_per_class, seed):
    rng = np.random.default_rng(seed)
    xs, ys = [], []
    for label, fault in enumerate(FAULTS):
        for _ in range(n_per_class):
            xs.append(simulate_window(fault, rng))
            ys.append(label)
    return np.stack(xs)[:, None, :], np.array(ys, dtype=np.int64)


# ----------------------------------------------------------------------------
# augmentation
# ----------------------------------------------------------------------------
def augment_batch(x, g):
    """Random gain, circular time shift, additive noise, random polarity."""
    B = x.shape[0]
    gain = torch.exp(0.25 * torch.randn(B, 1, 1, generator=g))
    shift = torch.randint(0, WIN, (B,), generator=g)
    idx = (torch.arange(WIN).view(1, WIN) + shift.view(B, 1)) % WIN
    x = torch.gather(x, 2, idx.view(B, 1, WIN))
    sign = torch.where(torch.rand(B, 1, 1, generator=g) < 0.5, -1.0, 1.0)
    x = sign * gain * x
    return x + 0.1 * torch.randn(x.shape, generator=g)


class AugmentedLoader:
    def __init__(self, loader, seed):
        self.loader = loader
        self.g = torch.Generator().manual_seed(seed)

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        for x, y in self.loader:
            yield augment_batch(x, self.g), y


def build_loaders():
    x_tr, y_tr = make_split(N_TRAIN_PER_CLASS, SEED)
    x_va, y_va = make_split(N_VAL_PER_CLASS, SEED + 1)
    # per-dataset standardisation (single channel)
    mu, sd = x_tr.mean(), x_tr.std()
    x_tr, x_va = (x_tr - mu) / sd, (x_va - mu) / sd
    train_ds = TensorDataset(torch.from_numpy(x_tr), torch.from_numpy(y_tr))
    val_ds = TensorDataset(torch.from_numpy(x_va), torch.from_numpy(y_va))
    train_dl = DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True, drop_last=True,
                          generator=torch.Generator().manual_seed(SEED))
    val_dl = DataLoader(val_ds, batch_size=BATCH_SIZE, shuffle=False)
    return AugmentedLoader(train_dl, SEED), val_dl


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class ConvBlock(nn.Module):
    def __init__(self, cin, cout, k, stride=1):
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, k, stride=stride, padding=k // 2, bias=False)
        self.bn = nn.BatchNorm1d(cout)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


class VibrationCNN(nn.Module):
    def __init__(self, num_classes=len(FAULTS)):
        super().__init__()
        self.stem = ConvBlock(1, 16, 15, stride=2)       # 256
        self.body = nn.Sequential(
            ConvBlock(16, 32, 9), nn.MaxPool1d(2),         # 128
            ConvBlock(32, 48, 7), nn.MaxPool1d(2),         # 64
            ConvBlock(48, 64, 5), nn.MaxPool1d(2),         # 32
            ConvBlock(64, 64, 3),
        )
        self.drop = nn.Dropout(0.1)
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x):
        h = self.body(self.stem(x))
        h = h.mean(dim=-1)
        return self.fc(self.drop(h))


criterion = nn.CrossEntropyLoss(label_smoothing=LABEL_SMOOTHING)


def compute_loss(model, batch):
    x, y = batch
    return criterion(model(x), y)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY)


def make_scheduler(opt, total_steps):
    def lr_lambda(step):
        if step < WARMUP_STEPS:
            return (step + 1) / WARMUP_STEPS
        p = (step - WARMUP_STEPS) / max(1, total_steps - WARMUP_STEPS)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, p)))
    return torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda)


def evaluate(model, loader):
    tot, correct, n = 0.0, 0, 0
    with torch.no_grad():
        for x, y in loader:
            logits = model(x)
            tot += F.cross_entropy(logits, y, reduction="sum").item()
            correct += (logits.argmax(-1) == y).sum().item()
            n += y.numel()
    return tot / n, correct / n


def make_target():
    torch.manual_seed(SEED)
    train_dl, _ = build_loaders()
    it = iter(train_dl)
    data = [next(it) for _ in range(4)]
    return {
        "model": VibrationCNN(),
        "data": data,
        "loss_fn": compute_loss,
        "make_optimizer": make_optimizer,
        "num_classes": len(FAULTS),
        "task": "classification",
    }


def main():
    torch.manual_seed(SEED)
    train_dl, val_dl = build_loaders()
    model = VibrationCNN()
    opt = make_optimizer(model.parameters())
    total_steps = EPOCHS * len(train_dl)
    sched = make_scheduler(opt, total_steps)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: VibrationCNN  params: {n_params / 1e3:.1f}k  "
          f"train windows: {N_TRAIN_PER_CLASS * len(FAULTS)}  val windows: {N_VAL_PER_CLASS * len(FAULTS)}")
    step = 0
    for epoch in range(1, EPOCHS + 1):
        model.train()
        t0 = time.time()
        tr_loss, tr_n = 0.0, 0
        for x, y in train_dl:
            loss = compute_loss(model, (x, y))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            step += 1
            tr_loss += loss.item() * y.numel()
            tr_n += y.numel()
        val_loss, val_acc = evaluate(model, val_dl)
        print(f"epoch {epoch:2d} | step {step:4d} | lr {sched.get_last_lr()[0]:.2e} | "
              f"train_loss {tr_loss / tr_n:.4f} | val_loss {val_loss:.4f} | "
              f"val_acc {100 * val_acc:5.1f}% | {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
