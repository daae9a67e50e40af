"""Intent classification for short support-chat utterances.

Single-layer GRU over word embeddings, packed by length, final hidden
state -> linear head. Utterances are generated synthetically: filler words
follow a Zipf distribution and each intent has a handful of cue words.
"""
import math
import random
import time
from collections import Counter

import numpy as np
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_sequence
from torch.utils.data import DataLoader, Dataset

SEED = 1234
NUM_INTENTS = 5
FILLER_VOCAB = 300
CUES_PER_INTENT = 8
N_TRAIN = 3000
N_VAL = 600
MIN_LEN, MAX_LEN = 6, 28

EMB_DIM = 64
HIDDEN = 96
BATCH_SIZE = 64
EPOCHS = 8
LR = 2e-3
CLIP = 1.0

PAD, UNK = "<pad>", "<unk>"


# ----------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------
def generate_corpus(n, rng):
    """Return (texts, labels). Cue words sit in the mid-frequency band of the
    filler distribution, so they are not trivially the most common tokens."""
    ranks = np.arange(1, FILLER_VOCAB + 1)
    filler_p = 1.0 / ranks ** 1.05
    filler_p /= filler_p.sum()
    filler = [f"w{i}" for i in range(FILLER_VOCAB)]
    cues = [[f"c{k}_{j}" for j in range(CUES_PER_INTENT)] for k in range(NUM_INTENTS)]

    texts, labels = [], []
    for _ in range(n):
        y = int(rng.integers(NUM_INTENTS))
        length = int(rng.integers(MIN_LEN, MAX_LEN + 1))
        toks = list(rng.choice(filler, size=length, p=filler_p))
        n_cues = int(rng.integers(1, 3))
        for _ in range(n_cues):
            # 15% of cue words are borrowed from another intent (noisy utterances)
            k = y if rng.random() > 0.15 else int(rng.integers(NUM_INTENTS))
            toks[int(rng.integers(length))] = cues[k][int(rng.integers(CUES_PER_INTENT))]
        texts.append(" ".join(toks))
        labels.append(y)
    return texts, labels


def tokenize(text):
    return text.lower().split()


def build_vocab(texts, min_freq=2):
    counts = Counter(tok for t in texts for tok in tokenize(t))
    itos = [PAD, UNK] + [w for w, c in counts.most_common() if c >= min_freq]
    return {w: i for i, w in enumerate(itos)}


def encode(text, vocab):
    unk = vocab[UNK]
    return [vocab.get(tok, unk) for tok in tokenize(text)]


class UtteranceDataset(Dataset):
    def __init__(self, ids, labels):
        self.ids = ids
        self.labels = labels

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return torch.tensor(self.ids[i], dtype=torch.long), self.labels[i]


def build_dataset(texts, labels, vocab=None, min_freq=2):
    if vocab is None:
        vocab = build_vocab(texts, min_freq)
    ids = [encode(t, vocab) for t in texts]
    return UtteranceDataset(ids, labels), vocab


def collate(batch):
    seqs, labels = zip(*batch)
    lengths = torch.tensor([len(s) for s in seqs], dtype=torch.long)
    padded = pad_sequence(seqs, batch_first=True, padding_value=0)
    return padded, lengths, torch.tensor(labels, dtype=torch.long)


def make_loaders(seed=SEED):
    rng = np.random.default_rng(seed)
    train_texts, train_labels = generate_corpus(N_TRAIN, rng)
    val_texts, val_labels = generate_corpus(N_VAL, rng)

    train_ds, vocab = build_dataset(train_texts, train_labels)
    val_ds, _ = build_dataset(val_texts, val_labels)

    g = torch.Generator().manual_seed(seed)
    train_loader = DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True,
                              collate_fn=collate, generator=g)
    val_loader = DataLoader(val_ds, batch_size=256, shuffle=False, collate_fn=collate)
    return train_loader, val_loader, vocab


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class GRUClassifier(nn.Module):
    def __init__(self, vocab_size, emb_dim, hidden, num_classes, dropout=0.2):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, emb_dim, padding_idx=0)
        self.gru = nn.GRU(emb_dim, hidden, batch_first=True)
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, x, lengths):
        emb = self.dropout(self.embedding(x))
        packed = pack_padded_sequence(emb, lengths.cpu(), batch_first=True,
                                      enforce_sorted=False)
        _, h_n = self.gru(packed)
        return self.head(self.dropout(h_n[-1]))


criterion = nn.CrossEntropyLoss()


def loss_fn(model, batch):
    x, lengths, y = batch
    return criterion(model(x, lengths), y)


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR)


def build_model(vocab_size):
    torch.manual_seed(SEED)
    return GRUClassifier(vocab_size, EMB_DIM, HIDDEN, NUM_INTENTS)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    total, correct, loss_sum = 0, 0, 0.0
    for x, lengths, y in loader:
        logits = model(x, lengths)
        loss_sum += criterion(logits, y).item() * y.size(0)
        correct += (logits.argmax(-1) == y).sum().item()
        total += y.size(0)
    model.train()
    return loss_sum / total, correct / total


def make_target():
    random.seed(SEED)
    torch.manual_seed(SEED)
    train_loader, val_loader, vocab = make_loaders()
    data = []
    for i, batch in enumerate(train_loader):
        data.append(batch)
        if i == 4:
            break
    val_data = [next(iter(val_loader))]
    return {
        "model": build_model(len(vocab)),
        "data": data,
        "val_data": val_data,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "num_classes": NUM_INTENTS,
        "task": "classification",
    }


def main():
    torch.set_num_threads(1)
    random.seed(SEED)
    np.random.seed(SEED)
    torch.manual_seed(SEED)

    train_loader, val_loader, vocab = make_loaders()
    print(f"vocab size: {len(vocab)} | train utterances: {len(train_loader.dataset)} "
          f"| val utterances: {len(val_loader.dataset)}")
    model = build_model(len(vocab))
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: GRUClassifier, {n_params/1e3:.1f}K parameters")
    optimizer = make_optimizer(model.parameters())

    step = 0
    t0 = time.time()
    for epoch in range(1, EPOCHS + 1):
        model.train()
        run_loss, run_correct, run_n = 0.0, 0, 0
        for batch in train_loader:
            x, lengths, y = batch
            optimizer.zero_grad()
            logits = model(x, lengths)
            loss = criterion(logits, y)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), CLIP)
            optimizer.step()
            step += 1
            run_loss += loss.item() * y.size(0)
            run_correct += (logits.argmax(-1) == y).sum().item()
            run_n += y.size(0)
            if step % 20 == 0:
                print(f"step {step:4d} | epoch {epoch} | loss {loss.item():.4f}")
        val_loss, val_acc = evaluate(model, val_loader)
        print(f"Epoch {epoch}/{EPOCHS} - loss: {run_loss/run_n:.4f} - acc: {run_correct/run_n:.4f} "
              f"- val_loss: {val_loss:.4f} - val_acc: {val_acc:.4f} - {time.time()-t0:.1f}s")
    print(f"done. best val_acc would be checkpointed here; final val_acc={val_acc:.4f}")


if __name__ == "__main__":
    main()
