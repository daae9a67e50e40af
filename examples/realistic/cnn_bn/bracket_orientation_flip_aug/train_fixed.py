"""Pick-and-place vision: classify the orientation of an L-bracket on the conveyor
(which way its long arm points: up / right / down / left) from 32x32 top-down crops.

Augmentation follows the defect-inspection pipeline this script was forked from.
"""
import argparse
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

CLASSES = ["up", "right", "down", "left"]


def render_bracket(rng, label, size=32):
    img = np.zeros((size, size), dtype=np.float32)
    L = rng.integers(12, 19)          # long arm
    S = rng.integers(5, 9)            # short foot
    w = rng.integers(3, 5)            # thickness
    cy, cx = rng.integers(8, 24, 2)
    # canonical: long arm pointing up from the corner, foot pointing right
    shape = np.zeros((size * 2, size * 2), dtype=np.float32)
    oy, ox = size, size
    shape[oy - L:oy, ox:ox + w] = 1.0
    shape[oy - w:oy, ox:ox + S + w] = 1.0
    shape = np.rot90(shape, k=-label)                   # up, right, down, left
    ys, xs = np.nonzero(shape)
    ys = ys - int(ys.mean()) + cy
    xs = xs - int(xs.mean()) + cx
    ok = (ys >= 0) & (ys < size) & (xs >= 0) & (xs < size)
    img[ys[ok], xs[ok]] = rng.uniform(0.6, 1.0)
    grad = np.linspace(0, rng.uniform(0, 0.3), size)[None, :] * np.ones((size, 1))
    img = img + grad + rng.normal(0, 0.12, (size, size))
    return img.astype(np.float32)


def make_split(n, seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 4, n)
    X = np.stack([render_bracket(rng, k) for k in y])[:, None]
    return X, y


class Crops(torch.utils.data.Dataset):
    def __init__(self, X, y, train):
        self.X = torch.from_numpy((X - 0.2) / 0.3)
        self.y = torch.from_numpy(y).long()
        self.train = train

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        x = self.X[i]
        if self.train:
            # flips change which way the arm points (the label): only photometric jitter here
            x = x * (1.0 + 0.1 * (torch.rand(1) - 0.5))
        return x, self.y[i]


def conv_bn(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())


class OrientNet(nn.Module):
    def __init__(self, n_classes=4):
        super().__init__()
        self.body = nn.Sequential(conv_bn(1, 16), nn.MaxPool2d(2), conv_bn(16, 32), nn.MaxPool2d(2),
                                  conv_bn(32, 64), nn.MaxPool2d(2))
        self.fc = nn.Linear(64 * 4 * 4, n_classes)

    def forward(self, x):
        return self.fc(self.body(x).flatten(1))


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def get_args(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--wd", type=float, default=5e-4)
    p.add_argument("--seed", type=int, default=17)
    return p.parse_args(argv)


def build(args):
    torch.manual_seed(args.seed)
    Xtr, ytr = make_split(2560, args.seed)
    Xva, yva = make_split(640, args.seed + 1)
    g = torch.Generator().manual_seed(args.seed)
    train_loader = torch.utils.data.DataLoader(Crops(Xtr, ytr, train=True), batch_size=args.batch_size,
                                               shuffle=True, generator=g)
    val_loader = torch.utils.data.DataLoader(Crops(Xva, yva, train=False), batch_size=320)
    model = OrientNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum,
                                weight_decay=args.wd, nesterov=True)
    return model, optimizer, train_loader, val_loader


def main():
    args = get_args()
    model, optimizer, train_loader, val_loader = build(args)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs * len(train_loader))
    total = len(train_loader)
    for epoch in range(args.epochs):
        model.train()
        t0 = time.time()
        for i, (x, y) in enumerate(train_loader):
            out = model(x)
            loss = F.cross_entropy(out, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            sched.step()
            if (i + 1) % 20 == 0:
                acc = (out.argmax(1) == y).float().mean().item()
                print(f"Epoch [{epoch + 1}/{args.epochs}], Step [{i + 1}/{total}], Loss: {loss.item():.4f}, "
                      f"Acc: {acc:.3f}")
        model.eval()
        correct, vloss, n = 0, 0.0, 0
        conf = torch.zeros(4, 4, dtype=torch.long)
        with torch.no_grad():
            for x, y in val_loader:
                out = model(x)
                vloss += F.cross_entropy(out, y, reduction="sum").item()
                pred = out.argmax(1)
                correct += (pred == y).sum().item()
                n += len(y)
                for t, p_ in zip(y, pred):
                    conf[t, p_] += 1
        print(f"==> Epoch {epoch + 1}: val_loss {vloss / n:.4f}  val_acc {correct / n:.4f}  "
              f"({time.time() - t0:.1f}s)")
    print("confusion (rows=true " + "/".join(CLASSES) + "):")
    print(conf.numpy())


def make_target():
    model, optimizer, train_loader, _ = build(get_args([]))
    return {"model": model, "batch": next(iter(train_loader)), "loss_fn": loss_fn,
            "optimizer": optimizer, "num_classes": len(CLASSES)}


if __name__ == "__main__":
    main()
