"""Wrist-IMU gesture recognition: fine-tune an activity-pretrained 1D-CNN encoder.

The encoder is first pretrained on a (synthetic) 6-class activity-recognition
corpus and saved as a state dict. Fine-tuning reloads it, attaches a new
gesture head and trains everything with discriminative learning rates,
linear warmup + linear decay, and mixup on the small labelled gesture set.
Logging follows the HF Trainer convention (dict lines).
"""
import math
import os
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

RUN_DIR = os.path.dirname(os.path.abspath(__file__))
ENCODER_PATH = os.path.join(RUN_DIR, "har_encoder.pt")
GESTURE_CSV = os.path.join(RUN_DIR, "gestures.csv")

CHANNELS = ["acc_x", "acc_y", "acc_z", "gyr_x", "gyr_y", "gyr_z"]
GESTURES = ["swipe_left", "swipe_right", "swipe_up", "swipe_down",
            "circle_cw", "circle_ccw", "double_tap", "shake"]
WIN = 96
FS = 50.0


@dataclass
class TrainingArguments:
    seed: int = 42
    per_device_train_batch_size: int = 32
    per_device_eval_batch_size: int = 256
    num_train_epochs: int = 30
    learning_rate: float = 2e-3          # head
    encoder_learning_rate: float = 3e-4  # pretrained encoder
    weight_decay: float = 1e-2
    warmup_ratio: float = 0.1
    mixup_alpha: float = 0.4
    logging_steps: int = 10
    eval_every_epochs: int = 3
    n_train_per_class: int = 24
    n_eval_per_class: int = 60


# --------------------------------------------------------------------------
# synthetic IMU data
# --------------------------------------------------------------------------
def _random_rotation(rng, max_deg):
    a, b, c = np.deg2rad(rng.uniform(-max_deg, max_deg, 3))
    rx = np.array([[1, 0, 0], [0, np.cos(a), -np.sin(a)], [0, np.sin(a), np.cos(a)]])
    ry = np.array([[np.cos(b), 0, np.sin(b)], [0, 1, 0], [-np.sin(b), 0, np.cos(b)]])
    rz = np.array([[np.cos(c), -np.sin(c), 0], [np.sin(c), np.cos(c), 0], [0, 0, 1]])
    return (rz @ ry @ rx).astype(np.float32)


def _finish(rng, acc, gyr, noise):
    """Rotate into a random watch orientation, add gravity, noise and drift."""
    r = _random_rotation(rng, 25)
    gravity = np.array([0.0, 0.0, 1.0], np.float32)
    acc = (acc + gravity[:, None]).T @ r.T
    gyr = gyr.T @ r.T
    sig = np.concatenate([acc, gyr], axis=1)
    sig += rng.normal(0, noise, sig.shape)
    sig += np.linspace(0, 1, WIN)[:, None] * rng.normal(0, 0.05, (1, 6))
    return sig.astype(np.float32)  # (WIN, 6)


def activity_window(rng, label):
    """Pretraining corpus: periodic locomotion / posture patterns."""
    t = np.arange(WIN) / FS
    f = [0.0, 1.8, 2.8, 1.5, 0.25, 0.9][label] * rng.uniform(0.85, 1.15)
    amp = [0.02, 0.35, 0.9, 0.45, 0.1, 0.25][label] * rng.uniform(0.7, 1.3)
    ph = rng.uniform(0, 2 * np.pi)
    acc = np.stack([amp * np.sin(2 * np.pi * f * t + ph),
                    0.5 * amp * np.sin(4 * np.pi * f * t + ph),
                    amp * np.abs(np.sin(2 * np.pi * f * t + ph)) - amp / 2])
    gyr = np.stack([0.8 * amp * np.cos(2 * np.pi * f * t + ph),
                    0.3 * amp * np.sin(2 * np.pi * f * t),
                    (0.5 if label == 3 else 0.1) * amp * np.sin(np.pi * f * t + ph)])
    return _finish(rng, acc, gyr, 0.05)


def gesture_window(rng, label):
    """Target task: short wrist gestures at a random position inside the window."""
    dur = int(rng.integers(30, 55))
    start = int(rng.integers(0, WIN - dur))
    s = np.linspace(0, 1, dur)
    bump = np.sin(np.pi * s)            # smooth 0 -> 1 -> 0
    dbump = np.sin(2 * np.pi * s)       # accelerate then decelerate
    amp = rng.uniform(0.5, 1.2)
    acc = np.zeros((3, WIN)); gyr = np.zeros((3, WIN))
    seg = slice(start, start + dur)
    if label in (0, 1):                 # swipe left / right
        sgn = -1 if label == 0 else 1
        acc[0, seg] = sgn * amp * dbump
        gyr[2, seg] = sgn * 0.6 * amp * bump
    elif label in (2, 3):               # swipe up / down
        sgn = 1 if label == 2 else -1
        acc[1, seg] = sgn * amp * dbump
        gyr[0, seg] = -sgn * 0.6 * amp * bump
    elif label in (4, 5):               # circle cw / ccw
        sgn = 1 if label == 4 else -1
        acc[0, seg] = amp * np.cos(2 * np.pi * s) * bump
        acc[1, seg] = sgn * amp * np.sin(2 * np.pi * s) * bump
        gyr[2, seg] = sgn * 0.5 * amp * bump
    elif label == 6:                    # double tap
        for c in (0.3, 0.7):
            acc[2, seg] += -1.5 * amp * np.exp(-((s - c) ** 2) / 0.002)
    else:                               # shake
        acc[0, seg] = amp * np.sin(2 * np.pi * 4 * s) * bump
        gyr[1, seg] = 0.8 * amp * np.sin(2 * np.pi * 4 * s + 0.5) * bump
    return _finish(rng, acc, gyr, 0.12)


