# Small ResNet on procedurally rendered grayscale shapes.
# SGD + nesterov, linear warmup followed by cosine decay (stepped every iteration).
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

torch.set_num_threads(1)

# -----------------------------------------------------------------------------
seed = 7
img_size = 20
classes = ["disk", "ring", "square", "frame", "plus", "xcross", "hbar", "vbar"]
n_train = 2560
n_val = 800
batch_size = 64
epochs = 8
base_lr = 0.1
momentum = 0.9
weight_decay = 5e-4
warmup_epochs = 2
log_interval = 20
# -----------------------------------------------------------------------------


def render_shape(rng, cls):
    s = img_size
    yy, xx = np.mgrid[0:s, 0:s].astype(np.float32)
    cy, cx = rng.uniform(6.5, s - 7.5, size=2)
    r = rng.uniform(3.0, 5.5)
    dy, dx = yy - cy, xx - cx
    w = rng.uniform(1.0, 1.8)  # stroke width
    if cls == "disk":
        m = np.hypot(dy, dx) <= r
    elif cls == "ring":
        d = np.hypot(dy, dx)
        m = (d <= r) & (d >= r - w)
    elif cls == "square":
        m = (np.abs(dy) <= r * 0.85) & (np.abs(dx) <= r * 0.85)
    elif cls == "frame":
        a = r * 0.85
        inner = (np.abs(dy) <= a - w) & (np.abs(dx) <= a - w)
        m = (np.abs(dy) <= a) & (np.abs(dx) <= a) & ~inner
    elif cls == "plus":
        m = ((np.abs(dy) <= w / 2 + 0.3) & (np.abs(dx) <= r)) | ((np.abs(dx) <= w / 2 + 0.3) & (np.abs(dy) <= r))
    elif cls == "xcross":
        m = ((np.abs(dy - dx) <= w) | (np.abs(dy + dx) <= w)) & (np.abs(dy) <= r * 0.8) & (np.abs(dx) <= r * 0.8)
    elif cls == "hbar":
        m = (np.abs(dy) <= w) & (np.abs(dx) <= r * 1.2)
    else:  # vbar
        m = (np.abs(dx) <= w) & (np.abs(dy) <= r * 1.2)
    fg = rng.uniform(0.45, 1.0)
    bg = rng.uniform(0.0, 0.35)
    grad = rng.normal(0, 0.15) * (xx / s - 0.5) + rng.normal(0, 0.15) * (yy / s - 0.5)
    img = bg + grad + (fg - bg) * m.astype(np.float32)
    img += rng.normal(0, 0.12, size=img.shape)
    return np.clip(img, 0.0, 1.0).astype(np.float32)


def make_split(n, seed_):
    rng = np.random.default_rng(seed_)
    labels = rng.integers(0, len(classes), size=n)
    imgs = np.stack([render_shape(rng, classes[c]) for c in labels])[:, None]
    return imgs, labels.astype(np.int64)


class ShapesDataset(Dataset):
    def __init__(self, images, labels, mean, std, train):
        self.x = torch.from_numpy((images - mean) / std)
        self.y = torch.from_numpy(labels)
        self.train = train

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        x = self.x[i]
        if self.train:
            # pad-and-crop, horizontal flip, light gaussian noise
            x = F.pad(x, (2, 2, 2, 2), mode="reflect")
            oy, ox = torch.randint(0, 5, (2,)).tolist()
            x = x[:, oy:oy + img_size, ox:ox + img_size]
            if torch.rand(()) < 0.5:
                x = x.flip(-1)
            x = x + 0.05 * torch.randn_like(x)
        return x, self.y[i]


def build_datasets():
    x_tr, y_tr = make_split(n_train, seed)
    x_va, y_va = make_split(n_val, seed + 100)
    mean, std = float(x_tr.mean()), float(x_tr.std())
    return ShapesDataset(x_tr, y_tr, mean, std, True), ShapesDataset(x_va, y_va, mean, std, False)


def build_loaders(train_set, val_set):
    g = torch.Generator().manual_seed(seed)
    train_loader = DataLoader(train_set, batch_size=batch_size, shuffle=True, drop_last=True, generator=g)
    val_loader = DataLoader(val_set, batch_size=256, shuffle=False)
    return train_loader, val_loader


class BasicBlock(nn.Module):
    def __init__(self, c_in, c_out, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut = nn.Identity()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNetTiny(nn.Module):
    def __init__(self, num_classes=len(classes)):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(inplace=True))
        self.layer1 = BasicBlock(16, 16)
        self.layer2 = BasicBlock(16, 32, stride=2)
        self.layer3 = BasicBlock(32, 64, stride=2)
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x):
        x = self.layer3(self.layer2(self.layer1(self.stem(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def make_optimizer(params):
    return torch.optim.SGD(params, lr=base_lr, momentum=momentum, nesterov=True, weight_decay=weight_decay)


def make_scheduler(optimizer, train_set, train_loader):
    total_steps = epochs * len(train_loader)
    warmup_steps = warmup_epochs * len(train_set)

    def lr_lambda(step):
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    loss_sum, correct, n = 0.0, 0, 0
    for x, y in loader:
        logits = model(x)
        loss_sum += F.cross_entropy(logits, y, reduction="sum").item()
        correct += (logits.argmax(1) == y).sum().item()
        n += y.numel()
    model.train()
    return loss_sum / n, correct / n


def make_target():
    torch.manual_seed(seed)
    train_set, val_set = build_datasets()
    train_loader, _ = build_loaders(train_set, val_set)
    data = []
    for i, batch in enumerate(train_loader):
        if i == 6:
            break
        data.append(batch)
    return {
        "model": ResNetTiny(),
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "num_classes": len(classes),
        "task": "classification",
    }


def main():
    torch.manual_seed(seed)
    train_set, val_set = build_datasets()
    train_loader, val_loader = build_loaders(train_set, val_set)
    model = ResNetTiny()
    print(f"number of parameters: {sum(p.numel() for p in model.parameters()) / 1e6:.3f}M")
    optimizer = make_optimizer(model.parameters())
    scheduler = make_scheduler(optimizer, train_set, train_loader)

    step = 0
    model.train()
    t0 = time.time()
    for epoch in range(epochs):
        for x, y in train_loader:
            loss = loss_fn(model, (x, y))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            step += 1
            if step % log_interval == 0:
                dt = (time.time() - t0) * 1000 / log_interval
                t0 = time.time()
                print(f"iter {step}: loss {loss.item():.4f}, lr {optimizer.param_groups[0]['lr']:.2e}, time {dt:.1f}ms")
        val_loss, val_acc = evaluate(model, val_loader)
        print(f"step {step} (epoch {epoch + 1}): val loss {val_loss:.4f}, val acc {val_acc:.4f}")


if __name__ == "__main__":
    main()
