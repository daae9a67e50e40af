"""Small VGG-style CNN on procedurally rendered RGB glyphs.

Glyphs (disc, ring, square, plus, x, triangle, h-bar, v-bar) are drawn with a
random colour on a random background colour, random position and scale, with
sensor noise. Images are rendered as (H, W, C) float arrays like they come out
of PIL / imageio. Training uses batch-level random-crop + h-flip + noise,
SGD with Nesterov momentum and a MultiStep schedule.
"""
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)

SEED = 7
IMG = 20
NUM_CLASSES = 8
N_TRAIN = 2400
N_VAL = 800
BATCH_SIZE = 64
EPOCHS = 8
LR = 0.05
MOMENTUM = 0.9
WEIGHT_DECAY = 5e-4
MILESTONES = [5, 7]
PAD = 2

GLYPHS = ["disc", "ring", "square", "plus", "x", "triangle", "hbar", "vbar"]


# ---------------------------------------------------------------------------
# rendering
# ---------------------------------------------------------------------------
def glyph_mask(kind, rng):
    yy, xx = np.mgrid[0:IMG, 0:IMG].astype(np.float32)
    cy, cx = rng.uniform(7, IMG - 7, size=2)
    r = rng.uniform(4.0, 6.5)
    w = rng.uniform(1.2, 2.2)
    dy, dx = yy - cy, xx - cx
    if kind == "disc":
        m = dx ** 2 + dy ** 2 <= r ** 2
    elif kind == "ring":
        d = np.sqrt(dx ** 2 + dy ** 2)
        m = (d <= r) & (d >= r - w)
    elif kind == "square":
        m = (np.abs(dx) <= r * 0.8) & (np.abs(dy) <= r * 0.8)
    elif kind == "plus":
        m = ((np.abs(dx) <= w / 2 + 0.3) & (np.abs(dy) <= r)) | ((np.abs(dy) <= w / 2 + 0.3) & (np.abs(dx) <= r))
    elif kind == "x":
        m = ((np.abs(dx - dy) <= w) | (np.abs(dx + dy) <= w)) & (np.abs(dx) <= r * 0.8) & (np.abs(dy) <= r * 0.8)
    elif kind == "triangle":
        m = (dy <= r * 0.7) & (dy >= -r * 0.9) & (np.abs(dx) <= (dy + r * 0.9) * 0.6)
    elif kind == "hbar":
        m = (np.abs(dy) <= w / 2 + 0.5) & (np.abs(dx) <= r)
    else:  # vbar
        m = (np.abs(dx) <= w / 2 + 0.5) & (np.abs(dy) <= r)
    return m.astype(np.float32)


def render_split(n, seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, NUM_CLASSES, size=n)
    images = np.empty((n, IMG, IMG, 3), dtype=np.float32)
    for i, y in enumerate(labels):
        m = glyph_mask(GLYPHS[y], rng)[..., None]
        fg = rng.uniform(0, 1, size=3)
        bg = rng.uniform(0, 1, size=3)
        # keep some contrast between glyph and background
        while np.abs(fg - bg).sum() < 0.6:
            bg = rng.uniform(0, 1, size=3)
        img = m * fg + (1 - m) * bg
        img += rng.normal(0, 0.08, size=img.shape)
        images[i] = np.clip(img, 0, 1)
    return images, labels.astype(np.int64)


def to_tensor_images(images, mean, std):
    # (N, H, W, C) float array -> normalised (N, C, H, W) tensor
    images = (images - mean) / std
    return torch.from_numpy(images.astype(np.float32)).reshape(len(images), 3, IMG, IMG)


def build_datasets():
    xtr, ytr = render_split(N_TRAIN, SEED)
    xva, yva = render_split(N_VAL, SEED + 100)
    mean = xtr.mean(axis=(0, 1, 2))
    std = xtr.std(axis=(0, 1, 2))
    train_ds = TensorDataset(to_tensor_images(xtr, mean, std), torch.from_numpy(ytr))
    val_ds = TensorDataset(to_tensor_images(xva, mean, std), torch.from_numpy(yva))
    return train_ds, val_ds