def write_gesture_csv(path, args):
    """Long-format export as recorded by the collection app: one row per sample."""
    rng = np.random.default_rng(args.seed + 1)
    rows = []
    rec = 0
    for split, n in (("train", args.n_train_per_class), ("eval", args.n_eval_per_class)):
        for label in range(len(GESTURES)):
            for _ in range(n):
                w = gesture_window(rng, label)
                df = pd.DataFrame(w, columns=CHANNELS)
                df.insert(0, "t", np.arange(WIN))
                df.insert(0, "gesture", GESTURES[label])
                df.insert(0, "split", split)
                df.insert(0, "recording_id", rec)
                rows.append(df)
                rec += 1
    pd.concat(rows, ignore_index=True).to_csv(path, index=False, float_format="%.5f")


class GestureDataset(Dataset):
    def __init__(self, df, mean, std):
        df = df.sort_values(["recording_id", "t"])
        x = df[CHANNELS].to_numpy(np.float32).reshape(-1, WIN, len(CHANNELS))
        x = (x - mean) / std
        self.x = torch.from_numpy(x).transpose(1, 2).contiguous()  # (N, C, T)
        labels = df.groupby("recording_id", sort=True)["gesture"].first()
        self.y = torch.tensor([GESTURES.index(g) for g in labels], dtype=torch.long)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return {"inputs": self.x[i], "label": self.y[i]}


class MixupCollator:
    def __init__(self, num_classes, alpha):
        self.num_classes = num_classes
        self.alpha = alpha

    def _mix(self, t, lam, perm):
        return lam * t + (1.0 - lam) * t[perm]

    def __call__(self, features):
        x = torch.stack([f["inputs"] for f in features])
        y = F.one_hot(torch.stack([f["label"] for f in features]), self.num_classes).float()
        lam = float(np.random.beta(self.alpha, self.alpha))
        perm = torch.randperm(x.size(0))
        return {"inputs": self._mix(x, lam, perm), "labels": self._mix(y, lam, perm)}


def eval_collate(features):
    return {"inputs": torch.stack([f["inputs"] for f in features]),
            "labels": torch.stack([f["label"] for f in features])}


