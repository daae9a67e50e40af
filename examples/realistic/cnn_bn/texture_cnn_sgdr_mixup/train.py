"""Surface-texture classification with a small BatchNorm CNN.

Recipe: random crop + flips + brightness jitter + mixup, label smoothing,
SGD with Nesterov momentum and SGDR (cosine annealing with warm restarts,
stepped with fractional epochs as in the PyTorch docs).
Logging mimics the HF Trainer (dict lines every `LOGGING_STEPS`, eval per epoch).
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 2024
RAW = 24
CROP = 20
CLASSES = ["fine_grain", "coarse_grain", "stripes", "checker", "dots", "cracks"]
N_TRAIN_PER_CLASS = 240
N_VAL_PER_CLASS = 80

BATCH_SIZE = 64
EPOCHS = 14                # SGDR cycles of 2, 4, 8 epochs
T_0, T_MULT = 2, 2
LR = 0.1
MOMENTUM = 0.9
WEIGHT_DECAY = 5e-4
LABEL_SMOOTHING = 0.1
MIXUP_ALPHA = 0.4
LOGGING_STEPS = 10


# ----------------------------------------------------------------------------
# synthetic textures
# ----------------------------------------------------------------------------
def _smooth_noise(rng, scale):
    n = rng.normal(size=(RAW, RAW))
    f = np.fft.fftfreq(RAW)
    fx, fy = np.meshgrid(f, f)
    spec = np.fft.fft2(n) * np.exp(-(fx ** 2 + fy ** 2) * (scale ** 2) * 20)
    out = np.real(np.fft.ifft2(spec))
    return out / (out.std() + 1e-8)


def _render(kind, rng):
    yy, xx = np.mgrid[0:RAW, 0:RAW].astype(np.float64)
    theta = rng.uniform(0, np.pi)
    u = xx * np.cos(theta) + yy * np.sin(theta)
    v = -xx * np.sin(theta) + yy * np.cos(theta)
    if kind == "fine_grain":
        img = _smooth_noise(rng, rng.uniform(0.6, 1.0))
    elif kind == "coarse_grain":
        img = _smooth_noise(rng, rng.uniform(2.0, 3.0))
    elif kind == "stripes":
        period = rng.uniform(4.0, 7.0)
        img = np.sin(2 * np.pi * u / period + rng.uniform(0, 2 * np.pi))
    elif kind == "checker":
        period = rng.uniform(5.0, 8.0)
        img = np.sin(2 * np.pi * u / period) * np.sin(2 * np.pi * v / period + rng.uniform(0, 2 * np.pi))
        img = img * 1.6
    elif kind == "dots":
        img = np.zeros((RAW, RAW))
        for _ in range(rng.integers(4, 9)):
            cx, cy = rng.uniform(0, RAW, size=2)
            img += np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / (2 * rng.uniform(0.8, 1.4) ** 2))
        img = 2.0 * img - 0.5
    else:  # cracks: a few thin dark random-walk curves
        img = np.zeros((RAW, RAW))
        for _ in range(rng.integers(1, 3)):
            x, y = rng.uniform(0, RAW, size=2)
            ang = rng.uniform(0, 2 * np.pi)
            for _ in range(40):
                ang += rng.normal(0, 0.35)
                x, y = x + np.cos(ang), y + np.sin(ang)
                img -= np.exp(-((xx - x) ** 2 + (yy - y) ** 2) / 0.6)
        img = np.clip(img, -1.5, 0) * 1.5 + 0.4
    img = rng.uniform(0.4, 1.0) * img + rng.uniform(-0.3, 0.3)   # lighting
    img = img + rng.normal(0, 0.45, size=img.shape)              # camera noise
    return img.astype(np.float32)


def make_split(n_per_class, seed):
    rng = np.random.default_rng(seed)
    X = np.stack([_render(k, rng) for k in CLASSES for _ in range(n_per_class)])[:, None]
    y = np.repeat(np.arange(len(CLASSES)), n_per_class).astype(np.int64)
    return X, y


class Loader:
    def __init__(self, X, y, mean, std, batch_size, train, seed=SEED):
        self.X = torch.from_numpy((X - mean) / std)
        self.y = torch.from_numpy(y)
        self.batch_size, self.train = batch_size, train
        self.gen = torch.Generator().manual_seed(seed)

    def __len__(self):
        n = len(self.y)
        return n // self.batch_size if self.train else math.ceil(n / self.batch_size)

    def __iter__(self):
        n = len(self.y)
        order = torch.randperm(n, generator=self.gen) if self.train else torch.arange(n)
        for b in range(len(self)):
            idx = order[b * self.batch_size:(b + 1) * self.batch_size]
            x, y = self.X[idx], self.y[idx]
            yield (self._augment(x) if self.train else self._center(x)), y

    def _center(self, x):
        o = (RAW - CROP) // 2
        return x[:, :, o:o + CROP, o:o + CROP]

    def _augment(self, x):
        B = x.shape[0]
        out = torch.empty(B, 1, CROP, CROP)
        ox = torch.randint(0, RAW - CROP + 1, (B,), generator=self.gen)
        oy = torch.randint(0, RAW - CROP + 1, (B,), generator=self.gen)
        hf = torch.rand(B, generator=self.gen) < 0.5
        vf = torch.rand(B, generator=self.gen) < 0.5
        for i in range(B):
            xi = x[i, :, oy[i]:oy[i] + CROP, ox[i]:ox[i] + CROP]
            if hf[i]:
                xi = xi.flip(2)
            if vf[i]:
                xi = xi.flip(1)
            out[i] = xi
        out = out * (1 + 0.2 * torch.randn(B, 1, 1, 1, generator=self.gen)) \
            + 0.2 * torch.randn(B, 1, 1, 1, generator=self.gen)
        return out


def build_loaders(seed=SEED):
    X_tr, y_tr = make_split(N_TRAIN_PER_CLASS, seed)
    X_va, y_va = make_split(N_VAL_PER_CLASS, seed + 1)
    mean, std = float(X_tr.mean()), float(X_tr.std())
    return (Loader(X_tr, y_tr, mean, std, BATCH_SIZE, train=True, seed=seed),
            Loader(X_va, y_va, mean, std, 256, train=False))


# ----------------------------------------------------------------------------
# model / loss
# ----------------------------------------------------------------------------
def block(c_in, c_out, pool):
    layers = [nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(inplace=True)]
    if pool:
        layers.append(nn.MaxPool2d(2))
    return nn.Sequential(*layers)


class TextureNet(nn.Module):
    def __init__(self, num_classes=len(CLASSES), width=16):
        super().__init__()
        self.features = nn.Sequential(
            block(1, width, pool=False),
            block(width, 2 * width, pool=True),        # 10x10
            block(2 * width, 4 * width, pool=True),    # 5x5
            block(4 * width, 4 * width, pool=False),
        )
        self.dropout = nn.Dropout(0.2)
        self.classifier = nn.Linear(4 * width, num_classes)

    def forward(self, x):
        x = F.adaptive_avg_pool2d(self.features(x), 1).flatten(1)
        return self.classifier(self.dropout(x))


_mix_rng = np.random.default_rng(SEED + 7)
_mix_gen = torch.Generator().manual_seed(SEED + 7)


def loss_fn(model, batch):
    x, y = batch
    lam = float(_mix_rng.beta(MIXUP_ALPHA, MIXUP_ALPHA))
    perm = torch.randperm(x.shape[0], generator=_mix_gen)
    logits = model(lam * x + (1 - lam) * x[perm])
    return lam * F.cross_entropy(logits, y, label_smoothing=LABEL_SMOOTHING) + \
        (1 - lam) * F.cross_entropy(logits, y[perm], label_smoothing=LABEL_SMOOTHING)


def make_optimizer(params):
    return torch.optim.SGD(params, lr=LR, momentum=MOMENTUM, nesterov=True, weight_decay=WEIGHT_DECAY)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    tot, correct, n = 0.0, 0, 0
    for x, y in loader:
        logits = model(x)
        tot += F.cross_entropy(logits, y, reduction="sum").item()
        correct += (logits.argmax(1) == y).sum().item()
        n += len(y)
    model.train()
    return tot / n, correct / n


def make_target():
    torch.manual_seed(SEED)
    train_loader, _ = build_loaders()
    data = []
    for i, batch in enumerate(train_loader):
        data.append(batch)
        if i == 4:
            break
    return {
        "model": TextureNet(),
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "num_classes": len(CLASSES),
        "task": "classification",
    }


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    train_loader, val_loader = build_loaders()
    model = TextureNet()
    optimizer = make_optimizer(model.parameters())
    scheduler = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(optimizer, T_0=T_0, T_mult=T_MULT, eta_min=1e-4)
    iters = len(train_loader)
    print(f"***** Running training *****\n  Num examples = {len(train_loader.y)}\n  Num Epochs = {EPOCHS}\n"
          f"  Batch size = {BATCH_SIZE}\n  Total optimization steps = {EPOCHS * iters}")
    t_start = time.time()
    step, window, all_losses = 0, [], []
    for epoch in range(EPOCHS):
        model.train()
        for i, (x, y) in enumerate(train_loader):
            loss = loss_fn(model, (x, y))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step(epoch + (i + 1) / iters)
            step += 1
            window.append(loss.item())
            all_losses.append(loss.item())
            if step % LOGGING_STEPS == 0:
                print({"loss": round(float(np.mean(window)), 4), "learning_rate": round(scheduler.get_last_lr()[0], 6),
                       "epoch": round(step / iters, 2)})
                window = []
        val_loss, val_acc = evaluate(model, val_loader)
        print({"eval_loss": round(val_loss, 4), "eval_accuracy": round(val_acc, 4), "epoch": float(epoch + 1)})
    runtime = time.time() - t_start
    print({"train_runtime": round(runtime, 2), "train_steps_per_second": round(step / runtime, 2),
           "train_loss": round(float(np.mean(all_losses)), 4), "epoch": float(EPOCHS)})
    torch.save(model.state_dict(), "texturenet.pt")


if __name__ == "__main__":
    main()
