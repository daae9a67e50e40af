"""Review polarity classifier: embedding -> LSTM -> masked mean pooling -> linear.

Synthetic "reviews" built from a small vocabulary of positive, negative and
neutral words plus a negation token that flips the polarity of the word right
after it. Sequences have variable length and are padded per batch.
"""
import math
import random
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 1234
PAD, NOT = 0, 1
POS_WORDS = list(range(2, 17))
NEG_WORDS = list(range(17, 32))
NEUTRAL_WORDS = list(range(32, 120))
VOCAB_SIZE = 120

N_TRAIN, N_VAL = 4000, 1000
MIN_LEN, MAX_LEN = 8, 40
BATCH_SIZE = 64
EPOCHS = 10
LR = 2e-3

torch.set_num_threads(1)


def set_seed(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def make_review(rng):
    """Returns (token ids, label). label=1 for positive."""
    while True:
        n = int(rng.integers(MIN_LEN, MAX_LEN + 1))
        tokens, score = [], 0
        i = 0
        while i < n:
            r = rng.random()
            if r < 0.12 and i < n - 1:
                # "not <sentiment word>" flips the polarity
                pos = rng.random() < 0.5
                word = int(rng.choice(POS_WORDS if pos else NEG_WORDS))
                tokens += [NOT, word]
                score += -1 if pos else 1
                i += 2
            elif r < 0.30:
                pos = rng.random() < 0.5
                tokens.append(int(rng.choice(POS_WORDS if pos else NEG_WORDS)))
                score += 1 if pos else -1
                i += 1
            elif r < 0.34:
                # a stray negation in front of a neutral word does nothing
                tokens += [NOT, int(rng.choice(NEUTRAL_WORDS))]
                i += 2
            else:
                tokens.append(int(rng.choice(NEUTRAL_WORDS)))
                i += 1
        if score != 0:
            return tokens[:n], int(score > 0)


def build_dataset(n, seed):
    rng = np.random.default_rng(seed)
    return [make_review(rng) for _ in range(n)]


def collate(examples):
    lengths = torch.tensor([len(t) for t, _ in examples], dtype=torch.long)
    max_len = int(lengths.max())
    tokens = torch.full((len(examples), max_len), PAD, dtype=torch.long)
    for i, (t, _) in enumerate(examples):
        tokens[i, : len(t)] = torch.tensor(t, dtype=torch.long)
    labels = torch.tensor([y for _, y in examples], dtype=torch.long)
    return tokens, lengths, labels


def iterate_batches(dataset, batch_size, shuffle, seed=0):
    idx = list(range(len(dataset)))
    if shuffle:
        random.Random(seed).shuffle(idx)
    for start in range(0, len(idx), batch_size):
        yield collate([dataset[i] for i in idx[start : start + batch_size]])


class ReviewClassifier(nn.Module):
    def __init__(self, vocab_size, emb_dim=64, hidden=96, num_classes=2):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, emb_dim, padding_idx=PAD)
        self.lstm = nn.LSTM(emb_dim, hidden, num_layers=1)
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, tokens, lengths):
        x = self.embed(tokens)                       # (B, T, E)
        out, _ = self.lstm(x)                        # (B, T, H)
        mask = (tokens != PAD).unsqueeze(-1).float()  # (B, T, 1)
        pooled = (out * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return self.head(pooled)


def loss_fn(model, batch):
    tokens, lengths, labels = batch
    logits = model(tokens, lengths)
    return F.cross_entropy(logits, labels)


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR)


@torch.no_grad()
def evaluate(model, dataset):
    model.eval()
    total_loss, correct, n = 0.0, 0, 0
    for tokens, lengths, labels in iterate_batches(dataset, 256, shuffle=False):
        logits = model(tokens, lengths)
        total_loss += F.cross_entropy(logits, labels, reduction="sum").item()
        correct += (logits.argmax(-1) == labels).sum().item()
        n += labels.numel()
    model.train()
    return total_loss / n, correct / n


def make_target():
    set_seed(SEED)
    train_set = build_dataset(N_TRAIN, seed=SEED)
    batches = []
    for b, batch in enumerate(iterate_batches(train_set, BATCH_SIZE, shuffle=True, seed=SEED)):
        batches.append(batch)
        if b == 4:
            break
    return {
        "model": ReviewClassifier(VOCAB_SIZE),
        "data": batches,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "num_classes": 2,
        "task": "classification",
    }


def main():
    set_seed(SEED)
    train_set = build_dataset(N_TRAIN, seed=SEED)
    val_set = build_dataset(N_VAL, seed=SEED + 1)
    model = ReviewClassifier(VOCAB_SIZE)
    optimizer = make_optimizer(model.parameters())
    n_params = sum(p.numel() for p in model.parameters())
    print(f"Train on {len(train_set)} samples, validate on {len(val_set)} samples")
    print(f"Model: ReviewClassifier ({n_params:,} params)")
    steps_per_epoch = math.ceil(len(train_set) / BATCH_SIZE)

    for epoch in range(1, EPOCHS + 1):
        t0 = time.time()
        run_loss, run_correct, seen = 0.0, 0, 0
        model.train()
        for tokens, lengths, labels in iterate_batches(train_set, BATCH_SIZE, shuffle=True, seed=SEED + epoch):
            optimizer.zero_grad()
            logits = model(tokens, lengths)
            loss = F.cross_entropy(logits, labels)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            run_loss += loss.item() * labels.numel()
            run_correct += (logits.argmax(-1) == labels).sum().item()
            seen += labels.numel()
        val_loss, val_acc = evaluate(model, val_set)
        dt = time.time() - t0
        print(f"Epoch {epoch}/{EPOCHS}")
        print(f"{steps_per_epoch}/{steps_per_epoch} - {dt:.0f}s - loss: {run_loss / seen:.4f} - "
              f"accuracy: {run_correct / seen:.4f} - val_loss: {val_loss:.4f} - val_accuracy: {val_acc:.4f}")


if __name__ == "__main__":
    main()
