"""Small ResNet on a synthetic "shapes" benchmark.

Images are 1x24x24 renderings of six outline / filled shapes with random
size, rotation, position, contrast, background gradient and pixel noise.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 1234
IMG = 24
N_CLASSES = 6
N_TRAIN = 1600
N_VAL = 600
BATCH_SIZE = 64
EPOCHS = 8
BASE_LR = 0.05
MOMENTUM = 0.9
WEIGHT_DECAY = 5e-4
MILESTONES = [5, 7]
PAD = 3

CLASS_NAMES = ["disk", "square", "triangle", "ring", "plus", "frame"]


# ----------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------
def render_shapes(n, rng):
    ys, xs = np.mgrid[0:IMG, 0:IMG].astype(np.float32)
    labels = rng.integers(0, N_CLASSES, size=n)
    imgs = np.empty((n, IMG, IMG), dtype=np.float32)
    for i in range(n):
        c = labels[i]
        r = rng.uniform(5.5, 9.0)
        cx, cy = rng.uniform(r + 1, IMG - r - 1, size=2)
        th = rng.uniform(0, 2 * math.pi)
        dx, dy = xs - cx, ys - cy
        u = dx * math.cos(th) + dy * math.sin(th)
        v = -dx * math.sin(th) + dy * math.cos(th)
        rad = np.sqrt(u ** 2 + v ** 2)
        w = max(1.2, 0.25 * r)
        if c == 0:
            m = rad <= r
        elif c == 1:
            m = (np.abs(u) <= 0.8 * r) & (np.abs(v) <= 0.8 * r)
        elif c == 2:
            ang = np.arctan2(v, u)
            k = np.cos(math.pi / 3) / np.cos(((ang + math.pi) % (2 * math.pi / 3)) - math.pi / 3)
            m = rad <= r * k
        elif c == 3:
            m = (rad <= r) & (rad >= r - w)
        elif c == 4:
            m = ((np.abs(u) <= w / 2) & (np.abs(v) <= r)) | ((np.abs(v) <= w / 2) & (np.abs(u) <= r))
        else:
            outer = (np.abs(u) <= 0.8 * r) & (np.abs(v) <= 0.8 * r)
            inner = (np.abs(u) <= 0.8 * r - w) & (np.abs(v) <= 0.8 * r - w)
            m = outer & ~inner
        contrast = rng.uniform(0.5, 1.0)
        gx, gy = rng.normal(0, 0.01, size=2)
        bg = 0.5 + gx * (xs - IMG / 2) + gy * (ys - IMG / 2)
        img = bg + contrast * m.astype(np.float32)
        img += rng.normal(0, 0.2, size=img.shape)
        imgs[i] = img
    return imgs[:, None], labels.astype(np.int64)


def load_data():
    rng = np.random.default_rng(SEED)
    x_tr, y_tr = render_shapes(N_TRAIN, rng)
    x_va, y_va = render_shapes(N_VAL, rng)
    mean, std = x_tr.mean(), x_tr.std()
    x_tr = torch.from_numpy((x_tr - mean) / std)
    x_va = torch.from_numpy((x_va - mean) / std)
    return (x_tr, torch.from_numpy(y_tr)), (x_va, torch.from_numpy(y_va))


def augment(x, gen):
    """Pad-and-random-crop plus horizontal flip, on a (B, 1, H, W) batch."""
    b = x.shape[0]
    xp = F.pad(x, (PAD, PAD, PAD, PAD), mode="replicate")
    ox = torch.randint(0, 2 * PAD + 1, (b,), generator=gen)
    oy = torch.randint(0, 2 * PAD + 1, (b,), generator=gen)
    out = torch.stack([xp[i, :, oy[i]:oy[i] + IMG, ox[i]:ox[i] + IMG] for i in range(b)])
    flip = torch.rand(b, generator=gen) < 0.5
    out[flip] = out[flip].flip(-1)
    return out


def train_loader(x, y, gen):
    perm = torch.randperm(len(x), generator=gen)
    for i in range(0, len(x) - BATCH_SIZE + 1, BATCH_SIZE):
        idx = perm[i:i + BATCH_SIZE]
        yield augment(x[idx], gen), y[idx]


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
def conv_bn(c_in, c_out, stride=1):
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False),
        nn.BatchNorm2d(c_out),
    )


class BasicBlock(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.conv1 = nn.Conv2d(ch, ch, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(ch)
        self.conv2 = nn.Conv2d(ch, ch, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(ch)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + x)


class ShapesResNet(nn.Module):
    def __init__(self, widths=(16, 32, 48), blocks=(2, 2, 1), n_classes=N_CLASSES):
        super().__init__()
        self.stem = conv_bn(1, widths[0])
        stages = []
        c_prev = widths[0]
        for s, (c, nb) in enumerate(zip(widths, blocks)):
            layers = []
            if s > 0:
                layers += [conv_bn(c_prev, c, stride=2), nn.ReLU(inplace=True)]
            layers += [BasicBlock(c) for _ in range(nb)]
            stages.append(nn.Sequential(*layers))
            c_prev = c
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(c_prev, n_classes)
        self._init_weights()

    def _init_weights(self):
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        # zero-init the residual branches so every block starts as identity (Goyal et al., 2017)
        for m in self.modules():
            if isinstance(m, BasicBlock):
                for bn in (m.bn1, m.bn2):
                    nn.init.zeros_(bn.weight)

    def forward(self, x):
        x = F.relu(self.stem(x))
        x = self.stages(x)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def make_optimizer(params):
    return torch.optim.SGD(params, lr=BASE_LR, momentum=MOMENTUM, nesterov=True,
                           weight_decay=WEIGHT_DECAY)


@torch.no_grad()
def evaluate(model, x, y, bs=300):
    model.eval()
    loss_sum, correct = 0.0, 0
    for i in range(0, len(x), bs):
        logits = model(x[i:i + bs])
        loss_sum += F.cross_entropy(logits, y[i:i + bs], reduction="sum").item()
        correct += (logits.argmax(1) == y[i:i + bs]).sum().item()
    model.train()
    return loss_sum / len(x), correct / len(x)


def make_target():
    torch.manual_seed(SEED)
    (x_tr, y_tr), _ = load_data()
    gen = torch.Generator().manual_seed(SEED)
    data = []
    for k, batch in enumerate(train_loader(x_tr, y_tr, gen)):
        data.append(batch)
        if k == 3:
            break
    return {
        "model": ShapesResNet(),
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "num_classes": N_CLASSES,
        "task": "classification",
    }


def main():
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    t_start = time.time()
    (x_tr, y_tr), (x_va, y_va) = load_data()
    gen = torch.Generator().manual_seed(SEED)
    model = ShapesResNet()
    optimizer = make_optimizer(model.parameters())
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=MILESTONES, gamma=0.1)
    print(f"data: train={tuple(x_tr.shape)} val={tuple(x_va.shape)} ({time.time() - t_start:.1f}s)")
    print(f"model: ShapesResNet params={sum(p.numel() for p in model.parameters()):,}")

    step = 0
    for epoch in range(EPOCHS):
        model.train()
        t0 = time.time()
        for x, y in train_loader(x_tr, y_tr, gen):
            loss = loss_fn(model, (x, y))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % 25 == 0:
                print(f"epoch {epoch} | step {step:4d} | loss {loss.item():.4f} | lr {optimizer.param_groups[0]['lr']:.4f}")
            step += 1
        scheduler.step()
        val_loss, val_acc = evaluate(model, x_va, y_va)
        print(f"epoch {epoch} done | val_loss {val_loss:.4f} | val_acc {val_acc*100:.2f}% | {time.time() - t0:.1f}s")
    print(f"finished in {time.time() - t_start:.1f}s")


if __name__ == "__main__":
    main()
