"""Surface texture classification (material inspection), small ResNet-ish CNN.

Synthetic grayscale patches of 5 surface finishes. Training uses random
pad-and-crop, flips and mixup; SGD + cosine annealing with warm restarts.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)

CLASSES = ["brushed", "knurled", "pitted", "woven", "matte"]
IMG = 24
BATCH_SIZE = 64
EPOCHS = 12          # SGDR cycles of 4 + 8 epochs
LR = 0.1
MOMENTUM = 0.9
WEIGHT_DECAY = 5e-4
MIXUP_ALPHA = 0.4
SEED = 2024


# ----------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------
def render_patch(label, rng):
    yy, xx = np.mgrid[0:IMG, 0:IMG].astype(np.float32)
    theta = rng.uniform(0, np.pi)
    u = xx * np.cos(theta) + yy * np.sin(theta)
    v = -xx * np.sin(theta) + yy * np.cos(theta)
    f = rng.uniform(0.35, 0.6)
    if label == 0:    # brushed: fine parallel streaks with random phase noise
        img = np.sin(f * 2.2 * u)
        img += 0.5 * rng.standard_normal((IMG, IMG)) * np.abs(np.sin(0.3 * u))
    elif label == 1:  # knurled: crossed diagonal ridges
        img = np.sin(f * u) * np.sin(f * v)
    elif label == 2:  # pitted: sparse dark dimples
        img = np.zeros((IMG, IMG), np.float32)
        for _ in range(rng.integers(6, 12)):
            cy, cx = rng.uniform(0, IMG, size=2)
            r = rng.uniform(1.0, 2.2)
            img -= np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * r ** 2))
        img = 1.5 * img + 0.4
    elif label == 3:  # woven: alternating over/under pattern
        img = np.sign(np.sin(f * u)) * np.sin(0.5 * f * v)
    else:             # matte: smooth low-frequency noise
        coarse = rng.standard_normal((IMG // 6, IMG // 6))
        img = np.kron(coarse, np.ones((6, 6)))
        img = 0.5 * (img + np.roll(img, 3, 0) + np.roll(img, 3, 1) + np.roll(img, (3, 3), (0, 1))) / 2
    img = img + rng.normal(0, rng.uniform(0.3, 0.6), size=(IMG, IMG))
    img = img * rng.uniform(0.7, 1.3) + rng.uniform(-0.3, 0.3)   # lighting
    return img.astype(np.float32)


def make_split(n, seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, len(CLASSES), size=n)
    x = np.stack([render_patch(int(c), rng) for c in y])[:, None]
    return torch.from_numpy(x), torch.from_numpy(y.astype(np.int64))


def load_datasets(n_train=2500, n_val=500):
    x_tr, y_tr = make_split(n_train, SEED)
    x_va, y_va = make_split(n_val, SEED + 1)
    mean, std = x_tr.mean(), x_tr.std()
    return ((x_tr - mean) / std, y_tr), ((x_va - mean) / std, y_va)


def random_crop_flip(x, pad=3):
    n = x.shape[0]
    xp = F.pad(x, (pad, pad, pad, pad), mode="reflect")
    oy = torch.randint(0, 2 * pad + 1, (n,))
    ox = torch.randint(0, 2 * pad + 1, (n,))
    rows = (oy[:, None] + torch.arange(IMG)[None])[:, None, :, None].expand(n, 1, IMG, IMG + 2 * pad)
    xp = torch.gather(xp, 2, rows)
    cols = (ox[:, None] + torch.arange(IMG)[None])[:, None, None, :].expand(n, 1, IMG, IMG)
    out = torch.gather(xp, 3, cols)
    flip = torch.rand(n) < 0.5
    out[flip] = out[flip].flip(-1)
    return out


def train_batches(x, y, generator):
    perm = torch.randperm(len(y), generator=generator)
    for i in range(0, len(y) - BATCH_SIZE + 1, BATCH_SIZE):
        idx = perm[i:i + BATCH_SIZE]
        yield random_crop_flip(x[idx]), y[idx]


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class TextureNet(nn.Module):
    def __init__(self, num_classes=len(CLASSES), width=16):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        self.layer1 = BasicBlock(width, 2 * width, stride=2)      # 12x12
        self.layer2 = BasicBlock(2 * width, 4 * width, stride=2)  # 6x6
        self.fc = nn.Linear(4 * width, num_classes)

    def forward(self, x):
        x = self.layer2(self.layer1(self.stem(x)))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def mixup(x, y, alpha=MIXUP_ALPHA):
    lam = float(np.random.beta(alpha, alpha))
    perm = torch.randperm(x.shape[0])
    return lam * x + (1 - lam) * x[perm], y, y[perm], lam


def loss_fn(model, batch):
    x, y = batch
    xm, y_a, y_b, lam = mixup(x, y)
    logits = model(xm)
    return lam * F.cross_entropy(logits, y_a) + (1 - lam) * F.cross_entropy(logits, y_b)


def make_optimizer(params):
    return torch.optim.SGD(params, lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY, nesterov=True)


@torch.no_grad()
def evaluate(model, x, y):
    model.eval()
    logits = torch.cat([model(x[i:i + 250]) for i in range(0, len(y), 250)])
    model.train()
    return F.cross_entropy(logits, y).item(), (logits.argmax(1) == y).float().mean().item()


def make_target():
    torch.manual_seed(SEED)
    np.random.seed(SEED)
    (x_tr, y_tr), _ = load_datasets()
    g = torch.Generator().manual_seed(SEED)
    data = []
    for i, batch in enumerate(train_batches(x_tr, y_tr, g)):
        data.append(batch)
        if i == 5:
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
    np.random.seed(SEED)
    (x_tr, y_tr), (x_va, y_va) = load_datasets()
    g = torch.Generator().manual_seed(SEED)
    model = TextureNet()
    optimizer = make_optimizer(model.parameters())
    scheduler = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(optimizer, T_0=4, T_mult=2, eta_min=1e-4)
    iters = len(y_tr) // BATCH_SIZE
    log_every = 13
    step, t0 = 0, time.time()
    running, n_running = 0.0, 0
    for epoch in range(EPOCHS):
        for i, batch in enumerate(train_batches(x_tr, y_tr, g)):
            loss = loss_fn(model, batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step(epoch + (i + 1) / iters)
            step += 1
            running += loss.item()
            n_running += 1
            if step % log_every == 0:
                print({"loss": round(running / n_running, 4),
                       "learning_rate": float(f"{optimizer.param_groups[0]['lr']:.4e}"),
                       "epoch": round(step / iters, 2)})
                running, n_running = 0.0, 0
        val_loss, val_acc = evaluate(model, x_va, y_va)
        print({"eval_loss": round(val_loss, 4), "eval_accuracy": round(val_acc, 4),
               "eval_runtime": round(time.time() - t0, 2), "epoch": float(epoch + 1)})
    print({"train_runtime": round(time.time() - t0, 2), "train_steps": step})


if __name__ == "__main__":
    main()
