"""Bearing fault classification from single-axis vibration snippets.

1-D CNN (Conv1d/BatchNorm) trained with mixup + label smoothing, AdamW and a
one-cycle schedule. Vibration data are simulated with a standard impulse-train
model: each fault type excites the housing resonance at its characteristic
defect frequency (BPFO / BPFI / BSF) relative to the shaft speed.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)

CFG = dict(
    seed=42,
    fs=6400.0,
    raw_len=768,
    crop_len=640,
    n_train=2000,
    n_val=600,
    batch_size=64,
    max_epochs=12,
    max_lr=3e-3,
    weight_decay=0.05,
    mixup_alpha=0.2,
    label_smoothing=0.1,
)
CLASSES = ["normal", "outer_race", "inner_race", "ball", "imbalance"]
# defect frequencies as multiples of shaft frequency (6205-style bearing)
BPFO, BPFI, BSF = 3.58, 5.42, 2.36


def _impulse_train(t, rate, fs, resonance, decay, jitter, rng):
    sig = np.zeros_like(t)
    period = 1.0 / rate
    t0 = rng.uniform(0, period)
    n_len = len(t)
    while t0 < t[-1]:
        k = int((t0 + rng.normal(0, jitter * period)) * fs)
        if 0 <= k < n_len:
            tt = t[k:] - t[k]
            sig[k:] += np.exp(-decay * tt) * np.sin(2 * math.pi * resonance * tt)
        t0 += period
    return sig


def simulate(rng, label):
    fs, n = CFG["fs"], CFG["raw_len"]
    t = np.arange(n) / fs
    fr = rng.uniform(20.0, 30.0)                  # shaft speed, Hz
    res = rng.uniform(1300.0, 1800.0)             # housing resonance
    decay = rng.uniform(250.0, 450.0)
    x = 0.3 * np.sin(2 * math.pi * fr * t + rng.uniform(0, 6.3))
    x += 0.1 * np.sin(2 * math.pi * 2 * fr * t + rng.uniform(0, 6.3))
    name = CLASSES[label]
    sev = rng.uniform(0.9, 1.6)
    if name == "outer_race":
        x += sev * _impulse_train(t, BPFO * fr, fs, res, decay, 0.02, rng)
    elif name == "inner_race":
        mod = 1.0 + 0.6 * np.sin(2 * math.pi * fr * t + rng.uniform(0, 6.3))
        x += sev * mod * _impulse_train(t, BPFI * fr, fs, res, decay, 0.02, rng)
    elif name == "ball":
        x += 0.7 * sev * _impulse_train(t, 2 * BSF * fr, fs, res, decay, 0.05, rng)
    elif name == "imbalance":
        x += sev * 1.2 * np.sin(2 * math.pi * fr * t + rng.uniform(0, 6.3))
    x += rng.normal(0, 0.3, size=n)
    return x.astype(np.float32)


def make_dataset(n, seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, len(CLASSES), size=n)
    x = np.stack([simulate(rng, int(c)) for c in y])[:, None, :]
    return x, y.astype(np.int64)


def prepare_data():
    x_tr, y_tr = make_dataset(CFG["n_train"], CFG["seed"])
    x_va, y_va = make_dataset(CFG["n_val"], CFG["seed"] + 1)
    mu, sd = x_tr.mean(), x_tr.std()
    return (x_tr - mu) / sd, y_tr, (x_va - mu) / sd, y_va


class SnippetLoader:
    """Minimal loader: random crop / polarity flip / noise for training, centre crop for eval."""

    def __init__(self, x, y, batch_size, train, seed=0):
        self.x, self.y, self.bs, self.train = x, y, batch_size, train
        self.rng = np.random.default_rng(seed)

    def __len__(self):
        return math.ceil(len(self.x) / self.bs)

    def __iter__(self):
        n, L = len(self.x), CFG["crop_len"]
        order = self.rng.permutation(n) if self.train else np.arange(n)
        for s in range(0, n, self.bs):
            idx = order[s:s + self.bs]
            xb = self.x[idx]
            if self.train:
                offs = self.rng.integers(0, xb.shape[-1] - L + 1, size=len(idx))
                xb = np.stack([xb[i, :, o:o + L] for i, o in enumerate(offs)])
                xb = xb * self.rng.choice([-1.0, 1.0], size=(len(idx), 1, 1))
                xb = xb + self.rng.normal(0, 0.1, size=xb.shape)
            else:
                o = (xb.shape[-1] - L) // 2
                xb = xb[:, :, o:o + L]
            yield torch.tensor(xb, dtype=torch.float32), torch.from_numpy(self.y[idx])


def conv_bn(c_in, c_out, k, stride=1):
    return nn.Sequential(nn.Conv1d(c_in, c_out, k, stride, k // 2, bias=False),
                         nn.BatchNorm1d(c_out), nn.ReLU(inplace=True))


class VibrationCNN(nn.Module):
    def __init__(self, n_classes=len(CLASSES)):
        super().__init__()
        self.body = nn.Sequential(
            conv_bn(1, 24, 15, stride=2),
            conv_bn(24, 32, 9), nn.MaxPool1d(2),
            conv_bn(32, 48, 7), nn.MaxPool1d(2),
            conv_bn(48, 64, 5), nn.MaxPool1d(2),
            conv_bn(64, 64, 3),
        )
        self.classifier = nn.Linear(64, n_classes)

    def forward(self, x):
        return self.classifier(self.body(x).mean(-1))


def mixup(x, y, alpha, gen):
    lam = float(np.random.default_rng(int(torch.randint(0, 2**31 - 1, (1,), generator=gen))).beta(alpha, alpha))
    perm = torch.randperm(x.size(0), generator=gen)
    return lam * x + (1.0 - lam) * x[perm], y, y[perm], lam


def training_loss(model, batch, gen=None):
    """Mixup + label-smoothed cross-entropy, as used for every optimisation step."""
    x, y = batch
    if gen is None:
        gen = torch.Generator().manual_seed(CFG["seed"])
    x_mix, y_a, y_b, lam = mixup(x, y, CFG["mixup_alpha"], gen)
    logits = model(x_mix)
    ls = CFG["label_smoothing"]
    return lam * F.cross_entropy(logits, y_a, label_smoothing=ls) + \
        (1.0 - lam) * F.cross_entropy(logits, y_b, label_smoothing=ls)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=CFG["max_lr"], weight_decay=CFG["weight_decay"])


@torch.no_grad()
def validate(model, loader):
    model.eval()
    tot, correct, n = 0.0, 0, 0
    for x, y in loader:
        logits = model(x)
        tot += F.cross_entropy(logits, y, reduction="sum").item()
        correct += (logits.argmax(-1) == y).sum().item()
        n += len(y)
    model.train()
    return tot / n, correct / n


def make_target():
    torch.manual_seed(CFG["seed"])
    x_tr, y_tr, _, _ = prepare_data()
    loader = SnippetLoader(x_tr, y_tr, CFG["batch_size"], train=True, seed=CFG["seed"])
    data = []
    for i, b in enumerate(loader):
        if i == 5:
            break
        data.append(b)
    return {
        "model": VibrationCNN(),
        "data": data,
        "loss_fn": training_loss,
        "make_optimizer": make_optimizer,
        "num_classes": len(CLASSES),
        "task": "classification",
    }


def main():
    torch.manual_seed(CFG["seed"])
    gen = torch.Generator().manual_seed(CFG["seed"])
    x_tr, y_tr, x_va, y_va = prepare_data()
    train_loader = SnippetLoader(x_tr, y_tr, CFG["batch_size"], train=True, seed=CFG["seed"])
    val_loader = SnippetLoader(x_va, y_va, 250, train=False)

    model = VibrationCNN()
    optimizer = make_optimizer(model.parameters())
    steps_per_epoch = len(train_loader)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=CFG["max_lr"], epochs=CFG["max_epochs"], steps_per_epoch=steps_per_epoch,
        pct_start=0.25)

    n_params = sum(p.numel() for p in model.parameters())
    print("  | Name       | Type         | Params")
    print("-----------------------------------------")
    print(f"0 | model      | VibrationCNN | {n_params / 1e3:.1f} K")
    print(f"{n_params / 1e3:.1f} K    Trainable params")

    global_step = 0
    for epoch in range(CFG["max_epochs"]):
        t0 = time.time()
        running = 0.0
        for batch in train_loader:
            loss = training_loss(model, batch, gen)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            running += loss.item()
            global_step += 1
        train_loss = running / steps_per_epoch
        val_loss, val_acc = validate(model, val_loader)
        elapsed = time.time() - t0
        print(f"Epoch {epoch}: 100%|##########| {steps_per_epoch}/{steps_per_epoch} "
              f"[00:{int(elapsed):02d}<00:00, {steps_per_epoch / elapsed:.2f}it/s, v_num=0, "
              f"lr={scheduler.get_last_lr()[0]:.2e}, train_loss={train_loss:.3f}, "
              f"val_loss={val_loss:.3f}, val_acc={val_acc:.3f}]")
    print(f"`Trainer.fit` stopped: `max_epochs={CFG['max_epochs']}` reached.")


if __name__ == "__main__":
    main()
