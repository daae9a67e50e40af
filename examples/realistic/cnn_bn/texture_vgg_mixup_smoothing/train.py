"""VGG-style CNN with BatchNorm on synthetic texture patches.

Five texture families (stripes, checker, dots, rings, blobs), each rendered at a
random orientation / scale / colour so that flips and crops do not change the
class.  Regularisation: random crop + h/v flips + pixel noise, mixup (alpha=0.4)
and label smoothing 0.1.  SGD momentum, linear warmup then cosine decay.
Logging mimics the HF Trainer dict lines.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)

CLASSES = ["stripes", "checker", "dots", "rings", "blobs"]
IMG = 28
OUT = 24
CFG = dict(
    n_train=2000,
    n_val=500,
    batch_size=50,
    epochs=10,
    lr=0.1,
    momentum=0.9,
    weight_decay=5e-4,
    warmup_steps=80,
    mixup_alpha=0.4,
    label_smoothing=0.1,
    noise_std=0.1,
    logging_steps=20,
    seed=7,
)


# ----------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------
def render_texture(rng, label):
    yy, xx = np.mgrid[0:IMG, 0:IMG].astype(np.float32)
    th = rng.uniform(0, np.pi)
    u = xx * np.cos(th) + yy * np.sin(th)
    v = -xx * np.sin(th) + yy * np.cos(th)
    period = rng.uniform(4.0, 7.0)
    if label == 0:
        pat = np.sin(2 * np.pi * u / period)
    elif label == 1:
        pat = np.sign(np.sin(2 * np.pi * u / period) * np.sin(2 * np.pi * v / period))
    elif label == 2:
        pat = (np.cos(2 * np.pi * u / period) * np.cos(2 * np.pi * v / period) > 0.6) * 2.0 - 1.0
    elif label == 3:
        cy, cx = rng.uniform(6, IMG - 6, size=2)
        pat = np.sin(2 * np.pi * np.hypot(yy - cy, xx - cx) / period)
    else:
        pat = np.zeros_like(xx)
        for _ in range(rng.integers(3, 7)):
            cy, cx = rng.uniform(0, IMG, size=2)
            s = rng.uniform(2.0, 4.0)
            pat += np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * s * s))
        pat = 2 * pat / (pat.max() + 1e-6) - 1
    c1 = rng.uniform(0, 1, size=(3, 1, 1))
    c2 = rng.uniform(0, 1, size=(3, 1, 1))
    w = (pat[None] + 1) / 2
    img = w * c1 + (1 - w) * c2 + rng.normal(0, 0.05, size=(3, IMG, IMG))
    return np.clip(img, 0, 1).astype(np.float32)


def make_split(n, seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, len(CLASSES), size=n)
    x = np.stack([render_texture(rng, int(c)) for c in y])
    return torch.from_numpy(x), torch.from_numpy(y).long()


def build_data(cfg=CFG):
    x_tr, y_tr = make_split(cfg["n_train"], cfg["seed"])
    x_va, y_va = make_split(cfg["n_val"], cfg["seed"] + 100)
    mean = x_tr.mean(dim=(0, 2, 3), keepdim=True)
    std = x_tr.std(dim=(0, 2, 3), keepdim=True)
    s = (IMG - OUT) // 2
    x_va = x_va[:, :, s:s + OUT, s:s + OUT]
    return (x_tr - mean) / std, y_tr, (x_va - mean) / std, y_va


def augment(x, gen, noise_std):
    n = x.shape[0]
    oy, ox = torch.randint(0, IMG - OUT + 1, (2,), generator=gen).tolist()
    x = x[:, :, oy:oy + OUT, ox:ox + OUT]
    hflip = torch.rand(n, 1, 1, 1, generator=gen) < 0.5
    vflip = torch.rand(n, 1, 1, 1, generator=gen) < 0.5
    x = torch.where(hflip, x.flip(-1), x)
    x = torch.where(vflip, x.flip(-2), x)
    return x + noise_std * torch.randn(x.shape, generator=gen)


def mixup(x, y, num_classes, alpha, gen):
    lam = float(np.random.default_rng(int(torch.randint(0, 2**31, (1,), generator=gen))).beta(alpha, alpha))
    perm = torch.randperm(x.shape[0], generator=gen)
    y1 = F.one_hot(y, num_classes).float()
    x_mix = lam * x + (1 - lam) * x[perm]
    y_mix = lam * y1 + (1 - lam) * y1[perm]
    return x_mix, y_mix


def train_batches(x, y, cfg, gen):
    perm = torch.randperm(x.shape[0], generator=gen)
    bs = cfg["batch_size"]
    for i in range(0, x.shape[0] - bs + 1, bs):
        idx = perm[i:i + bs]
        xb = augment(x[idx], gen, cfg["noise_std"])
        yield mixup(xb, y[idx], len(CLASSES), cfg["mixup_alpha"], gen)


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
def block(c_in, c_out):
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(inplace=True),
        nn.Conv2d(c_out, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(inplace=True),
        nn.MaxPool2d(2),
    )


class TextureVGG(nn.Module):
    def __init__(self, num_classes=5):
        super().__init__()
        self.features = nn.Sequential(block(3, 16), block(16, 32), block(32, 48))
        self.classifier = nn.Linear(48, num_classes)

    def forward(self, x):
        return self.classifier(self.features(x).mean(dim=(2, 3)))


def build_model():
    return TextureVGG(len(CLASSES))


def soft_cross_entropy(logits, target, smoothing):
    k = logits.shape[-1]
    target = target * (1 - smoothing) + smoothing / k
    return -(target * F.log_softmax(logits, dim=-1)).sum(-1).mean()


def compute_loss(model, batch, cfg=CFG):
    x, y_soft = batch
    return soft_cross_entropy(model(x), y_soft, cfg["label_smoothing"])


def make_optimizer(params, cfg=CFG):
    return torch.optim.SGD(params, lr=cfg["lr"], momentum=cfg["momentum"],
                           weight_decay=cfg["weight_decay"], nesterov=True)


def warmup_cosine(step, total, warmup):
    if step < warmup:
        return (step + 1) / warmup
    return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))


@torch.no_grad()
def evaluate(model, x, y):
    model.eval()
    logits = model(x)
    model.train()
    return {
        "eval_loss": round(F.cross_entropy(logits, y).item(), 4),
        "eval_accuracy": round((logits.argmax(1) == y).float().mean().item(), 4),
    }


def make_target():
    torch.manual_seed(CFG["seed"])
    x_tr, y_tr, _, _ = build_data()
    gen = torch.Generator().manual_seed(CFG["seed"])
    it = train_batches(x_tr, y_tr, CFG, gen)
    return {
        "model": build_model(),
        "data": [next(it) for _ in range(4)],
        "loss_fn": compute_loss,
        "make_optimizer": make_optimizer,
        "num_classes": len(CLASSES),
        "task": "classification",
    }


def main():
    cfg = CFG
    torch.manual_seed(cfg["seed"])
    x_tr, y_tr, x_va, y_va = build_data(cfg)
    model = build_model()
    optimizer = make_optimizer(model.parameters(), cfg)
    steps_per_epoch = cfg["n_train"] // cfg["batch_size"]
    total = cfg["epochs"] * steps_per_epoch
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: warmup_cosine(s, total, cfg["warmup_steps"]))
    gen = torch.Generator().manual_seed(cfg["seed"])

    print("***** Running training *****")
    print(f"  Num examples = {len(x_tr)}")
    print(f"  Num Epochs = {cfg['epochs']}")
    print(f"  Train batch size = {cfg['batch_size']}")
    print(f"  Total optimization steps = {total}")
    step, t0 = 0, time.time()
    running, n_running = 0.0, 0
    for epoch in range(cfg["epochs"]):
        for batch in train_batches(x_tr, y_tr, cfg, gen):
            loss = compute_loss(model, batch, cfg)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            step += 1
            running += loss.item()
            n_running += 1
            if step % cfg["logging_steps"] == 0:
                print({"loss": round(running / n_running, 4),
                       "learning_rate": float(f"{scheduler.get_last_lr()[0]:.4e}"),
                       "epoch": round(step / steps_per_epoch, 2)})
                running, n_running = 0.0, 0
        metrics = evaluate(model, x_va, y_va)
        metrics["epoch"] = float(epoch + 1)
        print(metrics)
    runtime = time.time() - t0
    print({"train_runtime": round(runtime, 2), "train_samples_per_second": round(total * cfg["batch_size"] / runtime, 1),
           "epoch": float(cfg["epochs"])})


if __name__ == "__main__":
    main()
