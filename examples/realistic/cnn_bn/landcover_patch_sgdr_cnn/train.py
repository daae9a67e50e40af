"""Land-cover classification of 32x32 RGB satellite patches (EuroSAT-like, 6 classes).

Small VGG-style CNN with BatchNorm, SGD + Nesterov momentum, cosine annealing
with warm restarts (SGDR, T_0=2, T_mult=2 -> cycles of 2, 4, 8 epochs),
pad-and-crop + flip augmentation (top-down imagery, no canonical orientation).
"""
import random
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

SEED = 2024
IMG = 32
CLASSES = ["AnnualCrop", "Forest", "Pasture", "Residential", "River", "SeaLake"]
NUM_CLASSES = len(CLASSES)

CONFIG = {
    "n_train": 1200,
    "n_val": 360,
    "batch_size": 64,
    "epochs": 14,
    "lr": 0.1,
    "momentum": 0.9,
    "weight_decay": 5e-4,
    "T_0": 2,
    "T_mult": 2,
}


def seed_everything(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


# ----------------------------------------------------------------------------
# synthetic imagery
# ----------------------------------------------------------------------------
_YY, _XX = np.mgrid[0:IMG, 0:IMG].astype(np.float32)
_FY, _FX = np.meshgrid(np.fft.fftfreq(IMG), np.fft.fftfreq(IMG), indexing="ij")
_FR = np.hypot(_FY, _FX)


def smooth_noise(rng, cutoff):
    spec = np.fft.fft2(rng.standard_normal((IMG, IMG))) * np.exp(-(_FR / cutoff) ** 2)
    n = np.real(np.fft.ifft2(spec))
    return (n - n.mean()) / (n.std() + 1e-6)


def render_patch(rng, label):
    tone = rng.normal(0, 0.07, 3)
    if label == 0:    # annual crop: parallel fields with alternating crops
        a = rng.uniform(0, np.pi)
        u = _YY * np.sin(a) + _XX * np.cos(a)
        period = rng.uniform(5, 10)
        stripes = (np.sin(2 * np.pi * u / period) > 0).astype(np.float32)
        c1, c2 = np.array([0.45, 0.55, 0.30]), np.array([0.60, 0.52, 0.38])
        img = stripes[..., None] * c1 + (1 - stripes[..., None]) * c2
        img = img + 0.04 * smooth_noise(rng, 0.15)[..., None]
    elif label == 1:  # forest: dark green, canopy texture
        img = np.array([0.18, 0.32, 0.18]) + 0.06 * smooth_noise(rng, 0.30)[..., None]
    elif label == 2:  # pasture: lighter green, smooth, faint mowing lines sometimes
        img = np.array([0.35, 0.50, 0.28]) + 0.05 * smooth_noise(rng, 0.08)[..., None]
        if rng.random() < 0.4:
            a = rng.uniform(0, np.pi)
            img = img + 0.03 * np.sin(2 * np.pi * (_YY * np.sin(a) + _XX * np.cos(a)) / rng.uniform(6, 12))[..., None]
    elif label == 3:  # residential: grid of roofs along streets
        img = np.array([0.40, 0.45, 0.35]) + 0.04 * smooth_noise(rng, 0.2)[..., None]
        step = rng.integers(5, 8)
        oy, ox = rng.integers(0, step, 2)
        roofs = (((_YY + oy) % step) < step - 2) & (((_XX + ox) % step) < step - 2)
        roof_col = np.array([0.62, 0.55, 0.52]) + rng.normal(0, 0.05, 3)
        img = np.where(roofs[..., None], roof_col, img)
    elif label == 4:  # river: meandering blue band through vegetation
        img = np.array([0.30, 0.45, 0.26]) + 0.05 * smooth_noise(rng, 0.15)[..., None]
        a = rng.uniform(0, np.pi)
        u = _YY * np.sin(a) + _XX * np.cos(a)
        v = -_YY * np.cos(a) + _XX * np.sin(a)
        centre = rng.uniform(-4, 4) + 3.0 * np.sin(u / rng.uniform(4, 8) + rng.uniform(0, 6))
        d = np.abs(v - (v.mean() + centre))
        water = 1.0 / (1.0 + np.exp((d - rng.uniform(2.5, 5.0)) * 2))
        img = img * (1 - water[..., None]) + water[..., None] * np.array([0.12, 0.22, 0.40])
    else:             # sea / lake: blue, low texture, sometimes a shoreline
        img = np.array([0.10, 0.20, 0.38]) + 0.02 * smooth_noise(rng, 0.1)[..., None]
        if rng.random() < 0.4:
            a = rng.uniform(0, 2 * np.pi)
            land = (_YY - 16) * np.sin(a) + (_XX - 16) * np.cos(a) > rng.uniform(8, 14)
            img = np.where(land[..., None], np.array([0.32, 0.44, 0.28]), img)
    img = img + tone
    if rng.random() < 0.35:  # thin cloud / haze
        haze = np.clip(0.5 + 0.5 * smooth_noise(rng, 0.05), 0, 1)[..., None] * rng.uniform(0.3, 0.7)
        img = img * (1 - haze) + haze * 0.85
    img = img + 0.05 * rng.standard_normal(img.shape)
    return np.clip(img, 0, 1).astype(np.float32)


def make_split(n, seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, NUM_CLASSES, n)
    imgs = np.stack([render_patch(rng, int(c)) for c in labels]).transpose(0, 3, 1, 2)
    return np.ascontiguousarray(imgs), labels.astype(np.int64)


MEAN = torch.tensor([0.36, 0.42, 0.31]).view(3, 1, 1)
STD = torch.tensor([0.17, 0.13, 0.10]).view(3, 1, 1)


class PatchDataset(Dataset):
    def __init__(self, images, labels, train):
        self.images = torch.from_numpy(images)
        self.labels = torch.from_numpy(labels)
        self.train = train

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, idx):
        x = self.images[idx]
        if self.train:
            x = F.pad(x[None], (4, 4, 4, 4), mode="reflect")[0]
            i, j = random.randint(0, 8), random.randint(0, 8)
            x = x[:, i:i + IMG, j:j + IMG]
            if random.random() < 0.5:
                x = x.flip(-1)
            if random.random() < 0.5:
                x = x.flip(-2)
        return (x - MEAN) / STD, self.labels[idx]