# --------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------
class ConvEncoder(nn.Module):
    def __init__(self, in_ch=6, width=48):
        super().__init__()
        def block(ci, co, k, s):
            return nn.Sequential(nn.Conv1d(ci, co, k, s, k // 2, bias=False), nn.BatchNorm1d(co), nn.GELU())
        self.blocks = nn.Sequential(block(in_ch, width, 7, 2), block(width, width, 5, 1),
                                    block(width, 2 * width, 5, 2), block(2 * width, 2 * width, 3, 1))
        self.out_dim = 2 * width

    def forward(self, x):
        h = self.blocks(x)
        return torch.cat([h.mean(-1), h.amax(-1)], dim=1)


class GestureClassifier(nn.Module):
    def __init__(self, encoder, num_classes):
        super().__init__()
        self.encoder = encoder
        self.classifier = nn.Sequential(nn.Dropout(0.1), nn.Linear(2 * encoder.out_dim, num_classes))

    def forward(self, inputs):
        return self.classifier(self.encoder(inputs))


def pretrain_encoder(path, seed=7, n=3000, epochs=4):
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    ys = rng.integers(0, 6, n)
    x = np.stack([activity_window(rng, int(y)) for y in ys])
    mean, std = x.reshape(-1, 6).mean(0), x.reshape(-1, 6).std(0)
    x = torch.from_numpy((x - mean) / std).transpose(1, 2).contiguous()
    y = torch.from_numpy(ys)
    enc = ConvEncoder()
    head = nn.Linear(2 * enc.out_dim, 6)
    opt = torch.optim.AdamW(list(enc.parameters()) + list(head.parameters()), lr=2e-3)
    for ep in range(epochs):
        perm = torch.randperm(n)
        tot = 0.0
        for i in range(0, n, 128):
            idx = perm[i:i + 128]
            loss = F.cross_entropy(head(enc(x[idx])), y[idx])
            opt.zero_grad(); loss.backward(); opt.step()
            tot += loss.item() * len(idx)
        print(f"[har-pretrain] epoch {ep + 1} loss {tot / n:.4f}")
    torch.save({"encoder": enc.state_dict(), "channel_mean": mean, "channel_std": std}, path)


def soft_cross_entropy(logits, target):
    return -(target * F.log_softmax(logits, dim=-1)).sum(-1).mean()


def loss_fn(model, batch):
    return soft_cross_entropy(model(batch["inputs"]), batch["labels"])


def build_optimizer(model, args):
    decay, no_decay = [], []
    for n, p in model.encoder.named_parameters():
        (no_decay if p.ndim < 2 else decay).append(p)
    groups = [
        {"params": decay, "lr": args.encoder_learning_rate, "weight_decay": args.weight_decay},
        {"params": no_decay, "lr": args.encoder_learning_rate, "weight_decay": 0.0},
        {"params": list(model.classifier.parameters()), "lr": args.learning_rate, "weight_decay": args.weight_decay},
    ]
    return torch.optim.AdamW(groups)


def get_linear_schedule_with_warmup(opt, warmup, total):
    def f(step):
        if step < warmup:
            return step / max(1, warmup)
        return max(0.0, (total - step) / max(1, total - warmup))
    return torch.optim.lr_scheduler.LambdaLR(opt, f)


def setup(args):
    if not os.path.exists(ENCODER_PATH):
        pretrain_encoder(ENCODER_PATH)
    if not os.path.exists(GESTURE_CSV):
        write_gesture_csv(GESTURE_CSV, args)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    ckpt = torch.load(ENCODER_PATH, map_location="cpu", weights_only=False)
    df = pd.read_csv(GESTURE_CSV)
    train_ds = GestureDataset(df[df.split == "train"], ckpt["channel_mean"], ckpt["channel_std"])
    eval_ds = GestureDataset(df[df.split == "eval"], ckpt["channel_mean"], ckpt["channel_std"])
    train_dl = DataLoader(train_ds, batch_size=args.per_device_train_batch_size, shuffle=True,
                          drop_last=True, collate_fn=MixupCollator(len(GESTURES), args.mixup_alpha))
    eval_dl = DataLoader(eval_ds, batch_size=args.per_device_eval_batch_size, collate_fn=eval_collate)
    encoder = ConvEncoder()
    encoder.load_state_dict(ckpt["encoder"])
    model = GestureClassifier(encoder, len(GESTURES))
    optimizer = build_optimizer(model, args)
    return model, optimizer, train_dl, eval_dl


@torch.no_grad()
def evaluate(model, dl):
    model.eval()
    t0 = time.time()
    tot, correct, n = 0.0, 0, 0
    for batch in dl:
        logits = model(batch["inputs"])
        tot += F.cross_entropy(logits, batch["labels"], reduction="sum").item()
        correct += (logits.argmax(-1) == batch["labels"]).sum().item()
        n += len(batch["labels"])
    model.train()
    return {"eval_loss": round(tot / n, 4), "eval_accuracy": round(correct / n, 4),
            "eval_runtime": round(time.time() - t0, 4)}


def make_target():
    args = TrainingArguments()
    model, optimizer, train_dl, eval_dl = setup(args)
    model.train()
    return {"model": model, "data": train_dl, "val_data": eval_dl, "loss_fn": loss_fn,
            "optimizer": optimizer, "num_classes": len(GESTURES), "task": "classification"}


def main():
    torch.set_num_threads(1)
    args = TrainingArguments()
    model, optimizer, train_dl, eval_dl = setup(args)
    steps_per_epoch = len(train_dl)
    total = steps_per_epoch * args.num_train_epochs
    sched = get_linear_schedule_with_warmup(optimizer, int(args.warmup_ratio * total), total)
    print(f"***** Running training *****\n  Num examples = {len(train_dl.dataset)}\n"
          f"  Num Epochs = {args.num_train_epochs}\n  Batch size = {args.per_device_train_batch_size}\n"
          f"  Total optimization steps = {total}")
    t0 = time.time()
    model.train()
    step, running, n_run, all_loss = 0, 0.0, 0, 0.0
    for epoch in range(args.num_train_epochs):
        for batch in train_dl:
            loss = loss_fn(model, batch)
            optimizer.zero_grad()
            loss.backward()
            gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            sched.step()
            step += 1
            running += loss.item(); n_run += 1; all_loss += loss.item()
            if step % args.logging_steps == 0:
                print({"loss": round(running / n_run, 4), "grad_norm": round(float(gn), 4),
                       "learning_rate": float(f"{sched.get_last_lr()[2]:.4e}"),
                       "epoch": round(step / steps_per_epoch, 2)})
                running, n_run = 0.0, 0
        if (epoch + 1) % args.eval_every_epochs == 0:
            m = evaluate(model, eval_dl)
            m["epoch"] = float(epoch + 1)
            print(m)
    rt = time.time() - t0
    print({"train_runtime": round(rt, 2), "train_samples_per_second": round(total * args.per_device_train_batch_size / rt, 1),
           "train_loss": round(all_loss / step, 4), "epoch": float(args.num_train_epochs)})


if __name__ == "__main__":
    main()
