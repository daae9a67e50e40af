"""
Fine-tune a pretrained 1D-conv sensor encoder on a new 6-class fault task.

Stage 1 (pretrain): the encoder is trained on the large 10-class "machine state"
dataset and its weights are cached to a temp dir (reused on later runs).
Stage 2 (finetune): a fresh linear head is put on top; backbone and head get
separate LRs, linear warmup via LambdaLR, AdamW. Keras-style epoch lines.
"""
import argparse
import math
import os
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

CONFIG = {
    "seed": 0,
    "seq_len": 64,
    "channels": 3,
    "pretrain_classes": 10,
    "pretrain_samples": 6000,
    "pretrain_epochs": 3,
    "pretrain_lr": 2e-3,
    "finetune_classes": 6,
    "finetune_train": 1200,
    "finetune_val": 600,
    "batch_size": 32,
    "epochs": 8,
    "head_lr": 3e-3,
    "backbone_lr": 3e-4,
    "weight_decay": 1e-4,
    "warmup_steps": 100,
    "ckpt": os.path.join(tempfile.gettempdir(), "sensor_encoder_pretrained_v2.pt"),
}


def synth_signals(n, n_classes, seed, cfg, class_offset=0):
    """Each class = a mixture of two base frequencies + channel phase pattern + noise."""
    rng = np.random.default_rng(seed)
    t = np.linspace(0, 1, cfg["seq_len"], dtype=np.float32)
    labels = rng.integers(0, n_classes, size=n)
    x = np.empty((n, cfg["channels"], cfg["seq_len"]), dtype=np.float32)
    for i, c in enumerate(labels):
        k = c + class_offset
        f1, f2 = 2 + (k % 5) * 1.5, 7 + (k // 5) * 2.0
        amp = rng.uniform(0.7, 1.3)
        for ch in range(cfg["channels"]):
            phase = (k * (ch + 1) * 0.7) % (2 * np.pi) + rng.normal(0, 0.3)
            x[i, ch] = amp * (np.sin(2 * np.pi * f1 * t + phase) + 0.6 * np.sin(2 * np.pi * f2 * t + ch * phase))
    x += rng.normal(0, 0.8, size=x.shape).astype(np.float32)
    return torch.from_numpy(x), torch.from_numpy(labels.astype(np.int64))


class SensorEncoder(nn.Module):
    def __init__(self, in_ch=3, width=32, out_dim=64):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv1d(in_ch, width, 5, padding=2), nn.BatchNorm1d(width), nn.ReLU(),
            nn.Conv1d(width, width, 5, padding=2, stride=2), nn.BatchNorm1d(width), nn.ReLU(),
            nn.Conv1d(width, out_dim, 3, padding=1, stride=2), nn.BatchNorm1d(out_dim), nn.ReLU(),
            nn.AdaptiveAvgPool1d(1), nn.Flatten())
        self.out_dim = out_dim

    def forward(self, x):
        return self.net(x)


class Classifier(nn.Module):
    def __init__(self, encoder, n_classes):
        super().__init__()
        self.encoder = encoder
        self.head = nn.Linear(encoder.out_dim, n_classes)

    def forward(self, x):
        return self.head(self.encoder(x))


