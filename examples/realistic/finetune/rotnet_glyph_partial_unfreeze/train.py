"""Glyph recognition with a RotNet-pretrained CNN.

1. Pretext: predict which of 4 rotations (0/90/180/270) was applied to an
   unlabeled glyph crop (Gidaris et al. style self-supervision).
2. Fine-tune: keep the stem frozen, unfreeze the last conv block and train a
   new 6-way classification head on a small labelled set.
"""
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)

HERE = os.path.dirname(os.path.abspath(__file__))
CKPT_PATH = os.path.join(HERE, "rotnet_backbone.pt")
IMG = 24
SEED = 7

# stroke glyphs in [-1, 1] coords (x right, y down), drawn upright
GLYPHS = {
    "T": [((-0.7, -0.7), (0.7, -0.7)), ((0.0, -0.7), (0.0, 0.8))],
    "L": [((-0.4, -0.8), (-0.4, 0.7)), ((-0.4, 0.7), (0.6, 0.7))],
    "tri": [((0.0, -0.8), (-0.7, 0.6)), ((0.0, -0.8), (0.7, 0.6)), ((-0.7, 0.6), (0.7, 0.6))],
    "arrow": [((0.0, -0.8), (0.0, 0.8)), ((0.0, -0.8), (-0.5, -0.3)), ((0.0, -0.8), (0.5, -0.3))],
    "Y": [((-0.6, -0.8), (0.0, -0.1)), ((0.6, -0.8), (0.0, -0.1)), ((0.0, -0.1), (0.0, 0.8))],
    "F": [((-0.4, -0.8), (-0.4, 0.8)), ((-0.4, -0.8), (0.5, -0.8)), ((-0.4, -0.1), (0.3, -0.1))],
    # only seen (unlabeled) during pretraining
    "J": [((0.3, -0.8), (0.3, 0.6)), ((0.3, 0.6), (-0.4, 0.6)), ((-0.4, 0.6), (-0.4, 0.2))],
    "7": [((-0.6, -0.7), (0.6, -0.7)), ((0.6, -0.7), (-0.1, 0.8))],
    "h": [((-0.5, -0.8), (-0.5, 0.8)), ((-0.5, 0.0), (0.4, 0.0)), ((0.4, 0.0), (0.4, 0.8))],
    "P": [((-0.4, -0.8), (-0.4, 0.8)), ((-0.4, -0.8), (0.4, -0.5)), ((0.4, -0.5), (-0.4, -0.1))],
}
CLASSES = ["T", "L", "tri", "arrow", "Y", "F"]
N_CLASSES = len(CLASSES)

PRETRAIN_CFG = dict(n_images=8000, epochs=4, batch_size=128, lr=2e-3)
FINETUNE_CFG = dict(n_train_per_class=20, n_val_per_class=80, epochs=15,
                    batch_size=32, eval_batch_size=64, lr=2e-3, weight_decay=1e-4)

_ys, _xs = np.mgrid[0:IMG, 0:IMG].astype(np.float32)
PIX = np.stack([_xs.ravel(), _ys.ravel()], 1) + 0.5


# ----------------------------------------------------------------------------
# rendering
# ----------------------------------------------------------------------------
def _seg_dist(p, a, b):
    ab = b - a
    t = np.clip(((p - a) @ ab) / (ab @ ab + 1e-9), 0.0, 1.0)
    return np.linalg.norm(p - (a + t[:, None] * ab), axis=1)


def render_glyph(rng, name):
    scale = rng.uniform(7.0, 10.0)
    ang = np.deg2rad(rng.uniform(-12, 12))
    rot = np.array([[np.cos(ang), -np.sin(ang)], [np.sin(ang), np.cos(ang)]])
    center = IMG / 2 + rng.uniform(-2.0, 2.0, size=2)
    thick = rng.uniform(0.9, 1.6)
    d = np.full(len(PIX), np.inf)
    for a, b in GLYPHS[name]:
        a = center + scale * (rot @ np.array(a))
        b = center + scale * (rot @ np.array(b))
        d = np.minimum(d, _seg_dist(PIX, a, b))
    img = rng.uniform(0.6, 1.0) * np.clip(thick + 0.5 - d, 0.0, 1.0)
    img = img.reshape(IMG, IMG) + 0.25 * rng.standard_normal((IMG, IMG))
    return img.astype(np.float32)


def normalize(x):
    return (x - 0.1) / 0.35


def make_unlabeled_set(n, seed):
    rng = np.random.default_rng(seed)
    names = list(GLYPHS)
    X = np.stack([render_glyph(rng, names[rng.integers(len(names))]) for _ in range(n)])
    return normalize(torch.from_numpy(X[:, None]))


def make_labeled_set(n_per_class, seed):
    rng = np.random.default_rng(seed)
    xs, ys = [], []
    for c, name in enumerate(CLASSES):
        for _ in range(n_per_class):
            xs.append(render_glyph(rng, name))
            ys.append(c)
    X = normalize(torch.from_numpy(np.stack(xs)[:, None]))
    return X, torch.tensor(ys)


