"""Review-polarity classifier on tokenised event streams.

Synthetic "reviews": token ids drawn from a small vocabulary where a handful of
tokens carry positive or negative weight; the label is whether the review's
total polarity is positive. Reviews have very different lengths and are
right-padded per batch (pad id 0). Model: embedding -> 1-layer GRU -> linear.
Keras-style epoch logging.
"""
import argparse
import json
import os
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

PAD = 0


def get_config():
    p = argparse.ArgumentParser(description="GRU review classifier")
    p.add_argument("--vocab", type=int, default=40)
    p.add_argument("--min_len", type=int, default=6)
    p.add_argument("--max_len", type=int, default=60)
    p.add_argument("--n_train", type=int, default=3000)
    p.add_argument("--n_val", type=int, default=600)
    p.add_argument("--emb", type=int, default=32)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--batch_size", type=int, default=50)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--clip", type=float, default=5.0)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_known_args()[0]


# --------------------------------------------------------------------------- data
def write_corpus(path, n, cfg, rng):
    """Dump a jsonl corpus, like the export we get from the labelling tool."""
    polarity = np.zeros(cfg.vocab)
    polarity[1:6] = [2.0, 1.5, 1.0, 1.0, 0.5]      # positive words
    polarity[6:11] = [-2.0, -1.5, -1.0, -1.0, -0.5]  # negative words
    with open(path, "w") as f:
        written = 0
        while written < n:
            L = int(rng.integers(cfg.min_len, cfg.max_len + 1))
            toks = rng.integers(1, cfg.vocab, size=L)
            score = polarity[toks].sum()
            if abs(score) < 0.5:  # drop ambiguous reviews
                continue
            f.write(json.dumps({"tokens": toks.tolist(), "label": int(score > 0)}) + "\n")
            written += 1


class ReviewDataset(Dataset):
    def __init__(self, path):
        self.rows = [json.loads(line) for line in open(path)]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        r = self.rows[i]
        return torch.tensor(r["tokens"], dtype=torch.long), r["label"]


def collate(batch):
    seqs, labels = zip(*batch)
    lengths = torch.tensor([len(s) for s in seqs], dtype=torch.long)
    padded = nn.utils.rnn.pad_sequence(seqs, batch_first=True, padding_value=PAD)
    return padded, lengths, torch.tensor(labels, dtype=torch.long)


def build_data(cfg):
    rng = np.random.default_rng(cfg.seed)
    tmp = tempfile.mkdtemp(prefix="reviews_")
    tr_path, va_path = os.path.join(tmp, "train.jsonl"), os.path.join(tmp, "val.jsonl")
    write_corpus(tr_path, cfg.n_train, cfg, rng)
    write_corpus(va_path, cfg.n_val, cfg, rng)
    train_ds, val_ds = ReviewDataset(tr_path), ReviewDataset(va_path)
    g = torch.Generator().manual_seed(cfg.seed)
    train_dl = DataLoader(train_ds, batch_size=cfg.batch_size, shuffle=True,
                          collate_fn=collate, generator=g)
    val_dl = DataLoader(val_ds, batch_size=200, shuffle=False, collate_fn=collate)
    return train_dl, val_dl


# --------------------------------------------------------------------------- model
class GRUClassifier(nn.Module):
    def __init__(self, vocab, emb, hidden, n_classes=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, emb, padding_idx=PAD)
        self.gru = nn.GRU(emb, hidden, batch_first=True)
        self.fc = nn.Linear(hidden, n_classes)

    def forward(self, tokens, lengths):
        out, _ = self.gru(self.embed(tokens))  # (B, T, H)
        last = out[:, -1, :]
        return self.fc(last)


def loss_fn(model, batch):
    tokens, lengths, y = batch
    return F.cross_entropy(model(tokens, lengths), y)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    n, correct, total_loss = 0, 0, 0.0
    for tokens, lengths, y in loader:
        logits = model(tokens, lengths)
        total_loss += F.cross_entropy(logits, y, reduction="sum").item()
        correct += (logits.argmax(1) == y).sum().item()
        n += len(y)
    model.train()
    return total_loss / n, correct / n


def make_target():
    cfg = get_config()
    torch.manual_seed(cfg.seed)
    train_dl, _ = build_data(cfg)
    model = GRUClassifier(cfg.vocab, cfg.emb, cfg.hidden)
    it = iter(train_dl)
    data = [next(it) for _ in range(4)]
    return {
        "model": model,
        "batch": data[0],
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": lambda params: torch.optim.Adam(params, lr=cfg.lr),
        "num_classes": 2,
        "task": "classification",
    }


def progress_bar(i, n, width=30):
    done = int(width * i / n)
    return "[" + "=" * max(done - 1, 0) + (">" if done < width else "=") + "." * (width - done) + "]"


def main():
    cfg = get_config()
    torch.manual_seed(cfg.seed)
    train_dl, val_dl = build_data(cfg)
    model = GRUClassifier(cfg.vocab, cfg.emb, cfg.hidden)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    print(f"Train on {len(train_dl.dataset)} samples, validate on {len(val_dl.dataset)} samples")
    n_batches = len(train_dl)
    for epoch in range(1, cfg.epochs + 1):
        print(f"Epoch {epoch}/{cfg.epochs}")
        t0 = time.time()
        seen, correct, loss_sum = 0, 0, 0.0
        for tokens, lengths, y in train_dl:
            opt.zero_grad()
            logits = model(tokens, lengths)
            loss = F.cross_entropy(logits, y)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
            opt.step()
            loss_sum += loss.item() * len(y)
            correct += (logits.argmax(1) == y).sum().item()
            seen += len(y)
        val_loss, val_acc = evaluate(model, val_dl)
        dt = time.time() - t0
        print(f"{n_batches}/{n_batches} {progress_bar(n_batches, n_batches)} - {dt:.0f}s "
              f"{1000 * dt / n_batches:.0f}ms/step - loss: {loss_sum / seen:.4f} - "
              f"accuracy: {correct / seen:.4f} - val_loss: {val_loss:.4f} - val_accuracy: {val_acc:.4f}")


if __name__ == "__main__":
    main()
