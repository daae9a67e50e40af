"""Fine-tune a pretrained 1-D CNN vibration encoder (backbone.pt, from pretrain.py)
to a new plant: classify gearbox accelerometer windows as normal / bearing wear /
shaft misalignment. Discriminative LRs (backbone 1e-5, new head 1e-3), AdamW,
linear warmup over the first epoch then linear decay. Trainer-style dict logs."""
import math
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
WIN = 96
FS = 96.0
# fault signatures seen in pretraining: (base freq, harmonic ratio, impulse rate)
SIGNATURES = [(6.0, 0.0, 0.0), (6.0, 0.6, 0.0), (6.0, 0.0, 0.08), (11.0, 0.0, 0.0),
              (11.0, 0.6, 0.0), (11.0, 0.0, 0.08)]
CONDITIONS = ["normal", "bearing_wear", "misalignment"]


def vibration_windows(kinds, rng, freq_jitter=0.5, noise=0.6, shift=0.0):
    """Two-axis windows: fundamental + optional 2x harmonic (misalignment) +
    periodic impulses (bearing defect) + gaussian noise."""
    n = len(kinds)
    t = np.arange(WIN) / FS
    base = np.array([SIGNATURES[k][0] for k in kinds]) + shift + rng.normal(0, freq_jitter, n)
    harm = np.array([SIGNATURES[k][1] for k in kinds])
    imp = np.array([SIGNATURES[k][2] for k in kinds])
    phase = rng.uniform(0, 2 * np.pi, (n, 1))
    w = 2 * np.pi * base[:, None] * t[None, :] + phase
    x = np.sin(w) + harm[:, None] * np.sin(2 * w + 0.7)
    spikes = (rng.random((n, WIN)) < imp[:, None]) * rng.uniform(1.5, 3.0, (n, WIN))
    axial = 0.5 * np.sin(w + 1.3) + harm[:, None] * 0.8 * np.sin(2 * w) + spikes
    radial = x + spikes
    sig = np.stack([radial, axial], 1) * rng.uniform(0.7, 1.3, (n, 1, 1))
    sig = sig + rng.normal(0, noise, sig.shape)
    return torch.tensor(sig, dtype=torch.float32)


def plant_dataset(n, seed):
    """New plant: different gear ratio (frequency shift) and a noisier sensor."""
    rng = np.random.default_rng(seed)
    kinds = rng.integers(0, len(SIGNATURES), n)
    x = vibration_windows(kinds, rng, shift=1.5, noise=0.9)
    cond = np.where(np.array([SIGNATURES[k][2] for k in kinds]) > 0, 1,
                    np.where(np.array([SIGNATURES[k][1] for k in kinds]) > 0, 2, 0))
    return x, torch.tensor(cond, dtype=torch.long)


class VibrationEncoder(nn.Module):
    def __init__(self, in_ch=2, width=32):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv1d(in_ch, width, 7, stride=2, padding=3), nn.BatchNorm1d(width), nn.ReLU(),
            nn.Conv1d(width, 2 * width, 5, stride=2, padding=2), nn.BatchNorm1d(2 * width), nn.ReLU(),
            nn.Conv1d(2 * width, 2 * width, 5, stride=2, padding=2), nn.BatchNorm1d(2 * width), nn.ReLU(),
            nn.AdaptiveAvgPool1d(1), nn.Flatten(),
        )
        self.out_dim = 2 * width

    def forward(self, x):
        return self.net(x)


class ConditionClassifier(nn.Module):
    def __init__(self, backbone, num_labels):
        super().__init__()
        self.backbone = backbone
        self.head = nn.Sequential(nn.Dropout(0.1), nn.Linear(backbone.out_dim, num_labels))

    def forward(self, x):
        return self.head(self.backbone(x))


CONFIG = dict(backbone_lr=1e-5, head_lr=1e-3, weight_decay=0.01, epochs=4, batch_size=32,
              warmup_epochs=1, max_grad_norm=1.0, logging_steps=10, seed=0)


def build_model():
    backbone = VibrationEncoder()
    backbone.load_state_dict(torch.load(os.path.join(HERE, "backbone.pt"), map_location="cpu"))
    torch.manual_seed(CONFIG["seed"])
    return ConditionClassifier(backbone, len(CONDITIONS))


