"""Sentiment classification of short synthetic reviews with an LSTM over packed sequences.

Reviews are lists of word ids of varying length (6-64 words). Batches are built
from reviews of similar length (bucketing) so there is little padding.
The label is positive when the review holds more positive than negative words,
so the model has to read the whole review.

    python train.py [--epochs 6] [--batch-size 32]
"""
import argparse
import math
import random
import time

import numpy as np
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_sequence
from torch.utils.data import DataLoader, Dataset, Sampler

PAD, UNK = 0, 1
N_FILLER, N_POS, N_NEG = 200, 25, 25


def make_reviews(n, seed):
    """Word ids: 2..401 filler, then positive words, then negative words."""
    rng = random.Random(seed)
    pos_ids = list(range(2 + N_FILLER, 2 + N_FILLER + N_POS))
    neg_ids = list(range(2 + N_FILLER + N_POS, 2 + N_FILLER + N_POS + N_NEG))
    reviews, labels = [], []
    while len(reviews) < n:
        length = rng.randint(6, 64)
        n_pos, n_neg = rng.randint(0, 8), rng.randint(0, 8)
        if n_pos == n_neg or n_pos + n_neg > length:
            continue
        words = [rng.randint(2, 1 + N_FILLER) for _ in range(length - n_pos - n_neg)]
        words += rng.choices(pos_ids, k=n_pos) + rng.choices(neg_ids, k=n_neg)
        rng.shuffle(words)
        reviews.append(words)
        labels.append(int(n_pos > n_neg))
    return reviews, labels


class ReviewDataset(Dataset):
    def __init__(self, reviews, labels, sort_by_length=False):
        reviews = [torch.tensor(r, dtype=torch.long) for r in reviews]
        if sort_by_length:
            # neighbours have similar lengths, so the bucket sampler's batches need little padding
            reviews = sorted(reviews, key=len)
        self.reviews, self.labels = reviews, labels

    def __len__(self):
        return len(self.reviews)

    def __getitem__(self, i):
        return self.reviews[i], self.labels[i]


class BucketBatchSampler(Sampler):
    """Consecutive indices of a length-sorted dataset as batches; batch order reshuffled each epoch."""

    def __init__(self, n_items, batch_size, shuffle=True):
        self.n_items, self.batch_size, self.shuffle = n_items, batch_size, shuffle

    def __iter__(self):
        batches = [list(range(i, min(i + self.batch_size, self.n_items)))
                   for i in range(0, self.n_items, self.batch_size)]
        if self.shuffle:
            random.shuffle(batches)
        return iter(batches)

    def __len__(self):
        return math.ceil(self.n_items / self.batch_size)


def collate(batch):
    seqs, labels = zip(*batch)
    lengths = torch.tensor([len(s) for s in seqs])
    # pack_padded_sequence wants the batch in decreasing length order
    lengths, order = lengths.sort(descending=True)
    padded = pad_sequence(seqs, batch_first=True, padding_value=PAD)[order]
    return padded, lengths, torch.tensor(labels)[order]


class LSTMClassifier(nn.Module):
    def __init__(self, vocab_size, emb_dim=32, hidden=64, num_classes=2):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, emb_dim, padding_idx=PAD)
        self.lstm = nn.LSTM(emb_dim, hidden, batch_first=True)
        self.fc = nn.Linear(hidden, num_classes)

    def forward(self, x, lengths):
        emb = self.embedding(x)
        packed = pack_padded_sequence(emb, lengths, batch_first=True)
        _, (h_n, _) = self.lstm(packed)
        return self.fc(h_n[-1])


criterion = nn.CrossEntropyLoss()


def loss_fn(model, batch):
    x, lengths, y = batch
    return criterion(model(x, lengths), y)


def build(args):
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    train_x, train_y = make_reviews(args.n_train, seed=args.seed)
    val_x, val_y = make_reviews(args.n_val, seed=args.seed + 1)
    train_ds = ReviewDataset(train_x, train_y, sort_by_length=True)
    val_ds = ReviewDataset(val_x, val_y, sort_by_length=True)
    train_loader = DataLoader(train_ds, batch_sampler=BucketBatchSampler(len(train_ds), args.batch_size),
                              collate_fn=collate)
    val_loader = DataLoader(val_ds, batch_sampler=BucketBatchSampler(len(val_ds), 256, shuffle=False),
                            collate_fn=collate)
    vocab_size = 2 + N_FILLER + N_POS + N_NEG
    model = LSTMClassifier(vocab_size, args.emb_dim, args.hidden)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    return model, optimizer, train_loader, val_loader, vocab_size


def parse_args(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--emb-dim", type=int, default=32)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--n-train", type=int, default=4000)
    p.add_argument("--n-val", type=int, default=800)
    p.add_argument("--log-every", type=int, default=25)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def make_target():
    args = parse_args([])
    model, optimizer, train_loader, _, _ = build(args)
    it = iter(train_loader)
    data = [next(it) for _ in range(4)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": optimizer,
            "make_optimizer": lambda params: torch.optim.Adam(params, lr=args.lr),
            "num_classes": 2, "task": "classification"}


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    total_loss, correct, n = 0.0, 0, 0
    for x, lengths, y in loader:
        logits = model(x, lengths)
        total_loss += criterion(logits, y).item() * len(y)
        correct += (logits.argmax(1) == y).sum().item()
        n += len(y)
    model.train()
    return total_loss / n, correct / n


def main():
    args = parse_args()
    print(args)
    model, optimizer, train_loader, val_loader, vocab_size = build(args)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"vocab {vocab_size} | train {len(train_loader.dataset)} | val {len(val_loader.dataset)} | params {n_params:,}")
    for epoch in range(1, args.epochs + 1):
        t0 = time.time()
        run_loss, run_correct, run_n = 0.0, 0, 0
        for i, (x, lengths, y) in enumerate(train_loader, 1):
            logits = model(x, lengths)
            loss = criterion(logits, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            run_loss += loss.item() * len(y)
            run_correct += (logits.argmax(1) == y).sum().item()
            run_n += len(y)
            if i % args.log_every == 0 or i == len(train_loader):
                print(f"epoch {epoch} | batch {i}/{len(train_loader)} | loss {run_loss / run_n:.4f} | acc {run_correct / run_n:.3f}")
                run_loss, run_correct, run_n = 0.0, 0, 0
        val_loss, val_acc = evaluate(model, val_loader)
        print(f"epoch {epoch} | val_loss {val_loss:.4f} | val_acc {val_acc:.3f} | {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
