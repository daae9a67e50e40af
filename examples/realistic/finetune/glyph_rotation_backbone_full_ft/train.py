"""Shape classification on 24x24 grayscale glyphs, starting from a rotation-pretext backbone.

pretrain:  small ResNet-ish CNN predicts the rotation (0/90/180/270) of unlabeled glyphs
finetune:  new MLP head; 3 epochs head-only warmup with the backbone frozen (BN stats
           frozen too), then full fine-tuning with a 10x lower backbone LR.
           Label smoothing 0.1, dropout 0.3, random shift/flip augmentation on train.
"""
import math
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)

HERE = os.path.dirname(os.path.abspath(__file__))
CKPT_PATH = os.path.join(HERE, "rotnet_backbone.pt")
SEED = 2024
IMG = 24
NUM_CLASSES = 6   # triangle, T, U, Y, dagger, H

N_UNLABELED = 2400
PRETRAIN_EPOCHS = 3
N_TRAIN = 360
N_VAL = 600

BATCH_SIZE = 32
MAX_EPOCHS = 12
WARMUP_EPOCHS = 3
HEAD_LR = 3e-3
BACKBONE_LR = 3e-4
WEIGHT_DECAY = 5e-4
LABEL_SMOOTHING = 0.1


# ----------------------------------------------------------------------------
# synthetic glyphs
# ----------------------------------------------------------------------------
# glyph strokes in a unit box (x right, y down), all left-right symmetric and upright
GLYPH_STROKES = {
    0: [((-1, 1), (0, -1)), ((0, -1), (1, 1)), ((-1, 1), (1, 1))],            # triangle
    1: [((-1, -1), (1, -1)), ((0, -1), (0, 1))],                              # T
    2: [((-1, -1), (-1, 1)), ((1, -1), (1, 1)), ((-1, 1), (1, 1))],           # U
    3: [((-1, -1), (0, 0)), ((1, -1), (0, 0)), ((0, 0), (0, 1))],             # Y
    4: [((0, -1), (0, 1)), ((-0.7, -0.35), (0.7, -0.35))],                    # dagger
    5: [((-1, -1), (-1, 1)), ((1, -1), (1, 1)), ((-1, 0), (1, 0))],           # H
}


def _segment_dist(px, py, a, b):
    ax, ay = a
    bx, by = b
    dx, dy = bx - ax, by - ay
    t = np.clip(((px - ax) * dx + (py - ay) * dy) / (dx * dx + dy * dy), 0.0, 1.0)
    return np.sqrt((px - ax - t * dx) ** 2 + (py - ay - t * dy) ** 2)


def draw_glyph(cls, rng):
    yy, xx = np.mgrid[0:IMG, 0:IMG].astype(np.float32)
    cy, cx = rng.uniform(10, 14, size=2)
    scale = rng.uniform(5.0, 7.5)
    thick = rng.uniform(0.9, 1.6)
    ang = np.deg2rad(rng.uniform(-12, 12))
    # pixel -> glyph coordinates (small random tilt)
    u = ((xx - cx) * np.cos(ang) + (yy - cy) * np.sin(ang)) / scale
    v = (-(xx - cx) * np.sin(ang) + (yy - cy) * np.cos(ang)) / scale
    d = np.min([_segment_dist(u, v, a, b) for a, b in GLYPH_STROKES[cls]], axis=0) * scale
    img = np.clip(1.0 - (d - thick), 0.0, 1.0) * rng.uniform(0.6, 1.0)
    # uneven illumination + sensor noise
    grad = rng.uniform(-0.2, 0.2) * (xx / IMG - 0.5) + rng.uniform(-0.2, 0.2) * (yy / IMG - 0.5)
    img = img + grad + rng.normal(0, 0.25, size=img.shape)
    return img.astype(np.float32)


def make_glyphs(n, rng):
    y = rng.integers(0, NUM_CLASSES, size=n)
    x = np.stack([draw_glyph(int(c), rng) for c in y])[:, None]
    return x, y.astype(np.int64)


