"""Fault classification on accelerometer windows.

Stage 1 (self-supervised-ish pretext): a 1D CNN encoder learns to tag which
spectral bands are active in unlabeled windows (multi-label, BCE).
Stage 2 (fine-tune): the encoder gets a fresh classification head and is
fine-tuned on the small labelled fault set with discriminative LRs.
"""
import math
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)

HERE = os.path.dirname(os.path.abspath(__file__))
CKPT_PATH = os.path.join(HERE, "pretrained_encoder.pt")

WINDOW = 128
N_BANDS = 16
BAND_FREQS = np.linspace(3.0, 40.0, N_BANDS)  # cycles per window

# each fault shows up as a pair of characteristic bands; pairs overlap on purpose
FAULT_BANDS = {
    0: (1, 5),    # inner race
    1: (1, 10),   # outer race
    2: (5, 10),   # ball
    3: (3, 13),   # misalignment
    4: (3, 8),    # looseness
    5: (8, 13),   # imbalance
}
N_CLASSES = len(FAULT_BANDS)

PRETRAIN_CFG = dict(n_windows=10000, epochs=4, batch_size=128, lr=2e-3)
FINETUNE_CFG = dict(n_train_per_class=8, n_val_per_class=100, epochs=30,
                    batch_size=16, lr_backbone=5e-4, lr_head=5e-3, weight_decay=1e-2)
SEED = 1234


# ----------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------
def synth_window(rng, bands, amps, noise_std=0.7):
    t = np.arange(WINDOW) / WINDOW
    x = np.zeros(WINDOW)
    for b, a in zip(bands, amps):
        f = BAND_FREQS[b] + rng.uniform(-0.6, 0.6)
        x += a * np.sin(2 * np.pi * f * t + rng.uniform(0, 2 * np.pi))
    # slow drift from the sensor mount + broadband noise
    x += rng.uniform(-0.5, 0.5) * t + rng.uniform(-0.3, 0.3)
    x += noise_std * rng.standard_normal(WINDOW)
    return x.astype(np.float32)


def make_pretext_set(n, seed):
    rng = np.random.default_rng(seed)
    X = np.zeros((n, 1, WINDOW), np.float32)
    Y = np.zeros((n, N_BANDS), np.float32)
    for i in range(n):
        k = rng.integers(1, 5)
        bands = rng.choice(N_BANDS, size=k, replace=False)
        X[i, 0] = synth_window(rng, bands, rng.uniform(0.4, 1.2, size=k))
        Y[i, bands] = 1.0
    return torch.from_numpy(X), torch.from_numpy(Y)


def make_fault_set(n_per_class, seed):
    rng = np.random.default_rng(seed)
    xs, ys = [], []
    for c, (b1, b2) in FAULT_BANDS.items():
        for _ in range(n_per_class):
            bands = [b1, b2]
            amps = list(rng.uniform(0.5, 1.0, size=2))
            # background machinery: 0-2 unrelated bands at lower energy
            for d in rng.choice([b for b in range(N_BANDS) if b not in (b1, b2)],
                                size=rng.integers(0, 3), replace=False):
                bands.append(int(d))
                amps.append(rng.uniform(0.2, 0.6))
            xs.append(synth_window(rng, bands, amps, noise_std=0.9))
            ys.append(c)
    X = torch.from_numpy(np.stack(xs)[:, None, :])
    y = torch.tensor(ys, dtype=torch.long)
    return X, y


def standardize(X):
    # per-window standardisation, same as the acquisition firmware does
    return (X - X.mean(dim=-1, keepdim=True)) / (X.std(dim=-1, keepdim=True) + 1e-6)


def build_finetune_loaders(cfg=FINETUNE_CFG, seed=SEED):
    Xtr, ytr = make_fault_set(cfg["n_train_per_class"], seed + 1)
    Xva, yva = make_fault_set(cfg["n_val_per_class"], seed + 2)
    g = torch.Generator().manual_seed(seed)
    train_loader = DataLoader(TensorDataset(standardize(Xtr), ytr),
                              batch_size=cfg["batch_size"], shuffle=True, generator=g)
    val_loader = DataLoader(TensorDataset(standardize(Xva), yva), batch_size=200)
    return train_loader, val_loader


# ----------------------------------------------------------------------------
# models
# ----------------------------------------------------------------------------
class ConvEncoder(nn.Module):
    def __init__(self, width=32, out_dim=128):
        super().__init__()
        self.conv1 = nn.Conv1d(1, width, 9, padding=4)
        self.bn1 = nn.BatchNorm1d(width)
        self.conv2 = nn.Conv1d(width, 2 * width, 7, stride=2, padding=3)
        self.bn2 = nn.BatchNorm1d(2 * width)
        self.conv3 = nn.Conv1d(2 * width, out_dim, 5, stride=2, padding=2)
        self.bn3 = nn.BatchNorm1d(out_dim)
        self.out_dim = out_dim

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        x = F.relu(self.bn3(self.conv3(x)))
        return x.mean(dim=-1)


class PretextNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = ConvEncoder()
        self.band_head = nn.Linear(self.encoder.out_dim, N_BANDS)

    def forward(self, x):
        return self.band_head(self.encoder(x))


class FaultClassifier(nn.Module):
    def __init__(self, n_classes=N_CLASSES):
        super().__init__()
        self.backbone = ConvEncoder()
        self.dropout = nn.Dropout(0.2)
        self.head = nn.Linear(self.backbone.out_dim, n_classes)

    def forward(self, x):
        return self.head(self.dropout(self.backbone(x)))


# ----------------------------------------------------------------------------
# stage 1: pretext pretraining
# ----------------------------------------------------------------------------
def pretrain_encoder(path=CKPT_PATH, cfg=PRETRAIN_CFG, seed=SEED):
    torch.manual_seed(seed)
    X, Y = make_pretext_set(cfg["n_windows"], seed)
    loader = DataLoader(TensorDataset(standardize(X), Y), batch_size=cfg["batch_size"],
                        shuffle=True, generator=torch.Generator().manual_seed(seed))
    net = PretextNet()
    opt = torch.optim.Adam(net.parameters(), lr=cfg["lr"])
    print(f"[pretrain] {len(X)} unlabeled windows, {N_BANDS} band targets")
    for epoch in range(cfg["epochs"]):
        net.train()
        tot, n = 0.0, 0
        for xb, yb in loader:
            loss = F.binary_cross_entropy_with_logits(net(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += loss.item() * len(xb)
            n += len(xb)
        print(f"[pretrain] epoch {epoch + 1}/{cfg['epochs']} - bce: {tot / n:.4f}")
    torch.save(net.state_dict(), path)
    print(f"[pretrain] saved checkpoint to {os.path.basename(path)}")


# ----------------------------------------------------------------------------
# stage 2: fine-tuning
# ----------------------------------------------------------------------------
def load_pretrained_backbone(model, path=CKPT_PATH):
    state = torch.load(path, map_location="cpu")
    # the checkpoint also carries the pretext band head, which we don't need
    state = {k[len("encoder."):]: v for k, v in state.items() if k.startswith("encoder.")}
    model.backbone.load_state_dict(state)
    return model


def build_model(seed=SEED):
    torch.manual_seed(seed)
    model = FaultClassifier()
    return load_pretrained_backbone(model)


def make_optimizer(params, head_params=(), cfg=FINETUNE_CFG):
    # discriminative LRs: pretrained encoder moves slowly, fresh head moves fast
    head_ids = {id(p) for p in head_params}
    params = list(params)
    groups = [{"params": [p for p in params if id(p) not in head_ids], "lr": cfg["lr_backbone"]}]
    head = [p for p in params if id(p) in head_ids]
    if head:
        groups.append({"params": head, "lr": cfg["lr_head"]})
    return torch.optim.AdamW(groups, weight_decay=cfg["weight_decay"])


def loss_fn(model, batch):
    xb, yb = batch
    return F.cross_entropy(model(xb), yb)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    tot, correct, n = 0.0, 0, 0
    for xb, yb in loader:
        logits = model(xb)
        tot += F.cross_entropy(logits, yb, reduction="sum").item()
        correct += (logits.argmax(-1) == yb).sum().item()
        n += len(yb)
    return tot / n, correct / n


def finetune(cfg=FINETUNE_CFG):
    train_loader, val_loader = build_finetune_loaders(cfg)
    model = build_model()
    print(f"Loaded pretrained encoder from {os.path.basename(CKPT_PATH)}")
    opt = make_optimizer(model.parameters(), model.head.parameters(), cfg)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=cfg["epochs"])
    n_trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print(f"Fine-tuning FaultClassifier: {n_trainable:,} trainable params, "
          f"{len(train_loader.dataset)} train / {len(val_loader.dataset)} val windows")
    for epoch in range(cfg["epochs"]):
        t0 = time.time()
        model.train()
        tot, n = 0.0, 0
        for batch in train_loader:
            loss = loss_fn(model, batch)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += loss.item() * len(batch[1])
            n += len(batch[1])
        sched.step()
        val_loss, val_acc = evaluate(model, val_loader)
        _, train_acc = evaluate(model, train_loader)
        dt = time.time() - t0
        print(f"Epoch {epoch + 1}/{cfg['epochs']} - {dt * 1000:.0f}ms - loss: {tot / n:.4f} "
              f"- acc: {train_acc:.4f} - val_loss: {val_loss:.4f} - val_acc: {val_acc:.4f}")
    return model


def make_target():
    train_loader, _ = build_finetune_loaders()
    data = []
    for i, batch in enumerate(train_loader):
        data.append(batch)
        if i == 3:
            break
    model = build_model()
    return {
        "model": model,
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": lambda params: make_optimizer(params, model.head.parameters()),
        "num_classes": N_CLASSES,
        "task": "classification",
    }


if __name__ == "__main__":
    t_start = time.time()
    if not os.path.exists(CKPT_PATH):
        pretrain_encoder()
    finetune()
    print(f"Done in {time.time() - t_start:.1f}s")
