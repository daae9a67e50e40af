"""Fine-tune a small glyph CNN (pretrained on synthetic primitive shapes) on road-sign pictograms."""
import math
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

SEED = 7
IMG = 28
RUN_DIR = os.path.dirname(os.path.abspath(__file__))
CKPT = os.path.join(RUN_DIR, "glyphnet_pretrained.pt")

torch.set_num_threads(1)

SOURCE_CLASSES = ["bar_0", "bar_45", "bar_90", "bar_135", "circle", "square", "triangle", "cross", "x_mark", "dot"]
SIGN_CLASSES = ["ahead", "turn_left", "turn_right", "keep_left", "keep_right", "no_entry", "no_vehicles", "give_way"]

CFG = dict(
    pretrain_epochs=2,
    pretrain_lr=3e-3,
    n_pretrain=2000,
    n_train=1024,
    n_val=512,
    batch_size=64,
    epochs=10,
    head_lr=1e-2,
    backbone_lr=2e-3,
    weight_decay=1e-4,
    warmup_steps=30,
)

# ----------------------------------------------------------------------------- rendering
_yy, _xx = np.mgrid[0:IMG, 0:IMG].astype(np.float32)


def _segment(canvas, p0, p1, width):
    (x0, y0), (x1, y1) = p0, p1
    dx, dy = x1 - x0, y1 - y0
    L2 = dx * dx + dy * dy + 1e-6
    t = np.clip(((_xx - x0) * dx + (_yy - y0) * dy) / L2, 0.0, 1.0)
    d = np.hypot(_xx - (x0 + t * dx), _yy - (y0 + t * dy))
    np.maximum(canvas, np.clip(width - d + 0.5, 0.0, 1.0), out=canvas)


def _ring(canvas, c, r, width):
    d = np.abs(np.hypot(_xx - c[0], _yy - c[1]) - r)
    np.maximum(canvas, np.clip(width - d + 0.5, 0.0, 1.0), out=canvas)


def _disk(canvas, c, r):
    d = np.hypot(_xx - c[0], _yy - c[1])
    np.maximum(canvas, np.clip(r - d + 0.5, 0.0, 1.0), out=canvas)


def _polygon(canvas, pts, width):
    for i in range(len(pts)):
        _segment(canvas, pts[i], pts[(i + 1) % len(pts)], width)


def _rot(v, ang):
    c, s = math.cos(ang), math.sin(ang)
    return (c * v[0] - s * v[1], s * v[0] + c * v[1])


def _arrow(canvas, c, direction, length, width):
    d = np.asarray(direction, dtype=np.float32)
    d = d / np.linalg.norm(d)
    tail = (c[0] - d[0] * length, c[1] - d[1] * length)
    tip = (c[0] + d[0] * length, c[1] + d[1] * length)
    _segment(canvas, tail, tip, width)
    back = (-d[0] * length * 0.6, -d[1] * length * 0.6)
    for a in (0.6, -0.6):
        w = _rot(back, a)
        _segment(canvas, tip, (tip[0] + w[0], tip[1] + w[1]), width)


def _finish(canvas, rng):
    contrast = rng.uniform(0.6, 1.0)
    bg = rng.uniform(0.0, 0.25)
    img = bg + contrast * canvas + rng.normal(0, 0.06, canvas.shape)
    return np.clip(img, 0.0, 1.0).astype(np.float32)


def render_source(label, rng):
    canvas = np.zeros((IMG, IMG), np.float32)
    c = (IMG / 2 + rng.uniform(-3, 3), IMG / 2 + rng.uniform(-3, 3))
    s = rng.uniform(7, 10)
    w = rng.uniform(1.0, 2.0)
    name = SOURCE_CLASSES[label]
    if name.startswith("bar_"):
        ang = math.radians(float(name.split("_")[1]) + rng.uniform(-8, 8))
        v = (math.cos(ang) * s, -math.sin(ang) * s)
        _segment(canvas, (c[0] - v[0], c[1] - v[1]), (c[0] + v[0], c[1] + v[1]), w)
    elif name == "circle":
        _ring(canvas, c, s, w)
    elif name == "square":
        _polygon(canvas, [(c[0] - s, c[1] - s), (c[0] + s, c[1] - s), (c[0] + s, c[1] + s), (c[0] - s, c[1] + s)], w)
    elif name == "triangle":
        _polygon(canvas, [(c[0], c[1] - s), (c[0] + s, c[1] + s * 0.8), (c[0] - s, c[1] + s * 0.8)], w)
    elif name == "cross":
        _segment(canvas, (c[0] - s, c[1]), (c[0] + s, c[1]), w)
        _segment(canvas, (c[0], c[1] - s), (c[0], c[1] + s), w)
    elif name == "x_mark":
        _segment(canvas, (c[0] - s, c[1] - s), (c[0] + s, c[1] + s), w)
        _segment(canvas, (c[0] - s, c[1] + s), (c[0] + s, c[1] - s), w)
    else:
        _disk(canvas, c, s * 0.45)
    return _finish(canvas, rng)


