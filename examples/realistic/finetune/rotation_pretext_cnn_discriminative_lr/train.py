"""Glyph classifier fine-tuned from a rotation-prediction pretrained CNN.

Pretext: predict which of 0/90/180/270 degrees an unlabeled glyph image was
rotated by (Gidaris et al. style self-supervision).
Downstream: 5-way glyph classification from a small labelled set.
  - epochs 0-1: backbone frozen, head warm-up
  - epochs 2+ : full fine-tuning with discriminative LRs (backbone 10x lower)
  - label smoothing 0.1, dropout before the head, shift/noise augmentation
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

IMG = 20
CLASSES = ["ell", "tee", "plus", "box", "arrow"]
N_CLASSES = len(CLASSES)

PRETRAIN_N = 2000
PRETRAIN_EPOCHS = 2
PRETRAIN_BS = 64

FT_TRAIN_N = 600
FT_VAL_N = 1000
FT_BS = 32
FT_EPOCHS = 12
HEAD_WARMUP_EPOCHS = 2
HEAD_LR = 3e-3
BACKBONE_LR = 3e-4
LABEL_SMOOTHING = 0.1


# ----------------------------------------------------------------------------
# synthetic glyphs
# ----------------------------------------------------------------------------
def draw_glyph(kind, rng):
    img = np.zeros((IMG, IMG), dtype=np.float32)
    s = int(rng.integers(8, 13))                   # glyph size
    th = int(rng.integers(2, 4))                   # stroke thickness
    r0 = int(rng.integers(1, IMG - s - 1))
    c0 = int(rng.integers(1, IMG - s - 1))
    sub = np.zeros((s, s), dtype=np.float32)
    m = s // 2
    if kind == 0:      # ell
        sub[:, :th] = 1
        sub[-th:, :] = 1
    elif kind == 1:    # tee
        sub[:th, :] = 1
        sub[:, m - th // 2:m - th // 2 + th] = 1
    elif kind == 2:    # plus
        sub[m - th // 2:m - th // 2 + th, :] = 1
        sub[:, m - th // 2:m - th // 2 + th] = 1
    elif kind == 3:    # box
        sub[:th, :] = 1
        sub[-th:, :] = 1
        sub[:, :th] = 1
        sub[:, -th:] = 1
    else:              # arrow pointing up
        sub[:, m - th // 2:m - th // 2 + th] = 1
        for i in range(m):
            sub[i, max(0, m - i):max(0, m - i) + th] = 1
            sub[i, min(s - 1, m + i):min(s, m + i + th)] = 1
    img[r0:r0 + s, c0:c0 + s] = sub
    img *= rng.uniform(0.7, 1.0)
    img += rng.normal(0, 0.15, size=img.shape).astype(np.float32)
    return img


def make_glyph_set(n, seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, N_CLASSES, size=n)
    x = np.stack([draw_glyph(k, rng) for k in labels])[:, None]
    return torch.from_numpy(x.astype(np.float32)), torch.from_numpy(labels).long()


def rotation_batch(x):
    """Every image in all four rotations, label = number of quarter turns."""
    xs = [torch.rot90(x, k, dims=(2, 3)) for k in range(4)]
    ys = [torch.full((x.size(0),), k, dtype=torch.long) for k in range(4)]
    return torch.cat(xs), torch.cat(ys)


def augment(x, gen):
    # random translation by up to 2px + extra sensor noise; both label-preserving
    dx, dy = torch.randint(-2, 3, (2,), generator=gen).tolist()
    x = torch.roll(x, shifts=(dy, dx), dims=(2, 3))
    return x + 0.05 * torch.randn(x.shape, generator=gen)


class AugmentedLoader:
    def __init__(self, x, y, batch_size, seed):
        self.x, self.y, self.bs = x, y, batch_size
        self.gen = torch.Generator().manual_seed(seed)

    def __len__(self):
        return math.ceil(len(self.x) / self.bs)

    def __iter__(self):
        perm = torch.randperm(len(self.x), generator=self.gen)
        for i in range(0, len(perm), self.bs):
            idx = perm[i:i + self.bs]
            yield augment(self.x[idx], self.gen), self.y[idx]


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
def conv_block(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        self.stage1 = nn.Sequential(conv_block(1, 24), conv_block(24, 24), nn.MaxPool2d(2))   # 10x10
        self.stage2 = nn.Sequential(conv_block(24, 48), nn.MaxPool2d(2))                     # 5x5
        self.stage3 = conv_block(48, 64)
        self.out_dim = 64

    def forward(self, x):
        x = self.stage3(self.stage2(self.stage1(x)))
        return x.mean(dim=(2, 3))


class GlyphClassifier(nn.Module):
    def __init__(self, n_classes=N_CLASSES):
        super().__init__()
        self.backbone = Backbone()
        self.head = nn.Sequential(nn.Dropout(0.3), nn.Linear(self.backbone.out_dim, n_classes))

    def forward(self, x):
        return self.head(self.backbone(x))


# ----------------------------------------------------------------------------
# stage 1: rotation pretext
# ----------------------------------------------------------------------------
def pretrain():
    torch.manual_seed(0)
    x, _ = make_glyph_set(PRETRAIN_N, seed=100)            # labels unused
    backbone = Backbone()
    rot_head = nn.Linear(backbone.out_dim, 4)
    params = list(backbone.parameters()) + list(rot_head.parameters())
    opt = torch.optim.Adam(params, lr=2e-3)
    gen = torch.Generator().manual_seed(0)
    for epoch in range(PRETRAIN_EPOCHS):
        backbone.train()
        perm = torch.randperm(len(x), generator=gen)
        tot, correct, n = 0.0, 0, 0
        t0 = time.time()
        for i in range(0, len(perm), PRETRAIN_BS // 4):
            xb, yb = rotation_batch(x[perm[i:i + PRETRAIN_BS // 4]])
            logits = rot_head(backbone(xb))
            loss = F.cross_entropy(logits, yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += loss.item() * len(yb)
            correct += (logits.argmax(1) == yb).sum().item()
            n += len(yb)
        print(f"[rotnet] epoch {epoch}: rot_loss={tot / n:.4f} rot_acc={correct / n:.4f} ({time.time() - t0:.1f}s)")
    torch.save(backbone.state_dict(), CKPT_PATH)


# ----------------------------------------------------------------------------
# stage 2: fine-tuning
# ----------------------------------------------------------------------------
def build_model():
    torch.manual_seed(1)
    model = GlyphClassifier()
    if os.path.exists(CKPT_PATH):
        model.backbone.load_state_dict(torch.load(CKPT_PATH, map_location="cpu"))
    return model


def get_data():
    x_tr, y_tr = make_glyph_set(FT_TRAIN_N, seed=200)
    x_va, y_va = make_glyph_set(FT_VAL_N, seed=201)
    train_loader = AugmentedLoader(x_tr, y_tr, FT_BS, seed=5)
    return train_loader, (x_va, y_va)


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y, label_smoothing=LABEL_SMOOTHING)


def param_groups(params):
    """Discriminative LRs: anything that isn't the new head gets the low LR."""
    params = list(params)
    head_ids = {id(p) for p in params if getattr(p, "_is_head", False)}
    return [
        {"params": [p for p in params if id(p) not in head_ids], "lr": BACKBONE_LR, "name": "backbone"},
        {"params": [p for p in params if id(p) in head_ids], "lr": HEAD_LR, "name": "head"},
    ]


