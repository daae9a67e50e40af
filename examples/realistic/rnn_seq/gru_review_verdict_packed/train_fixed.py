"""GRU sentiment classifier for short product reviews.

The label is the reviewer's final verdict, i.e. the polarity of the last
opinion word in the review (reviews often open positive and end with a
"but ..."). Sequences are variable length, padded per batch and packed.
"""
import math
import random
import time
from collections import Counter

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence

SEED = 13
PAD_IDX = 0
BATCH_SIZE = 64
EPOCHS = 8
LR = 2e-3
EMB_DIM = 48
HIDDEN = 96

FILLER = ["the", "a", "it", "is", "was", "this", "product", "i", "and", "for",
          "to", "my", "with", "of", "after", "week", "use", "bought", "they",
          "item", "battery", "screen", "price", "delivery", "box", "quality",
          "size", "color", "works", "arrived", "really", "very", "quite", "so"]
POSITIVE = ["great", "excellent", "love", "perfect", "amazing", "solid",
            "recommend", "happy", "fantastic", "reliable"]
NEGATIVE = ["terrible", "awful", "broke", "disappointed", "poor", "useless",
            "refund", "cheap", "worst", "flimsy"]
CONNECTIVES = ["but", "however", "overall", "honestly", "still"]


def generate_reviews(n, rng):
    """Synthetic reviews: filler text with opinion words sprinkled in."""
    reviews, labels = [], []
    for _ in range(n):
        length = rng.randint(10, 48)
        words = []
        for _ in range(length):
            r = rng.random()
            if r < 0.22:
                words.append("the")
            elif r < 0.32:
                words.append(rng.choice(POSITIVE))
            elif r < 0.42:
                words.append(rng.choice(NEGATIVE))
            elif r < 0.47:
                words.append(rng.choice(CONNECTIVES))
            else:
                words.append(rng.choice(FILLER[1:]))
        # make sure there is at least one opinion word
        if not any(w in POSITIVE or w in NEGATIVE for w in words):
            words[rng.randrange(len(words))] = rng.choice(POSITIVE + NEGATIVE)
        last_opinion = [w for w in words if w in POSITIVE or w in NEGATIVE][-1]
        reviews.append(words)
        labels.append(1 if last_opinion in POSITIVE else 0)
    return reviews, labels


def build_vocab(reviews):
    counts = Counter(w for r in reviews for w in r)
    vocab = [w for w, _ in counts.most_common()]
    stoi = {w: i + 1 for i, w in enumerate(vocab)}
    return stoi


def encode(reviews, stoi):
    return [[stoi[w] for w in r] for r in reviews]


def collate(examples):
    seqs, labels = zip(*examples)
    max_len = max(len(s) for s in seqs)
    x = torch.full((len(seqs), max_len), PAD_IDX, dtype=torch.long)
    for i, s in enumerate(seqs):
        x[i, :len(s)] = torch.tensor(s, dtype=torch.long)
    return x, torch.tensor(labels, dtype=torch.long)


def make_batches(encoded, labels, batch_size, shuffle, seed=0):
    idx = list(range(len(encoded)))
    if shuffle:
        random.Random(seed).shuffle(idx)
    batches = []
    for start in range(0, len(idx), batch_size):
        chunk = idx[start:start + batch_size]
        batches.append(collate([(encoded[i], labels[i]) for i in chunk]))
    return batches


def load_data():
    rng = random.Random(SEED)
    train_reviews, train_labels = generate_reviews(4000, rng)
    val_reviews, val_labels = generate_reviews(800, rng)
    stoi = build_vocab(train_reviews)
    return (encode(train_reviews, stoi), train_labels,
            encode(val_reviews, stoi), val_labels, stoi)


class ReviewGRU(nn.Module):
    def __init__(self, vocab_size, emb_dim=EMB_DIM, hidden=HIDDEN, num_classes=2):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, emb_dim, padding_idx=PAD_IDX)
        self.gru = nn.GRU(emb_dim, hidden, batch_first=True)
        self.dropout = nn.Dropout(0.2)
        self.classifier = nn.Linear(hidden, num_classes)

    def forward(self, x):
        lengths = (x != PAD_IDX).sum(dim=1).clamp(min=1)
        emb = self.embedding(x)
        packed = pack_padded_sequence(emb, lengths.cpu(), batch_first=True,
                                      enforce_sorted=False)
        _, h_n = self.gru(packed)
        return self.classifier(self.dropout(h_n[-1]))


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR)


def make_target():
    torch.manual_seed(SEED)
    train_x, train_y, _, _, stoi = load_data()
    batches = make_batches(train_x, train_y, BATCH_SIZE, shuffle=True, seed=SEED)
    return {
        "model": ReviewGRU(len(stoi) + 1),
        "data": batches[:6],
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "num_classes": 2,
        "task": "classification",
    }


@torch.no_grad()
def evaluate(model, batches):
    model.eval()
    total_loss, correct, n = 0.0, 0, 0
    for x, y in batches:
        logits = model(x)
        total_loss += F.cross_entropy(logits, y, reduction="sum").item()
        correct += (logits.argmax(-1) == y).sum().item()
        n += y.numel()
    model.train()
    return total_loss / n, correct / n


def main():
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    np.random.seed(SEED)
    train_x, train_y, val_x, val_y, stoi = load_data()
    print(f"vocab size: {len(stoi)} | train reviews: {len(train_x)} | val reviews: {len(val_x)}")
    model = ReviewGRU(len(stoi) + 1)
    optimizer = make_optimizer(model.parameters())
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model params: {n_params:,}")
    val_batches = make_batches(val_x, val_y, 256, shuffle=False)

    steps = math.ceil(len(train_x) / BATCH_SIZE)
    for epoch in range(1, EPOCHS + 1):
        t0 = time.time()
        model.train()
        batches = make_batches(train_x, train_y, BATCH_SIZE, shuffle=True, seed=SEED + epoch)
        running, correct, seen = 0.0, 0, 0
        for x, y in batches:
            optimizer.zero_grad()
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()
            running += loss.item() * y.numel()
            correct += (logits.argmax(-1) == y).sum().item()
            seen += y.numel()
        val_loss, val_acc = evaluate(model, val_batches)
        dt = time.time() - t0
        print(f"Epoch {epoch}/{EPOCHS}")
        print(f"{steps}/{steps} - {dt:.0f}s - loss: {running / seen:.4f} - accuracy: {correct / seen:.4f}"
              f" - val_loss: {val_loss:.4f} - val_accuracy: {val_acc:.4f}")


if __name__ == "__main__":
    main()
