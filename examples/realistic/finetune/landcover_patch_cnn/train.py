"""Fine-tune a small texture-pretrained CNN on land-cover patch classification.

Stage 1 (only if no checkpoint exists): pretrain the backbone on a synthetic
texture task (orientation x frequency) and save its state dict.
Stage 2: load the backbone, freeze the stem and layer1, train layer2 with a
small LR and a fresh classification head with a larger LR (linear warmup,
cosine decay).
"""
import math
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

RUN_DIR = os.path.dirname(os.path.abspath(__file__))
CKPT_PATH = os.path.join(RUN_DIR, "texture_backbone.pt")
PATCH_PATH = os.path.join(RUN_DIR, "landcover_patches.npz")

IMG = 24
CLASSES = ["cropland", "forest", "water", "urban", "grassland", "bare_soil"]
# channel statistics of the pretraining corpus (computed once, hard-coded)
MEAN = torch.tensor([0.47, 0.46, 0.44])
STD = torch.tensor([0.21, 0.20, 0.21])

CFG = dict(
    seed=0,
    batch_size=32,
    epochs=20,
    head_lr=2e-3,
    backbone_lr=2e-4,
    weight_decay=1e-4,
    warmup_steps=40,
    n_train_per_class=60,
    n_val_per_class=100,
)


# --------------------------------------------------------------------------
# synthetic textures
# --------------------------------------------------------------------------
_yy, _xx = np.mgrid[0:IMG, 0:IMG].astype(np.float32)


def stripes(rng, angle, freq):
    phase = rng.uniform(0, 2 * np.pi)
    u = np.cos(angle) * _xx + np.sin(angle) * _yy
    return 0.5 + 0.5 * np.sin(2 * np.pi * freq * u + phase)


def blobs(rng, n_blobs, radius):
    img = np.zeros((IMG, IMG), np.float32)
    for _ in range(n_blobs):
        cy, cx = rng.uniform(0, IMG, size=2)
        r = radius * rng.uniform(0.7, 1.3)
        img += np.exp(-((_yy - cy) ** 2 + (_xx - cx) ** 2) / (2 * r * r))
    return np.clip(img, 0, 1)


def grid(rng, spacing):
    ox, oy = rng.integers(0, spacing, size=2)
    g = ((((_xx + ox) % spacing) < 2) | (((_yy + oy) % spacing) < 2)).astype(np.float32)
    return g


def colorize(rng, tex, base, tint, noise):
    """tex: (H, W) in [0, 1] -> (H, W, 3) float image."""
    base = np.asarray(base, np.float32) + rng.normal(0, 0.08, 3)
    tint = np.asarray(tint, np.float32) + rng.normal(0, 0.08, 3)
    img = base[None, None, :] * (1 - tex[..., None]) + tint[None, None, :] * tex[..., None]
    img = img * rng.uniform(0.75, 1.25) + rng.normal(0, noise, img.shape)
    return np.clip(img, 0, 1).astype(np.float32)