def render_sign(label, rng):
    canvas = np.zeros((IMG, IMG), np.float32)
    c = (IMG / 2 + rng.uniform(-2.5, 2.5), IMG / 2 + rng.uniform(-2.5, 2.5))
    s = rng.uniform(6.5, 9.0)
    w = rng.uniform(1.0, 1.8)
    tilt = math.radians(rng.uniform(-12, 12))
    name = SIGN_CLASSES[label]
    dirs = {
        "ahead": (0, -1), "turn_left": (-1, 0), "turn_right": (1, 0),
        "keep_left": (-1, 1), "keep_right": (1, 1),
    }
    if name in dirs:
        _ring(canvas, c, s + 3.5, 0.8)
        _arrow(canvas, c, _rot(dirs[name], tilt), s * 0.75, w)
    elif name == "no_entry":
        _ring(canvas, c, s + 3.5, 0.8)
        v = _rot((s * 0.8, 0), tilt)
        _segment(canvas, (c[0] - v[0], c[1] - v[1]), (c[0] + v[0], c[1] + v[1]), w + 0.8)
    elif name == "no_vehicles":
        _ring(canvas, c, s + 3.5, w + 0.5)
    else:
        r = s + 3.0
        _polygon(canvas, [(c[0] - r, c[1] - r * 0.7), (c[0] + r, c[1] - r * 0.7), (c[0], c[1] + r)], w)
    return _finish(canvas, rng)


def make_images(render, n, n_classes, seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_classes, size=n)
    x = np.stack([render(int(k), rng) for k in y])[:, None]
    return x, y.astype(np.int64)


# ----------------------------------------------------------------------------- data
class SignDataset(Dataset):
    def __init__(self, images, labels, train=False, seed=0):
        self.images = torch.from_numpy(images)
        self.labels = torch.from_numpy(labels)
        self.train = train
        self.gen = torch.Generator().manual_seed(seed)

    def __len__(self):
        return len(self.labels)

    def augment(self, x):
        dx, dy = torch.randint(-2, 3, (2,), generator=self.gen).tolist()
        x = torch.roll(x, shifts=(dy, dx), dims=(-2, -1))
        gain = 0.8 + 0.4 * torch.rand(1, generator=self.gen)
        return (x * gain).clamp(0, 1)

    def __getitem__(self, i):
        x = self.images[i]
        if self.train:
            x = self.augment(x)
        return (x - 0.5) / 0.25, self.labels[i]


def build_loaders(cfg):
    xtr, ytr = make_images(render_sign, cfg["n_train"], len(SIGN_CLASSES), seed=SEED + 1)
    xva, yva = make_images(render_sign, cfg["n_val"], len(SIGN_CLASSES), seed=SEED + 2)
    g = torch.Generator().manual_seed(SEED)
    train_dl = DataLoader(SignDataset(xtr, ytr, train=True, seed=SEED), batch_size=cfg["batch_size"], shuffle=True,
                          generator=g, drop_last=True)
    val_dl = DataLoader(SignDataset(xva, yva), batch_size=256)
    return train_dl, val_dl


# ----------------------------------------------------------------------------- model
class GlyphBackbone(nn.Module):
    def __init__(self):
        super().__init__()

        def block(cin, cout):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))

        self.stem = block(1, 16)
        self.stage1 = block(16, 32)
        self.stage2 = block(32, 64)
        self.out_dim = 64

    def forward(self, x):
        x = F.max_pool2d(self.stem(x), 2)
        x = F.max_pool2d(self.stage1(x), 2)
        x = self.stage2(x)
        return F.adaptive_avg_pool2d(x, 1).flatten(1)


