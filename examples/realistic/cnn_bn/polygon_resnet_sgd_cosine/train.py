"""Small ResNet on synthetic shape images (circle / square / triangle / cross).

Images are rendered on the fly with numpy: random position, size, colour and a
noisy textured background.  Training uses random crops with padding and
horizontal flips; SGD + nesterov with linear warmup and cosine decay.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)

CLASSES = ["circle", "square", "triangle", "cross"]
IMG = 24
CFG = dict(
    n_train=2400,
    n_val=600,
    batch_size=64,
    epochs=6,
    lr=0.1,
    momentum=0.9,
    weight_decay=5e-4,
    warmup_epochs=1,
    zero_init_residual=True,
    seed=0,
)


# ----------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------
def render_shape(rng, label):
    yy, xx = np.mgrid[0:IMG, 0:IMG].astype(np.float32)
    cy, cx = rng.uniform(7, IMG - 7, size=2)
    r = rng.uniform(3.5, 6.5)
    if label == 0:  # circle
        mask = (yy - cy) ** 2 + (xx - cx) ** 2 <= r ** 2
    elif label == 1:  # square
        mask = (np.abs(yy - cy) <= r * 0.85) & (np.abs(xx - cx) <= r * 0.85)
    elif label == 2:  # triangle pointing up
        top = cy - r
        h = (yy - top) / (2 * r)
        mask = (yy >= top) & (yy <= cy + r) & (np.abs(xx - cx) <= h * r)
    else:  # cross
        w = max(1.2, r * 0.3)
        mask = ((np.abs(yy - cy) <= w) & (np.abs(xx - cx) <= r)) | (
            (np.abs(xx - cx) <= w) & (np.abs(yy - cy) <= r)
        )
    bg = rng.uniform(0.1, 0.5, size=(3, 1, 1)).astype(np.float32)
    fg = rng.uniform(0.4, 1.0, size=(3, 1, 1)).astype(np.float32)
    img = np.broadcast_to(bg, (3, IMG, IMG)).copy()
    img[:, mask] = fg[:, 0]
    img += rng.normal(0, 0.08, size=img.shape).astype(np.float32)
    return np.clip(img, 0, 1)


def make_dataset(n, seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, len(CLASSES), size=n)
    images = np.stack([render_shape(rng, int(c)) for c in labels])
    return torch.from_numpy(images), torch.from_numpy(labels).long()


def channel_stats(x):
    return x.mean(dim=(0, 2, 3), keepdim=True), x.std(dim=(0, 2, 3), keepdim=True)


def augment(x, gen, pad=3):
    """Random crop with reflect padding + random horizontal flip."""
    n = x.shape[0]
    xp = F.pad(x, (pad, pad, pad, pad), mode="reflect")
    out = torch.empty_like(x)
    offs = torch.randint(0, 2 * pad + 1, (n, 2), generator=gen)
    flips = torch.rand(n, generator=gen) < 0.5
    for i in range(n):
        dy, dx = offs[i].tolist()
        crop = xp[i, :, dy:dy + IMG, dx:dx + IMG]
        out[i] = crop.flip(-1) if flips[i] else crop
    return out


def build_data(cfg=CFG):
    x_tr, y_tr = make_dataset(cfg["n_train"], cfg["seed"])
    x_va, y_va = make_dataset(cfg["n_val"], cfg["seed"] + 1)
    mean, std = channel_stats(x_tr)
    return (x_tr - mean) / std, y_tr, (x_va - mean) / std, y_va


def train_batches(x, y, batch_size, gen):
    perm = torch.randperm(x.shape[0], generator=gen)
    for i in range(0, x.shape[0] - batch_size + 1, batch_size):
        idx = perm[i:i + batch_size]
        yield augment(x[idx], gen), y[idx]


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class BasicBlock(nn.Module):
    def __init__(self, c_in, c_out, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut = nn.Identity()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out)
            )

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class SmallResNet(nn.Module):
    def __init__(self, num_classes=4, width=16, zero_init_residual=False):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU()
        )
        self.layer1 = BasicBlock(width, width)
        self.layer2 = BasicBlock(width, 2 * width, stride=2)
        self.layer3 = BasicBlock(2 * width, 4 * width, stride=2)
        self.fc = nn.Linear(4 * width, num_classes)
        self._init_weights(zero_init_residual)

    def _init_weights(self, zero_init_residual):
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)
        # zero-init the last BN in each residual branch so every block starts
        # as identity (Goyal et al. 2017)
        if zero_init_residual:
            for m in self.modules():
                if isinstance(m, nn.BatchNorm2d):
                    nn.init.constant_(m.weight, 0)

    def forward(self, x):
        x = self.stem(x)
        x = self.layer3(self.layer2(self.layer1(x)))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


# ----------------------------------------------------------------------------
# training
# ----------------------------------------------------------------------------
def build_model(cfg=CFG):
    return SmallResNet(len(CLASSES), zero_init_residual=cfg["zero_init_residual"])


def compute_loss(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def make_optimizer(params, cfg=CFG):
    # no weight decay on BN / bias parameters
    params = list(params)
    decay = [p for p in params if p.ndim > 1]
    no_decay = [p for p in params if p.ndim <= 1]
    return torch.optim.SGD(
        [
            {"params": decay, "weight_decay": cfg["weight_decay"]},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=cfg["lr"],
        momentum=cfg["momentum"],
        nesterov=True,
    )


def lr_lambda(step, steps_per_epoch, cfg=CFG):
    warm = cfg["warmup_epochs"] * steps_per_epoch
    total = cfg["epochs"] * steps_per_epoch
    if step < warm:
        return (step + 1) / warm
    t = (step - warm) / max(1, total - warm)
    return 0.5 * (1 + math.cos(math.pi * t))


@torch.no_grad()
def evaluate(model, x, y, bs=200):
    model.eval()
    loss, correct = 0.0, 0
    for i in range(0, x.shape[0], bs):
        logits = model(x[i:i + bs])
        loss += F.cross_entropy(logits, y[i:i + bs], reduction="sum").item()
        correct += (logits.argmax(1) == y[i:i + bs]).sum().item()
    model.train()
    return loss / x.shape[0], correct / x.shape[0]


def make_target():
    torch.manual_seed(CFG["seed"])
    x_tr, y_tr, _, _ = build_data()
    gen = torch.Generator().manual_seed(CFG["seed"])
    it = train_batches(x_tr, y_tr, CFG["batch_size"], gen)
    data = [next(it) for _ in range(4)]
    return {
        "model": build_model(),
        "data": data,
        "loss_fn": compute_loss,
        "make_optimizer": make_optimizer,
        "num_classes": len(CLASSES),
        "task": "classification",
    }


def main():
    cfg = CFG
    torch.manual_seed(cfg["seed"])
    x_tr, y_tr, x_va, y_va = build_data(cfg)
    model = build_model(cfg)
    opt = make_optimizer(model.parameters(), cfg)
    steps_per_epoch = cfg["n_train"] // cfg["batch_size"]
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_lambda(s, steps_per_epoch, cfg))
    gen = torch.Generator().manual_seed(cfg["seed"])
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: SmallResNet  params: {n_params/1e3:.1f}k  train: {len(x_tr)}  val: {len(x_va)}")

    step = 0
    t0 = time.time()
    for epoch in range(cfg["epochs"]):
        model.train()
        run_loss, run_n, run_correct = 0.0, 0, 0
        for x, y in train_batches(x_tr, y_tr, cfg["batch_size"], gen):
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            run_loss += loss.item() * len(y)
            run_correct += (logits.argmax(1) == y).sum().item()
            run_n += len(y)
            if step % 10 == 0:
                print(f"step {step:4d} | loss {loss.item():.4f} | lr {sched.get_last_lr()[0]:.4f}")
            step += 1
        val_loss, val_acc = evaluate(model, x_va, y_va)
        print(
            f"epoch {epoch + 1}/{cfg['epochs']} | train_loss {run_loss / run_n:.4f} "
            f"| train_acc {run_correct / run_n:.3f} | val_loss {val_loss:.4f} "
            f"| val_acc {val_acc:.3f} | {time.time() - t0:.1f}s"
        )


if __name__ == "__main__":
    main()