def make_optimizer(params, cfg=CONFIG):
    if isinstance(params, nn.Module):
        params = params.named_parameters()
    params = list(params)
    groups = [
        {"params": [p for n, p in params if n.startswith("backbone.")], "lr": cfg["backbone_lr"]},
        {"params": [p for n, p in params if n.startswith("head.")], "lr": cfg["head_lr"]},
    ]
    return torch.optim.AdamW(groups, weight_decay=cfg["weight_decay"])


def compute_loss(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def iterate(x, y, bs, gen=None):
    order = torch.randperm(len(x), generator=gen) if gen is not None else torch.arange(len(x))
    for i in range(0, len(x), bs):
        j = order[i:i + bs]
        yield x[j], y[j]


@torch.no_grad()
def evaluate(model, x, y, epoch):
    model.eval()
    t0 = time.time()
    logits = torch.cat([model(xb) for xb, _ in iterate(x, y, 256)])
    loss = F.cross_entropy(logits, y).item()
    acc = (logits.argmax(1) == y).float().mean().item()
    model.train()
    rt = max(time.time() - t0, 1e-6)
    return {"eval_loss": round(loss, 4), "eval_accuracy": round(acc, 4), "eval_runtime": round(rt, 4),
            "eval_samples_per_second": round(len(x) / rt, 3), "epoch": float(epoch)}


def _named_like(model, params):
    """Recover parameter names for a bare iterable of parameters of `model`."""
    params = list(params)
    if params and isinstance(params[0], tuple):
        return params
    names = {id(p): n for n, p in model.named_parameters()}
    if all(id(p) in names for p in params):
        return [(names[id(p)], p) for p in params]
    return [(n, p) for (n, _), p in zip(model.named_parameters(), params)]


def make_target():
    x, y = plant_dataset(1200, seed=3)
    model = build_model()
    g = torch.Generator().manual_seed(0)
    data = [b for _, b in zip(range(3), iterate(x, y, CONFIG["batch_size"], g))]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": compute_loss,
            "optimizer": make_optimizer(model),
            "make_optimizer": lambda params: make_optimizer(_named_like(model, params)),
            "num_classes": len(CONDITIONS), "task": "classification"}


def main():
    cfg = CONFIG
    torch.manual_seed(cfg["seed"])
    x_tr, y_tr = plant_dataset(1200, seed=3)
    x_ev, y_ev = plant_dataset(400, seed=4)
    model = build_model()
    optimizer = make_optimizer(model)
    steps_per_epoch = math.ceil(len(x_tr) / cfg["batch_size"])
    total = steps_per_epoch * cfg["epochs"]
    warmup = steps_per_epoch * cfg["warmup_epochs"]
    sched = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: s / warmup if s < warmup else max(0.0, (total - s) / (total - warmup)))
    print(f"***** Running training *****\n  Num examples = {len(x_tr)}\n  Num Epochs = {cfg['epochs']}\n"
          f"  Total optimization steps = {total}\n  Warmup steps = {warmup}")
    gen = torch.Generator().manual_seed(cfg["seed"])
    model.train()
    step, acc_loss, acc_n, total_loss = 0, 0.0, 0, 0.0
    t0 = time.time()
    for epoch in range(cfg["epochs"]):
        for batch in iterate(x_tr, y_tr, cfg["batch_size"], gen):
            loss = compute_loss(model, batch)
            optimizer.zero_grad()
            loss.backward()
            gn = nn.utils.clip_grad_norm_(model.parameters(), cfg["max_grad_norm"])
            optimizer.step()
            sched.step()
            step += 1
            acc_loss += loss.item(); acc_n += 1; total_loss += loss.item()
            if step % cfg["logging_steps"] == 0:
                print({"loss": round(acc_loss / acc_n, 4), "grad_norm": round(gn.item(), 4),
                       "learning_rate": float(f"{sched.get_last_lr()[0]:.4e}"),
                       "epoch": round(step / steps_per_epoch, 2)})
                acc_loss, acc_n = 0.0, 0
        print(evaluate(model, x_ev, y_ev, epoch + 1))
    rt = time.time() - t0
    print({"train_runtime": round(rt, 4), "train_samples_per_second": round(len(x_tr) * cfg["epochs"] / rt, 3),
           "train_loss": round(total_loss / step, 4), "epoch": float(cfg["epochs"])})


if __name__ == "__main__":
    main()
