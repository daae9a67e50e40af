"""1-D CNN for activity recognition on synthetic 3-axis accelerometer windows.

Classes: sitting, walking, running, stairs, jumping.  Windows are 128 samples
at 50 Hz.  Augmentation: random 112-sample crop, per-window amplitude scaling
and Gaussian jitter.  AdamW + OneCycle (stepped per batch).
"""
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)

CLASSES = ["sitting", "walking", "running", "stairs", "jumping"]
FS = 50.0
WIN = 128
CROP = 112
CFG = dict(
    n_train=3000,
    n_val=750,
    batch_size=50,
    epochs=12,
    max_lr=3e-3,
    weight_decay=1e-2,
    seed=1234,
)


# ----------------------------------------------------------------------------
# synthetic IMU data
# ----------------------------------------------------------------------------
def random_rotation(rng):
    q = rng.normal(size=4)
    q /= np.linalg.norm(q)
    a, b, c, d = q
    return np.array([
        [a*a + b*b - c*c - d*d, 2*(b*c - a*d), 2*(b*d + a*c)],
        [2*(b*c + a*d), a*a - b*b + c*c - d*d, 2*(c*d - a*b)],
        [2*(b*d - a*c), 2*(c*d + a*b), a*a - b*b - c*c + d*d],
    ])


def synth_window(rng, label):
    t = np.arange(WIN) / FS
    phase = rng.uniform(0, 2 * np.pi)
    body = np.zeros((3, WIN))
    if label == 0:  # sitting: gravity + small sway
        body[0] = 0.03 * np.sin(2 * np.pi * rng.uniform(0.2, 0.5) * t + phase)
    elif label in (1, 2, 3):
        f = {1: rng.uniform(1.6, 2.1), 2: rng.uniform(2.3, 3.0), 3: rng.uniform(1.3, 1.8)}[label]
        amp = {1: rng.uniform(0.25, 0.45), 2: rng.uniform(0.5, 0.8), 3: rng.uniform(0.25, 0.45)}[label]
        body[2] = amp * (np.sin(2 * np.pi * f * t + phase) + 0.35 * np.sin(4 * np.pi * f * t + 2 * phase))
        body[0] = 0.5 * amp * np.sin(2 * np.pi * f * t + phase + np.pi / 3)
        body[1] = 0.2 * amp * np.sin(np.pi * f * t + phase)
        if label == 3:  # stairs: step impacts + slow vertical trend
            body[2] += 0.25 * np.maximum(0, np.sin(2 * np.pi * f * t + phase)) ** 8
            body[2] += rng.choice([-1, 1]) * 0.15 * (t - t.mean())
    else:  # jumping: sparse impacts with flight phase
        f = rng.uniform(1.0, 1.6)
        s = np.sin(2 * np.pi * f * t + phase)
        body[2] = 1.2 * np.maximum(0, s) ** 6 - 0.6 * (s < -0.3)
        body[0] = 0.1 * s
    gravity = np.array([0.0, 0.0, 1.0])[:, None]
    R = random_rotation(rng) if rng.random() < 0.5 else np.eye(3)
    sig = R @ (body + gravity)
    sig += rng.normal(0, 0.06, size=sig.shape)
    return sig.astype(np.float32)


def make_split(n, seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, len(CLASSES), size=n)
    x = np.stack([synth_window(rng, int(c)) for c in y])
    return torch.from_numpy(x), torch.from_numpy(y).long()


def build_data(cfg=CFG):
    x_tr, y_tr = make_split(cfg["n_train"], cfg["seed"])
    x_va, y_va = make_split(cfg["n_val"], cfg["seed"] + 1)
    mean = x_tr.mean(dim=(0, 2), keepdim=True)
    std = x_tr.std(dim=(0, 2), keepdim=True)
    x_tr = (x_tr - mean) / std
    x_va = (x_va - mean) / std
    # val: deterministic centre crop
    s = (WIN - CROP) // 2
    return x_tr, y_tr, x_va[:, :, s:s + CROP], y_va