def make_pretrain_set(n, seed):
    """Source task: 4 orientations x 2 frequencies of random-coloured stripes (CHW)."""
    rng = np.random.default_rng(seed)
    xs, ys = [], []
    for _ in range(n):
        y = int(rng.integers(0, 8))
        angle = (y % 4) * np.pi / 4 + rng.normal(0, 0.08)
        freq = (0.08, 0.2)[y // 4] * rng.uniform(0.85, 1.15)
        tex = stripes(rng, angle, freq)
        img = colorize(rng, tex, rng.uniform(0.1, 0.8, 3), rng.uniform(0.2, 0.9, 3), 0.08)
        xs.append(img.transpose(2, 0, 1))
        ys.append(y)
    x = torch.from_numpy(np.stack(xs))
    x = (x - MEAN[:, None, None]) / STD[:, None, None]
    return x, torch.tensor(ys)


def render_patch(rng, label):
    """Target task: land-cover patches, mostly distinguished by texture."""
    if label == 0:   # cropland: parallel field strips, diagonal-ish
        tex = stripes(rng, rng.choice([np.pi / 4, 3 * np.pi / 4]) + rng.normal(0, 0.15), 0.12 * rng.uniform(0.8, 1.2))
        base, tint = (0.45, 0.45, 0.25), (0.35, 0.55, 0.25)
    elif label == 1:  # forest: many small dark crowns
        tex = blobs(rng, int(rng.integers(14, 22)), 1.6)
        base, tint = (0.30, 0.42, 0.25), (0.18, 0.33, 0.18)
    elif label == 2:  # water: smooth, faint ripples
        tex = 0.3 * stripes(rng, rng.uniform(0, np.pi), 0.04)
        base, tint = (0.25, 0.38, 0.45), (0.30, 0.42, 0.50)
    elif label == 3:  # urban: street grid
        tex = grid(rng, int(rng.integers(5, 8)))
        base, tint = (0.45, 0.45, 0.45), (0.60, 0.58, 0.55)
    elif label == 4:  # grassland: few large soft patches
        tex = blobs(rng, int(rng.integers(2, 5)), 4.5)
        base, tint = (0.40, 0.50, 0.28), (0.33, 0.55, 0.25)
    else:             # bare soil: fine ploughing lines, axis aligned
        tex = stripes(rng, rng.choice([0.0, np.pi / 2]) + rng.normal(0, 0.15), 0.22 * rng.uniform(0.85, 1.15))
        base, tint = (0.50, 0.45, 0.35), (0.42, 0.48, 0.30)
    return colorize(rng, tex, base, tint, 0.10)


def export_patches(path, n_train, n_val, seed):
    """Write the labelled patches as the tiling tool exports them (uint8 images)."""
    rng = np.random.default_rng(seed)
    out = {}
    for split, n in (("train", n_train), ("val", n_val)):
        labels = np.repeat(np.arange(len(CLASSES)), n)
        rng.shuffle(labels)
        imgs = np.stack([render_patch(rng, int(l)) for l in labels])
        out[f"{split}_images"] = (imgs * 255).round().astype(np.uint8)
        out[f"{split}_labels"] = labels.astype(np.int64)
    np.savez_compressed(path, **out)


def load_split(path, split):
    d = np.load(path)
    imgs = d[f"{split}_images"]
    x = torch.from_numpy(imgs).float().div_(255.0)
    x = x.view(-1, 3, IMG, IMG)
    x = (x - MEAN[:, None, None]) / STD[:, None, None]
    y = torch.from_numpy(d[f"{split}_labels"])
    return x, y


def augment(x):
    """Random horizontal / vertical flips (land cover has no canonical orientation)."""
    if torch.rand(()) < 0.5:
        x = x.flip(-1)
    if torch.rand(()) < 0.5:
        x = x.flip(-2)
    return x


# --------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------
def conv_bn(cin, cout, stride=1):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class TextureNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = conv_bn(3, 16)
        self.layer1 = nn.Sequential(conv_bn(16, 32, 2), conv_bn(32, 32))
        self.layer2 = nn.Sequential(conv_bn(32, 64, 2), conv_bn(64, 64))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.out_dim = 64

    def forward(self, x):
        x = self.layer2(self.layer1(self.stem(x)))
        return self.pool(x).flatten(1)


class PatchClassifier(nn.Module):
    def __init__(self, backbone, num_classes):
        super().__init__()
        self.backbone = backbone
        self.head = nn.Sequential(nn.Dropout(0.2), nn.Linear(backbone.out_dim, num_classes))

    def forward(self, x):
        return self.head(self.backbone(x))

    def frozen_modules(self):
        return [self.backbone.stem, self.backbone.layer1]


def pretrain_backbone(path, seed=123, n=2400, epochs=3):
    torch.manual_seed(seed)
    x, y = make_pretrain_set(n, seed)
    net = TextureNet()
    clf = nn.Linear(net.out_dim, 8)
    opt = torch.optim.Adam(list(net.parameters()) + list(clf.parameters()), lr=2e-3)
    dl = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True)
    for ep in range(epochs):
        tot, correct, seen = 0.0, 0, 0
        for xb, yb in dl:
            logits = clf(net(xb))
            loss = F.cross_entropy(logits, yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += loss.item() * len(yb)
            correct += (logits.argmax(1) == yb).sum().item()
            seen += len(yb)
        print(f"[pretrain] epoch {ep + 1}/{epochs} loss {tot / seen:.4f} acc {correct / seen:.3f}")
    torch.save(net.state_dict(), path)


def build_model(num_classes):
    backbone = TextureNet()
    state = torch.load(CKPT_PATH, map_location="cpu")
    backbone.load_state_dict(state)
    model = PatchClassifier(backbone, num_classes)
    for m in model.frozen_modules():
        for p in m.parameters():
            p.requires_grad_(False)
    return model


def build_optimizer(model, cfg):
    groups = [
        {"params": [p for p in model.backbone.layer2.parameters()], "lr": cfg["backbone_lr"]},
        {"params": list(model.head.parameters()), "lr": cfg["head_lr"]},
    ]
    return torch.optim.AdamW(groups, weight_decay=cfg["weight_decay"])


def build_scheduler(opt, cfg, total_steps):
    def lr_lambda(step):
        if step < cfg["warmup_steps"]:
            return (step + 1) / cfg["warmup_steps"]
        prog = (step - cfg["warmup_steps"]) / max(1, total_steps - cfg["warmup_steps"])
        return 0.5 * (1 + math.cos(math.pi * prog))
    return torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda)