def build_finetune_loaders(cfg=FINETUNE_CFG, seed=SEED):
    Xtr, ytr = make_labeled_set(cfg["n_train_per_class"], seed + 1)
    Xva, yva = make_labeled_set(cfg["n_val_per_class"], seed + 2)
    train_loader = DataLoader(TensorDataset(Xtr, ytr), batch_size=cfg["batch_size"],
                              shuffle=True, generator=torch.Generator().manual_seed(seed))
    val_loader = DataLoader(TensorDataset(Xva, yva), batch_size=cfg["eval_batch_size"],
                            shuffle=False)
    return train_loader, val_loader


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
def conv_bn(cin, cout, stride):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(conv_bn(1, 16, 1), conv_bn(16, 32, 2))
        self.block = nn.Sequential(conv_bn(32, 64, 2), conv_bn(64, 64, 1))
        self.out_dim = 64

    def forward(self, x):
        return self.block(self.stem(x)).mean(dim=(2, 3))


class GlyphNet(nn.Module):
    def __init__(self, n_out):
        super().__init__()
        self.backbone = Backbone()
        self.head = nn.Sequential(nn.Dropout(0.3), nn.Linear(self.backbone.out_dim, n_out))

    def forward(self, x):
        return self.head(self.backbone(x))


# ----------------------------------------------------------------------------
# stage 1: rotation pretext
# ----------------------------------------------------------------------------
def rotate_batch(x, gen):
    k = torch.randint(0, 4, (x.shape[0],), generator=gen)
    out = torch.stack([torch.rot90(img, int(r), dims=(1, 2)) for img, r in zip(x, k)])
    return out, k


def pretrain(path=CKPT_PATH, cfg=PRETRAIN_CFG, seed=SEED):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    X = make_unlabeled_set(cfg["n_images"], seed)
    loader = DataLoader(TensorDataset(X), batch_size=cfg["batch_size"], shuffle=True, generator=gen)
    net = GlyphNet(4)
    opt = torch.optim.Adam(net.parameters(), lr=cfg["lr"])
    for epoch in range(cfg["epochs"]):
        net.train()
        tot, correct, n = 0.0, 0, 0
        for (xb,) in loader:
            xr, k = rotate_batch(xb, gen)
            logits = net(xr)
            loss = F.cross_entropy(logits, k)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += loss.item() * len(k)
            correct += (logits.argmax(1) == k).sum().item()
            n += len(k)
        print(f"pretrain epoch {epoch:02d} | rot_loss {tot / n:.4f} | rot_acc {100 * correct / n:.1f}%")
    torch.save(net.backbone.state_dict(), path)


# ----------------------------------------------------------------------------
# stage 2: fine-tune
# ----------------------------------------------------------------------------
def build_model(seed=SEED):
    torch.manual_seed(seed)
    model = GlyphNet(N_CLASSES)
    model.backbone.load_state_dict(torch.load(CKPT_PATH, map_location="cpu"))
    # low-level filters transfer as-is; only adapt the last block + head
    for p in model.backbone.stem.parameters():
        p.requires_grad_(False)
    return model


def make_optimizer(params, cfg=FINETUNE_CFG):
    params = [p for p in params if p.requires_grad]
    return torch.optim.Adam(params, lr=cfg["lr"], weight_decay=cfg["weight_decay"])


def loss_fn(model, batch):
    xb, yb = batch
    return F.cross_entropy(model(xb), yb)


@torch.no_grad()
def evaluate(model, loader):
    tot, correct, n = 0.0, 0, 0
    for xb, yb in loader:
        logits = model(xb)
        tot += F.cross_entropy(logits, yb, reduction="sum").item()
        correct += (logits.argmax(1) == yb).sum().item()
        n += len(yb)
    return tot / n, correct / n


def finetune(cfg=FINETUNE_CFG):
    train_loader, val_loader = build_finetune_loaders(cfg)
    model = build_model()
    opt = make_optimizer(model.parameters(), cfg)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=6, gamma=0.3)
    n_tr = sum(p.numel() for p in model.parameters() if p.requires_grad)
    n_all = sum(p.numel() for p in model.parameters())
    print(f"finetune: {len(train_loader.dataset)} train / {len(val_loader.dataset)} val, "
          f"trainable {n_tr}/{n_all} params")
    best = 0.0
    for epoch in range(cfg["epochs"]):
        t0 = time.time()
        model.train()
        tot, n = 0.0, 0
        for batch in train_loader:
            loss = loss_fn(model, batch)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += loss.item() * len(batch[1])
            n += len(batch[1])
        lr = opt.param_groups[0]["lr"]
        sched.step()
        val_loss, val_acc = evaluate(model, val_loader)
        best = max(best, val_acc)
        print(f"epoch {epoch:02d} | train_loss {tot / n:.4f} | val_loss {val_loss:.4f} | "
              f"val_acc {100 * val_acc:.1f}% | lr {lr:.1e} | {1000 * (time.time() - t0):.0f}ms")
    print(f"best val_acc {100 * best:.1f}%")
    return model


def make_target():
    train_loader, _ = build_finetune_loaders()
    return {
        "model": build_model(),
        "data": [b for _, b in zip(range(4), train_loader)],
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "num_classes": N_CLASSES,
        "task": "classification",
    }


if __name__ == "__main__":
    t_start = time.time()
    if not os.path.exists(CKPT_PATH):
        pretrain()
    finetune()
    print(f"total {time.time() - t_start:.1f}s")
