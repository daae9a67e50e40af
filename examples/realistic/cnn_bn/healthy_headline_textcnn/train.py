"""Headline topic classifier: Kim (2014)-style TextCNN with BatchNorm.

Synthetic news headlines over a small word-id vocabulary. Each topic owns a
handful of multi-word phrases (built from words that are shared across topics,
so the *bigram/trigram* identifies the topic, not the single word), plus a few
topic-leaning unigrams; the rest of a headline is Zipf-distributed filler.
Some headlines also carry a phrase from a different topic, and ~4% of labels
are flipped, so the task is not perfectly separable.

Headlines are right-padded with 0 to the longest headline in the batch and fed
to embedding -> Conv1d(k=3,4,5) + BatchNorm1d + ReLU -> max over time ->
dropout -> linear. Keras-style per-epoch log.
"""
import math
import random
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 1234
PAD = 0
TOPICS = ["business", "sports", "science", "politics", "entertainment"]
NUM_CLASSES = len(TOPICS)

N_FILLER = 400          # ids 1..400   : function words / generic filler
N_CONTENT = 160         # ids 401..560 : content words, shared across topics
VOCAB_SIZE = 1 + N_FILLER + N_CONTENT
PHRASES_PER_TOPIC = 14
UNIGRAMS_PER_TOPIC = 10
MIN_LEN, MAX_LEN = 4, 40
LABEL_NOISE = 0.04

N_TRAIN, N_VAL = 3840, 1000
BATCH_SIZE = 64
EPOCHS = 8
LR = 2e-3
EMBED_DIM = 48
NUM_FILTERS = 32
KERNEL_SIZES = (3, 4, 5)
DROPOUT = 0.5


# ----------------------------------------------------------------------------- data
def build_lexicon(rng):
    content = list(range(1 + N_FILLER, VOCAB_SIZE))
    phrases, unigrams = {}, {}
    for c in range(NUM_CLASSES):
        ps = set()
        while len(ps) < PHRASES_PER_TOPIC:
            n = rng.choice([2, 2, 3])
            ps.add(tuple(rng.sample(content, n)))
        phrases[c] = sorted(ps)
        unigrams[c] = rng.sample(content, UNIGRAMS_PER_TOPIC)
    return phrases, unigrams


def make_headlines(n, phrases, unigrams, rng):
    ranks = np.arange(1, N_FILLER + 1)
    zipf = (1.0 / ranks ** 1.05)
    zipf /= zipf.sum()
    np_rng = np.random.default_rng(rng.randrange(1 << 30))

    texts, labels = [], []
    for _ in range(n):
        y = rng.randrange(NUM_CLASSES)
        # long-tailed lengths: most headlines are short, a few are very long
        length = int(min(MAX_LEN, max(MIN_LEN, round(np_rng.lognormal(2.4, 0.55)))))
        toks = list(np_rng.choice(N_FILLER, size=length, p=zipf) + 1)

        pieces = [list(rng.choice(phrases[y]))]
        if length > 8 and rng.random() < 0.6:
            pieces.append(list(rng.choice(phrases[y])))
        if rng.random() < 0.25:                               # cross-topic mention
            other = rng.choice([c for c in range(NUM_CLASSES) if c != y])
            pieces.append(list(rng.choice(phrases[other])))
        if rng.random() < 0.6:
            pieces.append([rng.choice(unigrams[y])])
        if rng.random() < 0.3:                                # bag-of-words noise
            pieces.append([rng.choice(unigrams[rng.randrange(NUM_CLASSES)])])

        for p in pieces:
            if len(toks) - len(p) < 0:
                break
            pos = rng.randrange(0, len(toks) - len(p) + 1)
            toks[pos:pos + len(p)] = p
        toks = toks[:MAX_LEN]
        if rng.random() < LABEL_NOISE:
            y = rng.randrange(NUM_CLASSES)
        texts.append(torch.tensor(toks, dtype=torch.long))
        labels.append(y)
    return texts, torch.tensor(labels, dtype=torch.long)


class HeadlineDataset(torch.utils.data.Dataset):
    def __init__(self, texts, labels):
        self.texts, self.labels = texts, labels

    def __len__(self):
        return len(self.texts)

    def __getitem__(self, i):
        return self.texts[i], self.labels[i]


