"""Character-level GRU language model on procedurally generated names.

Names come from a fixed second-order Markov chain over 26 letters (a stand-in
for a real name list), so they are short and of variable length. Each batch
is padded to its longest name; the GRU consumes packed sequences and padded
target positions are ignored in the loss.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

# -----------------------------------------------------------------------------
# config
seed = 2024
n_train_names = 12000
n_val_names = 1500
min_len, max_len = 3, 10
batch_size = 64
max_iters = 900
eval_interval = 150
log_interval = 50
n_embd = 48
n_hidden = 128
n_layer = 2
dropout = 0.3
learning_rate = 3e-3
min_lr = 3e-4
warmup_iters = 60
weight_decay = 0.01
grad_clip = 1.0
# -----------------------------------------------------------------------------

PAD, BOS, EOS = 0, 1, 2
LETTERS = "abcdefghijklmnopqrstuvwxyz"
stoi = {ch: i + 3 for i, ch in enumerate(LETTERS)}
itos = {i: ch for ch, i in stoi.items()}
vocab_size = len(LETTERS) + 3


def build_chain(rng):
    """Transition table P(next | prev2, prev1) over letters + EOS.

    Index 0 of the context stands for BOS; column 0 of the output is EOS.
    The table mixes a bigram term (on prev1) with a skip-gram term (on prev2);
    a sparse Dirichlet keeps each row peaked on a handful of letters.
    """
    n = len(LETTERS) + 1
    bigram = rng.dirichlet(np.full(n, 0.08), size=n)
    skip = rng.dirichlet(np.full(n, 0.08), size=n)
    probs = 0.65 * bigram[None, :, :] + 0.35 * skip[:, None, :]
    return probs


def sample_name(rng, chain):
    prev2, prev1, out = 0, 0, []
    while True:
        p = chain[prev2, prev1].copy()
        if len(out) < min_len:
            p[0] = 0.0
        if len(out) >= max_len:
            break
        p /= p.sum()
        nxt = rng.choice(len(p), p=p)
        if nxt == 0:
            break
        out.append(LETTERS[nxt - 1])
        prev2, prev1 = prev1, nxt
    return "".join(out)


def load_names():
    rng = np.random.default_rng(seed)
    chain = build_chain(rng)
    # like a real name list: keep each distinct name once, then split
    names, seen = [], set()
    while len(names) < n_train_names + n_val_names:
        name = sample_name(rng, chain)
        if name not in seen:
            seen.add(name)
            names.append(name)
    return names[:n_train_names], names[n_train_names:]


def encode(name):
    return [stoi[c] for c in name]


def make_batch(names):
    """(inputs, targets, lengths): inputs start with BOS, targets end with EOS."""
    seqs = [encode(n) for n in names]
    lengths = torch.tensor([len(s) + 1 for s in seqs])
    T = int(lengths.max())
    x = torch.full((len(seqs), T), PAD, dtype=torch.long)
    y = torch.full((len(seqs), T), PAD, dtype=torch.long)
    for i, s in enumerate(seqs):
        x[i, : len(s) + 1] = torch.tensor([BOS] + s)
        y[i, : len(s) + 1] = torch.tensor(s + [EOS])
    return x, y, lengths


class BatchSampler:
    def __init__(self, names, batch_size, seed):
        self.names = names
        self.batch_size = batch_size
        self.gen = np.random.default_rng(seed)

    def __call__(self):
        idx = self.gen.integers(0, len(self.names), size=self.batch_size)
        return make_batch([self.names[i] for i in idx])


class CharGRU(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd, padding_idx=PAD)
        self.rnn = nn.GRU(n_embd, n_hidden, num_layers=n_layer, batch_first=True,
                          dropout=dropout if n_layer > 1 else 0.0)
        self.drop = nn.Dropout(dropout)
        self.lm_head = nn.Linear(n_hidden, vocab_size)

    def forward(self, idx, lengths, targets=None):
        x = self.drop(self.wte(idx))
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        h, _ = self.rnn(packed)
        h, _ = pad_packed_sequence(h, batch_first=True, total_length=idx.size(1))
        logits = self.lm_head(self.drop(h))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, vocab_size), targets.view(-1), ignore_index=PAD)
        return logits, loss


def lm_loss(model, batch):
    x, y, lengths = batch
    _, loss = model(x, lengths, y)
    return loss


def configure_optimizer(params):
    params = list(params)
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=learning_rate, betas=(0.9, 0.99))


def get_lr(it):
    if it < warmup_iters:
        return learning_rate * (it + 1) / warmup_iters
    ratio = (it - warmup_iters) / max(1, max_iters - warmup_iters)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (learning_rate - min_lr)


@torch.no_grad()
def val_loss(model, names):
    model.eval()
    tot, ntok = 0.0, 0
    for i in range(0, len(names), 256):
        x, y, lengths = make_batch(names[i:i + 256])
        logits, _ = model(x, lengths)
        tot += F.cross_entropy(logits.view(-1, vocab_size), y.view(-1),
                               ignore_index=PAD, reduction="sum").item()
        ntok += int((y != PAD).sum())
    model.train()
    return tot / ntok


@torch.no_grad()
def sample(model, n=5, gen=None):
    model.eval()
    out = []
    for _ in range(n):
        idx, h, s = torch.tensor([[BOS]]), None, ""
        for _ in range(max_len + 1):
            e = model.wte(idx)
            o, h = model.rnn(e, h)
            p = F.softmax(model.lm_head(o[:, -1]), dim=-1)
            nxt = int(torch.multinomial(p, 1, generator=gen))
            if nxt in (EOS, PAD, BOS):
                break
            s += itos[nxt]
            idx = torch.tensor([[nxt]])
        out.append(s)
    model.train()
    return out


def make_target():
    torch.manual_seed(seed)
    train_names, _ = load_names()
    get_batch = BatchSampler(train_names, batch_size, seed)
    return {
        "model": CharGRU(),
        "data": [get_batch() for _ in range(5)],
        "loss_fn": lm_loss,
        "make_optimizer": configure_optimizer,
        "task": "lm",
    }


def main():
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    train_names, val_names = load_names()
    print(f"train names: {len(train_names)}, val names: {len(val_names)}, vocab: {vocab_size}")
    print("examples:", ", ".join(train_names[:8]))

    model = CharGRU()
    optimizer = configure_optimizer(model.parameters())
    get_batch = BatchSampler(train_names, batch_size, seed)
    print(f"number of parameters: {sum(p.numel() for p in model.parameters()) / 1e3:.1f}K")

    recent = []
    t0 = time.time()
    for it in range(max_iters + 1):
        lr = get_lr(it)
        for g in optimizer.param_groups:
            g["lr"] = lr

        if it % eval_interval == 0:
            if recent:
                print(f"step {it}: train loss {sum(recent) / len(recent):.4f}, val loss {val_loss(model, val_names):.4f}")
            else:
                print(f"step {it}: val loss {val_loss(model, val_names):.4f}")
            recent = []
        if it == max_iters:
            break

        loss = lm_loss(model, get_batch())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        recent.append(loss.item())

        t1 = time.time()
        if it % log_interval == 0:
            print(f"iter {it}: loss {loss.item():.4f}, lr {lr:.2e}, time {(t1 - t0) * 1000:.2f}ms")
        t0 = t1

    gen = torch.Generator().manual_seed(seed)
    print("samples:", ", ".join(sample(model, 8, gen)))


if __name__ == "__main__":
    main()
