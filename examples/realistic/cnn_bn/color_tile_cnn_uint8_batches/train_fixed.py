"""Small BN CNN on synthetic 32x32 RGB "tiles" (shape x colour family).

Images are rendered as uint8 HWC arrays (what you get from PIL / cv2 decode),
batched on the fly, augmented on-tensor (pad+random crop, horizontal flip,
gaussian noise) and normalised with per-channel train statistics.
Optimiser: AdamW + OneCycleLR. Logging mimics the HF Trainer dict lines.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

IMG = 32
NUM_CLASSES = 6
SHAPES = ["disk", "square", "cross"]
PALETTES = ["warm", "cool"]

args = dict(
    n_train=3000,
    n_val=600,
    per_device_train_batch_size=64,
    num_train_epochs=6,
    learning_rate=3e-3,
    weight_decay=0.05,
    logging_steps=20,
    seed=7,
)


# ----------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------
def render_tile(label, rng):
    shape = SHAPES[label % 3]
    palette = PALETTES[label // 3]
    yy, xx = np.mgrid[0:IMG, 0:IMG].astype(np.float32)
    # background: low-frequency mottled grey
    bg = 110 + 25 * np.sin(xx / rng.uniform(3, 8) + rng.uniform(0, 6)) * np.cos(yy / rng.uniform(3, 8))
    img = np.repeat(bg[..., None], 3, axis=2)
    img += rng.normal(0, 12, img.shape)

    cy, cx = rng.uniform(10, 22, size=2)
    r = rng.uniform(5, 9)
    if shape == "disk":
        mask = (yy - cy) ** 2 + (xx - cx) ** 2 <= r ** 2
    elif shape == "square":
        mask = (np.abs(yy - cy) <= r * 0.8) & (np.abs(xx - cx) <= r * 0.8)
    else:
        w = r * 0.3
        mask = ((np.abs(yy - cy) <= w) & (np.abs(xx - cx) <= r)) | ((np.abs(xx - cx) <= w) & (np.abs(yy - cy) <= r))

    if palette == "warm":
        colour = np.array([rng.uniform(170, 240), rng.uniform(60, 150), rng.uniform(20, 90)])
    else:
        colour = np.array([rng.uniform(20, 90), rng.uniform(60, 150), rng.uniform(170, 240)])
    img[mask] = colour + rng.normal(0, 10, (mask.sum(), 3))
    return np.clip(img, 0, 255).astype(np.uint8)          # (H, W, 3)


def make_split(n, seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, NUM_CLASSES, size=n)
    images = np.stack([render_tile(int(c), rng) for c in labels])   # (N, H, W, 3)
    return images, labels


def channel_stats(images_hwc):
    x = images_hwc.astype(np.float32) / 255.0
    return x.mean(axis=(0, 1, 2)), x.std(axis=(0, 1, 2))


def to_tensor(batch_hwc):
    x = torch.from_numpy(batch_hwc).float().div_(255.0)
    return x.permute(0, 3, 1, 2).contiguous()


def random_crop_flip(x, gen, pad=4):
    n = x.shape[0]
    xp = F.pad(x, (pad, pad, pad, pad), mode="reflect")
    oy = torch.randint(0, 2 * pad + 1, (n,), generator=gen)
    ox = torch.randint(0, 2 * pad + 1, (n,), generator=gen)
    out = torch.stack([xp[i, :, oy[i]:oy[i] + IMG, ox[i]:ox[i] + IMG] for i in range(n)])
    flip = torch.rand(n, generator=gen) < 0.5
    out[flip] = out[flip].flip(-1)
    return out


class Batches:
    def __init__(self, images, labels, mean, std, batch_size, train, seed=0):
        self.images, self.labels = images, labels
        self.mean = torch.tensor(mean).view(1, 3, 1, 1)
        self.std = torch.tensor(std).view(1, 3, 1, 1)
        self.batch_size, self.train = batch_size, train
        self.gen = torch.Generator().manual_seed(seed)

    def __len__(self):
        return math.ceil(len(self.images) / self.batch_size)

    def __iter__(self):
        n = len(self.images)
        order = torch.randperm(n, generator=self.gen).numpy() if self.train else np.arange(n)
        for i in range(0, n, self.batch_size):
            idx = order[i:i + self.batch_size]
            x = to_tensor(self.images[idx])
            if self.train:
                x = random_crop_flip(x, self.gen)
                x = x + 0.02 * torch.randn(x.shape, generator=self.gen)
            x = (x - self.mean) / self.std
            yield x, torch.from_numpy(self.labels[idx]).long()


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
def conv_bn(c_in, c_out):
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False),
                         nn.BatchNorm2d(c_out), nn.ReLU(inplace=True))


class TileNet(nn.Module):
    def __init__(self, num_classes=NUM_CLASSES):
        super().__init__()
        self.body = nn.Sequential(
            conv_bn(3, 24), nn.MaxPool2d(2),             # 16x16
            conv_bn(24, 48), nn.MaxPool2d(2),            # 8x8
            conv_bn(48, 64), conv_bn(64, 64), nn.MaxPool2d(2),   # 4x4
        )
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x):
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.body(x), 1), 1))


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=args["learning_rate"], weight_decay=args["weight_decay"])


def build_loaders(n_train, n_val):
    tr_img, tr_lab = make_split(n_train, args["seed"])
    va_img, va_lab = make_split(n_val, args["seed"] + 100)
    mean, std = channel_stats(tr_img)
    train_dl = Batches(tr_img, tr_lab, mean, std, args["per_device_train_batch_size"], train=True, seed=args["seed"])
    val_dl = Batches(va_img, va_lab, mean, std, 200, train=False)
    return train_dl, val_dl


@torch.no_grad()
def evaluate(model, dl):
    model.eval()
    tot, correct, n = 0.0, 0, 0
    for x, y in dl:
        logits = model(x)
        tot += F.cross_entropy(logits, y, reduction="sum").item()
        correct += (logits.argmax(1) == y).sum().item()
        n += len(y)
    model.train()
    return tot / n, correct / n


def make_target():
    torch.manual_seed(args["seed"])
    train_dl, _ = build_loaders(320, 16)
    data = [b for _, b in zip(range(4), train_dl)]
    return {
        "model": TileNet(),
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "num_classes": NUM_CLASSES,
        "task": "classification",
    }


def main():
    torch.set_num_threads(1)
    torch.manual_seed(args["seed"])
    t0 = time.time()
    train_dl, val_dl = build_loaders(args["n_train"], args["n_val"])
    model = TileNet()
    opt = make_optimizer(model.parameters())
    total_steps = len(train_dl) * args["num_train_epochs"]
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args["learning_rate"], total_steps=total_steps,
                                                pct_start=0.25)
    print(f"***** Running training *****\n  Num examples = {args['n_train']}\n  Num Epochs = {args['num_train_epochs']}\n"
          f"  Batch size = {args['per_device_train_batch_size']}\n  Total optimization steps = {total_steps}")

    step, acc_loss, acc_n = 0, 0.0, 0
    for epoch in range(args["num_train_epochs"]):
        for batch in train_dl:
            loss = loss_fn(model, batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            opt.step()
            sched.step()
            step += 1
            acc_loss += loss.item()
            acc_n += 1
            if step % args["logging_steps"] == 0:
                print({"loss": round(acc_loss / acc_n, 4), "grad_norm": round(grad_norm.item(), 4),
                       "learning_rate": float(f"{sched.get_last_lr()[0]:.3e}"),
                       "epoch": round(step / len(train_dl), 2)})
                acc_loss, acc_n = 0.0, 0
        val_loss, val_acc = evaluate(model, val_dl)
        print({"eval_loss": round(val_loss, 4), "eval_accuracy": round(val_acc, 4), "epoch": float(epoch + 1)})
    rt = time.time() - t0
    print({"train_runtime": round(rt, 2), "train_steps_per_second": round(step / rt, 3), "epoch": float(args["num_train_epochs"])})


if __name__ == "__main__":
    main()