def make_optimizer(params):
    return torch.optim.AdamW(param_groups(params), weight_decay=1e-4)


def mark_head(model):
    for p in model.head.parameters():
        p._is_head = True


def set_backbone_frozen(model, frozen):
    for p in model.backbone.parameters():
        p.requires_grad = not frozen


@torch.no_grad()
def evaluate(model, val):
    model.eval()
    x, y = val
    logits = torch.cat([model(x[i:i + 500]) for i in range(0, len(x), 500)])
    return F.cross_entropy(logits, y).item(), (logits.argmax(1) == y).float().mean().item()


def finetune():
    model = build_model()
    mark_head(model)
    train_loader, val = get_data()
    optimizer = make_optimizer(model.parameters())
    total_steps = FT_EPOCHS * len(train_loader)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=[BACKBONE_LR, HEAD_LR], total_steps=total_steps, pct_start=0.15)

    n_params = sum(p.numel() for p in model.parameters())
    print("  | Name     | Type     | Params")
    print("-----------------------------------")
    print(f"0 | backbone | Backbone | {sum(p.numel() for p in model.backbone.parameters())}")
    print(f"1 | head     | Sequential | {sum(p.numel() for p in model.head.parameters())}")
    print(f"{n_params} Total params")

    for epoch in range(FT_EPOCHS):
        frozen = epoch < HEAD_WARMUP_EPOCHS
        set_backbone_frozen(model, frozen)
        model.train()
        if frozen:
            model.backbone.eval()      # keep pretrained BN stats while the head warms up
        t0 = time.time()
        tot, n = 0.0, 0
        for x, y in train_loader:
            loss = loss_fn(model, (x, y))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            tot += loss.item() * len(y)
            n += len(y)
        val_loss, val_acc = evaluate(model, val)
        lr_bb, lr_head = scheduler.get_last_lr()
        elapsed = time.time() - t0
        steps = len(train_loader)
        print(f"Epoch {epoch}: 100%|##########| {steps}/{steps} [00:{elapsed:05.2f}, "
              f"train_loss={tot / n:.3f}, val_loss={val_loss:.3f}, val_acc={val_acc:.3f}, "
              f"lr-backbone={lr_bb if not frozen else 0.0:.2e}, lr-head={lr_head:.2e}]")
    print(f"`Trainer.fit` stopped: `max_epochs={FT_EPOCHS}` reached.")
    return model


def make_target():
    model = build_model()
    mark_head(model)
    train_loader, _ = get_data()
    data = []
    for i, batch in enumerate(train_loader):
        if i >= 4:
            break
        data.append(batch)
    return {
        "model": model,
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "num_classes": N_CLASSES,
        "task": "classification",
    }


if __name__ == "__main__":
    t_start = time.time()
    pretrain()
    finetune()
    print(f"total time {time.time() - t_start:.1f}s")