def make_labeled_splits():
    rng = np.random.default_rng(SEED + 1)
    xtr, ytr = make_glyphs(N_TRAIN, rng)
    xva, yva = make_glyphs(N_VAL, rng)
    return (torch.from_numpy(xtr), torch.from_numpy(ytr)), (torch.from_numpy(xva), torch.from_numpy(yva))


def augment(x, generator):
    """Random shift by up to 2px (reflect pad + crop) and horizontal flip; shape class is invariant."""
    b = x.shape[0]
    padded = F.pad(x, (2, 2, 2, 2), mode="reflect")
    out = torch.empty_like(x)
    offs = torch.randint(0, 5, (b, 2), generator=generator)
    flip = torch.rand(b, generator=generator) < 0.5
    for i in range(b):
        oy, ox = offs[i].tolist()
        crop = padded[i, :, oy:oy + IMG, ox:ox + IMG]
        out[i] = crop.flip(-1) if flip[i] else crop
    return out


def train_batches(x, y, generator):
    order = torch.randperm(len(y), generator=generator)
    for i in range(0, len(y), BATCH_SIZE):
        idx = order[i:i + BATCH_SIZE]
        yield augment(x[idx], generator), y[idx]


def val_batches(x, y, batch_size=200):
    for i in range(0, len(y), batch_size):
        yield x[i:i + batch_size], y[i:i + batch_size]


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
def conv_bn(c_in, c_out, stride=1):
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(inplace=True))


class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            conv_bn(1, 16), conv_bn(16, 16),
            conv_bn(16, 32, stride=2), conv_bn(32, 32),
            conv_bn(32, 64, stride=2), conv_bn(64, 64),
        )
        self.out_dim = 64

    def forward(self, x):
        return F.adaptive_avg_pool2d(self.features(x), 1).flatten(1)


class GlyphClassifier(nn.Module):
    def __init__(self, backbone, num_classes):
        super().__init__()
        self.backbone = backbone
        self.head = nn.Sequential(nn.Linear(backbone.out_dim, 128), nn.ReLU(), nn.Dropout(0.3),
                                  nn.Linear(128, num_classes))

    def forward(self, x):
        return self.head(self.backbone(x))


# ----------------------------------------------------------------------------
# rotation pretext
# ----------------------------------------------------------------------------
def pretrain_rotnet():
    torch.manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    x, _ = make_glyphs(N_UNLABELED, rng)  # class labels unused
    x = torch.from_numpy(x)
    backbone = Backbone()
    rot_head = nn.Linear(backbone.out_dim, 4)
    opt = torch.optim.SGD(list(backbone.parameters()) + list(rot_head.parameters()), lr=0.05, momentum=0.9, weight_decay=5e-4)
    g = torch.Generator().manual_seed(SEED)
    backbone.train()
    for epoch in range(PRETRAIN_EPOCHS):
        order = torch.randperm(len(x), generator=g)
        tot, n = 0.0, 0
        for i in range(0, len(x), 128):
            xb = x[order[i:i + 128]]
            k = torch.randint(0, 4, (len(xb),), generator=g)
            xr = torch.stack([torch.rot90(img, int(r), dims=(1, 2)) for img, r in zip(xb, k)])
            loss = F.cross_entropy(rot_head(backbone(xr)), k)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            tot += loss.item() * len(xb)
            n += len(xb)
        print(f"[rotnet] epoch {epoch + 1}/{PRETRAIN_EPOCHS} rot_loss={tot / n:.4f}")
    torch.save(backbone.state_dict(), CKPT_PATH)


def load_backbone():
    if not os.path.exists(CKPT_PATH):
        pretrain_rotnet()
    backbone = Backbone()
    backbone.load_state_dict(torch.load(CKPT_PATH, map_location="cpu"))
    return backbone


