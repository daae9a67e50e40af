"""Galaxy morphology classification (5 classes) from single-band cutouts.

The backbone is first trained on a large "sky object type" source task
(stars, blobs, rings, trails, doubles, arcs), cached to backbone_skyobj.pt,
then fine-tuned on a small labelled morphology set with the stem frozen.
"""
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import TensorDataset, DataLoader

RUN_DIR = os.path.dirname(os.path.abspath(__file__))
CKPT_PATH = os.path.join(RUN_DIR, "backbone_skyobj.pt")

MORPH_CLASSES = ["elliptical", "spiral", "barred_spiral", "edge_on", "irregular"]
SOURCE_CLASSES = ["star", "blob", "ring", "trail", "double", "arc"]
IMG = 32

CFG = dict(
    seed=7,
    n_source=3000,
    pretrain_epochs=3,
    n_train=900,
    n_val=400,
    batch_size=64,
    epochs=20,
    lr=0.005,
    momentum=0.9,
    weight_decay=5e-4,
)


def seed_everything(seed):
    np.random.seed(seed)
    torch.manual_seed(seed)


# ----------------------------------------------------------------------------
# synthetic cutouts
# ----------------------------------------------------------------------------
_lin = np.linspace(-1, 1, IMG)
GX, GY = np.meshgrid(_lin, _lin)


def _frame(rng, jitter=0.08):
    cx, cy = rng.normal(0, jitter, 2)
    th = rng.uniform(0, np.pi)
    x, y = GX - cx, GY - cy
    xr = x * np.cos(th) + y * np.sin(th)
    yr = -x * np.sin(th) + y * np.cos(th)
    return xr, yr


def galaxy(rng, label):
    xr, yr = _frame(rng)
    s = rng.uniform(0.35, 0.6)
    if label == 0:      # elliptical: smooth de Vaucouleurs-like, mild flattening
        q = rng.uniform(0.45, 1.0)
        r = np.sqrt(xr ** 2 + (yr / q) ** 2)
        img = np.exp(-3.0 * (r / s) ** 0.5)
    elif label in (1, 2):   # (barred) spiral: disk + 2-armed log spiral + bulge
        q = rng.uniform(0.6, 1.0)
        r = np.sqrt(xr ** 2 + (yr / q) ** 2) + 1e-3
        phi = np.arctan2(yr / q, xr)
        pitch = rng.uniform(0.25, 0.5)
        arms = 0.5 * (1 + np.cos(2 * (phi - np.log(r) / np.tan(pitch))))
        img = np.exp(-r / (0.6 * s)) * (0.3 + 0.9 * arms ** 2) + 0.8 * np.exp(-(r / (0.25 * s)) ** 2)
        if label == 2:
            L = rng.uniform(0.5, 0.9) * s
            img += 1.2 * np.exp(-(xr / L) ** 2 - (yr / (0.1 * s)) ** 2)
    elif label == 3:    # edge-on disk, sometimes with a dust lane
        q = rng.uniform(0.08, 0.25)
        img = np.exp(-np.abs(xr) / (0.5 * s) - np.abs(yr) / (q * 0.5 * s))
        img += 0.4 * np.exp(-(xr ** 2 + yr ** 2) / (0.2 * s) ** 2)
        if rng.random() < 0.5:
            img *= 1 - 0.6 * np.exp(-(yr / (0.03 + 0.02 * rng.random())) ** 2)
    else:               # irregular / clumpy
        img = np.zeros_like(xr)
        for _ in range(rng.integers(3, 7)):
            cx, cy = rng.normal(0, 0.5 * s, 2)
            w = rng.uniform(0.05, 0.15)
            img += rng.uniform(0.4, 1.0) * np.exp(-((xr - cx) ** 2 + (yr - cy) ** 2) / w ** 2)
    return img