def augment(x, gen):
    n = x.shape[0]
    starts = torch.randint(0, WIN - CROP + 1, (n,), generator=gen)
    idx = starts[:, None] + torch.arange(CROP)[None, :]
    x = torch.gather(x, 2, idx[:, None, :].expand(-1, x.shape[1], -1))
    scale = 0.8 + 0.4 * torch.rand(n, 1, 1, generator=gen)
    jitter = 0.05 * torch.randn(x.shape, generator=gen)
    return x * scale + jitter


def train_loader(x, y, batch_size, gen):
    perm = torch.randperm(x.shape[0], generator=gen)
    for i in range(0, x.shape[0], batch_size):
        idx = perm[i:i + batch_size]
        yield augment(x[idx], gen), y[idx]


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
def conv_bn(c_in, c_out, k, stride=1):
    return nn.Sequential(
        nn.Conv1d(c_in, c_out, k, stride, padding=k // 2, bias=False),
        nn.BatchNorm1d(c_out),
        nn.ReLU(inplace=True),
    )


class ActivityCNN(nn.Module):
    def __init__(self, n_classes=5):
        super().__init__()
        self.features = nn.Sequential(
            conv_bn(3, 32, 7),
            conv_bn(32, 64, 5, stride=2),
            conv_bn(64, 64, 5, stride=2),
            conv_bn(64, 96, 3, stride=2),
        )
        self.dropout = nn.Dropout(0.2)
        self.head = nn.Linear(96, n_classes)

    def forward(self, x):
        h = self.features(x).mean(dim=-1)
        return self.head(self.dropout(h))


def build_model():
    return ActivityCNN(len(CLASSES))


def compute_loss(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def make_optimizer(params, cfg=CFG):
    return torch.optim.AdamW(params, lr=cfg["max_lr"], weight_decay=cfg["weight_decay"])


@torch.no_grad()
def evaluate(model, x, y):
    model.eval()
    logits = model(x)
    model.train()
    return F.cross_entropy(logits, y).item(), (logits.argmax(1) == y).float().mean().item()


def make_target():
    torch.manual_seed(CFG["seed"])
    x_tr, y_tr, _, _ = build_data()
    gen = torch.Generator().manual_seed(CFG["seed"])
    loader = train_loader(x_tr, y_tr, CFG["batch_size"], gen)
    return {
        "model": build_model(),
        "data": [next(loader) for _ in range(5)],
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
    steps_per_epoch = (cfg["n_train"] + cfg["batch_size"] - 1) // cfg["batch_size"]
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=cfg["max_lr"], epochs=cfg["epochs"], steps_per_epoch=steps_per_epoch,
        pct_start=0.25,
    )
    gen = torch.Generator().manual_seed(cfg["seed"])
    print(f"Train on {len(x_tr)} samples, validate on {len(x_va)} samples")

    for epoch in range(cfg["epochs"]):
        t0 = time.time()
        model.train()
        tot_loss, tot_correct, tot_n = 0.0, 0, 0
        optimizer.zero_grad()
        for xb, yb in train_loader(x_tr, y_tr, cfg["batch_size"], gen):
            logits = model(xb)
            loss = F.cross_entropy(logits, yb)
            loss.backward()
            optimizer.step()
            scheduler.step()
            tot_loss += loss.item() * len(yb)
            tot_correct += (logits.argmax(1) == yb).sum().item()
            tot_n += len(yb)
        val_loss, val_acc = evaluate(model, x_va, y_va)
        print(
            f"Epoch {epoch + 1}/{cfg['epochs']} - {time.time() - t0:.1f}s - "
            f"loss: {tot_loss / tot_n:.4f} - accuracy: {tot_correct / tot_n:.4f} - "
            f"val_loss: {val_loss:.4f} - val_accuracy: {val_acc:.4f} - "
            f"lr: {scheduler.get_last_lr()[0]:.2e}"
        )


if __name__ == "__main__":
    main()
