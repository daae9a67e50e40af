"""Fabric defect classifier for the loom inspection camera.

Grayscale 32x32 patches cropped around candidate regions flagged by the line
scanner, labelled by the QA operator as one of: clean, hole, scratch, stain.
We only have a few hundred labelled patches from the pilot line, so the model
is a small conv net with BatchNorm trained with Adam.
"""
import argparse
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIG = dict(
    seed=3,
    n_train=300,
    n_val=200,
    img=32,
    batch_size=24,
    epochs=40,
    lr=2e-3,
)

CLASSES = ["clean", "hole", "scratch", "stain"]


def weave(rng, size):
    """Woven background: two sinusoidal thread patterns with random pitch/phase and some fibre noise."""
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    pitch = rng.uniform(2.5, 4.0)
    ang = rng.uniform(-0.25, 0.25)
    u = xx * np.cos(ang) + yy * np.sin(ang)
    v = -xx * np.sin(ang) + yy * np.cos(ang)
    base = 0.22 * np.sin(2 * np.pi * u / pitch + rng.uniform(0, 6.3)) \
        + 0.22 * np.sin(2 * np.pi * v / pitch + rng.uniform(0, 6.3))
    base += rng.normal(0, 0.2, size=(size, size))
    brightness = rng.uniform(0.35, 0.65)
    return brightness + 0.5 * base * rng.uniform(0.7, 1.3), (yy, xx)


def make_patch(rng, label, size):
    img, (yy, xx) = weave(rng, size)
    cy, cx = rng.uniform(8, size - 8, size=2)
    if label == 1:  # hole: small dark roundish blob
        r = rng.uniform(1.8, 3.2)
        d2 = ((yy - cy) ** 2 + (xx - cx) ** 2) / r ** 2
        img -= rng.uniform(0.5, 0.8) * np.exp(-d2 ** 2)
    elif label == 2:  # scratch: thin bright line segment at a random angle
        th = rng.uniform(0, np.pi)
        along = (xx - cx) * np.cos(th) + (yy - cy) * np.sin(th)
        across = -(xx - cx) * np.sin(th) + (yy - cy) * np.cos(th)
        half_len = rng.uniform(5, 10)
        img += rng.uniform(0.35, 0.6) * np.exp(-(across / 0.8) ** 2) * (np.abs(along) < half_len)
    elif label == 3:  # stain: large, soft, low-contrast discolouration
        sy, sx = rng.uniform(4, 7, size=2)
        img -= rng.uniform(0.25, 0.4) * np.exp(-((yy - cy) ** 2 / (2 * sy ** 2) + (xx - cx) ** 2 / (2 * sx ** 2)))
    img += rng.normal(0, 0.08, size=(size, size))
    return img.astype(np.float32)


def make_split(n, size, seed):
    rng = np.random.default_rng(seed)
    # pilot line: most flagged candidates turn out to be clean
    labels = rng.choice(4, size=n, p=[0.4, 0.2, 0.2, 0.2])
    imgs = np.stack([make_patch(rng, int(c), size) for c in labels])
    # operator labels from the pilot: ~10% of patches were tagged with a different class on review
    disputed = rng.random(n) < 0.1
    labels[disputed] = rng.choice(4, size=disputed.sum())
    return torch.from_numpy(imgs).unsqueeze(1), torch.from_numpy(labels.astype(np.int64))


def build_data(cfg):
    X_tr, y_tr = make_split(cfg["n_train"], cfg["img"], cfg["seed"])
    X_va, y_va = make_split(cfg["n_val"], cfg["img"], cfg["seed"] + 1000)
    mean, std = X_tr.mean(), X_tr.std()
    return ((X_tr - mean) / std, y_tr), ((X_va - mean) / std, y_va)


def augment(x):
    """Defects and the weave look the same mirrored or rotated by 90 degrees."""
    if torch.rand(1) < 0.5:
        x = x.flip(3)
    if torch.rand(1) < 0.5:
        x = x.flip(2)
    return torch.rot90(x, int(torch.randint(0, 4, (1,))), (2, 3))


def conv_block(c_in, c_out):
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out),
                         nn.ReLU(inplace=True), nn.MaxPool2d(2))


class DefectNet(nn.Module):
    def __init__(self, n_classes=4, size=32):
        super().__init__()
        self.features = nn.Sequential(conv_block(1, 16), conv_block(16, 32), conv_block(32, 64))
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(64 * (size // 8) ** 2, 256), nn.ReLU(inplace=True),
                                  nn.Linear(256, n_classes))

    def forward(self, x):
        return self.head(self.features(x))


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def build_optimizer(model, cfg):
    return torch.optim.Adam(model.parameters(), lr=cfg["lr"])


def make_target():
    cfg = dict(CONFIG)
    torch.manual_seed(cfg["seed"])
    (X_tr, y_tr), _ = build_data(cfg)
    model = DefectNet(len(CLASSES), cfg["img"])
    bs = cfg["batch_size"]
    data = [(X_tr[i * bs:(i + 1) * bs], y_tr[i * bs:(i + 1) * bs]) for i in range(4)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": build_optimizer(model, cfg), "task": "classification", "num_classes": len(CLASSES)}


@torch.no_grad()
def evaluate(model, X, y, bs=100):
    model.eval()
    tot, correct = 0.0, 0
    for i in range(0, len(y), bs):
        logits = model(X[i:i + bs])
        tot += F.cross_entropy(logits, y[i:i + bs], reduction="sum").item()
        correct += (logits.argmax(1) == y[i:i + bs]).sum().item()
    model.train()
    return tot / len(y), correct / len(y)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=CONFIG["epochs"])
    p.add_argument("--lr", type=float, default=CONFIG["lr"])
    cli = p.parse_args()
    cfg = dict(CONFIG, epochs=cli.epochs, lr=cli.lr)

    torch.manual_seed(cfg["seed"])
    np.random.seed(cfg["seed"])
    (X_tr, y_tr), (X_va, y_va) = build_data(cfg)
    print(f"train {tuple(X_tr.shape)} val {tuple(X_va.shape)} "
          f"class counts {torch.bincount(y_tr, minlength=4).tolist()}")

    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X_tr, y_tr), batch_size=cfg["batch_size"],
                                         shuffle=True, drop_last=True,
                                         generator=torch.Generator().manual_seed(cfg["seed"]))
    model = DefectNet(len(CLASSES), cfg["img"])
    opt = build_optimizer(model, cfg)

    for epoch in range(1, cfg["epochs"] + 1):
        t0 = time.time()
        tot, correct, n = 0.0, 0, 0
        for xb, yb in loader:
            xb = augment(xb)
            logits = model(xb)
            loss = F.cross_entropy(logits, yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            tot += loss.item() * len(yb)
            correct += (logits.argmax(1) == yb).sum().item()
            n += len(yb)
        val_loss, val_acc = evaluate(model, X_va, y_va)
        print(f"epoch {epoch:3d} | lr {opt.param_groups[0]['lr']:.4f} | train loss {tot / n:.4f} | "
              f"train acc {correct / n:.3f} | val loss {val_loss:.4f} | val acc {val_acc:.3f} | "
              f"{time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
