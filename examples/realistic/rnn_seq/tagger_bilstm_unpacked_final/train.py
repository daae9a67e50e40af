"""Wrist-IMU gesture tagger: BiLSTM over variable-length sensor clips.

Each clip is a 4-channel wrist IMU recording (accel x/y/z + gyro z) of one
gesture, segmented by an upstream detector, so clip lengths vary a lot
(20..120 samples at 50 Hz). Gestures: circle clockwise / counter-clockwise,
each either released or finished with a confirm "tap" (a short z-axis
impulse just before the segment ends). Channels are standardised with train
statistics; clips are zero-padded after their end to the batch max length and
the true lengths travel with the batch.

The final hidden states of both LSTM directions are concatenated and fed to
a small MLP head. Logging follows the HF Trainer dict lines.
"""
import argparse
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

LABELS = ["circle_cw", "circle_ccw", "circle_cw_tap", "circle_ccw_tap"]
NUM_LABELS = len(LABELS)
N_CH = 4


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--n_train", type=int, default=1536)
    p.add_argument("--n_eval", type=int, default=400)
    p.add_argument("--min_len", type=int, default=20)
    p.add_argument("--max_len", type=int, default=120)
    p.add_argument("--per_device_train_batch_size", type=int, default=32)
    p.add_argument("--num_train_epochs", type=int, default=6)
    p.add_argument("--learning_rate", type=float, default=3e-3)
    p.add_argument("--weight_decay", type=float, default=1e-4)
    p.add_argument("--warmup_ratio", type=float, default=0.06)
    p.add_argument("--max_grad_norm", type=float, default=1.0)
    p.add_argument("--hidden_size", type=int, default=32)
    p.add_argument("--logging_steps", type=int, default=24)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_known_args()[0]


def synth_clip(rng, label, length):
    t = np.arange(length)
    cw = label in (0, 2)
    tap = label in (2, 3)
    freq = rng.uniform(0.06, 0.14)                       # cycles / sample
    phase = rng.uniform(0, 2 * math.pi)
    amp = rng.uniform(0.6, 1.4)
    w = 2 * math.pi * freq * t + phase
    ax = amp * np.cos(w)
    ay = amp * np.sin(w) * (1 if cw else -1)
    az = 0.3 * rng.standard_normal() + 0.05 * np.cumsum(rng.standard_normal(length)) / np.sqrt(length)
    gz = amp * freq * 6 * (1 if cw else -1) + np.zeros(length)
    x = np.stack([ax, ay, az, gz], axis=1)
    x += rng.normal(0, 0.45, size=x.shape)
    # an occasional wrist flick anywhere in the clip (distractor impulses)
    if rng.random() < 0.5:
        s = rng.integers(0, length - 4)
        x[s:s + 3, 2] += rng.uniform(1.0, 2.0)
    if tap:
        end = length - rng.integers(1, 4)
        x[end - 4:end, 2] += np.array([1.5, 3.0, 2.0, 0.8]) * rng.uniform(0.8, 1.2)
        x[end - 4:end, :2] *= 0.3                       # hand stops rotating to tap
    return x.astype(np.float32)


class GestureClips(Dataset):
    def __init__(self, n, args, seed, stats=None):
        rng = np.random.default_rng(seed)
        self.clips, self.labels = [], []
        for _ in range(n):
            y = int(rng.integers(NUM_LABELS))
            L = int(rng.integers(args.min_len, args.max_len + 1))
            self.clips.append(synth_clip(rng, y, L))
            self.labels.append(y)
        if stats is None:
            cat = np.concatenate(self.clips)
            stats = (cat.mean(0), cat.std(0) + 1e-6)
        self.stats = stats
        self.clips = [torch.from_numpy((c - stats[0]) / stats[1]) for c in self.clips]

    def __len__(self):
        return len(self.clips)

    def __getitem__(self, i):
        return self.clips[i], self.labels[i]


def collate(batch):
    clips, labels = zip(*batch)
    lengths = torch.tensor([c.shape[0] for c in clips])
    x = torch.zeros(len(clips), int(lengths.max()), N_CH)
    for i, c in enumerate(clips):
        x[i, :c.shape[0]] = c
    return {"inputs": x, "lengths": lengths, "labels": torch.tensor(labels)}


class BiLSTMTagger(nn.Module):
    def __init__(self, n_ch, hidden, n_labels):
        super().__init__()
        self.lstm = nn.LSTM(n_ch, hidden, batch_first=True, bidirectional=True)
        self.head = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.GELU(),
                                  nn.Dropout(0.1), nn.Linear(hidden, n_labels))

    def forward(self, inputs, lengths):
        _, (h_n, _) = self.lstm(inputs)
        feats = torch.cat([h_n[-2], h_n[-1]], dim=-1)     # last fwd state, last bwd state
        return self.head(feats)


