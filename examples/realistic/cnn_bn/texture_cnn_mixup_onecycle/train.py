"""Texture classification with a small ResNet-ish CNN.

Synthetic grayscale texture patches (checkerboards, gratings, dots, rings,
smooth / rough noise, ...). Recipe: random crop + flips + mixup + label
smoothing, AdamW with a OneCycle schedule (stepped every batch).
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)

HPARAMS = dict(
    seed=2024,
    img=20,
    pad=3,
    n_train=2048,
    n_val=800,
    batch_size=64,
    max_epochs=10,
    max_lr=4e-3,
    weight_decay=0.05,
    mixup_alpha=0.4,
    label_smoothing=0.1,
)
TEXTURES = ["checker", "hgrating", "vgrating", "dots", "rings", "smooth_noise", "rough_noise", "plaid"]
NUM_CLASSES = len(TEXTURES)


# ---------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------
def _smooth(a, k):
    kern = np.ones(k) / k
    a = np.apply_along_axis(lambda r: np.convolve(r, kern, mode="same"), 0, a)
    return np.apply_along_axis(lambda r: np.convolve(r, kern, mode="same"), 1, a)


def render_texture(kind, rng, size):
    S = size + 2 * HPARAMS["pad"]
    yy, xx = np.mgrid[0:S, 0:S].astype(np.float32)
    period = rng.uniform(3.5, 7.0)
    ph_y, ph_x = rng.uniform(0, 2 * np.pi, size=2)
    w = 2 * np.pi / period
    if kind == "checker":
        t = np.sign(np.sin(w * yy + ph_y) * np.sin(w * xx + ph_x))
    elif kind == "hgrating":
        t = np.sin(w * yy + ph_y)
    elif kind == "vgrating":
        t = np.sin(w * xx + ph_x)
    elif kind == "dots":
        t = ((np.sin(w * yy + ph_y) > 0.6) & (np.sin(w * xx + ph_x) > 0.6)).astype(np.float32) * 2 - 1
    elif kind == "rings":
        cy, cx = rng.uniform(0, S, size=2)
        t = np.sin(w * np.sqrt((yy - cy) ** 2 + (xx - cx) ** 2) + ph_y)
    elif kind == "smooth_noise":
        t = _smooth(rng.normal(size=(S, S)), 5)
        t = t / (t.std() + 1e-6)
    elif kind == "rough_noise":
        t = rng.normal(size=(S, S))
    else:  # plaid
        t = 0.5 * (np.sin(w * yy + ph_y) + np.sin(w * xx + ph_x))
    contrast = rng.uniform(0.4, 1.0)
    img = 0.5 + 0.25 * contrast * t + rng.uniform(-0.15, 0.15)
    img = img + rng.normal(0, 0.12, size=img.shape)
    return img.astype(np.float32)


def make_split(n, seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, NUM_CLASSES, size=n)
    x = np.stack([render_texture(TEXTURES[k], rng, HPARAMS["img"]) for k in y])[:, None]
    return x, y.astype(np.int64)


def build_loaders():
    xtr, ytr = make_split(HPARAMS["n_train"], HPARAMS["seed"])
    xva, yva = make_split(HPARAMS["n_val"], HPARAMS["seed"] + 1)
    mean, std = xtr.mean(), xtr.std()
    p, S = HPARAMS["pad"], HPARAMS["img"]
    xtr = torch.from_numpy((xtr - mean) / std)  # full padded canvas, cropped on the fly
    xva = torch.from_numpy((xva - mean) / std)[:, :, p:p + S, p:p + S].contiguous()  # center crop
    g = torch.Generator().manual_seed(HPARAMS["seed"])
    train_loader = DataLoader(TensorDataset(xtr, torch.from_numpy(ytr)), batch_size=HPARAMS["batch_size"],
                              shuffle=True, drop_last=True, generator=g)
    val_loader = DataLoader(TensorDataset(xva, torch.from_numpy(yva)), batch_size=400)
    return train_loader, val_loader


def random_crop_flip(x):
    n, S = x.size(0), HPARAMS["img"]
    max_off = x.size(-1) - S
    oy = torch.randint(0, max_off + 1, (n,))
    ox = torch.randint(0, max_off + 1, (n,))
    out = torch.stack([x[i, :, oy[i]:oy[i] + S, ox[i]:ox[i] + S] for i in range(n)])
    hflip = torch.rand(n) < 0.5
    out[hflip] = out[hflip].flip(-1)
    vflip = torch.rand(n) < 0.5
    out[vflip] = out[vflip].flip(-2)
    return out


def mixup(x, y, alpha):
    lam = float(np.random.beta(alpha, alpha))
    perm = torch.randperm(x.size(0))
    x_mix = lam * x + (1.0 - lam) * x[perm]
    return x_mix, y, y[perm], lam


def train_batches(loader):
    for x, y in loader:
        x = random_crop_flip(x)
        yield mixup(x, y, HPARAMS["mixup_alpha"])


# ---------------------------------------------------------------------------
# model
# ---------------------------------------------------------------------------
class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
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


class TextureResNet(nn.Module):
    def __init__(self, num_classes=NUM_CLASSES):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(inplace=True))
        self.layer1 = BasicBlock(16, 16, 1)
        self.layer2 = BasicBlock(16, 32, 2)
        self.layer3 = BasicBlock(32, 64, 2)
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x):
        x = self.layer3(self.layer2(self.layer1(self.stem(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def mixup_loss(model, batch):
    x, y_a, y_b, lam = batch
    logits = model(x)
    ls = HPARAMS["label_smoothing"]
    return lam * F.cross_entropy(logits, y_a, label_smoothing=ls) + \
        (1.0 - lam) * F.cross_entropy(logits, y_b, label_smoothing=ls)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=HPARAMS["max_lr"], weight_decay=HPARAMS["weight_decay"])


@torch.no_grad()
def validate(model, loader):
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
    torch.manual_seed(HPARAMS["seed"])
    np.random.seed(HPARAMS["seed"])
    train_loader, _ = build_loaders()
    data = []
    for i, batch in enumerate(train_batches(train_loader)):
        data.append(batch)
        if i == 3:
            break
    return {
        "model": TextureResNet(),
        "data": data,
        "loss_fn": mixup_loss,
        "make_optimizer": make_optimizer,
        "num_classes": NUM_CLASSES,
        "task": "classification",
    }


def main():
    torch.manual_seed(HPARAMS["seed"])
    np.random.seed(HPARAMS["seed"])
    train_loader, val_loader = build_loaders()
    model = TextureResNet()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"  | Name  | Type          | Params\n0 | model | TextureResNet | {n_params / 1e3:.1f} K")

    optimizer = make_optimizer(model.parameters())
    steps_per_epoch = len(train_loader)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=HPARAMS["max_lr"],
                                                    epochs=HPARAMS["max_epochs"], steps_per_epoch=steps_per_epoch,
                                                    pct_start=0.25)
    global_step = 0
    for epoch in range(HPARAMS["max_epochs"]):
        t0 = time.time()
        losses = []
        for batch in train_batches(train_loader):
            loss = mixup_loss(model, batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            losses.append(loss.item())
            global_step += 1
        val_loss, val_acc = validate(model, val_loader)
        elapsed = time.time() - t0
        print(f"Epoch {epoch}: 100%|##########| {steps_per_epoch}/{steps_per_epoch} [{elapsed:04.1f}s, "
              f"{steps_per_epoch / elapsed:.2f}it/s, step={global_step}, train_loss={np.mean(losses):.3f}, "
              f"val_loss={val_loss:.3f}, val_acc={val_acc:.3f}, lr={scheduler.get_last_lr()[0]:.2e}]")
    print(f"`Trainer.fit` stopped: `max_epochs={HPARAMS['max_epochs']}` reached.")


if __name__ == "__main__":
    main()
