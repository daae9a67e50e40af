"""Land-cover tile classifier on top of a frozen image backbone.

32x32 RGB tiles (10 m/pixel, 6 land-cover classes) are embedded once with the
frozen conv backbone (Gabor / colour-opponent stem + two conv stages, loaded
from `load_pretrained_backbone`), the embeddings are cached, and only a small
MLP head is trained on them, which keeps experiments fast on the CPU box.
Lightning-style epoch logs.
"""
import argparse
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, TensorDataset

CONFIG = dict(
    seed=77,
    n_train=2000,
    n_val=500,
    img=32,
    extract_batch_size=200,
    batch_size=128,
    epochs=30,
    lr=3e-3,
    hidden=128,
)

CLASSES = ["water", "forest", "cropland", "grassland", "urban", "bare_soil"]
CLASS_P = [0.12, 0.22, 0.22, 0.18, 0.12, 0.14]
BASE_RGB = {"water": (0.10, 0.20, 0.35), "forest": (0.12, 0.30, 0.12), "cropland": (0.35, 0.45, 0.20),
            "grassland": (0.40, 0.52, 0.25), "urban": (0.45, 0.44, 0.42), "bare_soil": (0.55, 0.45, 0.32)}


def smooth_noise(rng, size, scale):
    coarse = rng.standard_normal((size // scale + 2, size // scale + 2))
    up = np.kron(coarse, np.ones((scale, scale)))[:size, :size]
    for axis in (0, 1):  # separable box blur to soften the blocks
        pad = [(0, 0), (0, 0)]
        pad[axis] = (scale // 2, scale - 1 - scale // 2)
        up = np.lib.stride_tricks.sliding_window_view(np.pad(up, pad, mode="edge"), scale, axis=axis).mean(-1)
    return up


def render_tile(cls, size, rng):
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    rgb = np.array(BASE_RGB[cls]) * rng.uniform(0.8, 1.2, size=3)
    season = rng.uniform(-0.08, 0.08)  # phenology shifts green vs brown
    rgb = rgb + np.array([season, -season, 0.0])
    img = np.broadcast_to(rgb[:, None, None], (3, size, size)).astype(np.float32).copy()
    if cls == "water":
        img += 0.03 * np.sin(2 * np.pi * (yy * rng.uniform(-1, 1) + xx) / rng.uniform(4, 8))
    elif cls == "forest":
        img *= 1 + 0.35 * smooth_noise(rng, size, 2)
    elif cls == "cropland":
        th = rng.uniform(0, np.pi)
        rows = np.sin(2 * np.pi * (np.cos(th) * xx + np.sin(th) * yy) / rng.uniform(3, 7))
        img *= 1 + rng.uniform(0.08, 0.3) * rows
        if rng.random() < 0.4:  # field boundary to a neighbouring parcel
            cut = rng.integers(6, size - 6)
            img[:, :, cut:] *= rng.uniform(0.75, 1.25, size=(3, 1, 1))
    elif cls == "grassland":
        img *= 1 + 0.15 * smooth_noise(rng, size, 6)
    elif cls == "urban":
        img *= 1 + 0.15 * smooth_noise(rng, size, 3)
        step = int(rng.integers(7, 12))
        off = rng.integers(0, step, size=2)
        roads = ((yy.astype(int) + off[0]) % step < 2) | ((xx.astype(int) + off[1]) % step < 2)
        img[:, roads] = rng.uniform(0.25, 0.35)
        roofs = rng.random((size // 4 + 1, size // 4 + 1)) < 0.3
        img[:, np.kron(roofs, np.ones((4, 4), bool))[:size, :size] & ~roads] += rng.uniform(0.1, 0.3)
    elif cls == "bare_soil":
        img *= 1 + 0.2 * smooth_noise(rng, size, 4)
    if rng.random() < 0.25:  # thin cloud / haze
        img = img * 0.6 + 0.4 * rng.uniform(0.6, 0.9) * (0.7 + 0.3 * smooth_noise(rng, size, 8))
    img += rng.normal(0, 0.03, img.shape)
    return np.clip(img, 0, 1).astype(np.float32)


class TileDataset(Dataset):
    MEAN = torch.tensor([0.32, 0.38, 0.27]).view(3, 1, 1)
    STD = torch.tensor([0.15, 0.13, 0.11]).view(3, 1, 1)

    def __init__(self, n, size, rng):
        self.labels = rng.choice(len(CLASSES), size=n, p=CLASS_P)
        self.images = torch.from_numpy(np.stack([render_tile(CLASSES[c], size, rng) for c in self.labels]))

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return (self.images[i] - self.MEAN) / self.STD, int(self.labels[i])


def gabor_bank(k=7):
    r = torch.arange(k, dtype=torch.float32) - k // 2
    yy, xx = torch.meshgrid(r, r, indexing="ij")
    filters = []
    for freq in (0.15, 0.3):
        for th in np.linspace(0, np.pi, 6, endpoint=False):
            u = xx * math.cos(th) + yy * math.sin(th)
            g = torch.exp(-(xx ** 2 + yy ** 2) / (2 * 2.0 ** 2)) * torch.cos(2 * math.pi * freq * u)
            filters.append(torch.stack([g, g, g]) / 3)  # luminance
    blob = torch.exp(-(xx ** 2 + yy ** 2) / (2 * 1.5 ** 2))
    for w in ([1, 0, 0], [0, 1, 0], [0, 0, 1], [1, -1, 0], [0.5, 0.5, -1], [-1, 1, 0], [1, 1, 1], [-0.5, 1, -0.5]):
        filters.append(torch.tensor(w, dtype=torch.float32).view(3, 1, 1) * blob)  # colour-opponent
    bank = torch.stack(filters)
    return bank - bank.mean(dim=(1, 2, 3), keepdim=True) * (torch.arange(len(bank)) < 12).float().view(-1, 1, 1, 1)


class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 20, 7, padding=3, bias=False)
        self.stage1 = nn.Conv2d(20, 48, 3, padding=1)
        self.stage2 = nn.Conv2d(48, 64, 3, padding=1)
        self.out_dim = 128

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.stem(x)), 2)
        h = F.max_pool2d(F.relu(self.stage1(h)), 2)
        h = F.relu(self.stage2(h))
        return torch.cat([h.mean(dim=(2, 3)), h.amax(dim=(2, 3))], dim=1)


def load_pretrained_backbone(seed):
    g = torch.Generator().manual_seed(seed)
    net = Backbone()
    with torch.no_grad():
        net.stem.weight.copy_(gabor_bank())
        for conv in (net.stage1, net.stage2):
            fan_in = conv.weight[0].numel()
            conv.weight.copy_(torch.randn(conv.weight.shape, generator=g) * math.sqrt(2.0 / fan_in))
            conv.bias.zero_()
    for p in net.parameters():
        p.requires_grad_(False)
    return net.eval()


class TileClassifier(nn.Module):
    def __init__(self, backbone, n_classes, hidden):
        super().__init__()
        self.backbone = backbone
        self.head = nn.Sequential(nn.BatchNorm1d(backbone.out_dim), nn.Linear(backbone.out_dim, hidden), nn.ReLU(),
                                  nn.Dropout(0.2), nn.Linear(hidden, n_classes))

    def forward(self, x):
        return self.head(self.backbone(x))


def make_loader(ds, cfg, train):
    return DataLoader(ds, batch_size=cfg["extract_batch_size"], shuffle=train,
                      generator=torch.Generator().manual_seed(cfg["seed"]))


@torch.no_grad()
def extract_features(backbone, loader):
    return torch.cat([backbone(x) for x, _ in loader])


def build_features(cfg):
    rng = np.random.default_rng(cfg["seed"])
    train_ds = TileDataset(cfg["n_train"], cfg["img"], rng)
    val_ds = TileDataset(cfg["n_val"], cfg["img"], rng)
    backbone = load_pretrained_backbone(cfg["seed"])
    tr_feats = extract_features(backbone, make_loader(train_ds, cfg, train=True))
    va_feats = extract_features(backbone, make_loader(val_ds, cfg, train=False))
    tr = (tr_feats, torch.as_tensor(train_ds.labels, dtype=torch.long))
    va = (va_feats, torch.as_tensor(val_ds.labels, dtype=torch.long))
    return backbone, tr, va


def loss_fn(model, batch):
    feats, y = batch
    return F.cross_entropy(model.head(feats), y)


def make_optimizer(model, cfg):
    return torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=cfg["lr"])


def make_target():
    cfg = dict(CONFIG)
    torch.manual_seed(cfg["seed"])
    backbone, (f_tr, y_tr), _ = build_features(cfg)
    model = TileClassifier(backbone, len(CLASSES), cfg["hidden"])
    bs = cfg["batch_size"]
    data = [(f_tr[i * bs:(i + 1) * bs], y_tr[i * bs:(i + 1) * bs]) for i in range(4)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model, cfg), "task": "classification", "num_classes": len(CLASSES)}