def sky_object(rng, label):
    xr, yr = _frame(rng, jitter=0.3)
    if label == 0:
        w = rng.uniform(0.04, 0.07)
        img = np.exp(-(xr ** 2 + yr ** 2) / w ** 2)
    elif label == 1:
        w = rng.uniform(0.2, 0.45)
        img = np.exp(-(xr ** 2 + (yr / rng.uniform(0.5, 1)) ** 2) / w ** 2)
    elif label == 2:
        R = rng.uniform(0.2, 0.5)
        img = np.exp(-((np.sqrt(xr ** 2 + yr ** 2) - R) / 0.05) ** 2)
    elif label == 3:
        img = np.exp(-(yr / rng.uniform(0.02, 0.05)) ** 2) * (np.abs(xr) < rng.uniform(0.5, 1.5))
    elif label == 4:
        d = rng.uniform(0.15, 0.4)
        img = np.exp(-((xr - d) ** 2 + yr ** 2) / 0.06 ** 2) + rng.uniform(0.3, 1) * np.exp(-((xr + d) ** 2 + yr ** 2) / 0.06 ** 2)
    else:
        R = rng.uniform(0.3, 0.6)
        rr, ph = np.sqrt(xr ** 2 + yr ** 2), np.arctan2(yr, xr)
        img = np.exp(-((rr - R) / 0.05) ** 2) * (np.abs(ph) < rng.uniform(0.5, 1.3))
    return img


def render(rng, labels, painter, noise=(0.04, 0.1)):
    imgs = np.stack([painter(rng, int(y)) for y in labels]).astype(np.float32)
    imgs *= rng.uniform(0.5, 2.0, size=(len(labels), 1, 1)).astype(np.float32)   # brightness
    t = torch.from_numpy(imgs)[:, None]
    k = torch.exp(-torch.arange(-2, 3, dtype=torch.float32) ** 2 / (2 * 1.0 ** 2))
    k = (k[:, None] * k[None, :]) / k.sum() ** 2
    t = F.conv2d(t, k[None, None], padding=2)                                     # PSF
    sig = torch.from_numpy(rng.uniform(*noise, size=(len(labels), 1, 1, 1)).astype(np.float32))
    t = t + sig * torch.from_numpy(rng.standard_normal(t.shape).astype(np.float32))
    return torch.asinh(t / 0.1)                                                   # asinh stretch


def build_data(cfg):
    rng = np.random.default_rng(cfg["seed"])
    y_tr = rng.integers(0, len(MORPH_CLASSES), cfg["n_train"])
    y_va = rng.integers(0, len(MORPH_CLASSES), cfg["n_val"])
    x_tr = render(rng, y_tr, galaxy)
    x_va = render(rng, y_va, galaxy)
    mu, sd = x_tr.mean(), x_tr.std()
    x_tr, x_va = (x_tr - mu) / sd, (x_va - mu) / sd
    g = torch.Generator().manual_seed(cfg["seed"])
    train_loader = DataLoader(TensorDataset(x_tr, torch.from_numpy(y_tr)), batch_size=cfg["batch_size"],
                              shuffle=True, drop_last=True, generator=g)
    val_loader = DataLoader(TensorDataset(x_va, torch.from_numpy(y_va)), batch_size=200)
    return train_loader, val_loader


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
def cbr(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class SkyCNN(nn.Module):
    def __init__(self, n_out):
        super().__init__()
        self.stem = nn.Sequential(cbr(1, 16), nn.MaxPool2d(2))                  # 16x16
        self.layer1 = nn.Sequential(cbr(16, 32), cbr(32, 32), nn.MaxPool2d(2))   # 8x8
        self.layer2 = nn.Sequential(cbr(32, 64), nn.MaxPool2d(2))               # 4x4
        self.layer3 = nn.Sequential(cbr(64, 64))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64, n_out)

    def features(self, x):
        return self.pool(self.layer3(self.layer2(self.layer1(self.stem(x))))).flatten(1)

    def forward(self, x):
        return self.fc(self.features(x))


FROZEN = ("stem", "layer1")


def freeze_backbone(model):
    for name in FROZEN:
        for p in getattr(model, name).parameters():
            p.requires_grad = False


