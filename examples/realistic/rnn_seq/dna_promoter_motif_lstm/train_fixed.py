"""Promoter motif detection on variable-length DNA reads.

A read is positive when it carries a -10 box ("TATAAT") somewhere along it.
Reads are tokenised per nucleotide, padded per batch, run through a
BiLSTM (packed) and max-pooled over the valid positions.
"""
import math
import random
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence
from torch.utils.data import DataLoader, Dataset

SEED = 1234
NUCLEOTIDES = "ACGT"
MOTIF = "TATAAT"
MIN_LEN, MAX_LEN = 40, 100
N_TRAIN, N_VAL = 3000, 800
BATCH_SIZE = 64
EPOCHS = 6
LR = 2e-3

PAD_IDX = 0
stoi = {nt: i for i, nt in enumerate(NUCLEOTIDES, start=1)}
VOCAB_SIZE = len(stoi) + 1


def set_seed(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


# ---------------------------------------------------------------- data
def random_read(rng, length):
    # slightly AT-rich background, like many bacterial intergenic regions
    return "".join(rng.choice(list(NUCLEOTIDES), size=length, p=[0.3, 0.2, 0.2, 0.3]))


def generate_reads(n, seed):
    rng = np.random.default_rng(seed)
    reads, labels = [], []
    for i in range(n):
        length = int(rng.integers(MIN_LEN, MAX_LEN + 1))
        label = int(rng.random() < 0.5)
        seq = random_read(rng, length)
        while MOTIF in seq:
            seq = random_read(rng, length)
        if label:
            pos = int(rng.integers(0, length - len(MOTIF) + 1))
            seq = seq[:pos] + MOTIF + seq[pos + len(MOTIF):]
        reads.append(seq)
        labels.append(label)
    return reads, labels


def encode(seq):
    return torch.tensor([stoi[nt] for nt in seq], dtype=torch.long)


class ReadDataset(Dataset):
    def __init__(self, reads, labels):
        self.tokens = [encode(r) for r in reads]
        self.labels = torch.tensor(labels, dtype=torch.float32)

    def __len__(self):
        return len(self.tokens)

    def __getitem__(self, idx):
        return self.tokens[idx], self.labels[idx]


def collate_reads(batch):
    seqs, labels = zip(*batch)
    tokens = pad_sequence(seqs, batch_first=True, padding_value=PAD_IDX)
    return tokens, torch.stack(labels)


def make_loaders():
    train_reads, train_labels = generate_reads(N_TRAIN, SEED)
    val_reads, val_labels = generate_reads(N_VAL, SEED + 1)
    g = torch.Generator().manual_seed(SEED)
    train_dl = DataLoader(ReadDataset(train_reads, train_labels), batch_size=BATCH_SIZE,
                          shuffle=True, collate_fn=collate_reads, generator=g)
    val_dl = DataLoader(ReadDataset(val_reads, val_labels), batch_size=256,
                        shuffle=False, collate_fn=collate_reads)
    return train_dl, val_dl


# ---------------------------------------------------------------- model
class MotifLSTM(nn.Module):
    def __init__(self, vocab_size=VOCAB_SIZE, emb_dim=16, hidden=48, pad_idx=PAD_IDX):
        super().__init__()
        self.pad_idx = pad_idx
        self.embed = nn.Embedding(vocab_size, emb_dim, padding_idx=pad_idx)
        self.lstm = nn.LSTM(emb_dim, hidden, batch_first=True, bidirectional=True)
        self.head = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, tokens):
        mask = tokens != self.pad_idx                      # (B, T)
        lengths = mask.sum(1).clamp(min=1)
        x = self.embed(tokens)
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, _ = self.lstm(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=tokens.size(1))
        out = out.masked_fill(~mask.unsqueeze(-1), -1e4)   # masked max-pool over positions
        pooled = out.max(dim=1).values
        return self.head(pooled).squeeze(-1)


def loss_fn(model, batch):
    tokens, labels = batch
    logits = model(tokens)
    return F.binary_cross_entropy_with_logits(logits, labels)


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR)


@torch.no_grad()
def evaluate(model, dl):
    model.eval()
    tot_loss, correct, n = 0.0, 0, 0
    for tokens, labels in dl:
        logits = model(tokens)
        tot_loss += F.binary_cross_entropy_with_logits(logits, labels, reduction="sum").item()
        correct += ((logits > 0).float() == labels).sum().item()
        n += labels.numel()
    model.train()
    return tot_loss / n, correct / n


def train():
    torch.set_num_threads(1)
    set_seed(SEED)
    train_dl, val_dl = make_loaders()
    model = MotifLSTM()
    optimizer = make_optimizer(model.parameters())
    n_params = sum(p.numel() for p in model.parameters())
    print(f"MotifLSTM: {n_params} trainable parameters | train reads {N_TRAIN} | val reads {N_VAL}")
    steps = len(train_dl)
    for epoch in range(1, EPOCHS + 1):
        t0 = time.time()
        model.train()
        run_loss, seen = 0.0, 0
        for tokens, labels in train_dl:
            optimizer.zero_grad()
            loss = loss_fn(model, (tokens, labels))
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            run_loss += loss.item() * labels.numel()
            seen += labels.numel()
        val_loss, val_acc = evaluate(model, val_dl)
        dt = time.time() - t0
        print(f"Epoch {epoch}/{EPOCHS}")
        print(f"{steps}/{steps} - {dt:.0f}s - loss: {run_loss / seen:.4f} "
              f"- val_loss: {val_loss:.4f} - val_acc: {val_acc:.4f}")
    return model


def make_target():
    set_seed(SEED)
    train_dl, _ = make_loaders()
    it = iter(train_dl)
    data = [next(it) for _ in range(4)]
    return {
        "model": MotifLSTM(),
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "num_classes": 2,
        "task": "classification",
    }


if __name__ == "__main__":
    start = time.time()
    train()
    print(f"done in {time.time() - start:.1f}s")
