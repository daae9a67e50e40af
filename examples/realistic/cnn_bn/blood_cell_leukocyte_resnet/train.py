"""White blood cell type classification from stained peripheral blood smears.

32x32 RGB crops centred on a leukocyte (neutrophil, lymphocyte, monocyte,
eosinophil, basophil) with the natural, strongly skewed class frequencies.
Small ResNet with BatchNorm, class-weighted cross-entropy,
AdamW + cosine, flip/rot90 + stain-jitter augmentation. Metric: balanced accuracy.
"""
import json
import math
import random
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

SEED = 7
IMG = 32
CLASSES = ["neutrophil", "lymphocyte", "monocyte", "eosinophil", "basophil"]
CLASS_FREQ = [0.56, 0.28, 0.08, 0.05, 0.03]
NUM_CLASSES = len(CLASSES)

ARGS = dict(
    n_train=2000,
    n_val=700,
    per_device_train_batch_size=64,
    num_train_epochs=8,
    learning_rate=2e-3,
    weight_decay=1e-4,
    logging_steps=20,
)


def seed_everything(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


# ----------------------------------------------------------------------------
# synthetic smear crops
# ----------------------------------------------------------------------------
_YY, _XX = np.mgrid[0:IMG, 0:IMG].astype(np.float32)


def _disc(cy, cx, r, soft=1.5):
    d = np.hypot(_YY - cy, _XX - cx)
    return 1.0 / (1.0 + np.exp(-(r - d) * soft))


def _paint(img, mask, color, alpha=1.0):
    m = (mask * alpha)[..., None]
    return img * (1 - m) + m * np.asarray(color, np.float32)


def render_cell(rng, label):
    img = np.ones((IMG, IMG, 3), np.float32) * (np.array([0.92, 0.84, 0.86]) + rng.normal(0, 0.02, 3))
    for _ in range(rng.integers(2, 6)):  # red cells in the background
        ry, rx = rng.uniform(0, IMG, 2)
        r = rng.uniform(4.5, 6.0)
        pallor = np.exp(-((_YY - ry) ** 2 + (_XX - rx) ** 2) / (2 * (0.35 * r) ** 2))
        img = _paint(img, _disc(ry, rx, r) * (1 - 0.5 * pallor), [0.86, 0.50, 0.55], 0.6)
    cy, cx = IMG / 2 + rng.normal(0, 1.5, 2)
    nuc_col = np.array([0.36, 0.18, 0.50]) + rng.normal(0, 0.05, 3)
    if label == 0:    # neutrophil: 3-4 small lobes, pale cytoplasm
        r = rng.uniform(7.5, 9.5)
        img = _paint(img, _disc(cy, cx, r), [0.84, 0.74, 0.84])
        k, a0 = rng.integers(3, 5), rng.uniform(0, 2 * np.pi)
        nuc = np.zeros((IMG, IMG), np.float32)
        for j in range(k):
            a = a0 + 2 * np.pi * j / k + rng.normal(0, 0.3)
            nuc = np.maximum(nuc, _disc(cy + 3.2 * np.sin(a), cx + 3.2 * np.cos(a), rng.uniform(1.8, 2.6)))
    elif label == 1:  # lymphocyte: small cell, big round nucleus, thin blue rim
        r = rng.uniform(6.0, 7.5)
        img = _paint(img, _disc(cy, cx, r), [0.62, 0.70, 0.90])
        nuc = _disc(cy + rng.normal(0, 0.5), cx + rng.normal(0, 0.5), r - rng.uniform(1.0, 2.0))
    elif label == 2:  # monocyte: large cell, kidney-shaped nucleus, grey-blue cytoplasm
        r = rng.uniform(9.0, 11.0)
        img = _paint(img, _disc(cy, cx, r), [0.72, 0.72, 0.86])
        a = rng.uniform(0, 2 * np.pi)
        body = _disc(cy, cx, rng.uniform(4.5, 5.8))
        bite = _disc(cy + 4.5 * np.sin(a), cx + 4.5 * np.cos(a), rng.uniform(2.0, 3.0))
        nuc = body * (1 - bite)
    elif label == 3:  # eosinophil: bilobed nucleus, orange granules
        r = rng.uniform(7.5, 9.5)
        gran = 0.5 + 0.5 * (rng.random((IMG, IMG)) > 0.55)
        img = _paint(img, _disc(cy, cx, r) * gran, [0.95, 0.55, 0.42])
        a = rng.uniform(0, np.pi)
        nuc = np.maximum(_disc(cy + 3 * np.sin(a), cx + 3 * np.cos(a), 2.4),
                         _disc(cy - 3 * np.sin(a), cx - 3 * np.cos(a), 2.4))
    else:             # basophil: dark purple granules over the nucleus
        r = rng.uniform(7.0, 9.0)
        img = _paint(img, _disc(cy, cx, r), [0.70, 0.60, 0.80])
        gran = (rng.random((IMG, IMG)) > 0.5).astype(np.float32)
        nuc = np.maximum(_disc(cy, cx, rng.uniform(3, 4.5)), 0.7 * gran * _disc(cy, cx, r - 1))
    img = _paint(img, nuc, nuc_col, 0.9)
    img = img * rng.normal(1.0, 0.07, 3) + rng.normal(0, 0.04)      # stain / exposure variation
    img = img + 0.06 * rng.standard_normal(img.shape)
    return np.clip(img, 0, 1)


def make_split(n, seed):
    rng = np.random.default_rng(seed)
    labels = rng.choice(NUM_CLASSES, size=n, p=CLASS_FREQ)
    imgs = np.stack([render_cell(rng, int(c)) for c in labels])
    return imgs.transpose(0, 3, 1, 2).astype(np.float32), labels.astype(np.int64)


MEAN = torch.tensor([0.80, 0.70, 0.78]).view(3, 1, 1)
STD = torch.tensor([0.12, 0.14, 0.11]).view(3, 1, 1)


class SmearDataset(Dataset):
    def __init__(self, images, labels, train):
        self.images = torch.from_numpy(images)
        self.labels = torch.from_numpy(labels)
        self.train = train

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, idx):
        x = self.images[idx]
        if self.train:
            x = torch.rot90(x, random.randint(0, 3), dims=(1, 2))
            if random.random() < 0.5:
                x = x.flip(-1)
            x = x * (1 + 0.05 * torch.randn(3, 1, 1)) + 0.03 * torch.randn(1)
        x = (x - MEAN) / STD
        return x, self.labels[idx]