def set_train_mode(model):
    model.train()
    for name in FROZEN:
        getattr(model, name).eval()


def pretrain_backbone(cfg):
    print(f"[pretrain] {CKPT_PATH} not found -> training on sky-object source task")
    t0 = time.time()
    rng = np.random.default_rng(cfg["seed"] + 1000)
    y = rng.integers(0, len(SOURCE_CLASSES), cfg["n_source"])
    x = render(rng, y, sky_object)
    x = (x - x.mean()) / x.std()
    torch.manual_seed(cfg["seed"] + 1000)
    model = SkyCNN(len(SOURCE_CLASSES))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    loader = DataLoader(TensorDataset(x, torch.from_numpy(y)), batch_size=64, shuffle=True)
    for ep in range(cfg["pretrain_epochs"]):
        correct, tot = 0, 0
        for xb, yb in loader:
            out = model(xb)
            loss = F.cross_entropy(out, yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            correct += (out.argmax(1) == yb).sum().item()
            tot += len(yb)
        print(f"[pretrain] epoch {ep + 1} loss {loss.item():.4f} acc {correct / tot:.4f}")
    torch.save(model.state_dict(), CKPT_PATH)
    print(f"[pretrain] done in {time.time() - t0:.1f}s")


def build_model(cfg):
    if not os.path.exists(CKPT_PATH):
        pretrain_backbone(cfg)
    model = SkyCNN(len(SOURCE_CLASSES))
    model.load_state_dict(torch.load(CKPT_PATH, map_location="cpu"))
    torch.manual_seed(cfg["seed"])
    model.fc = nn.Linear(64, len(MORPH_CLASSES))
    freeze_backbone(model)
    return model


def make_optimizer_fn(cfg):
    def make_optimizer(params):
        return torch.optim.SGD(params, lr=cfg["lr"], momentum=cfg["momentum"],
                               weight_decay=cfg["weight_decay"], nesterov=True)
    return make_optimizer


def compute_loss(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    loss, correct, n = 0.0, 0, 0
    for x, y in loader:
        out = model(x)
        loss += F.cross_entropy(out, y, reduction="sum").item()
        correct += (out.argmax(1) == y).sum().item()
        n += len(y)
    return loss / n, correct / n


def make_target():
    torch.set_num_threads(1)
    cfg = dict(CFG)
    seed_everything(cfg["seed"])
    train_loader, _ = build_data(cfg)
    model = build_model(cfg)
    data = []
    for i, b in enumerate(train_loader):
        data.append(b)
        if i == 3:
            break
    return dict(model=model, data=data, loss_fn=compute_loss, make_optimizer=make_optimizer_fn(cfg),
                task="classification", num_classes=len(MORPH_CLASSES))


def main():
    torch.set_num_threads(1)
    cfg = dict(CFG)
    seed_everything(cfg["seed"])
    t0 = time.time()
    train_loader, val_loader = build_data(cfg)
    model = build_model(cfg)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = make_optimizer_fn(cfg)(params)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.1, patience=2)
    print(f"Train on {len(train_loader.dataset)} samples, validate on {len(val_loader.dataset)} samples")
    steps = len(train_loader)
    for epoch in range(1, cfg["epochs"] + 1):
        set_train_mode(model)
        tl, tc, tn = 0.0, 0, 0
        for x, y in train_loader:
            out = model(x)
            loss = F.cross_entropy(out, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            tl += loss.item() * len(y)
            tc += (out.argmax(1) == y).sum().item()
            tn += len(y)
        val_loss, val_acc = evaluate(model, val_loader)
        lr = optimizer.param_groups[0]["lr"]
        print(f"Epoch {epoch}/{cfg['epochs']}")
        print(f"{steps}/{steps} - loss: {tl / tn:.4f} - accuracy: {tc / tn:.4f} - val_loss: {val_loss:.4f}"
              f" - val_accuracy: {val_acc:.4f} - lr: {lr:.1e}")
        scheduler.step(val_acc)
    print(f"final: val_accuracy {val_acc:.4f} | wall {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
