"""1-D CNN rhythm classifier on synthetic single-lead ECG strips.

Five rhythm classes (sinus, sinus tachy, sinus brady, AF-like irregular, sinus
with ectopic wide beats). Strips are 4 s at 128 Hz with baseline wander,
mains hum, per-record gain and DC offset, like raw ADC output in mV.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

FS = 128
STRIP_LEN = 512           # 4 s
CROP_LEN = 448            # random 3.5 s window for training
NUM_CLASSES = 5
CLASS_NAMES = ["sinus", "tachy", "brady", "af", "ectopic"]

cfg = dict(
    n_train=2048,
    n_val=512,
    batch_size=64,
    epochs=8,
    lr=0.05,
    momentum=0.9,
    weight_decay=5e-4,
    warmup_epochs=1,
    bn_eps=1e-3,
    bn_momentum=0.1,
    seed=1234,
)


# ----------------------------------------------------------------------------
# synthetic data
# ----------------------------------------------------------------------------
def _beat(t, width=0.03, amp=1.0):
    """QRS-ish gaussian + small P and T waves around t=0 (seconds)."""
    qrs = amp * np.exp(-0.5 * (t / width) ** 2)
    p = 0.15 * amp * np.exp(-0.5 * ((t + 0.16) / 0.025) ** 2)
    tw = 0.3 * amp * np.exp(-0.5 * ((t - 0.25) / 0.06) ** 2)
    return qrs + p + tw


def synth_strip(label, rng):
    t = np.arange(STRIP_LEN) / FS
    if label == 0:
        hr = rng.uniform(60, 95)
    elif label == 1:
        hr = rng.uniform(110, 160)
    elif label == 2:
        hr = rng.uniform(38, 55)
    else:
        hr = rng.uniform(60, 100)
    rr = 60.0 / hr
    beats = []
    pos = rng.uniform(0, rr)
    while pos < t[-1] + 0.5:
        beats.append(pos)
        if label == 3:
            pos += rr * rng.uniform(0.55, 1.45)
        else:
            pos += rr * rng.normal(1.0, 0.03)
    x = np.zeros(STRIP_LEN)
    for i, b in enumerate(beats):
        if label == 4 and rng.random() < 0.35:
            # wide, tall ectopic complex without P wave
            x += 1.6 * np.exp(-0.5 * ((t - b) / 0.07) ** 2) - 0.5 * np.exp(-0.5 * ((t - b - 0.2) / 0.08) ** 2)
        elif label == 3:
            x += _beat(t - b) - 0.15 * np.exp(-0.5 * ((t - b + 0.16) / 0.025) ** 2)
        else:
            x += _beat(t - b)
    if label == 3:
        x += 0.06 * np.sin(2 * np.pi * rng.uniform(4, 8) * t + rng.uniform(0, 6.28))
    # baseline wander, mains hum, sensor noise
    x += 0.3 * np.sin(2 * np.pi * rng.uniform(0.1, 0.4) * t + rng.uniform(0, 6.28))
    x += 0.05 * np.sin(2 * np.pi * 50 * t + rng.uniform(0, 6.28))
    x += rng.normal(0, 0.04, STRIP_LEN)
    # per-record lead gain and DC offset (mV)
    x = x * rng.uniform(0.6, 1.8) + rng.uniform(-1.5, 1.5)
    return x.astype(np.float32)


def make_split(n, seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, NUM_CLASSES, size=n)
    X = np.stack([synth_strip(int(c), rng) for c in y])
    return torch.from_numpy(X).unsqueeze(1), torch.from_numpy(y).long()


# ----------------------------------------------------------------------------
# augmentation / batching
# ----------------------------------------------------------------------------
def augment(x, gen):
    """Random time crop, amplitude scaling and additive gaussian noise."""
    n = x.shape[0]
    starts = torch.randint(0, STRIP_LEN - CROP_LEN + 1, (n,), generator=gen)
    idx = starts[:, None] + torch.arange(CROP_LEN)[None, :]
    x = torch.gather(x, 2, idx[:, None, :])
    scale = torch.empty(n, 1, 1).uniform_(0.8, 1.2, generator=gen)
    x = x * scale + 0.03 * torch.randn(x.shape, generator=gen)
    return x


def center_crop(x):
    off = (STRIP_LEN - CROP_LEN) // 2
    return x[:, :, off:off + CROP_LEN]


def iterate_train(X, y, batch_size, gen):
    perm = torch.randperm(len(X), generator=gen)
    for i in range(0, len(X), batch_size):
        idx = perm[i:i + batch_size]
        yield augment(X[idx], gen), y[idx]


def iterate_eval(X, y, batch_size):
    for i in range(0, len(X), batch_size):
        yield center_crop(X[i:i + batch_size]), y[i:i + batch_size]


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class ConvBlock(nn.Module):
    def __init__(self, c_in, c_out, k, pool=True):
        super().__init__()
        self.conv = nn.Conv1d(c_in, c_out, k, padding=k // 2, bias=False)
        self.bn = nn.BatchNorm1d(c_out, eps=cfg["bn_eps"], momentum=cfg["bn_momentum"])
        self.pool = nn.MaxPool1d(2) if pool else nn.Identity()

    def forward(self, x):
        return self.pool(F.relu(self.bn(self.conv(x))))


class RhythmNet(nn.Module):
    def __init__(self, num_classes=NUM_CLASSES):
        super().__init__()
        self.features = nn.Sequential(
            ConvBlock(1, 32, 9),
            ConvBlock(32, 48, 7),
            ConvBlock(48, 64, 5),
            ConvBlock(64, 96, 5),
            ConvBlock(96, 96, 3, pool=False),
        )
        self.head = nn.Linear(96, num_classes)

    def forward(self, x):
        h = self.features(x)
        return self.head(h.mean(dim=2))


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def make_optimizer(params):
    return torch.optim.SGD(params, lr=cfg["lr"], momentum=cfg["momentum"],
                           nesterov=True, weight_decay=cfg["weight_decay"])


def make_scheduler(opt, steps_per_epoch):
    warm = cfg["warmup_epochs"] * steps_per_epoch
    total = cfg["epochs"] * steps_per_epoch

    def lr_lambda(step):
        if step < warm:
            return (step + 1) / warm
        prog = (step - warm) / max(1, total - warm)
        return 0.5 * (1 + math.cos(math.pi * prog))

    return torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda)


def load_data():
    Xtr, ytr = make_split(cfg["n_train"], cfg["seed"])
    Xva, yva = make_split(cfg["n_val"], cfg["seed"] + 1)
    return Xtr, ytr, Xva, yva


@torch.no_grad()
def evaluate(model, Xva, yva):
    model.eval()
    tot, correct, n = 0.0, 0, 0
    for x, y in iterate_eval(Xva, yva, 256):
        logits = model(x)
        tot += F.cross_entropy(logits, y, reduction="sum").item()
        correct += (logits.argmax(1) == y).sum().item()
        n += len(y)
    model.train()
    return tot / n, correct / n


def make_target():
    torch.manual_seed(cfg["seed"])
    Xtr, ytr = make_split(512, cfg["seed"])
    gen = torch.Generator().manual_seed(cfg["seed"])
    data = [b for _, b in zip(range(4), iterate_train(Xtr, ytr, cfg["batch_size"], gen))]
    return {
        "model": RhythmNet(),
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "num_classes": NUM_CLASSES,
        "task": "classification",
    }


def main():
    torch.set_num_threads(1)
    torch.manual_seed(cfg["seed"])
    t0 = time.time()
    Xtr, ytr, Xva, yva = load_data()
    print(f"loaded {len(Xtr)} train / {len(Xva)} val strips in {time.time() - t0:.1f}s")

    model = RhythmNet()
    opt = make_optimizer(model.parameters())
    steps_per_epoch = math.ceil(len(Xtr) / cfg["batch_size"])
    sched = make_scheduler(opt, steps_per_epoch)
    gen = torch.Generator().manual_seed(cfg["seed"])
    n_params = sum(p.numel() for p in model.parameters())
    print(f"RhythmNet: {n_params/1e3:.1f}k params, {steps_per_epoch} steps/epoch")

    for epoch in range(cfg["epochs"]):
        model.train()
        t_ep = time.time()
        run_loss, run_correct, seen = 0.0, 0, 0
        for x, y in iterate_train(Xtr, ytr, cfg["batch_size"], gen):
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            run_loss += loss.item() * len(y)
            run_correct += (logits.argmax(1) == y).sum().item()
            seen += len(y)
        val_loss, val_acc = evaluate(model, Xva, yva)
        dt = time.time() - t_ep
        print(f"Epoch {epoch + 1}/{cfg['epochs']} - {dt:.1f}s - loss: {run_loss / seen:.4f} "
              f"- accuracy: {run_correct / seen:.4f} - val_loss: {val_loss:.4f} "
              f"- val_accuracy: {val_acc:.4f} - lr: {sched.get_last_lr()[0]:.5f}")
    print(f"done in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
