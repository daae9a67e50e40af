"""Bird-call type classifier on log-mel spectrogram patches.

4-block CNN (Conv2d-BN-ReLU) trained with mixup + label smoothing + SpecAugment,
AdamW with linear warmup and cosine decay. Logging mimics the HF Trainer.
"""
import math
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    seed: int = 1234
    n_mels: int = 32
    n_frames: int = 32
    n_train: int = 2048
    n_val: int = 1000
    batch_size: int = 64
    epochs: int = 10
    lr: float = 3e-3
    weight_decay: float = 0.05
    warmup_ratio: float = 0.06
    mixup_alpha: float = 0.8
    label_smoothing: float = 0.1
    freq_mask: int = 5
    time_mask: int = 6
    logging_steps: int = 25
    max_grad_norm: float = 5.0


CALL_TYPES = ["upsweep", "downsweep", "harmonic_low", "harmonic_high", "trill", "buzz", "warble", "two_note"]
cfg = Config()


# ------------------------------------------------------------------ synthetic recordings
def synth_clip(kind, rng, n_mels, n_frames):
    mel = np.arange(n_mels, dtype=np.float32)[:, None]
    fr = np.arange(n_frames, dtype=np.float32)[None, :]
    # pink-ish background + wind rumble in the low bands
    spec = -60 + rng.normal(0, 4, (n_mels, n_frames)) - 0.35 * mel + 8 * np.exp(-mel / 4) * rng.uniform(0, 1)
    on = rng.integers(0, n_frames // 3)
    dur = rng.integers(n_frames // 3, n_frames - on)
    active = ((fr >= on) & (fr < on + dur)).astype(np.float32)
    level = rng.uniform(6, 20)
    width = rng.uniform(0.8, 1.5)
    tt = (fr - on) / max(dur, 1)
    if kind == 0:
        f = rng.uniform(4, 10) + rng.uniform(12, 18) * tt
        ev = np.exp(-(mel - f) ** 2 / (2 * width ** 2))
    elif kind == 1:
        f = rng.uniform(20, 28) - rng.uniform(12, 18) * tt
        ev = np.exp(-(mel - f) ** 2 / (2 * width ** 2))
    elif kind in (2, 3):
        f0 = rng.uniform(3.5, 6) if kind == 2 else rng.uniform(5.5, 9)
        ev = sum(0.8 ** h * np.exp(-(mel - f0 * (h + 1)) ** 2 / (2 * width ** 2)) for h in range(4))
    elif kind == 4:
        f = rng.uniform(10, 22)
        rate = rng.uniform(2.5, 4.0)
        ev = np.exp(-(mel - f) ** 2 / 8.0) * (np.sin(2 * np.pi * fr / rate) > 0.3)
    elif kind == 5:
        lo = rng.uniform(6, 16)
        ev = ((mel > lo) & (mel < lo + rng.uniform(6, 12))).astype(np.float32) * rng.uniform(0.5, 1, (n_mels, n_frames))
    elif kind == 6:
        f = rng.uniform(10, 20) + rng.uniform(2.5, 4) * np.sin(2 * np.pi * fr / rng.uniform(6, 10))
        ev = np.exp(-(mel - f) ** 2 / (2 * width ** 2))
    else:
        f1, f2 = rng.uniform(8, 13), rng.uniform(17, 24)
        per = rng.integers(5, 9)
        f = np.where((fr // per) % 2 == 0, f1, f2)
        ev = np.exp(-(mel - f) ** 2 / (2 * width ** 2))
    spec = np.maximum(spec, -60 - 0.35 * mel + level * ev * active + rng.normal(0, 2, (n_mels, n_frames)))
    return spec.astype(np.float32)


def make_split(n, seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, len(CALL_TYPES), n)
    x = np.stack([synth_clip(k, rng, cfg.n_mels, cfg.n_frames) for k in y])[:, None]
    return x, y


def load_data():
    xtr, ytr = make_split(cfg.n_train, cfg.seed)
    xva, yva = make_split(cfg.n_val, cfg.seed + 1)
    mu, sd = xtr.mean(), xtr.std()
    xtr = torch.from_numpy((xtr - mu) / sd)
    xva = torch.from_numpy((xva - mu) / sd)
    return xtr, torch.from_numpy(ytr).long(), xva, torch.from_numpy(yva).long()


def spec_augment(x, gen):
    x = x.clone()
    b, _, m, t = x.shape
    for i in range(b):
        f = int(torch.randint(0, cfg.freq_mask + 1, (1,), generator=gen))
        f0 = int(torch.randint(0, m - f + 1, (1,), generator=gen))
        w = int(torch.randint(0, cfg.time_mask + 1, (1,), generator=gen))
        t0 = int(torch.randint(0, t - w + 1, (1,), generator=gen))
        x[i, :, f0:f0 + f, :] = 0.0
        x[i, :, :, t0:t0 + w] = 0.0
    return x


def mixup(x, y, gen, num_classes):
    lam = float(np.random.default_rng(int(torch.randint(0, 2**31 - 1, (1,), generator=gen))).beta(cfg.mixup_alpha, cfg.mixup_alpha))
    perm = torch.randperm(x.size(0), generator=gen)
    off, on = cfg.label_smoothing / num_classes, 1.0 - cfg.label_smoothing + cfg.label_smoothing / num_classes
    t = torch.full((x.size(0), num_classes), off).scatter_(1, y[:, None], on)
    return lam * x + (1 - lam) * x[perm], lam * t + (1 - lam) * t[perm]


class TrainBatches:
    """Shuffled, augmented training batches (SpecAugment + mixup), re-drawn every epoch."""

    def __init__(self, x, y, batch_size, seed):
        self.x, self.y, self.bs = x, y, batch_size
        self.gen = torch.Generator().manual_seed(seed)

    def __len__(self):
        return len(self.x) // self.bs

    def __iter__(self):
        perm = torch.randperm(len(self.x), generator=self.gen)
        for i in range(len(self)):
            idx = perm[i * self.bs:(i + 1) * self.bs]
            xb = spec_augment(self.x[idx], self.gen)
            xb, tb = mixup(xb, self.y[idx], self.gen, len(CALL_TYPES))
            yield xb, tb, self.y[idx]


# ------------------------------------------------------------------ model
class CallNet(nn.Module):
    def __init__(self, n_classes, widths=(16, 32, 48, 64)):
        super().__init__()
        layers, cin = [], 1
        for i, w in enumerate(widths):
            layers += [nn.Conv2d(cin, w, 3, padding=1, bias=False), nn.BatchNorm2d(w), nn.ReLU(inplace=True)]
            if i < len(widths) - 1:
                layers.append(nn.MaxPool2d(2))
            cin = w
        self.body = nn.Sequential(*layers)
        self.dropout = nn.Dropout(0.2)
        self.classifier = nn.Linear(cin, n_classes)

    def forward(self, x):
        h = self.body(x)
        h = h.mean((2, 3))
        return self.classifier(self.dropout(h))


def soft_ce(logits, target):
    return torch.sum(-target * F.log_softmax(logits, dim=-1), dim=-1).mean()


def loss_fn(model, batch):
    xb, tb, _ = batch
    return soft_ce(model(xb), tb)


def build_optimizer(model):
    decay = [p for n, p in model.named_parameters() if p.ndim > 1]
    no_decay = [p for n, p in model.named_parameters() if p.ndim <= 1]
    return torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.999))


def make_target():
    torch.manual_seed(cfg.seed)
    xtr, ytr, xva, yva = load_data()
    model = CallNet(len(CALL_TYPES))
    train_batches = TrainBatches(xtr, ytr, cfg.batch_size, cfg.seed)
    val_batches = [(xva[i:i + 200], yva[i:i + 200]) for i in range(0, len(xva), 200)]
    return {"model": model, "data": train_batches, "val_data": val_batches, "loss_fn": loss_fn,
            "optimizer": build_optimizer(model), "num_classes": len(CALL_TYPES),
            "task": "classification"}


def cosine_with_warmup(optimizer, warmup, total):
    def f(step):
        if step < warmup:
            return (step + 1) / warmup
        p = (step - warmup) / max(1, total - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * p))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, f)


