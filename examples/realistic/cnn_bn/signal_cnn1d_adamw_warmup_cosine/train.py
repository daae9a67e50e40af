"""1-D CNN classifier for synthetic sensor waveforms.

Six waveform families (sine bands, square, sawtooth, chirp, AM bursts) with
random frequency / phase / amplitude and additive noise. Conv1d + BatchNorm
backbone, AdamW, linear warmup followed by cosine decay.
"""
import math
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

torch.set_num_threads(1)


@dataclass
class Config:
    seed: int = 1234
    n_train: int = 2048
    n_val: int = 800
    signal_len: int = 256
    crop_len: int = 224
    num_classes: int = 6
    batch_size: int = 64
    epochs: int = 9
    lr: float = 3e-3
    weight_decay: float = 1e-2
    warmup_steps: int = 60
    noise_std: float = 0.05
    log_interval: int = 20


cfg = Config()

CLASS_NAMES = ["sine_low", "sine_high", "square", "sawtooth", "chirp", "am_burst"]


# ---------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------
def synth_waveform(label, rng, n):
    t = np.linspace(0.0, 1.0, n, endpoint=False)
    phase = rng.uniform(0, 2 * np.pi)
    amp = rng.uniform(0.5, 1.5)
    if label == 0:
        f = rng.uniform(2, 6)
        x = np.sin(2 * np.pi * f * t + phase)
    elif label == 1:
        f = rng.uniform(5, 12)
        x = np.sin(2 * np.pi * f * t + phase)
    elif label == 2:
        f = rng.uniform(3, 9)
        x = np.sign(np.sin(2 * np.pi * f * t + phase))
    elif label == 3:
        f = rng.uniform(3, 9)
        x = 2.0 * ((f * t + phase / (2 * np.pi)) % 1.0) - 1.0
    elif label == 4:
        f0, f1 = rng.uniform(2, 5), rng.uniform(9, 14)
        inst = f0 + (f1 - f0) * t
        x = np.sin(2 * np.pi * np.cumsum(inst) / n + phase)
    else:
        fc = rng.uniform(6, 12)
        fm = rng.uniform(1, 3)
        x = (0.5 + 0.5 * np.sin(2 * np.pi * fm * t + phase)) * np.sin(2 * np.pi * fc * t)
    x = amp * x + rng.normal(0.0, 0.35, size=n)
    # slow baseline wander, as in real sensor recordings
    x += rng.uniform(-0.5, 0.5) * np.sin(2 * np.pi * rng.uniform(0.1, 0.6) * t + rng.uniform(0, 6))
    return x.astype(np.float32)


def make_split(n, seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, cfg.num_classes, size=n)
    signals = np.stack([synth_waveform(int(y), rng, cfg.signal_len) for y in labels])
    return signals, labels.astype(np.int64)


class WaveformDataset(Dataset):
    def __init__(self, signals, labels, train):
        self.x = torch.from_numpy(signals)
        self.y = torch.from_numpy(labels)
        self.train = train

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        x = self.x[i]
        if self.train:
            start = int(torch.randint(0, cfg.signal_len - cfg.crop_len + 1, (1,)))
            x = x[start:start + cfg.crop_len]
            x = x * torch.empty(1).uniform_(0.8, 1.2)
            x = x + cfg.noise_std * torch.randn_like(x)
        else:
            start = (cfg.signal_len - cfg.crop_len) // 2
            x = x[start:start + cfg.crop_len]
        # per-sample standardisation
        x = (x - x.mean()) / (x.std() + 1e-6)
        return x.unsqueeze(0), self.y[i]


def build_loaders():
    xtr, ytr = make_split(cfg.n_train, cfg.seed)
    xva, yva = make_split(cfg.n_val, cfg.seed + 1)
    g = torch.Generator().manual_seed(cfg.seed)
    train_loader = DataLoader(WaveformDataset(xtr, ytr, train=True), batch_size=cfg.batch_size,
                              shuffle=True, drop_last=True, generator=g)
    val_loader = DataLoader(WaveformDataset(xva, yva, train=False), batch_size=256, shuffle=False)
    return train_loader, val_loader


# ---------------------------------------------------------------------------
# model
# ---------------------------------------------------------------------------
def conv_bn(cin, cout, k, stride=1):
    return nn.Sequential(
        nn.Conv1d(cin, cout, k, stride=stride, padding=k // 2, bias=False),
        nn.BatchNorm1d(cout),
        nn.ReLU(inplace=True),
    )


class WaveNetSmall(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.features = nn.Sequential(
            conv_bn(1, 32, 7, stride=2),
            conv_bn(32, 32, 5),
            nn.MaxPool1d(2),
            conv_bn(32, 64, 5),
            conv_bn(64, 64, 3),
            nn.MaxPool1d(2),
            conv_bn(64, 128, 3),
            conv_bn(128, 128, 3),
        )
        self.head = nn.Linear(128, num_classes)

    def forward(self, x):
        h = self.features(x)
        h = h.mean(dim=-1)
        return self.head(h)


def compute_loss(model, batch):
    x, y = batch
    logits = model(x)
    return F.cross_entropy(logits, y)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.99))


def make_scheduler(optimizer, total_steps):
    def lr_lambda(step):
        if step < cfg.warmup_steps:
            return cfg.lr * (step + 1) / cfg.warmup_steps
        progress = (step - cfg.warmup_steps) / max(1, total_steps - cfg.warmup_steps)
        return cfg.lr * 0.5 * (1.0 + math.cos(math.pi * progress))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    total, correct, loss_sum = 0, 0, 0.0
    for x, y in loader:
        logits = model(x)
        loss_sum += F.cross_entropy(logits, y, reduction="sum").item()
        correct += (logits.argmax(-1) == y).sum().item()
        total += y.numel()
    model.train()
    return loss_sum / total, correct / total


def make_target():
    torch.manual_seed(cfg.seed)
    np.random.seed(cfg.seed)
    train_loader, _ = build_loaders()
    data = []
    for i, batch in enumerate(train_loader):
        data.append(batch)
        if i == 4:
            break
    model = WaveNetSmall(cfg.num_classes)
    return {
        "model": model,
        "data": data,
        "loss_fn": compute_loss,
        "make_optimizer": make_optimizer,
        "num_classes": cfg.num_classes,
        "task": "classification",
    }


def main():
    torch.manual_seed(cfg.seed)
    np.random.seed(cfg.seed)
    train_loader, val_loader = build_loaders()
    model = WaveNetSmall(cfg.num_classes)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: WaveNetSmall | params: {n_params/1e3:.1f}K | train: {cfg.n_train} | val: {cfg.n_val}")

    optimizer = make_optimizer(model.parameters())
    total_steps = cfg.epochs * len(train_loader)
    scheduler = make_scheduler(optimizer, total_steps)

    step = 0
    t0 = time.time()
    for epoch in range(cfg.epochs):
        model.train()
        running, n_seen = 0.0, 0
        for x, y in train_loader:
            loss = compute_loss(model, (x, y))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            running += loss.item() * y.size(0)
            n_seen += y.size(0)
            if step % cfg.log_interval == 0:
                dt = (time.time() - t0) * 1000
                print(f"step {step:4d} | epoch {epoch} | loss {loss.item():.4f} | lr {scheduler.get_last_lr()[0]:.2e} | {dt:.0f}ms")
                t0 = time.time()
            step += 1
        val_loss, val_acc = evaluate(model, val_loader)
        print(f"==> epoch {epoch} | train_loss {running / n_seen:.4f} | val_loss {val_loss:.4f} | val_acc {val_acc:.4f}")


if __name__ == "__main__":
    main()
