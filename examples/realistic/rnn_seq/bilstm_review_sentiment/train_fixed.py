"""Review sentiment classifier: BiLSTM over variable-length token sequences.

Synthetic "reviews": a small vocabulary with polar words, intensifiers and negators.
Label is negative / neutral / positive from the (negation-aware) polarity score.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_sequence

SEED = 1234
VOCAB_SIZE = 120
PAD_ID = 0
NUM_CLASSES = 3
MIN_LEN, MAX_LEN = 5, 30
N_TRAIN, N_VAL = 4000, 800
BATCH_SIZE = 100
EMB_DIM = 32
HIDDEN = 48
NUM_LAYERS = 1
EPOCHS = 10
LR = 2e-3

# token id layout: 0 pad, 1 unk, 2-3 negators, 4-5 intensifiers, 6-25 positive, 26-45 negative, rest filler
NEGATORS = [2, 3]
INTENSIFIERS = [4, 5]
POSITIVE = list(range(6, 26))
NEGATIVE = list(range(26, 46))
FILLER = list(range(46, VOCAB_SIZE))


def generate_reviews(n, rng):
    seqs, labels = [], []
    for _ in range(n):
        length = int(rng.integers(MIN_LEN, MAX_LEN + 1))
        toks = []
        score = 0.0
        negate = False
        boost = 1.0
        for _ in range(length):
            r = rng.random()
            if r < 0.08:
                tok = int(rng.choice(NEGATORS))
                negate = True
            elif r < 0.13:
                tok = int(rng.choice(INTENSIFIERS))
                boost = 2.0
            elif r < 0.27:
                tok = int(rng.choice(POSITIVE))
                score += (-1.0 if negate else 1.0) * boost
                negate, boost = False, 1.0
            elif r < 0.41:
                tok = int(rng.choice(NEGATIVE))
                score += (1.0 if negate else -1.0) * boost
                negate, boost = False, 1.0
            else:
                tok = int(rng.choice(FILLER))
            toks.append(tok)
        if score <= -1.0:
            y = 0
        elif score >= 1.0:
            y = 2
        else:
            y = 1
        seqs.append(toks)
        labels.append(y)
    return seqs, labels


def build_datasets(seed=SEED):
    rng = np.random.default_rng(seed)
    train = generate_reviews(N_TRAIN, rng)
    val = generate_reviews(N_VAL, rng)
    return train, val


def collate(seqs, labels):
    lengths = torch.tensor([len(s) for s in seqs], dtype=torch.long)
    tokens = pad_sequence([torch.tensor(s, dtype=torch.long) for s in seqs],
                          batch_first=True, padding_value=PAD_ID)
    return tokens, lengths, torch.tensor(labels, dtype=torch.long)


def iterate_batches(data, batch_size, shuffle, generator=None):
    seqs, labels = data
    n = len(seqs)
    if shuffle:
        order = torch.randperm(n, generator=generator).tolist()
    else:
        order = list(range(n))
    for start in range(0, n, batch_size):
        idx = order[start:start + batch_size]
        yield collate([seqs[i] for i in idx], [labels[i] for i in idx])


class BiLSTMClassifier(nn.Module):
    def __init__(self, vocab_size, emb_dim, hidden, num_layers, num_classes, dropout=0.2):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, emb_dim, padding_idx=PAD_ID)
        self.lstm = nn.LSTM(emb_dim, hidden, num_layers=num_layers, batch_first=True,
                            bidirectional=True, dropout=dropout if num_layers > 1 else 0.0)
        self.dropout = nn.Dropout(dropout)
        # final hidden states of every layer and direction are concatenated
        self.head = nn.Linear(num_layers * 2 * hidden, num_classes)

    def forward(self, tokens, lengths):
        batch_size = tokens.size(0)
        emb = self.embedding(tokens)
        packed = pack_padded_sequence(emb, lengths.cpu(), batch_first=True, enforce_sorted=False)
        _, (h_n, _) = self.lstm(packed)
        # h_n: (num_layers * 2, batch, hidden) -> (batch, num_layers * 2 * hidden)
        feats = h_n.permute(1, 0, 2).reshape(batch_size, -1)
        return self.head(self.dropout(feats))


def build_model():
    return BiLSTMClassifier(VOCAB_SIZE, EMB_DIM, HIDDEN, NUM_LAYERS, NUM_CLASSES)


criterion = nn.CrossEntropyLoss()


def loss_fn(model, batch):
    tokens, lengths, labels = batch
    logits = model(tokens, lengths)
    return criterion(logits, labels)


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR)


def evaluate(model, data):
    model.eval()
    total_loss, correct, count = 0.0, 0, 0
    with torch.no_grad():
        for tokens, lengths, labels in iterate_batches(data, 256, shuffle=False):
            logits = model(tokens, lengths)
            total_loss += criterion(logits, labels).item() * labels.size(0)
            correct += (logits.argmax(-1) == labels).sum().item()
            count += labels.size(0)
    model.train()
    return total_loss / count, correct / count


def make_target():
    torch.manual_seed(SEED)
    train, _ = build_datasets()
    g = torch.Generator().manual_seed(SEED)
    data = []
    for i, batch in enumerate(iterate_batches(train, BATCH_SIZE, shuffle=True, generator=g)):
        data.append(batch)
        if i == 5:
            break
    return {
        "model": build_model(),
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "num_classes": NUM_CLASSES,
        "task": "classification",
    }


def main():
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    train, val = build_datasets()
    counts = np.bincount(train[1], minlength=NUM_CLASSES)
    print(f"train reviews: {len(train[0])}  val reviews: {len(val[0])}  class counts: {counts.tolist()}")
    model = build_model()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"BiLSTMClassifier: {n_params / 1e3:.1f}K params")
    optimizer = make_optimizer(model.parameters())
    g = torch.Generator().manual_seed(SEED)
    steps_per_epoch = math.ceil(len(train[0]) / BATCH_SIZE)

    for epoch in range(1, EPOCHS + 1):
        t0 = time.time()
        running, correct, seen = 0.0, 0, 0
        for tokens, lengths, labels in iterate_batches(train, BATCH_SIZE, shuffle=True, generator=g):
            logits = model(tokens, lengths)
            loss = criterion(logits, labels)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            running += loss.item() * labels.size(0)
            correct += (logits.argmax(-1) == labels).sum().item()
            seen += labels.size(0)
        val_loss, val_acc = evaluate(model, val)
        dt = time.time() - t0
        print(f"Epoch {epoch}/{EPOCHS}")
        print(f"{steps_per_epoch}/{steps_per_epoch} - {dt:.0f}s - loss: {running / seen:.4f} - "
              f"accuracy: {correct / seen:.4f} - val_loss: {val_loss:.4f} - val_accuracy: {val_acc:.4f}")


if __name__ == "__main__":
    main()