class GlyphClassifier(nn.Module):
    def __init__(self, n_classes):
        super().__init__()
        self.backbone = GlyphBackbone()
        self.head = nn.Sequential(nn.Dropout(0.2), nn.Linear(self.backbone.out_dim, n_classes))

    def forward(self, x):
        return self.head(self.backbone(x))


def pretrain_backbone(cfg):
    x, y = make_images(render_source, cfg["n_pretrain"], len(SOURCE_CLASSES), seed=SEED + 100)
    ds = torch.utils.data.TensorDataset((torch.from_numpy(x) - 0.5) / 0.25, torch.from_numpy(y))
    dl = DataLoader(ds, batch_size=64, shuffle=True, generator=torch.Generator().manual_seed(SEED))
    model = GlyphClassifier(len(SOURCE_CLASSES))
    opt = torch.optim.Adam(model.parameters(), lr=cfg["pretrain_lr"])
    for ep in range(cfg["pretrain_epochs"]):
        model.train()
        tot, correct, n = 0.0, 0, 0
        for xb, yb in dl:
            logits = model(xb)
            loss = F.cross_entropy(logits, yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += loss.item() * len(yb)
            correct += (logits.argmax(1) == yb).sum().item()
            n += len(yb)
        print(f"[pretrain] epoch {ep + 1}/{cfg['pretrain_epochs']} - loss: {tot / n:.4f} - accuracy: {correct / n:.4f}")
    torch.save(model.backbone.state_dict(), CKPT)


def build_model():
    model = GlyphClassifier(len(SIGN_CLASSES))
    if os.path.exists(CKPT):
        model.backbone.load_state_dict(torch.load(CKPT))
    for p in model.backbone.stem.parameters():
        p.requires_grad = False
    return model


def make_optimizer(model, cfg):
    backbone = [p for n, p in model.backbone.named_parameters() if p.requires_grad]
    groups = [
        {"params": backbone, "lr": cfg["backbone_lr"]},
        {"params": list(model.head.parameters()), "lr": cfg["head_lr"]},
    ]
    return torch.optim.AdamW(groups, weight_decay=cfg["weight_decay"])


def make_scheduler(opt, cfg, total_steps):
    def lr_lambda(step):
        if step < cfg["warmup_steps"]:
            return (step + 1) / cfg["warmup_steps"]
        prog = (step - cfg["warmup_steps"]) / max(1, total_steps - cfg["warmup_steps"])
        return 0.5 * (1.0 + math.cos(math.pi * prog))

    return torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda)


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    tot, correct, n = 0.0, 0, 0
    for x, y in loader:
        logits = model(x)
        tot += F.cross_entropy(logits, y, reduction="sum").item()
        correct += (logits.argmax(1) == y).sum().item()
        n += len(y)
    return tot / n, correct / n


def make_target():
    torch.manual_seed(SEED)
    train_dl, val_dl = build_loaders(CFG)
    model = build_model()
    return {
        "model": model,
        "data": train_dl,
        "val_data": val_dl,
        "loss_fn": loss_fn,
        "optimizer": make_optimizer(model, CFG),
        "num_classes": len(SIGN_CLASSES),
        "task": "classification",
    }


def main():
    torch.manual_seed(SEED)
    t0 = time.time()
    pretrain_backbone(CFG)
    train_dl, val_dl = build_loaders(CFG)
    model = build_model()
    opt = make_optimizer(model, CFG)
    steps = len(train_dl)
    sched = make_scheduler(opt, CFG, steps * CFG["epochs"])
    n_trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print(f"Fine-tuning on {len(train_dl.dataset)} signs, {len(val_dl.dataset)} val, trainable params: {n_trainable:,}")
    for ep in range(CFG["epochs"]):
        print(f"Epoch {ep + 1}/{CFG['epochs']}")
        model.train()
        te = time.time()
        tot, correct, n = 0.0, 0, 0
        for batch in train_dl:
            x, y = batch
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            tot += loss.item() * len(y)
            correct += (logits.argmax(1) == y).sum().item()
            n += len(y)
        val_loss, val_acc = evaluate(model, val_dl)
        dt = time.time() - te
        print(f"{steps}/{steps} [==============================] - {dt:.0f}s {1000 * dt / steps:.0f}ms/step - loss: {tot / n:.4f}"
              f" - accuracy: {correct / n:.4f} - val_loss: {val_loss:.4f} - val_accuracy: {val_acc:.4f}")
    print(f"Total time: {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