@torch.no_grad()
def evaluate(model, feats, y):
    model.head.eval()
    logits = model.head(feats)
    model.head.train()
    return F.cross_entropy(logits, y).item(), (logits.argmax(1) == y).float().mean().item()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=CONFIG["epochs"])
    p.add_argument("--lr", type=float, default=CONFIG["lr"])
    cli = p.parse_args()
    cfg = dict(CONFIG, epochs=cli.epochs, lr=cli.lr)

    torch.manual_seed(cfg["seed"])
    t0 = time.time()
    backbone, (f_tr, y_tr), (f_va, y_va) = build_features(cfg)
    model = TileClassifier(backbone, len(CLASSES), cfg["hidden"])
    n_frozen = sum(p.numel() for p in model.backbone.parameters())
    n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print(f"cached {len(y_tr)} train / {len(y_va)} val embeddings (dim {f_tr.shape[1]}) in {time.time() - t0:.1f}s")
    print(f"backbone frozen ({n_frozen / 1e3:.1f} K params), trainable head {n_train / 1e3:.1f} K params")

    loader = DataLoader(TensorDataset(f_tr, y_tr), batch_size=cfg["batch_size"], shuffle=True,
                        generator=torch.Generator().manual_seed(cfg["seed"] + 1))
    opt = make_optimizer(model, cfg)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="min", factor=0.3, patience=3)
    model.head.train()
    for epoch in range(cfg["epochs"]):
        tot, correct, n = 0.0, 0, 0
        for fb, yb in loader:
            logits = model.head(fb)
            loss = F.cross_entropy(logits, yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += loss.item() * len(yb)
            correct += (logits.argmax(1) == yb).sum().item()
            n += len(yb)
        val_loss, val_acc = evaluate(model, f_va, y_va)
        sched.step(val_loss)
        print(f"Epoch {epoch}: train_loss={tot / n:.4f} train_acc={correct / n:.4f} "
              f"val_loss={val_loss:.4f} val_acc={val_acc:.4f}")


if __name__ == "__main__":
    main()