def build_train_loader():
    tr = make_split(CONFIG["n_train"], SEED)
    g = torch.Generator().manual_seed(SEED)
    return DataLoader(PatchDataset(*tr, train=True), batch_size=CONFIG["batch_size"], shuffle=True,
                      drop_last=True, generator=g)


def build_val_loader():
    va = make_split(CONFIG["n_val"], SEED + 1)
    return DataLoader(PatchDataset(*va, train=False), batch_size=180)


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
def block(cin, cout):
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
        nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
        nn.MaxPool2d(2),
    )


class LandCoverNet(nn.Module):
    def __init__(self, num_classes=NUM_CLASSES, width=10):
        super().__init__()
        self.body = nn.Sequential(block(3, width), block(width, 2 * width), block(2 * width, 4 * width))
        self.classifier = nn.Linear(4 * width, num_classes)

    def forward(self, x):
        x = self.body(x)
        return self.classifier(x.mean(dim=(2, 3)))


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def make_optimizer(params):
    return torch.optim.SGD(params, lr=CONFIG["lr"], momentum=CONFIG["momentum"], nesterov=True,
                           weight_decay=CONFIG["weight_decay"])


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    tot, correct, n = 0.0, 0, 0
    for x, y in loader:
        out = model(x)
        tot += F.cross_entropy(out, y, reduction="sum").item()
        correct += (out.argmax(1) == y).sum().item()
        n += len(y)
    model.train()
    return tot / n, correct / n


def make_target():
    seed_everything(SEED)
    loader = build_train_loader()
    data = []
    for i, b in enumerate(loader):
        data.append(b)
        if i == 3:
            break
    return dict(model=LandCoverNet(), data=data, loss_fn=loss_fn, make_optimizer=make_optimizer,
                task="classification", num_classes=NUM_CLASSES)


def main():
    torch.set_num_threads(1)
    seed_everything(SEED)
    train_loader, val_loader = build_train_loader(), build_val_loader()
    model = LandCoverNet()
    optimizer = make_optimizer(model.parameters())
    steps = len(train_loader)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(optimizer, T_0=CONFIG["T_0"] * steps,
                                                                     T_mult=CONFIG["T_mult"])
    print(f"Train on {len(train_loader.dataset)} samples, validate on {len(val_loader.dataset)} samples")
    t_start = time.time()
    for epoch in range(CONFIG["epochs"]):
        t0 = time.time()
        model.train()
        lr_start = optimizer.param_groups[0]["lr"]
        tot, correct, n = 0.0, 0, 0
        for x, y in train_loader:
            out = model(x)
            loss = F.cross_entropy(out, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            tot += loss.item() * len(y)
            correct += (out.argmax(1) == y).sum().item()
            n += len(y)
        val_loss, val_acc = evaluate(model, val_loader)
        print(f"Epoch {epoch + 1}/{CONFIG['epochs']}")
        print(f"{steps}/{steps} - {time.time() - t0:.0f}s - loss: {tot / n:.4f} - accuracy: {correct / n:.4f}"
              f" - val_loss: {val_loss:.4f} - val_accuracy: {val_acc:.4f} - lr: {lr_start:.4f}")
        sys.stdout.flush()
    print(f"Total training time: {time.time() - t_start:.1f}s")


if __name__ == "__main__":
    main()