def build_loaders():
    train_ds, val_ds = build_datasets()
    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True, drop_last=True, generator=g)
    val_loader = DataLoader(val_ds, batch_size=400, shuffle=False)
    return train_loader, val_loader


def augment(x):
    """Batch-level augmentation: reflect-pad + random crop, horizontal flip, gaussian noise."""
    n = x.size(0)
    padded = F.pad(x, (PAD, PAD, PAD, PAD), mode="reflect")
    oy = torch.randint(0, 2 * PAD + 1, (n,))
    ox = torch.randint(0, 2 * PAD + 1, (n,))
    out = torch.stack([padded[i, :, oy[i]:oy[i] + IMG, ox[i]:ox[i] + IMG] for i in range(n)])
    flip = torch.rand(n) < 0.5
    out[flip] = out[flip].flip(-1)
    out = out + 0.05 * torch.randn_like(out)
    return out


# ---------------------------------------------------------------------------
# model
# ---------------------------------------------------------------------------
def block(cin, cout):
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class GlyphNet(nn.Module):
    def __init__(self, num_classes=NUM_CLASSES):
        super().__init__()
        self.features = nn.Sequential(
            block(3, 16), block(16, 16), nn.MaxPool2d(2),   # 10x10
            block(16, 32), block(32, 32), nn.MaxPool2d(2),  # 5x5
            block(32, 64),
        )
        self.classifier = nn.Linear(64, num_classes)

    def forward(self, x):
        h = self.features(x)
        h = F.adaptive_avg_pool2d(h, 1).flatten(1)
        return self.classifier(h)


def train_batches(loader):
    for x, y in loader:
        yield augment(x), y


def compute_loss(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def make_optimizer(params):
    return torch.optim.SGD(params, lr=LR, momentum=MOMENTUM, nesterov=True, weight_decay=WEIGHT_DECAY)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    n, correct, loss_sum = 0, 0, 0.0
    for x, y in loader:
        logits = model(x)
        loss_sum += F.cross_entropy(logits, y, reduction="sum").item()
        correct += (logits.argmax(1) == y).sum().item()
        n += y.numel()
    model.train()
    return loss_sum / n, correct / n


def make_target():
    torch.manual_seed(SEED)
    train_loader, _ = build_loaders()
    data = []
    for i, batch in enumerate(train_batches(train_loader)):
        data.append(batch)
        if i == 3:
            break
    return {
        "model": GlyphNet(),
        "data": data,
        "loss_fn": compute_loss,
        "make_optimizer": make_optimizer,
        "num_classes": NUM_CLASSES,
        "task": "classification",
    }


def main():
    torch.manual_seed(SEED)
    train_loader, val_loader = build_loaders()
    model = GlyphNet()
    optimizer = make_optimizer(model.parameters())
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=MILESTONES, gamma=0.1)
    steps_per_epoch = len(train_loader)

    for epoch in range(1, EPOCHS + 1):
        model.train()
        t0 = time.time()
        tot_loss, tot_correct, tot_n = 0.0, 0, 0
        for x, y in train_batches(train_loader):
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            tot_loss += loss.item() * y.size(0)
            tot_correct += (logits.argmax(1) == y).sum().item()
            tot_n += y.size(0)
        lr = optimizer.param_groups[0]["lr"]
        scheduler.step()
        val_loss, val_acc = evaluate(model, val_loader)
        dt = time.time() - t0
        print(f"Epoch {epoch}/{EPOCHS}")
        print(f"{steps_per_epoch}/{steps_per_epoch} - {dt:.0f}s - loss: {tot_loss / tot_n:.4f} - accuracy: {tot_correct / tot_n:.4f}"
              f" - val_loss: {val_loss:.4f} - val_accuracy: {val_acc:.4f} - lr: {lr:.4f}")


if __name__ == "__main__":
    main()
