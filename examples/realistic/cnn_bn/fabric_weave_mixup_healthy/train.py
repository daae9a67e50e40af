"""Fabric pattern classifier for the textile sorting line.

Line-scan camera tiles (32x32 grayscale, arbitrary offset / scale of the weave)
are sorted into five pattern families. The catalogue is small, so training
uses heavy regularisation: random crop, flips, brightness/contrast jitter,
random erasing, mixup and dropout. The training loop mirrors what we had with
the HF Trainer, including its log dicts.
"""
import argparse
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIG = dict(
    seed=31,
    n_train=2000,
    n_val=600,
    img=32,
    batch_size=64,
    epochs=14,
    lr=2e-3,
    weight_decay=0.01,
    warmup_ratio=0.1,
    mixup_alpha=0.4,
    erase_p=0.5,
    logging_steps=16,
)

PATTERNS = ["stripe_h", "stripe_v", "plaid", "polka", "solid"]
PATTERN_P = [0.22, 0.22, 0.2, 0.16, 0.2]


def render_tile(kind, size, rng):
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    period = rng.uniform(3.0, 8.0)
    phase = rng.uniform(0, 2 * np.pi, size=2)
    contrast = rng.uniform(0.15, 0.6)
    warp = 0.6 * np.sin(2 * np.pi * yy / rng.uniform(20, 60) + phase[0])  # fabric is never perfectly straight
    if kind == "stripe_h":
        tex = np.sin(2 * np.pi * (yy + warp) / period + phase[0])
    elif kind == "stripe_v":
        tex = np.sin(2 * np.pi * (xx + warp) / period + phase[1])
    elif kind == "plaid":
        w = rng.uniform(0.3, 0.7)
        tex = w * np.sin(2 * np.pi * yy / period + phase[0]) + (1 - w) * np.sin(
            2 * np.pi * (xx + warp) / rng.uniform(3.0, 8.0) + phase[1])
        tex = tex / max(w, 1 - w)
    elif kind == "polka":
        gy = ((yy + phase[0]) % period) - period / 2
        gx = ((xx + phase[1]) % period) - period / 2
        tex = 2 * (np.hypot(gy, gx) < rng.uniform(0.8, 1.6)) - 1.0
    else:
        tex = np.zeros((size, size), np.float32)
    base = rng.uniform(0.3, 0.7)
    img = base + contrast * tex / 2
    img += rng.normal(0, rng.uniform(0.05, 0.22), (size, size))  # yarn fuzz / sensor noise
    img += 0.1 * rng.normal() * (xx / size)  # illumination gradient
    return img.astype(np.float32)


def generate(n, size, rng):
    y = rng.choice(len(PATTERNS), size=n, p=PATTERN_P)
    x = np.stack([render_tile(PATTERNS[k], size, rng) for k in y])[:, None]
    return torch.from_numpy(x), torch.from_numpy(y.astype(np.int64))


def build_data(cfg):
    rng = np.random.default_rng(cfg["seed"])
    x_tr, y_tr = generate(cfg["n_train"], cfg["img"], rng)
    x_va, y_va = generate(cfg["n_val"], cfg["img"], rng)
    mu, sd = x_tr.mean(), x_tr.std()
    return ((x_tr - mu) / sd, y_tr), ((x_va - mu) / sd, y_va)


def augment(x, cfg):
    n, _, h, w = x.shape
    # random crop with reflect padding
    xp = F.pad(x, (4, 4, 4, 4), mode="reflect")
    oy, ox = np.random.randint(0, 9, size=2)
    x = xp[:, :, oy:oy + h, ox:ox + w]
    # weave direction is preserved by h/v flips
    x = torch.where((torch.rand(n) < 0.5)[:, None, None, None], x.flip(3), x)
    x = torch.where((torch.rand(n) < 0.5)[:, None, None, None], x.flip(2), x)
    # brightness / contrast jitter
    x = x * (1 + 0.3 * (torch.rand(n, 1, 1, 1) - 0.5)) + 0.3 * (torch.rand(n, 1, 1, 1) - 0.5)
    # random erasing
    erase = torch.rand(n) < cfg["erase_p"]
    ey, ex = np.random.randint(0, h - 12, size=2)
    x = x.clone()
    x[erase, :, ey:ey + 12, ex:ex + 12] = torch.randn(int(erase.sum()), 1, 12, 12)
    return x


def mixup(x, y, alpha, n_classes):
    lam = float(np.random.beta(alpha, alpha))
    idx = torch.randperm(x.shape[0])
    y1 = F.one_hot(y, n_classes).float()
    return lam * x + (1 - lam) * x[idx], lam * y1 + (1 - lam) * y1[idx]