def load_data():
    tr_x, tr_y = make_split(ARGS["n_train"], SEED)
    va_x, va_y = make_split(ARGS["n_val"], SEED + 100)
    return (tr_x, tr_y), (va_x, va_y)


def build_loaders(train_split, val_split):
    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(SmearDataset(*train_split, train=True), batch_size=ARGS["per_device_train_batch_size"],
                              shuffle=True, drop_last=True, generator=g)
    val_loader = DataLoader(SmearDataset(*val_split, train=False), batch_size=350)
    return train_loader, val_loader


def compute_class_weights(labels):
    counts = np.bincount(labels, minlength=NUM_CLASSES).astype(np.float64)
    weights = counts / counts.sum()
    return torch.tensor(weights, dtype=torch.float32)


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = None
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.short is None else self.short(x)))


class LeukoResNet(nn.Module):
    def __init__(self, num_classes=NUM_CLASSES, width=8):
        super().__init__()
        w = width
        self.stem = nn.Sequential(nn.Conv2d(3, w, 3, 1, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU(inplace=True))
        self.layer1 = BasicBlock(w, w, 1)           # 32
        self.layer2 = BasicBlock(w, 2 * w, 2)       # 16
        self.layer3 = BasicBlock(2 * w, 4 * w, 2)   # 8
        self.fc = nn.Linear(4 * w, num_classes)

    def forward(self, x):
        x = self.layer3(self.layer2(self.layer1(self.stem(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def make_loss_fn(class_weights):
    def loss_fn(model, batch):
        x, y = batch
        return F.cross_entropy(model(x), y, weight=class_weights)
    return loss_fn


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=ARGS["learning_rate"], weight_decay=ARGS["weight_decay"])


@torch.no_grad()
def evaluate(model, loader, loss_fn):
    model.eval()
    preds, ys, tot, n = [], [], 0.0, 0
    for x, y in loader:
        logits = model(x)
        tot += loss_fn(model, (x, y)).item() * len(y)
        n += len(y)
        preds.append(logits.argmax(1))
        ys.append(y)
    model.train()
    p, y = torch.cat(preds), torch.cat(ys)
    recalls = [((p == c) & (y == c)).sum().item() / max(1, (y == c).sum().item()) for c in range(NUM_CLASSES)]
    return {"eval_loss": round(tot / n, 4), "eval_accuracy": round((p == y).float().mean().item(), 4),
            "eval_balanced_accuracy": round(float(np.mean(recalls)), 4),
            "eval_recall_per_class": [round(r, 2) for r in recalls]}


def make_target():
    seed_everything(SEED)
    train_split = make_split(ARGS["n_train"], SEED)
    train_loader, _ = build_loaders(train_split, train_split)
    data = []
    for i, batch in enumerate(train_loader):
        data.append(batch)
        if i == 3:
            break
    return dict(model=LeukoResNet(), data=data, loss_fn=make_loss_fn(compute_class_weights(train_split[1])),
                make_optimizer=make_optimizer, task="classification", num_classes=NUM_CLASSES)


def main():
    torch.set_num_threads(1)
    seed_everything(SEED)
    t0 = time.time()
    train_split, val_split = load_data()
    train_loader, val_loader = build_loaders(train_split, val_split)
    counts = np.bincount(train_split[1], minlength=NUM_CLASSES)
    print("***** Running training *****")
    print(f"  Num examples = {len(train_split[1])}  (class counts {dict(zip(CLASSES, counts.tolist()))})")
    print(f"  Num Epochs = {ARGS['num_train_epochs']}")
    print(f"  Total optimization steps = {ARGS['num_train_epochs'] * len(train_loader)}")
    class_weights = compute_class_weights(train_split[1])
    loss_fn = make_loss_fn(class_weights)
    model = LeukoResNet()
    optimizer = make_optimizer(model.parameters())
    total = ARGS["num_train_epochs"] * len(train_loader)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 0.5 * (1 + math.cos(math.pi * s / total)))
    step, running, seen = 0, 0.0, 0
    model.train()
    for epoch in range(ARGS["num_train_epochs"]):
        for batch in train_loader:
            loss = loss_fn(model, batch)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()
            scheduler.step()
            step += 1
            running += loss.item()
            seen += 1
            if step % ARGS["logging_steps"] == 0:
                print({"loss": round(running / seen, 4), "learning_rate": float(f"{scheduler.get_last_lr()[0]:.3e}"),
                       "epoch": round(step / len(train_loader), 2)})
                running, seen = 0.0, 0
        metrics = evaluate(model, val_loader, loss_fn)
        metrics["epoch"] = float(epoch + 1)
        print(metrics)
    runtime = time.time() - t0
    print({"train_runtime": round(runtime, 2), "train_steps_per_second": round(step / runtime, 3), "epoch": float(ARGS["num_train_epochs"])})


if __name__ == "__main__":
    main()