def loss_fn(model, batch):
    xb, yb = batch
    return F.cross_entropy(model(xb), yb)


def prepare(cfg=CFG):
    if not os.path.exists(CKPT_PATH):
        pretrain_backbone(CKPT_PATH)
    if not os.path.exists(PATCH_PATH):
        export_patches(PATCH_PATH, cfg["n_train_per_class"], cfg["n_val_per_class"], seed=cfg["seed"] + 7)
    torch.manual_seed(cfg["seed"])
    x_tr, y_tr = load_split(PATCH_PATH, "train")
    x_va, y_va = load_split(PATCH_PATH, "val")
    train_dl = DataLoader(TensorDataset(x_tr, y_tr), batch_size=cfg["batch_size"], shuffle=True, drop_last=True)
    val_dl = DataLoader(TensorDataset(x_va, y_va), batch_size=256)
    model = build_model(len(CLASSES))
    optimizer = build_optimizer(model, cfg)
    return model, optimizer, train_dl, val_dl


def set_train_mode(model):
    model.train()
    for m in model.frozen_modules():
        m.eval()


@torch.no_grad()
def evaluate(model, dl):
    model.eval()
    tot, correct, n = 0.0, 0, 0
    for xb, yb in dl:
        logits = model(xb)
        tot += F.cross_entropy(logits, yb, reduction="sum").item()
        correct += (logits.argmax(1) == yb).sum().item()
        n += len(yb)
    return tot / n, correct / n


def make_target():
    model, optimizer, train_dl, val_dl = prepare(CFG)
    set_train_mode(model)
    return {
        "model": model,
        "data": train_dl,
        "val_data": val_dl,
        "loss_fn": loss_fn,
        "optimizer": optimizer,
        "num_classes": len(CLASSES),
        "task": "classification",
    }


def main():
    torch.set_num_threads(1)
    cfg = CFG
    t0 = time.time()
    model, optimizer, train_dl, val_dl = prepare(cfg)
    total_steps = cfg["epochs"] * len(train_dl)
    sched = build_scheduler(optimizer, cfg, total_steps)
    n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print(f"train patches: {len(train_dl.dataset)}  val patches: {len(val_dl.dataset)}  trainable params: {n_train}")
    for epoch in range(cfg["epochs"]):
        set_train_mode(model)
        te = time.time()
        tot, correct, seen = 0.0, 0, 0
        for xb, yb in train_dl:
            xb = augment(xb)
            logits = model(xb)
            loss = F.cross_entropy(logits, yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            sched.step()
            tot += loss.item() * len(yb)
            correct += (logits.argmax(1) == yb).sum().item()
            seen += len(yb)
        val_loss, val_acc = evaluate(model, val_dl)
        print(f"Epoch {epoch + 1}/{cfg['epochs']} - {time.time() - te:.1f}s - loss: {tot / seen:.4f} - "
              f"accuracy: {correct / seen:.4f} - val_loss: {val_loss:.4f} - val_accuracy: {val_acc:.4f} - "
              f"lr: {optimizer.param_groups[1]['lr']:.2e}")
    print(f"done in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
