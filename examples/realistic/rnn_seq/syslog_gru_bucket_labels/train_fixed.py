"""Classify service-log event sequences into incident types with a GRU.

Each session is a variable-length sequence of log-template ids (the output of a
log parser). Sessions that ended in an incident contain that incident's event
signature somewhere in the stream, mixed with background chatter. Batches are
length-bucketed so the GRU does not spend most of its time on padding.
"""
import logging
import math
import random
import sys
import time

import numpy as np
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_sequence

logging.basicConfig(format="%(asctime)s %(levelname)s %(message)s", level=logging.INFO, stream=sys.stdout)
log = logging.getLogger("syslog_gru")

CLASSES = ["normal", "disk_full", "net_partition", "oom_kill"]
N_TEMPLATES = 60          # template ids 1..60, 0 is padding
PAD = 0
SIGNATURES = {            # ordered event chains that precede each incident
    1: [7, 23, 41],
    2: [12, 23, 55],
    3: [7, 31, 48],
}

CFG = dict(
    seed=1234,
    n_train=3000,
    n_val=600,
    min_len=16,
    max_len=110,
    emb_dim=32,
    hidden=64,
    batch_size=48,
    lr=3e-3,
    weight_decay=1e-4,
    epochs=14,
    clip=1.0,
    log_every=25,
)


def make_sessions(n, rng):
    """Synthetic parsed-log sessions: list of id lists plus incident labels."""
    weights = 1.0 / np.arange(1, N_TEMPLATES + 1) ** 0.8
    weights /= weights.sum()
    seqs, labels = [], []
    for _ in range(n):
        label = int(rng.integers(len(CLASSES)))
        length = int(rng.integers(CFG["min_len"], CFG["max_len"] + 1))
        seq = list(rng.choice(np.arange(1, N_TEMPLATES + 1), size=length, p=weights))
        if label == 0:
            # healthy sessions still emit some of the same templates, just not the chain
            chain = list(rng.choice([7, 12, 23, 31, 41, 48, 55], size=2, replace=False))
        else:
            chain = SIGNATURES[label]
        pos = sorted(rng.choice(length, size=len(chain), replace=False))
        for p, ev in zip(pos, chain):
            seq[p] = int(ev)
        seqs.append([int(t) for t in seq])
        labels.append(label)
    return seqs, labels


def bucket_batches(seqs, labels, batch_size):
    """Group sessions of similar length into padded batches."""
    seqs, labels = map(list, zip(*sorted(zip(seqs, labels), key=lambda p: len(p[0]))))
    batches = []
    for start in range(0, len(seqs), batch_size):
        chunk = seqs[start:start + batch_size]
        lengths = torch.tensor([len(s) for s in chunk])
        x = pad_sequence([torch.tensor(s) for s in chunk], batch_first=True, padding_value=PAD)
        y = torch.tensor(labels[start:start + batch_size])
        batches.append((x, lengths, y))
    return batches


class SessionGRU(nn.Module):
    def __init__(self, vocab, emb_dim, hidden, n_classes):
        super().__init__()
        self.emb = nn.Embedding(vocab, emb_dim, padding_idx=PAD)
        self.gru = nn.GRU(emb_dim, hidden, batch_first=True)
        self.head = nn.Sequential(nn.Dropout(0.1), nn.Linear(hidden, n_classes))

    def forward(self, x, lengths):
        packed = pack_padded_sequence(self.emb(x), lengths, batch_first=True, enforce_sorted=False)
        _, h_n = self.gru(packed)
        return self.head(h_n[-1])


criterion = nn.CrossEntropyLoss()


def compute_loss(model, batch):
    x, lengths, y = batch
    return criterion(model(x, lengths), y)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=CFG["lr"], weight_decay=CFG["weight_decay"])


def build_data():
    rng = np.random.default_rng(CFG["seed"])
    tr_seqs, tr_labels = make_sessions(CFG["n_train"], rng)
    va_seqs, va_labels = make_sessions(CFG["n_val"], rng)
    train_batches = bucket_batches(tr_seqs, tr_labels, CFG["batch_size"])
    val_batches = bucket_batches(va_seqs, va_labels, 128)
    return train_batches, val_batches


def build_model():
    torch.manual_seed(CFG["seed"])
    return SessionGRU(N_TEMPLATES + 1, CFG["emb_dim"], CFG["hidden"], len(CLASSES))


@torch.no_grad()
def evaluate(model, batches):
    model.eval()
    total, correct, n = 0.0, 0, 0
    for x, lengths, y in batches:
        logits = model(x, lengths)
        total += criterion(logits, y).item() * len(y)
        correct += (logits.argmax(1) == y).sum().item()
        n += len(y)
    model.train()
    return total / n, correct / n


def make_target():
    train_batches, _ = build_data()
    model = build_model()
    return {
        "model": model,
        "batch": train_batches[0],
        "data": train_batches[:3],
        "loss_fn": compute_loss,
        "optimizer": make_optimizer(model.parameters()),
        "make_optimizer": make_optimizer,
        "num_classes": len(CLASSES),
        "task": "classification",
    }


def main():
    random.seed(CFG["seed"])
    train_batches, val_batches = build_data()
    model = build_model()
    opt = make_optimizer(model.parameters())
    n_params = sum(p.numel() for p in model.parameters())
    log.info("train sessions=%d val sessions=%d batches/epoch=%d params=%d",
             CFG["n_train"], CFG["n_val"], len(train_batches), n_params)
    log.info("config %s", CFG)

    step = 0
    t0 = time.time()
    for epoch in range(1, CFG["epochs"] + 1):
        order = list(range(len(train_batches)))
        random.shuffle(order)
        running, seen = 0.0, 0
        for bi in order:
            batch = train_batches[bi]
            loss = compute_loss(model, batch)
            opt.zero_grad()
            loss.backward()
            gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), CFG["clip"])
            opt.step()
            step += 1
            running += loss.item() * len(batch[2])
            seen += len(batch[2])
            if step % CFG["log_every"] == 0:
                log.info("epoch %d step %d loss=%.4f grad_norm=%.3f", epoch, step, loss.item(), gnorm)
        val_loss, val_acc = evaluate(model, val_batches)
        log.info("epoch %d train_loss=%.4f val_loss=%.4f val_acc=%.3f elapsed=%.1fs",
                 epoch, running / seen, val_loss, val_acc, time.time() - t0)
    log.info("done: final val_acc=%.3f (chance %.3f)", val_acc, 1.0 / len(CLASSES))


if __name__ == "__main__":
    main()
