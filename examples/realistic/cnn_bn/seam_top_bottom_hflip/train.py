"""Weld-seam strip inspection: BN CNN classifying where a crack sits on the strip.

Images are 32x32 grayscale crops of a horizontal weld seam (the seam runs left to
right through the middle). Labels: crack in the upper plate, crack in the lower
plate, or no crack. Training recipe follows the usual timm defaults scaled down:
SGD + nesterov, warmup then cosine (stepped per epoch), random crop + flip.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

CLASSES = ["bottom_defect", "clean", "top_defect"]
IMG = 32

ARGS = dict(
    seed=42,
    n_train=3000,
    n_val=600,
    batch_size=64,
    epochs=10,
    lr=0.05,
    momentum=0.9,
    weight_decay=5e-4,
    warmup_epochs=1,
    warmup_lr=0.005,
    min_lr=1e-4,
    smoothing=0.1,
    hflip=0.5,
    crop_pad=2,
    log_interval=15,
)


def render_strips(n, rng):
    """Synthetic seam crops. Returns float32 images (n,1,32,32) in [0,1] and labels."""
    ys = rng.integers(0, len(CLASSES), size=n)
    yy, xx = np.mgrid[0:IMG, 0:IMG].astype(np.float32)
    imgs = np.empty((n, 1, IMG, IMG), dtype=np.float32)
    for i in range(n):
        base = 0.55 + 0.05 * rng.standard_normal()
        img = base + 0.06 * rng.standard_normal((IMG, IMG))
        # brushed-metal streaks along the seam direction
        img += 0.04 * np.sin(yy * rng.uniform(0.8, 1.6) + rng.uniform(0, 6.28))
        seam_y = 16 + rng.uniform(-1.5, 1.5)
        img += 0.25 * np.exp(-((yy - seam_y) ** 2) / (2 * 1.2 ** 2))
        # spatter: small bright dots anywhere, present on every class
        for _ in range(rng.integers(0, 4)):
            cy, cx = rng.uniform(2, 30, size=2)
            img += 0.2 * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / 1.5)
        label = CLASSES[ys[i]]
        if label != "clean":
            cy = rng.uniform(4, 10) if label == "top_defect" else rng.uniform(22, 28)
            cx = rng.uniform(6, 26)
            ang = rng.uniform(-0.6, 0.6) + (np.pi / 2 if rng.random() < 0.5 else 0.0)
            half = rng.uniform(3, 6)
            # distance from each pixel to the crack segment
            dx, dy = np.cos(ang), np.sin(ang)
            t = np.clip((xx - cx) * dx + (yy - cy) * dy, -half, half)
            d2 = (xx - cx - t * dx) ** 2 + (yy - cy - t * dy) ** 2
            img -= rng.uniform(0.18, 0.32) * np.exp(-d2 / 0.8)
        imgs[i, 0] = img
    return np.clip(imgs, 0, 1), ys.astype(np.int64)


def build_datasets():
    rng = np.random.default_rng(ARGS["seed"])
    x_tr, y_tr = render_strips(ARGS["n_train"], rng)
    x_va, y_va = render_strips(ARGS["n_val"], rng)
    mean, std = x_tr.mean(), x_tr.std()
    norm = lambda a: torch.from_numpy((a - mean) / std)
    return norm(x_tr), torch.from_numpy(y_tr), norm(x_va), torch.from_numpy(y_va)


def augment(x, gen):
    """Random crop with zero padding + random horizontal (left-right) flip, per sample."""
    n = x.shape[0]
    p = ARGS["crop_pad"]
    padded = F.pad(x, (p, p, p, p))
    offs = torch.randint(0, 2 * p + 1, (n, 2), generator=gen)
    out = torch.stack([padded[i, :, offs[i, 0]:offs[i, 0] + IMG, offs[i, 1]:offs[i, 1] + IMG]
                       for i in range(n)])
    flip = torch.rand(n, generator=gen) < ARGS["hflip"]
    out[flip] = out[flip].flip(-1)
    return out


def conv_bn(cin, cout, stride=1):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class SeamNet(nn.Module):
    def __init__(self, num_classes=3, width=16):
        super().__init__()
        w = width
        self.features = nn.Sequential(
            conv_bn(1, w), conv_bn(w, w),
            conv_bn(w, 2 * w, stride=2), conv_bn(2 * w, 2 * w),
            conv_bn(2 * w, 4 * w, stride=2), conv_bn(4 * w, 4 * w),
        )
        # keep coarse vertical position: pool over width fully, over height down to 4 rows
        self.pool = nn.AdaptiveAvgPool2d((4, 1))
        self.head = nn.Linear(4 * w * 4, num_classes)

    def forward(self, x):
        return self.head(self.pool(self.features(x)).flatten(1))


train_criterion = nn.CrossEntropyLoss(label_smoothing=ARGS["smoothing"])
val_criterion = nn.CrossEntropyLoss()


def compute_loss(model, batch):
    x, y = batch
    return train_criterion(model(x), y)


def make_optimizer(params):
    return torch.optim.SGD(params, lr=ARGS["lr"], momentum=ARGS["momentum"], nesterov=True,
                           weight_decay=ARGS["weight_decay"])


def lr_at_epoch(epoch):
    if epoch < ARGS["warmup_epochs"]:
        return ARGS["warmup_lr"]
    t = (epoch - ARGS["warmup_epochs"]) / max(1, ARGS["epochs"] - ARGS["warmup_epochs"])
    return ARGS["min_lr"] + 0.5 * (ARGS["lr"] - ARGS["min_lr"]) * (1 + math.cos(math.pi * t))


def train_batches(x, y, gen):
    perm = torch.randperm(len(x), generator=gen)
    bs = ARGS["batch_size"]
    for i in range(0, len(x) - bs + 1, bs):  # drop_last, as timm does for train
        idx = perm[i:i + bs]
        yield augment(x[idx], gen), y[idx]


class AverageMeter:
    def __init__(self):
        self.val = self.sum = self.count = 0.0

    def update(self, v, n=1):
        self.val = v
        self.sum += v * n
        self.count += n

    @property
    def avg(self):
        return self.sum / max(1, self.count)


def train_one_epoch(epoch, model, x, y, opt, gen):
    model.train()
    n_batches = len(x) // ARGS["batch_size"]
    losses, batch_time = AverageMeter(), AverageMeter()
    end = time.time()
    for i, batch in enumerate(train_batches(x, y, gen)):
        loss = compute_loss(model, batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.update(loss.item(), batch[0].shape[0])
        batch_time.update(time.time() - end)
        end = time.time()
        last = i == n_batches - 1
        if i % ARGS["log_interval"] == 0 or last:
            bs = ARGS["batch_size"]
            print(f"Train: {epoch} [{i:>4d}/{n_batches} ({100.0 * i / max(1, n_batches - 1):>3.0f}%)]  "
                  f"Loss: {losses.val:#.3g} ({losses.avg:#.3g})  "
                  f"Time: {batch_time.val:.3f}s, {bs / max(batch_time.val, 1e-6):>7.2f}/s  "
                  f"({batch_time.avg:.3f}s, {bs / max(batch_time.avg, 1e-6):>7.2f}/s)  "
                  f"LR: {opt.param_groups[0]['lr']:.3e}", flush=True)
    return losses.avg


@torch.no_grad()
def validate(model, x, y):
    model.eval()
    bs = 200
    n_batches = math.ceil(len(x) / bs)
    losses, top1 = AverageMeter(), AverageMeter()
    for i in range(n_batches):
        xb, yb = x[i * bs:(i + 1) * bs], y[i * bs:(i + 1) * bs]
        t = time.time()
        logits = model(xb)
        losses.update(val_criterion(logits, yb).item(), len(yb))
        top1.update((logits.argmax(1) == yb).float().mean().item() * 100, len(yb))
        if i == n_batches - 1:
            print(f"Test: [{i:>4d}/{n_batches - 1}]  Time: {time.time() - t:.3f}  "
                  f"Loss: {losses.val:>7.4f} ({losses.avg:>6.4f})  "
                  f"Acc@1: {top1.val:>7.3f} ({top1.avg:>7.3f})", flush=True)
    return losses.avg, top1.avg


def make_target():
    x_tr, y_tr, _, _ = build_datasets()
    torch.manual_seed(ARGS["seed"])
    model = SeamNet(len(CLASSES))
    gen = torch.Generator().manual_seed(ARGS["seed"])
    it = train_batches(x_tr, y_tr, gen)
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
    torch.manual_seed(ARGS["seed"])
    x_tr, y_tr, x_va, y_va = build_datasets()
    model = SeamNet(len(CLASSES))
    print(f"Model SeamNet created, param count: {sum(p.numel() for p in model.parameters())}")
    print(f"Classes: {CLASSES}  train: {len(x_tr)}  val: {len(x_va)}")
    print(f"Augmentation: RandomCrop({IMG}, padding={ARGS['crop_pad']}), RandomHorizontalFlip(p={ARGS['hflip']})")
    opt = make_optimizer(model.parameters())
    gen = torch.Generator().manual_seed(ARGS["seed"])
    best = (0.0, -1)
    for epoch in range(ARGS["epochs"]):
        for g in opt.param_groups:
            g["lr"] = lr_at_epoch(epoch)
        train_one_epoch(epoch, model, x_tr, y_tr, opt, gen)
        val_loss, acc1 = validate(model, x_va, y_va)
        if acc1 > best[0]:
            best = (acc1, epoch)
    print(f"*** Best metric: {best[0]:.3f} (epoch {best[1]})")


if __name__ == "__main__":
    main()