def pretrain_encoder(cfg, verbose=True):
    if os.path.exists(cfg["ckpt"]):
        enc = SensorEncoder(cfg["channels"])
        enc.load_state_dict(torch.load(cfg["ckpt"]))
        if verbose:
            print(f"Loaded pretrained encoder from {cfg['ckpt']}")
        return enc
    torch.manual_seed(cfg["seed"])
    x, y = synth_signals(cfg["pretrain_samples"], cfg["pretrain_classes"], cfg["seed"] + 1, cfg)
    model = Classifier(SensorEncoder(cfg["channels"]), cfg["pretrain_classes"])
    opt = torch.optim.Adam(model.parameters(), lr=cfg["pretrain_lr"])
    loader = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True)
    for ep in range(cfg["pretrain_epochs"]):
        correct = 0
        for xb, yb in loader:
            logits = model(xb)
            loss = F.cross_entropy(logits, yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            correct += (logits.argmax(1) == yb).sum().item()
        if verbose:
            print(f"[pretrain] epoch {ep + 1}/{cfg['pretrain_epochs']} - loss: {loss.item():.4f} - acc: {correct / len(y):.4f}")
    torch.save(model.encoder.state_dict(), cfg["ckpt"])
    return model.encoder


def build_finetune_data(cfg):
    # new task: different classes (offset into the signal family), small labelled set
    xtr, ytr = synth_signals(cfg["finetune_train"], cfg["finetune_classes"], cfg["seed"] + 11, cfg, class_offset=4)
    xva, yva = synth_signals(cfg["finetune_val"], cfg["finetune_classes"], cfg["seed"] + 12, cfg, class_offset=4)
    return xtr, ytr, xva, yva


def build_optimizer(model, cfg):
    return torch.optim.AdamW([
        {"params": model.encoder.parameters(), "lr": cfg["backbone_lr"]},
        {"params": model.head.parameters(), "lr": cfg["head_lr"]},
    ], weight_decay=cfg["weight_decay"])


def warmup_lambda(cfg):
    return lambda step: min(1.0, (step + 1) / cfg["warmup_steps"])


def loss_fn(model, batch):
    xb, yb = batch
    return F.cross_entropy(model(xb), yb)


def make_target():
    cfg = dict(CONFIG)
    torch.manual_seed(cfg["seed"])
    encoder = SensorEncoder(cfg["channels"])
    if os.path.exists(cfg["ckpt"]):
        encoder.load_state_dict(torch.load(cfg["ckpt"]))
    model = Classifier(encoder, cfg["finetune_classes"])
    xtr, ytr, _, _ = build_finetune_data(cfg)
    bs = cfg["batch_size"]
    data = [(xtr[i * bs:(i + 1) * bs], ytr[i * bs:(i + 1) * bs]) for i in range(4)]
    optimizer = build_optimizer(model, cfg)
    torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_lambda(cfg))
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": optimizer, "num_classes": cfg["finetune_classes"], "task": "classification"}


@torch.no_grad()
def evaluate(model, x, y):
    model.eval()
    logits = model(x)
    model.train()
    return F.cross_entropy(logits, y).item(), (logits.argmax(1) == y).float().mean().item()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=CONFIG["epochs"])
    args = parser.parse_args()
    cfg = dict(CONFIG, epochs=args.epochs)

    encoder = pretrain_encoder(cfg)
    torch.manual_seed(cfg["seed"])
    model = Classifier(encoder, cfg["finetune_classes"])
    xtr, ytr, xva, yva = build_finetune_data(cfg)
    loader = DataLoader(TensorDataset(xtr, ytr), batch_size=cfg["batch_size"], shuffle=True,
                        generator=torch.Generator().manual_seed(cfg["seed"]))
    optimizer = build_optimizer(model, cfg)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_lambda(cfg))
    steps_per_epoch = len(loader)
    print(f"Fine-tuning on {len(ytr)} samples, {cfg['finetune_classes']} classes, "
          f"{steps_per_epoch} steps/epoch, warmup {cfg['warmup_steps']} steps")

    for epoch in range(cfg["epochs"]):
        t0 = time.time()
        run_loss, correct, seen = 0.0, 0, 0
        for xb, yb in loader:
            logits = model(xb)
            loss = F.cross_entropy(logits, yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            run_loss += loss.item() * len(yb)
            correct += (logits.argmax(1) == yb).sum().item()
            seen += len(yb)
        scheduler.step()
        val_loss, val_acc = evaluate(model, xva, yva)
        head_lr = optimizer.param_groups[1]["lr"]
        print(f"Epoch {epoch + 1}/{cfg['epochs']}\n{steps_per_epoch}/{steps_per_epoch} - {time.time() - t0:.1f}s - "
              f"loss: {run_loss / seen:.4f} - accuracy: {correct / seen:.4f} - val_loss: {val_loss:.4f} - "
              f"val_accuracy: {val_acc:.4f} - lr: {head_lr:.2e}")


if __name__ == "__main__":
    main()
