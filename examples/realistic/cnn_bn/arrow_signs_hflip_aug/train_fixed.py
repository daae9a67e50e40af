"""Road-marking arrow classifier (synthetic 28x28 renders).

Six classes: straight, left, right, u-turn-ish 'down', roundabout (ring) and
stop (cross). Small conv net with BatchNorm, SGD + momentum, step decay.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

CLASSES = ["up", "down", "left", "right", "ring", "cross"]
IMG = 28
SEED = 0

CFG = dict(
    n_train=3000,
    n_val=600,
    batch_size=64,
    epochs=6,
    lr=0.05,
    momentum=0.9,
    weight_decay=5e-4,
    log_interval=15,
)


# ---------------------------------------------------------------- rendering --
def _arrow_up(size, thick, rng):
    img = np.zeros((IMG, IMG), dtype=np.float32)
    c = IMG // 2
    half = size // 2
    # shaft (even width so the glyph is centred on the 13.5 axis)
    img[c - half + size // 3: c + half, c - thick: c + thick] = 1.0
    # head: a triangle whose tip is at the top
    head_h = size // 2
    for r in range(head_h):
        row = c - half + r
        img[row, max(c - r - 1, 0): min(c + r + 1, IMG)] = 1.0
    return img


def render(label, rng):
    size = int(rng.integers(14, 21))
    thick = int(rng.integers(1, 3))
    if label in (0, 1, 2, 3):
        img = _arrow_up(size, thick, rng)
        # up -> k=0, left -> k=1, down -> k=2, right -> k=3 (counter-clockwise)
        k = {0: 0, 2: 1, 1: 2, 3: 3}[label]
        img = np.rot90(img, k).copy()
    elif label == 4:
        yy, xx = np.mgrid[:IMG, :IMG]
        r = np.sqrt((yy - IMG / 2 + 0.5) ** 2 + (xx - IMG / 2 + 0.5) ** 2)
        rad = size / 2.4
        img = ((r > rad - thick - 0.7) & (r < rad + 0.7)).astype(np.float32)
    else:
        img = np.zeros((IMG, IMG), dtype=np.float32)
        c = IMG // 2
        half = size // 2
        for i in range(-half, half + 1):
            for t in range(-thick, thick + 1):
                for a, b in ((c + i, c + i + t), (c + i, c - i + t)):
                    if 0 <= a < IMG and 0 <= b < IMG:
                        img[a, b] = 1.0
    # random placement jitter
    dy, dx = rng.integers(-3, 4, size=2)
    img = np.roll(img, (int(dy), int(dx)), axis=(0, 1))
    contrast = rng.uniform(0.6, 1.0)
    img = img * contrast + rng.normal(0, 0.15, img.shape).astype(np.float32)
    return img.astype(np.float32)


def make_split(n, seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, len(CLASSES), size=n)
    imgs = np.stack([render(int(y), rng) for y in labels])[:, None]
    return torch.from_numpy(imgs), torch.from_numpy(labels).long()


# ------------------------------------------------------------- transforms ---
class Compose:
    def __init__(self, ts):
        self.ts = ts

    def __call__(self, x, g):
        for t in self.ts:
            x = t(x, g)
        return x


class RandomShift:
    def __init__(self, pad=2):
        self.pad = pad

    def __call__(self, x, g):
        n = x.shape[0]
        xp = F.pad(x, (self.pad,) * 4)
        offs = torch.randint(0, 2 * self.pad + 1, (n, 2), generator=g)
        ar = torch.arange(IMG)
        rows = (ar[None, :] + offs[:, :1])[:, :, None]          # n, H, 1
        cols = (ar[None, :] + offs[:, 1:])[:, None, :]          # n, 1, W
        bidx = torch.arange(n)[:, None, None]
        return xp[:, 0][bidx, rows, cols].unsqueeze(1)


class RandomHorizontalFlip:
    def __init__(self, p=0.5):
        self.p = p

    def __call__(self, x, g):
        mask = torch.rand(x.shape[0], generator=g) < self.p
        x = x.clone()
        x[mask] = x[mask].flip(-1)
        return x


class GaussianNoise:
    def __init__(self, std=0.05):
        self.std = std

    def __call__(self, x, g):
        return x + self.std * torch.randn(x.shape, generator=g)


train_tf = Compose([RandomShift(2), GaussianNoise(0.05)])


class Loader:
    def __init__(self, x, y, batch_size, shuffle, transform=None, seed=0):
        self.x, self.y = x, y
        self.bs = batch_size
        self.shuffle = shuffle
        self.transform = transform
        self.g = torch.Generator().manual_seed(seed)

    def __len__(self):
        return math.ceil(len(self.x) / self.bs)

    def __iter__(self):
        n = len(self.x)
        idx = torch.randperm(n, generator=self.g) if self.shuffle else torch.arange(n)
        for s in range(0, n, self.bs):
            b = idx[s:s + self.bs]
            xb = self.x[b]
            if self.transform is not None:
                xb = self.transform(xb, self.g)
            yield xb, self.y[b]


# ------------------------------------------------------------------ model ---
def conv_bn(cin, cout):
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class ArrowNet(nn.Module):
    def __init__(self, num_classes=len(CLASSES)):
        super().__init__()
        self.features = nn.Sequential(
            conv_bn(1, 16), nn.MaxPool2d(2),      # 14
            conv_bn(16, 32), nn.MaxPool2d(2),     # 7
            conv_bn(32, 64),
        )
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, num_classes))

    def forward(self, x):
        return self.head(self.features(x))


def compute_loss(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def make_optimizer(params):
    return torch.optim.SGD(params, lr=CFG["lr"], momentum=CFG["momentum"],
                           weight_decay=CFG["weight_decay"], nesterov=True)


def build():
    torch.manual_seed(SEED)
    xtr, ytr = make_split(CFG["n_train"], seed=1)
    xva, yva = make_split(CFG["n_val"], seed=2)
    train_loader = Loader(xtr, ytr, CFG["batch_size"], shuffle=True, transform=train_tf, seed=SEED)
    val_loader = Loader(xva, yva, 100, shuffle=False)
    model = ArrowNet()
    return model, train_loader, val_loader


@torch.no_grad()
def validate(model, loader):
    model.eval()
    tot_loss, correct, n = 0.0, 0, 0
    per_cls = torch.zeros(len(CLASSES))
    per_cnt = torch.zeros(len(CLASSES))
    t0 = time.time()
    for i, (x, y) in enumerate(loader):
        out = model(x)
        tot_loss += F.cross_entropy(out, y, reduction="sum").item()
        pred = out.argmax(1)
        correct += (pred == y).sum().item()
        n += len(y)
        per_cls.index_add_(0, y, (pred == y).float())
        per_cnt.index_add_(0, y, torch.ones_like(y, dtype=torch.float))
    last = len(loader)
    print(f"Test: [{last:>4d}/{last}]  Time: {time.time() - t0:.3f}  "
          f"Loss: {tot_loss / n:.4f}  Acc@1: {100.0 * correct / n:.3f}")
    model.train()
    return tot_loss / n, 100.0 * correct / n, (per_cls / per_cnt.clamp(min=1))


def train_one_epoch(epoch, model, loader, optimizer):
    model.train()
    running, count = 0.0, 0
    t_end = time.time()
    n_batches = len(loader)
    for i, batch in enumerate(loader):
        loss = compute_loss(model, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        running += loss.item() * len(batch[1])
        count += len(batch[1])
        bt = time.time() - t_end
        t_end = time.time()
        if i % CFG["log_interval"] == 0 or i == n_batches - 1:
            lr = optimizer.param_groups[0]["lr"]
            print(f"Train: {epoch} [{i:>4d}/{n_batches} ({100.0 * i / (n_batches - 1):>3.0f}%)]  "
                  f"Loss: {loss.item():.4f} ({running / count:.4f})  "
                  f"Time: {bt:.3f}s, {len(batch[1]) / max(bt, 1e-6):>7.1f}/s  LR: {lr:.3e}")
    return running / count


def make_target():
    model, train_loader, _ = build()
    it = iter(train_loader)
    data = [next(it) for _ in range(3)]
    return {
        "model": model,
        "batch": data[0],
        "data": data,
        "loss_fn": compute_loss,
        "optimizer": make_optimizer(model.parameters()),
        "make_optimizer": make_optimizer,
        "num_classes": len(CLASSES),
        "task": "classification",
    }


def main():
    model, train_loader, val_loader = build()
    optimizer = make_optimizer(model.parameters())
    sched = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[4], gamma=0.1)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"Model arrownet created, param count: {n_params}")
    print(f"Train samples: {len(train_loader.x)}  Val samples: {len(val_loader.x)}  classes: {CLASSES}")
    best = 0.0
    for epoch in range(CFG["epochs"]):
        train_one_epoch(epoch, model, train_loader, optimizer)
        sched.step()
        _, acc, per_cls = validate(model, val_loader)
        best = max(best, acc)
        print("  per-class acc: " + "  ".join(f"{c}={a:.2f}" for c, a in zip(CLASSES, per_cls.tolist())))
    print(f"*** Best metric: {best:.3f} (epoch-wise Acc@1)")


if __name__ == "__main__":
    main()