@torch.no_grad()
def evaluate(model, val_batches):
    model.eval()
    n, loss, correct = 0, 0.0, 0
    for xb, yb in val_batches:
        out = model(xb)
        loss += F.cross_entropy(out, yb, reduction="sum").item()
        correct += (out.argmax(-1) == yb).sum().item()
        n += len(yb)
    model.train()
    return loss / n, correct / n


def main():
    torch.set_num_threads(1)
    t0 = time.time()
    target = make_target()
    model, train_batches, val_batches, optimizer = target["model"], target["data"], target["val_data"], target["optimizer"]
    steps_per_epoch = len(train_batches)
    total = cfg.epochs * steps_per_epoch
    scheduler = cosine_with_warmup(optimizer, int(cfg.warmup_ratio * total), total)
    print(f"***** Running training *****\n  Num examples = {len(train_batches.x)}\n  Num Epochs = {cfg.epochs}\n"
          f"  Instantaneous batch size = {cfg.batch_size}\n  Total optimization steps = {total}\n"
          f"  Number of trainable parameters = {sum(p.numel() for p in model.parameters())}")
    step, run_loss, run_n, tr_loss_sum = 0, 0.0, 0, 0.0
    model.train()
    for epoch in range(cfg.epochs):
        for batch in train_batches:
            loss = loss_fn(model, batch)
            optimizer.zero_grad()
            loss.backward()
            gn = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
            optimizer.step()
            scheduler.step()
            step += 1
            run_loss += loss.item(); run_n += 1; tr_loss_sum += loss.item()
            if step % cfg.logging_steps == 0:
                print({"loss": round(run_loss / run_n, 4), "grad_norm": round(gn.item(), 4),
                       "learning_rate": float(f"{scheduler.get_last_lr()[0]:.4e}"),
                       "epoch": round(step / steps_per_epoch, 2)})
                run_loss, run_n = 0.0, 0
        vl, va = evaluate(model, val_batches)
        print({"eval_loss": round(vl, 4), "eval_accuracy": round(va, 4), "eval_runtime": round(time.time() - t0, 2),
               "epoch": float(epoch + 1)})
    rt = time.time() - t0
    print({"train_runtime": round(rt, 2), "train_samples_per_second": round(total * cfg.batch_size / rt, 2),
           "train_loss": round(tr_loss_sum / step, 4), "epoch": float(cfg.epochs)})


if __name__ == "__main__":
    main()