class WeaveNet(nn.Module):
    def __init__(self, n_classes=len(PATTERNS)):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 24, 5, stride=2, padding=2, bias=False), nn.BatchNorm2d(24), nn.ReLU())
        self.block1 = nn.Sequential(nn.Conv2d(24, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
                                    nn.MaxPool2d(2))
        self.block2 = nn.Sequential(nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU())
        self.drop = nn.Dropout(0.3)
        self.fc = nn.Linear(64, n_classes)

    def forward(self, x):
        h = self.block2(self.block1(self.stem(x)))
        return self.fc(self.drop(h.mean(dim=(2, 3))))


def soft_ce(logits, target):
    return -(target * F.log_softmax(logits, dim=1)).sum(1).mean()


def loss_fn(model, batch):
    x, y_soft = batch
    return soft_ce(model(x), y_soft)


def make_optimizer(model, cfg):
    decay = [p for n, p in model.named_parameters() if p.ndim > 1]
    no_decay = [p for n, p in model.named_parameters() if p.ndim <= 1]
    return torch.optim.AdamW([{"params": decay, "weight_decay": cfg["weight_decay"]},
                              {"params": no_decay, "weight_decay": 0.0}], lr=cfg["lr"])


def linear_schedule_with_warmup(opt, warmup, total):
    def f(step):
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total - step) / max(1, total - warmup))
    return torch.optim.lr_scheduler.LambdaLR(opt, f)


def make_target():
    cfg = dict(CONFIG)
    np.random.seed(cfg["seed"])
    torch.manual_seed(cfg["seed"])
    (x_tr, y_tr), _ = build_data(cfg)
    model = WeaveNet()
    bs = cfg["batch_size"]
    data = []
    for i in range(4):
        xb = augment(x_tr[i * bs:(i + 1) * bs], cfg)
        data.append(mixup(xb, y_tr[i * bs:(i + 1) * bs], cfg["mixup_alpha"], len(PATTERNS)))
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model, cfg), "task": "classification", "num_classes": len(PATTERNS)}


@torch.no_grad()
def evaluate(model, x, y):
    model.eval()
    t0 = time.time()
    logits = model(x)
    model.train()
    dt = time.time() - t0
    return {"eval_loss": round(F.cross_entropy(logits, y).item(), 4),
            "eval_accuracy": round((logits.argmax(1) == y).float().mean().item(), 4),
            "eval_runtime": round(dt, 4), "eval_samples_per_second": round(len(y) / max(dt, 1e-6), 3)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--num_train_epochs", type=int, default=CONFIG["epochs"])
    p.add_argument("--learning_rate", type=float, default=CONFIG["lr"])
    cli = p.parse_args()
    cfg = dict(CONFIG, epochs=cli.num_train_epochs, lr=cli.learning_rate)

    np.random.seed(cfg["seed"])
    torch.manual_seed(cfg["seed"])
    (x_tr, y_tr), (x_va, y_va) = build_data(cfg)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x_tr, y_tr), batch_size=cfg["batch_size"],
                                         shuffle=True, drop_last=True)
    model = WeaveNet()
    opt = make_optimizer(model, cfg)
    total = cfg["epochs"] * len(loader)
    sched = linear_schedule_with_warmup(opt, int(cfg["warmup_ratio"] * total), total)
    print("***** Running training *****")
    print(f"  Num examples = {len(y_tr)}")
    print(f"  Num Epochs = {cfg['epochs']}")
    print(f"  Total train batch size = {cfg['batch_size']}")
    print(f"  Total optimization steps = {total}")

    t_start = time.time()
    step, running, n_run, all_losses = 0, 0.0, 0, []
    for epoch in range(cfg["epochs"]):
        for xb, yb in loader:
            xb, y_soft = mixup(augment(xb, cfg), yb, cfg["mixup_alpha"], len(PATTERNS))
            loss = loss_fn(model, (xb, y_soft))
            opt.zero_grad()
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            step += 1
            running += loss.item()
            n_run += 1
            all_losses.append(loss.item())
            if step % cfg["logging_steps"] == 0:
                print({"loss": round(running / n_run, 4), "grad_norm": round(grad_norm.item(), 4),
                       "learning_rate": float(f"{sched.get_last_lr()[0]:.4e}"),
                       "epoch": round(step / len(loader), 2)})
                running, n_run = 0.0, 0
        print({**evaluate(model, x_va, y_va), "epoch": float(epoch + 1)})
    rt = time.time() - t_start
    print({"train_runtime": round(rt, 4), "train_samples_per_second": round(cfg["epochs"] * len(y_tr) / rt, 3),
           "train_steps_per_second": round(total / rt, 3), "train_loss": round(float(np.mean(all_losses)), 4),
           "epoch": float(cfg["epochs"])})


if __name__ == "__main__":
    main()