def collate(items):
    """Right-pad to the longest headline in the batch."""
    texts, labels = zip(*items)
    L = max(len(t) for t in texts)
    ids = torch.full((len(texts), L), PAD, dtype=torch.long)
    for i, t in enumerate(texts):
        ids[i, :len(t)] = t
    return ids, torch.stack(labels)


def build_data():
    rng = random.Random(SEED)
    phrases, unigrams = build_lexicon(rng)
    train = HeadlineDataset(*make_headlines(N_TRAIN, phrases, unigrams, rng))
    val = HeadlineDataset(*make_headlines(N_VAL, phrases, unigrams, rng))
    return train, val


def make_loaders(train_ds, val_ds):
    g = torch.Generator().manual_seed(SEED)
    train_dl = torch.utils.data.DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True,
                                           collate_fn=collate, generator=g)
    val_dl = torch.utils.data.DataLoader(val_ds, batch_size=256, shuffle=False, collate_fn=collate)
    return train_dl, val_dl


# ----------------------------------------------------------------------------- model
class TextCNN(nn.Module):
    def __init__(self, vocab_size, embed_dim, num_filters, kernel_sizes, num_classes, dropout):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=PAD)
        self.convs = nn.ModuleList([
            nn.Sequential(
                nn.Conv1d(embed_dim, num_filters, k, padding=k // 2, bias=False),
                nn.BatchNorm1d(num_filters),
                nn.ReLU(inplace=True),
            )
            for k in kernel_sizes
        ])
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(num_filters * len(kernel_sizes), num_classes)

    def forward(self, ids):
        x = self.embedding(ids).transpose(1, 2)            # (B, E, L)
        feats = [conv(x).amax(dim=2) for conv in self.convs]  # max-over-time pooling
        return self.fc(self.dropout(torch.cat(feats, dim=1)))


def build_model():
    torch.manual_seed(SEED)
    return TextCNN(VOCAB_SIZE, EMBED_DIM, NUM_FILTERS, KERNEL_SIZES, NUM_CLASSES, DROPOUT)


def loss_fn(model, batch):
    ids, labels = batch
    return F.cross_entropy(model(ids), labels)


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR)


def make_target():
    train_ds, val_ds = build_data()
    model = build_model()
    train_dl, _ = make_loaders(train_ds, val_ds)
    data = []
    for batch in train_dl:
        data.append(batch)
        if len(data) == 12:
            break
    return {
        "model": model,
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "num_classes": NUM_CLASSES,
        "task": "classification",
    }


# ----------------------------------------------------------------------------- train
@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    tot_loss, correct, n = 0.0, 0, 0
    for ids, labels in loader:
        logits = model(ids)
        tot_loss += F.cross_entropy(logits, labels, reduction="sum").item()
        correct += (logits.argmax(1) == labels).sum().item()
        n += len(labels)
    model.train()
    return tot_loss / n, correct / n


def main():
    train_ds, val_ds = build_data()
    model = build_model()
    train_dl, val_dl = make_loaders(train_ds, val_ds)
    opt = make_optimizer(model.parameters())

    lens = [len(t) for t in train_ds.texts]
    print(f"Loaded {len(train_ds)} train / {len(val_ds)} val headlines, vocab={VOCAB_SIZE}, "
          f"len min/median/max = {min(lens)}/{int(np.median(lens))}/{max(lens)}")
    n_params = sum(p.numel() for p in model.parameters())
    print(f"Model: TextCNN(kernels={KERNEL_SIZES}, filters={NUM_FILTERS}) - {n_params:,} params")

    steps = math.ceil(len(train_ds) / BATCH_SIZE)
    t0 = time.time()
    for epoch in range(1, EPOCHS + 1):
        model.train()
        te = time.time()
        run_loss, run_correct, seen = 0.0, 0, 0
        for ids, labels in train_dl:
            logits = model(ids)
            loss = F.cross_entropy(logits, labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            run_loss += loss.item() * len(labels)
            run_correct += (logits.argmax(1) == labels).sum().item()
            seen += len(labels)
        val_loss, val_acc = evaluate(model, val_dl)
        dt = time.time() - te
        print(f"Epoch {epoch}/{EPOCHS}")
        print(f"{steps}/{steps} [==============================] - {dt:.0f}s "
              f"{1000 * dt / steps:.0f}ms/step - loss: {run_loss / seen:.4f} - "
              f"accuracy: {run_correct / seen:.4f} - val_loss: {val_loss:.4f} - val_accuracy: {val_acc:.4f}")
        sys.stdout.flush()
    print(f"Training finished in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