# ----------------------------------------------------------------------------
# fine-tuning
# ----------------------------------------------------------------------------
def build_model():
    backbone = load_backbone()
    torch.manual_seed(SEED + 2)
    return GlyphClassifier(backbone, NUM_CLASSES)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=HEAD_LR, weight_decay=WEIGHT_DECAY)


def param_groups(model):
    return [{"params": model.head.parameters(), "lr": HEAD_LR},
            {"params": model.backbone.parameters(), "lr": BACKBONE_LR}]


def set_backbone_trainable(model, trainable):
    for p in model.backbone.parameters():
        p.requires_grad_(trainable)


def loss_fn(model, batch):
    xb, yb = batch
    return F.cross_entropy(model(xb), yb, label_smoothing=LABEL_SMOOTHING)


@torch.no_grad()
def validate(model, x, y):
    model.eval()
    tot, correct = 0.0, 0
    for xb, yb in val_batches(x, y):
        logits = model(xb)
        tot += F.cross_entropy(logits, yb, reduction="sum").item()
        correct += (logits.argmax(-1) == yb).sum().item()
    return tot / len(y), correct / len(y)


def make_target():
    model = build_model()
    set_backbone_trainable(model, False)
    (xtr, ytr), _ = make_labeled_splits()
    g = torch.Generator().manual_seed(SEED)
    data = [b for _, b in zip(range(5), train_batches(xtr, ytr, g))]
    return {"model": model, "data": data, "loss_fn": loss_fn, "make_optimizer": make_optimizer,
            "num_classes": NUM_CLASSES, "task": "classification"}


def main():
    t_start = time.time()
    model = build_model()
    (xtr, ytr), (xva, yva) = make_labeled_splits()
    set_backbone_trainable(model, False)
    optimizer = make_optimizer(param_groups(model))
    steps_per_epoch = math.ceil(N_TRAIN / BATCH_SIZE)
    # cosine decay over the full-finetune phase only
    ft_steps = steps_per_epoch * (MAX_EPOCHS - WARMUP_EPOCHS)

    def lr_lambda(step):
        s = step - steps_per_epoch * WARMUP_EPOCHS
        return 1.0 if s < 0 else 0.5 * (1 + math.cos(math.pi * min(s, ft_steps) / ft_steps))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)

    n_params = sum(p.numel() for p in model.parameters())
    print(f"  | Name     | Type          | Params\n0 | backbone | Backbone      | {sum(p.numel() for p in model.backbone.parameters())}\n"
          f"1 | head     | Sequential    | {sum(p.numel() for p in model.head.parameters())}\n{n_params} Total params")

    g = torch.Generator().manual_seed(SEED)
    for epoch in range(MAX_EPOCHS):
        if epoch == WARMUP_EPOCHS:
            set_backbone_trainable(model, True)
            print(f"Epoch {epoch}: unfreezing backbone (lr={BACKBONE_LR:g})")
        model.train()
        if epoch < WARMUP_EPOCHS:
            model.backbone.eval()  # keep pretrained BN statistics while the backbone is frozen
        t0 = time.time()
        tot, n = 0.0, 0
        for batch in train_batches(xtr, ytr, g):
            loss = loss_fn(model, batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            tot += loss.item() * len(batch[1])
            n += len(batch[1])
        val_loss, val_acc = validate(model, xva, yva)
        dt = time.time() - t0
        print(f"Epoch {epoch}: 100%|##########| {steps_per_epoch}/{steps_per_epoch} [{dt:04.1f}s, {steps_per_epoch / dt:.2f}it/s, "
              f"train_loss={tot / n:.3f}, val_loss={val_loss:.3f}, val_acc={val_acc:.3f}, lr-head={scheduler.get_last_lr()[0]:.2e}]")
    print(f"`Trainer.fit` stopped: `max_epochs={MAX_EPOCHS}` reached. ({time.time() - t_start:.1f}s)")


if __name__ == "__main__":
    main()