def loss_fn(model, batch):
    logits = model(batch["inputs"], batch["lengths"])
    return F.cross_entropy(logits, batch["labels"])


def make_optimizer(params):
    args = parse_args()
    return torch.optim.AdamW(params, lr=args.learning_rate, weight_decay=args.weight_decay)


def build(args):
    torch.manual_seed(args.seed)
    train_ds = GestureClips(args.n_train, args, seed=args.seed + 11)
    eval_ds = GestureClips(args.n_eval, args, seed=args.seed + 12, stats=train_ds.stats)
    model = BiLSTMTagger(N_CH, args.hidden_size, NUM_LABELS)
    return model, train_ds, eval_ds


def train_dataloader(ds, args):
    g = torch.Generator().manual_seed(args.seed)
    return DataLoader(ds, batch_size=args.per_device_train_batch_size, shuffle=True,
                      collate_fn=collate, generator=g)


def make_target():
    args = parse_args()
    model, train_ds, _ = build(args)
    data = []
    for b in train_dataloader(train_ds, args):
        data.append(b)
        if len(data) == 10:
            break
    return {
        "model": model,
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "num_classes": NUM_LABELS,
        "task": "classification",
    }


def macro_f1(pred, gold, k):
    f1s = []
    for c in range(k):
        tp = ((pred == c) & (gold == c)).sum().item()
        fp = ((pred == c) & (gold != c)).sum().item()
        fn = ((pred != c) & (gold == c)).sum().item()
        f1s.append(2 * tp / max(1, 2 * tp + fp + fn))
    return sum(f1s) / k


@torch.no_grad()
def evaluate(model, ds, epoch):
    model.eval()
    t0 = time.time()
    loader = DataLoader(ds, batch_size=128, collate_fn=collate)
    preds, golds, tot = [], [], 0.0
    for b in loader:
        logits = model(b["inputs"], b["lengths"])
        tot += F.cross_entropy(logits, b["labels"], reduction="sum").item()
        preds.append(logits.argmax(-1))
        golds.append(b["labels"])
    model.train()
    pred, gold = torch.cat(preds), torch.cat(golds)
    rt = time.time() - t0
    return {"eval_loss": round(tot / len(gold), 4),
            "eval_accuracy": round((pred == gold).float().mean().item(), 4),
            "eval_f1": round(macro_f1(pred, gold, NUM_LABELS), 4),
            "eval_runtime": round(rt, 3),
            "eval_samples_per_second": round(len(gold) / rt, 1),
            "epoch": float(epoch)}


def main():
    args = parse_args()
    model, train_ds, eval_ds = build(args)
    loader = train_dataloader(train_ds, args)
    opt = make_optimizer(model.parameters())
    steps_per_epoch = len(loader)
    total = steps_per_epoch * args.num_train_epochs
    warmup = math.ceil(args.warmup_ratio * total)

    def lr_lambda(step):
        if step < warmup:
            return (step + 1) / warmup
        prog = (step - warmup) / max(1, total - warmup)
        return 0.5 * (1 + math.cos(math.pi * prog))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda)
    print("***** Running training *****")
    print(f"  Num examples = {len(train_ds)}")
    print(f"  Num Epochs = {args.num_train_epochs}")
    print(f"  Instantaneous batch size per device = {args.per_device_train_batch_size}")
    print(f"  Total optimization steps = {total}")
    print(f"  Number of trainable parameters = {sum(p.numel() for p in model.parameters()):,}")

    t_start = time.time()
    step, run, run_n = 0, 0.0, 0
    for epoch in range(args.num_train_epochs):
        for batch in loader:
            loss = loss_fn(model, batch)
            loss.backward()
            gn = nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
            opt.step()
            sched.step()
            opt.zero_grad()
            step += 1
            run += loss.item()
            run_n += 1
            if step % args.logging_steps == 0:
                print({"loss": round(run / run_n, 4), "grad_norm": round(float(gn), 4),
                       "learning_rate": float(f"{sched.get_last_lr()[0]:.4e}"),
                       "epoch": round(step / steps_per_epoch, 2)})
                run, run_n = 0.0, 0
        print(evaluate(model, eval_ds, epoch + 1))
    rt = time.time() - t_start
    print({"train_runtime": round(rt, 2), "train_samples_per_second": round(len(train_ds) * args.num_train_epochs / rt, 2),
           "train_steps_per_second": round(total / rt, 3), "epoch": float(args.num_train_epochs)})


if __name__ == "__main__":
    main()
