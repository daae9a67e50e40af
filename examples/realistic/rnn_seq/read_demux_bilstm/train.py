"""Sample demultiplexing from raw reads.

Each read is an insert of variable length followed by the 8-nt sample barcode
ligated at the 3' end (with sequencing errors). A BiLSTM over the packed read
predicts the sample of origin.
"""
import math
import random
import time

import numpy as np
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_sequence

torch.set_num_threads(1)

SEED = 1234
BASES = "ACGT"
BARCODES = ["ACGTCTGA", "TGCAGTCA", "GATCCATG", "CTAGGACT", "AGCTTCGA", "TCGAAGCT"]
# per-sample library GC content (different prep kits / organisms)
SAMPLE_GC = [0.38, 0.42, 0.46, 0.50, 0.54, 0.58]
MIN_INSERT, MAX_INSERT = 24, 64
ERROR_RATE = 0.04
BATCH_SIZE = 64
EPOCHS = 6
LR = 3e-3


# ----------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------
def add_errors(seq, rng):
    return "".join(rng.choice(BASES) if rng.random() < ERROR_RATE else b for b in seq)


def simulate_reads(n, seed):
    rng = random.Random(seed)
    reads, labels = [], []
    for _ in range(n):
        sample = rng.randrange(len(BARCODES))
        gc = SAMPLE_GC[sample]
        length = rng.randint(MIN_INSERT, MAX_INSERT)
        weights = [(1 - gc) / 2, gc / 2, gc / 2, (1 - gc) / 2]
        insert = "".join(rng.choices(BASES, weights=weights, k=length))
        reads.append(add_errors(insert + BARCODES[sample], rng))
        labels.append(sample)
    return reads, labels


def build_vocab(reads):
    alphabet = sorted(set("".join(reads)))
    return {ch: i for i, ch in enumerate(alphabet)}


PAD_IDX = 0


def encode(reads, vocab):
    return [torch.tensor([vocab[c] for c in r], dtype=torch.long) for r in reads]


def collate(batch):
    seqs, labels = zip(*batch)
    tokens = pad_sequence(seqs, batch_first=True, padding_value=PAD_IDX)
    lengths = (tokens != PAD_IDX).sum(dim=1)
    return tokens, lengths, torch.tensor(labels, dtype=torch.long)


def iterate_batches(examples, batch_size, shuffle, rng=None):
    idx = list(range(len(examples)))
    if shuffle:
        rng.shuffle(idx)
    for i in range(0, len(idx), batch_size):
        yield collate([examples[j] for j in idx[i:i + batch_size]])


def load_splits():
    train_reads, train_labels = simulate_reads(2400, SEED)
    val_reads, val_labels = simulate_reads(600, SEED + 1)
    vocab = build_vocab(train_reads)
    train = list(zip(encode(train_reads, vocab), train_labels))
    val = list(zip(encode(val_reads, vocab), val_labels))
    return train, val, vocab


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class ReadClassifier(nn.Module):
    def __init__(self, vocab_size, n_classes, emb_dim=16, hidden=48):
        super().__init__()
        self.embed = nn.Embedding(vocab_size + 1, emb_dim, padding_idx=PAD_IDX)
        self.lstm = nn.LSTM(emb_dim, hidden, batch_first=True, bidirectional=True)
        self.head = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.ReLU(), nn.Linear(hidden, n_classes))

    def forward(self, tokens, lengths):
        x = self.embed(tokens)
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        _, (h_n, _) = self.lstm(packed)
        feats = torch.cat([h_n[-2], h_n[-1]], dim=-1)
        return self.head(feats)


def loss_fn(model, batch):
    tokens, lengths, labels = batch
    logits = model(tokens, lengths)
    return nn.functional.cross_entropy(logits, labels)


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR)


def build_model(vocab):
    return ReadClassifier(len(vocab), len(BARCODES))


def make_target():
    torch.manual_seed(SEED)
    train, _, vocab = load_splits()
    rng = random.Random(SEED)
    data = []
    for i, batch in enumerate(iterate_batches(train, BATCH_SIZE, shuffle=True, rng=rng)):
        data.append(batch)
        if i == 5:
            break
    return {
        "model": build_model(vocab),
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "num_classes": len(BARCODES),
        "task": "classification",
    }


@torch.no_grad()
def evaluate(model, examples):
    model.eval()
    total, correct, loss_sum = 0, 0, 0.0
    for tokens, lengths, labels in iterate_batches(examples, 256, shuffle=False):
        logits = model(tokens, lengths)
        loss_sum += nn.functional.cross_entropy(logits, labels, reduction="sum").item()
        correct += (logits.argmax(-1) == labels).sum().item()
        total += labels.numel()
    model.train()
    return loss_sum / total, correct / total


def main():
    random.seed(SEED)
    np.random.seed(SEED)
    torch.manual_seed(SEED)

    train, val, vocab = load_splits()
    print(f"vocab size: {len(vocab)}")
    print(f"train reads: {len(train)}  val reads: {len(val)}  samples: {len(BARCODES)}")
    model = build_model(vocab)
    optimizer = make_optimizer(model.parameters())
    print(f"params: {sum(p.numel() for p in model.parameters()):,}")

    rng = random.Random(SEED)
    steps_per_epoch = math.ceil(len(train) / BATCH_SIZE)
    t_start = time.time()
    for epoch in range(1, EPOCHS + 1):
        model.train()
        t0 = time.time()
        run_loss, run_correct, run_n = 0.0, 0, 0
        for batch in iterate_batches(train, BATCH_SIZE, shuffle=True, rng=rng):
            optimizer.zero_grad()
            tokens, lengths, labels = batch
            logits = model(tokens, lengths)
            loss = nn.functional.cross_entropy(logits, labels)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()
            run_loss += loss.item() * labels.numel()
            run_correct += (logits.argmax(-1) == labels).sum().item()
            run_n += labels.numel()
        val_loss, val_acc = evaluate(model, val)
        dt = time.time() - t0
        print(f"Epoch {epoch}/{EPOCHS}")
        print(f"{steps_per_epoch}/{steps_per_epoch} - {dt:.0f}s - loss: {run_loss / run_n:.4f} - "
              f"accuracy: {run_correct / run_n:.4f} - val_loss: {val_loss:.4f} - val_accuracy: {val_acc:.4f}")
    print(f"total time: {time.time() - t_start:.1f}s")


if __name__ == "__main__":
    main()
