"""Linear-probe a pretrained IMU encoder on a new gesture set.

Stage 1 pretrains a 1-D conv encoder on six everyday activities (the "upstream"
checkpoint). Stage 2 freezes the encoder and trains a fresh classification
head on four wrist gestures, logging Trainer-style dicts.

    python train.py [--num_train_epochs 6] [--learning_rate 3e-5]
"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

FS = 50          # Hz
WINDOW = 128     # samples per window (2.56 s)
ACTIVITIES = ["walk", "jog", "stairs", "cycle", "jump", "sit"]
GESTURES = ["wave", "stir", "brush", "knock"]

# (base frequency Hz, dominant axis, harmonic weight, amplitude)
ACTIVITY_SPEC = [(1.8, 2, 0.3, 1.0), (2.8, 2, 0.5, 2.0), (1.2, 1, 0.6, 1.2),
                 (1.4, 0, 0.1, 0.8), (2.2, 2, 1.0, 2.5), (0.0, 2, 0.0, 0.1)]
GESTURE_SPEC = [(2.0, 0, 0.2, 1.5), (1.0, 1, 0.4, 0.9), (4.0, 0, 0.3, 0.7), (3.2, 1, 1.0, 1.8)]


def imu_window(spec, g):
    f0, axis, harm, amp = spec
    t = torch.arange(WINDOW) / FS
    f = f0 * (1 + 0.12 * (torch.rand(1, generator=g) - 0.5))
    ph = 2 * math.pi * torch.rand(2, generator=g)
    a = amp * (0.7 + 0.6 * torch.rand(1, generator=g))
    wave = torch.sin(2 * math.pi * f * t + ph[0]) + harm * torch.sin(4 * math.pi * f * t + ph[1])
    x = 0.35 * torch.randn(3, WINDOW, generator=g)
    gains = 0.25 * torch.rand(3, generator=g)
    gains[axis] = 1.0
    x += a * gains[:, None] * wave[None, :]
    x[2] += 1.0  # gravity on z
    return x


class IMUDataset(Dataset):
    def __init__(self, specs, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(len(specs), (n,), generator=g)
        self.x = torch.stack([imu_window(specs[int(k)], g) for k in self.labels])

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return {"inputs": self.x[i], "labels": self.labels[i]}


class IMUEncoder(nn.Module):
    def __init__(self, width=32):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv1d(3, width, 9, padding=4), nn.BatchNorm1d(width), nn.ReLU(),
            nn.Conv1d(width, width, 9, padding=4, stride=2), nn.BatchNorm1d(width), nn.ReLU(),
            nn.Conv1d(width, 2 * width, 9, padding=4, stride=2), nn.BatchNorm1d(2 * width), nn.ReLU(),
            nn.AdaptiveAvgPool1d(1), nn.Flatten())
        self.out_dim = 2 * width

    def forward(self, x):
        return self.net(x)


class IMUClassifier(nn.Module):
    def __init__(self, encoder, num_labels):
        super().__init__()
        self.encoder = encoder
        self.classifier = nn.Linear(encoder.out_dim, num_labels)
        self.num_labels = num_labels

    def forward(self, inputs, labels=None):
        logits = self.classifier(self.encoder(inputs))
        loss = F.cross_entropy(logits, labels) if labels is not None else None
        return {"loss": loss, "logits": logits}


def pretrain_encoder(seed=0, steps=120):
    """Upstream checkpoint: supervised pretraining on ACTIVITIES."""
    torch.manual_seed(seed)
    ds = IMUDataset(ACTIVITY_SPEC, 2000, seed=100)
    model = IMUClassifier(IMUEncoder(), len(ACTIVITIES))
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    loader = DataLoader(ds, batch_size=64, shuffle=True, drop_last=True)
    step = 0
    while step < steps:
        for batch in loader:
            out = model(**batch)
            opt.zero_grad()
            out["loss"].backward()
            opt.step()
            step += 1
            if step >= steps:
                break
    acc = (model(**ds[:512])["logits"].argmax(1) == ds.labels[:512]).float().mean().item()
    return model.encoder, out["loss"].item(), acc


def freeze(encoder):
    encoder.eval()
    for p in encoder.parameters():
        p.requires_grad_(False)
    return encoder


def parse_args(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--num_train_epochs", type=int, default=6)
    p.add_argument("--per_device_train_batch_size", type=int, default=32)
    p.add_argument("--learning_rate", type=float, default=3e-5)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--logging_steps", type=int, default=25)
    p.add_argument("--pretrain_steps", type=int, default=120)
    p.add_argument("--seed", type=int, default=42)
    return p.parse_args(argv)


def make_optimizer(params, lr):
    return torch.optim.SGD(params, lr=lr, momentum=0.9)


def make_target():
    args = parse_args([])
    encoder, _, _ = pretrain_encoder(steps=args.pretrain_steps)
    torch.manual_seed(args.seed)
    model = IMUClassifier(freeze(encoder), len(GESTURES))
    loader = DataLoader(IMUDataset(GESTURE_SPEC, 256, seed=1), batch_size=args.per_device_train_batch_size,
                        shuffle=True)
    data = [b for _, b in zip(range(4), loader)]
    return {"model": model, "batch": data[0], "data": data,
            "loss_fn": lambda model, batch: model(**batch)["loss"],
            "optimizer": make_optimizer([p for p in model.parameters() if p.requires_grad], args.learning_rate),
            "make_optimizer": lambda params: make_optimizer(params, args.learning_rate),
            "num_classes": len(GESTURES), "task": "classification"}


@torch.no_grad()
def evaluate(model, ds):
    model.classifier.eval()
    out = model(ds.x, ds.labels)
    acc = (out["logits"].argmax(1) == ds.labels).float().mean().item()
    return {"eval_loss": round(out["loss"].item(), 4), "eval_accuracy": round(acc, 4)}


def main():
    torch.set_num_threads(1)  # shared CPU runner
    args = parse_args()
    t_start = time.time()
    encoder, up_loss, up_acc = pretrain_encoder(steps=args.pretrain_steps)
    print(f"Loaded upstream encoder (pretrained {args.pretrain_steps} steps on {len(ACTIVITIES)} activities: "
          f"loss {up_loss:.3f}, acc {up_acc:.3f})")
    torch.manual_seed(args.seed)
    model = IMUClassifier(freeze(encoder), len(GESTURES))
    print(f"Some weights of IMUClassifier were newly initialized: ['classifier.weight', 'classifier.bias']")
    train_ds, eval_ds = IMUDataset(GESTURE_SPEC, 1600, seed=1), IMUDataset(GESTURE_SPEC, 400, seed=2)
    loader = DataLoader(train_ds, batch_size=args.per_device_train_batch_size, shuffle=True)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = make_optimizer(trainable, args.learning_rate)
    total = args.num_train_epochs * len(loader)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1 - s / total)
    print("***** Running training *****")
    print(f"  Num examples = {len(train_ds)}")
    print(f"  Num Epochs = {args.num_train_epochs}")
    print(f"  Instantaneous batch size per device = {args.per_device_train_batch_size}")
    print(f"  Total optimization steps = {total}")
    print(f"  Number of trainable parameters = {sum(p.numel() for p in trainable)}")
    step, t0, running = 0, time.time(), 0.0
    for epoch in range(args.num_train_epochs):
        model.classifier.train()
        for batch in loader:
            loss = model(**batch)["loss"]
            loss.backward()
            gn = torch.nn.utils.clip_grad_norm_(trainable, 1e9)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            step += 1
            running += loss.item()
            if step % args.logging_steps == 0:
                print({"loss": round(running / args.logging_steps, 4), "grad_norm": round(gn.item(), 4),
                       "learning_rate": scheduler.get_last_lr()[0], "epoch": round(step / len(loader), 2)})
                running = 0.0
        print({**evaluate(model, eval_ds), "epoch": float(epoch + 1)})
    rt = time.time() - t0
    print({"train_runtime": round(rt, 3), "train_samples_per_second": round(len(train_ds) * args.num_train_epochs / rt, 3),
           "train_steps_per_second": round(total / rt, 3), "epoch": float(args.num_train_epochs)})
    print(f"total wall time {time.time() - t_start:.1f}s")


if __name__ == "__main__":
    main()
