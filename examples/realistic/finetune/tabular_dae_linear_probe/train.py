"""Linear probe on top of the DAE-pretrained encoder for fault classification.

Run pretrain.py once first (writes dae_pretrained.pt + feature_stats.json).
"""
import json
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from data import N_CLASSES, sample_panel
from models import Encoder

CKPT = "dae_pretrained.pt"
STATS = "feature_stats.json"
N_TRAIN, N_VAL = 500, 2000
BATCH_SIZE = 64
EPOCHS = 40
LR = 3e-3
WEIGHT_DECAY = 1e-4


class FaultClassifier(nn.Module):
    def __init__(self, n_classes=N_CLASSES):
        super().__init__()
        self.backbone = Encoder()
        self.head = nn.Linear(64, n_classes)

    def forward(self, x):
        return self.head(self.backbone(x))


def build_model():
    model = FaultClassifier()
    state = torch.load(CKPT, map_location="cpu")
    # checkpoint also holds the decoder weights, which the classifier doesn't have
    model.backbone.load_state_dict(state, strict=False)
    for p in model.backbone.parameters():
        p.requires_grad = False
    return model


def load_splits():
    with open(STATS) as f:
        stats = json.load(f)
    mean = np.asarray(stats["mean"], dtype=np.float32)
    std = np.asarray(stats["std"], dtype=np.float32)
    x_tr, y_tr = sample_panel(N_TRAIN, seed=101)
    x_va, y_va = sample_panel(N_VAL, seed=202)
    x_tr = torch.from_numpy((x_tr - mean) / std)
    x_va = torch.from_numpy((x_va - mean) / std)
    return (x_tr, torch.from_numpy(y_tr)), (x_va, torch.from_numpy(y_va))


def iterate_batches(x, y, batch_size, generator):
    perm = torch.randperm(len(x), generator=generator)
    for i in range(0, len(x), batch_size):
        idx = perm[i:i + batch_size]
        yield x[idx], y[idx]


def loss_fn(model, batch):
    xb, yb = batch
    return F.cross_entropy(model(xb), yb)


def make_optimizer(params):
    params = [p for p in params if p.requires_grad]
    return torch.optim.Adam(params, lr=LR, weight_decay=WEIGHT_DECAY)


@torch.no_grad()
def evaluate(model, x, y):
    model.eval()
    logits = model(x)
    loss = F.cross_entropy(logits, y).item()
    acc = (logits.argmax(1) == y).float().mean().item()
    model.train()
    return loss, acc


def make_target():
    torch.manual_seed(0)
    (x_tr, y_tr), _ = load_splits()
    g = torch.Generator().manual_seed(0)
    batches = list(iterate_batches(x_tr, y_tr, BATCH_SIZE, g))[:5]
    return {
        "model": build_model(),
        "data": batches,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "num_classes": N_CLASSES,
        "task": "classification",
    }


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    (x_tr, y_tr), (x_va, y_va) = load_splits()
    model = build_model()
    opt = make_optimizer(model.parameters())
    n_trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    n_total = sum(p.numel() for p in model.parameters())
    print(f"Loaded pretrained encoder from {CKPT}")
    print(f"Trainable params: {n_trainable:,} / {n_total:,}")
    print(f"Train on {len(x_tr)} samples, validate on {len(x_va)} samples")
    g = torch.Generator().manual_seed(0)
    steps = (len(x_tr) + BATCH_SIZE - 1) // BATCH_SIZE
    for epoch in range(1, EPOCHS + 1):
        t0 = time.time()
        tot_loss, tot_correct = 0.0, 0
        for xb, yb in iterate_batches(x_tr, y_tr, BATCH_SIZE, g):
            logits = model(xb)
            loss = F.cross_entropy(logits, yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot_loss += loss.item() * len(xb)
            tot_correct += (logits.argmax(1) == yb).sum().item()
        val_loss, val_acc = evaluate(model, x_va, y_va)
        ms = (time.time() - t0) * 1000 / steps
        print(f"Epoch {epoch}/{EPOCHS}\n{steps}/{steps} - {ms:.0f}ms/step - loss: {tot_loss / len(x_tr):.4f}"
              f" - accuracy: {tot_correct / len(x_tr):.4f} - val_loss: {val_loss:.4f} - val_accuracy: {val_acc:.4f}")


if __name__ == "__main__":
    main()
