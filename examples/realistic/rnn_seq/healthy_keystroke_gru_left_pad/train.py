"""Keystroke-dynamics typist identification with a GRU.

Each sample is a burst of keystrokes captured from a shared terminal. Every
keystroke is tokenised as (key, flight-time bucket): the key pressed and how
long after the previous key it came, quantised into 5 buckets. Typists differ
in overall speed, in which keys they are slow/fast on, and in how often they
hit backspace. Goal: which of 6 enrolled typists produced the burst.

Bursts have very different lengths (4..64 keys). The collate function
LEFT-pads each batch (pad tokens first, the real keystrokes flush against the
right edge) so the most recent keystroke is always in the last column; the
classifier reads the GRU output at the last time step. Log lines imitate
Keras `model.fit(verbose=2)`.
"""
import argparse
import random
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

PAD = 0
N_KEYS = 28            # a-z, space, backspace
BACKSPACE = 27
N_BUCKETS = 5
N_TYPISTS = 6
VOCAB_SIZE = 1 + N_KEYS * N_BUCKETS


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--n_train", type=int, default=2400)
    p.add_argument("--n_val", type=int, default=600)
    p.add_argument("--min_len", type=int, default=4)
    p.add_argument("--max_len", type=int, default=64)
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--embed_dim", type=int, default=24)
    p.add_argument("--units", type=int, default=64)
    p.add_argument("--seed", type=int, default=1234)
    return p.parse_known_args()[0]


# rough English letter frequencies (a..z), then space
LETTER_FREQ = np.array([8.2, 1.5, 2.8, 4.3, 12.7, 2.2, 2.0, 6.1, 7.0, 0.2, 0.8, 4.0, 2.4,
                        6.7, 7.5, 1.9, 0.1, 6.0, 6.3, 9.1, 2.8, 1.0, 2.4, 0.2, 2.0, 0.1, 18.0])
LETTER_FREQ = LETTER_FREQ / LETTER_FREQ.sum()


def make_typists(rng):
    typists = []
    for i in range(N_TYPISTS):
        typists.append({
            "speed": 1.3 + 0.3 * i + rng.normal(0, 0.1),       # mean flight-time bucket
            "key_bias": rng.normal(0, 0.8, size=N_KEYS),        # slow/fast keys
            "backspace": rng.uniform(0.01, 0.09),
        })
    return typists


def synth_burst(rng, typist, length):
    keys = rng.choice(N_KEYS - 1, size=length, p=LETTER_FREQ)
    keys[rng.random(length) < typist["backspace"]] = BACKSPACE
    lat = typist["speed"] + typist["key_bias"][keys] + rng.normal(0, 1.1, size=length)
    buckets = np.clip(np.round(lat), 0, N_BUCKETS - 1).astype(np.int64)
    return 1 + keys * N_BUCKETS + buckets


class KeystrokeDataset(Dataset):
    def __init__(self, n, typists, args, seed):
        rng = np.random.default_rng(seed)
        self.samples = []
        for _ in range(n):
            who = int(rng.integers(N_TYPISTS))
            length = int(rng.integers(args.min_len, args.max_len + 1))
            self.samples.append((torch.from_numpy(synth_burst(rng, typists[who], length)), who))

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        return self.samples[i]


def left_pad_collate(batch):
    seqs, labels = zip(*batch)
    lengths = torch.tensor([len(s) for s in seqs])
    T = int(lengths.max())
    x = torch.full((len(seqs), T), PAD, dtype=torch.long)
    for i, s in enumerate(seqs):
        x[i, T - len(s):] = s          # right-align: padding goes in front
    return x, lengths, torch.tensor(labels)


class TypistGRU(nn.Module):
    def __init__(self, vocab, embed_dim, units, n_out):
        super().__init__()
        self.embedding = nn.Embedding(vocab, embed_dim, padding_idx=PAD)
        self.gru = nn.GRU(embed_dim, units, batch_first=True)
        self.dense = nn.Sequential(nn.Linear(units, units), nn.ReLU(), nn.Linear(units, n_out))

    def forward(self, x):
        out, _ = self.gru(self.embedding(x))
        return self.dense(out[:, -1, :])


def loss_fn(model, batch):
    x, lengths, y = batch
    return F.cross_entropy(model(x), y)


def make_optimizer(params):
    args = parse_args()
    return torch.optim.Adam(params, lr=args.lr)


def build(args):
    torch.manual_seed(args.seed)
    typists = make_typists(np.random.default_rng(args.seed))
    train_ds = KeystrokeDataset(args.n_train, typists, args, seed=args.seed + 1)
    val_ds = KeystrokeDataset(args.n_val, typists, args, seed=args.seed + 2)
    model = TypistGRU(VOCAB_SIZE, args.embed_dim, args.units, N_TYPISTS)
    return model, train_ds, val_ds


def train_loader(ds, args):
    g = torch.Generator().manual_seed(args.seed)
    return DataLoader(ds, batch_size=args.batch_size, shuffle=True,
                      collate_fn=left_pad_collate, generator=g)


def make_target():
    args = parse_args()
    model, train_ds, _ = build(args)
    data = []
    for b in train_loader(train_ds, args):
        data.append(b)
        if len(data) == 10:
            break
    return {
        "model": model,
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "num_classes": N_TYPISTS,
        "task": "classification",
    }


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    tot, correct, n = 0.0, 0, 0
    for x, lengths, y in loader:
        logits = model(x)
        tot += F.cross_entropy(logits, y, reduction="sum").item()
        correct += (logits.argmax(1) == y).sum().item()
        n += len(y)
    model.train()
    return tot / n, correct / n


def main():
    args = parse_args()
    model, train_ds, val_ds = build(args)
    loader = train_loader(train_ds, args)
    val_loader = DataLoader(val_ds, batch_size=256, collate_fn=left_pad_collate)
    opt = make_optimizer(model.parameters())
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="min", factor=0.5, patience=1)

    print(f"Model: \"typist_gru\"  ({sum(p.numel() for p in model.parameters()):,} params)")
    print(f"Train on {len(train_ds)} samples, validate on {len(val_ds)} samples")
    t_fit = time.time()
    for epoch in range(args.epochs):
        t0 = time.time()
        tot, correct, n = 0.0, 0, 0
        for batch in loader:
            x, lengths, y = batch
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            opt.step()
            tot += loss.item() * len(y)
            correct += (logits.argmax(1) == y).sum().item()
            n += len(y)
        val_loss, val_acc = evaluate(model, val_loader)
        sched.step(val_loss)
        print(f"Epoch {epoch + 1}/{args.epochs}")
        print(f"{len(loader)}/{len(loader)} - {time.time() - t0:.0f}s - loss: {tot / n:.4f} - "
              f"accuracy: {correct / n:.4f} - val_loss: {val_loss:.4f} - val_accuracy: {val_acc:.4f} - "
              f"learning_rate: {opt.param_groups[0]['lr']:.4g}")
    print(f"fit() finished in {time.time() - t_fit:.1f}s")


if __name__ == "__main__":
    main()
