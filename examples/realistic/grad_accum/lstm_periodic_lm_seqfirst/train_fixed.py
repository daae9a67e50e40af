"""Character-level LSTM language model on synthetic periodic "telemetry" strings.

Layout follows the PyTorch word_language_model example: token tensors are
sequence-first, (seq_len, batch). Each optimizer step consumes one batch of
`batch_size` sequences, split into `accum_steps` micro-batches so the
activations fit comfortably; autocast to bf16 on CPU.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)

# ----------------------------------------------------------------------------
# config
seed = 1337
vocab = list("abcdefghijklmnopqrstuvwxyz0123456789|")
vocab_size = len(vocab)
sep_id = vocab.index("|")
seq_len = 48
batch_size = 64
accum_steps = 4
n_train_seqs = 6144
n_val_seqs = 512
emb_dim = 64
hidden_dim = 160
num_layers = 1
dropout = 0.0
epochs = 6
lr = 4e-3
min_lr = 4e-4
warmup_steps = 20
weight_decay = 0.01
grad_clip = 1.0
log_interval = 20


# ----------------------------------------------------------------------------
# data
def _bigram_table(rng, n_symbols):
    # sparse-ish transition matrix so the segments look like "words"
    logits = rng.normal(0.0, 2.0, size=(n_symbols, n_symbols))
    p = np.exp(logits)
    return p / p.sum(axis=1, keepdims=True)


def generate_corpus(n_seqs, rng, table):
    """Each record is a short segment repeated with a separator, e.g. 'k3fa9q|k3fa9q|k3f'.
    The first occurrence follows a bigram chain; every later character is a copy."""
    n_symbols = vocab_size - 1
    cdf = np.cumsum(table, axis=1)
    out = np.empty((n_seqs, seq_len + 1), dtype=np.int64)
    for i in range(n_seqs):
        seg_len = rng.integers(7, 16)
        seg = [rng.integers(n_symbols)]
        for _ in range(seg_len - 1):
            seg.append(min(int(np.searchsorted(cdf[seg[-1]], rng.random())), n_symbols - 1))
        period = seg + [sep_id]
        reps = (seq_len + 1) // len(period) + 2
        stream = (period * reps)
        offset = rng.integers(len(period))
        out[i] = stream[offset:offset + seq_len + 1]
    return torch.from_numpy(out)


def build_datasets():
    rng = np.random.default_rng(seed)
    table = _bigram_table(rng, vocab_size - 1)
    train = generate_corpus(n_train_seqs, rng, table)
    val = generate_corpus(n_val_seqs, rng, table)
    return train, val


def get_batch(source, i, bsz):
    """Rows i..i+bsz of the corpus -> (input, target), both (seq_len, bsz)."""
    chunk = source[i:i + bsz].t().contiguous()
    return chunk[:-1], chunk[1:]


def iter_microbatches(data, target, n_micro):
    for micro_data, micro_target in zip(data.chunk(n_micro, dim=1), target.chunk(n_micro, dim=1)):
        yield micro_data, micro_target


def train_batches(train_data, epoch):
    g = torch.Generator().manual_seed(seed + epoch)
    perm = torch.randperm(train_data.size(0), generator=g)
    shuffled = train_data[perm]
    for i in range(0, shuffled.size(0) - batch_size + 1, batch_size):
        yield get_batch(shuffled, i, batch_size)


# ----------------------------------------------------------------------------
# model
class RNNModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(vocab_size, emb_dim)
        self.rnn = nn.LSTM(emb_dim, hidden_dim, num_layers, dropout=dropout)
        self.decoder = nn.Linear(hidden_dim, vocab_size)
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def forward(self, src, hidden=None):
        emb = self.drop(self.encoder(src))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        return self.decoder(output), hidden


def compute_loss(model, micro_data, micro_target):
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        logits, _ = model(micro_data)
    return F.cross_entropy(logits.float().view(-1, vocab_size), micro_target.reshape(-1))


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.99), weight_decay=weight_decay)


def lr_at(step, total_steps):
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * progress))


@torch.no_grad()
def evaluate(model, val_data):
    model.eval()
    total, count = 0.0, 0
    for i in range(0, val_data.size(0), 128):
        data, target = get_batch(val_data, i, 128)
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            logits, _ = model(data)
        total += F.cross_entropy(logits.float().view(-1, vocab_size), target.reshape(-1),
                                 reduction="sum").item()
        count += target.numel()
    model.train()
    return total / count


def make_target():
    torch.manual_seed(seed)
    train_data, _ = build_datasets()
    data, target = next(train_batches(train_data, 1))
    micro = list(iter_microbatches(data, target, accum_steps))
    return {
        "model": RNNModel(),
        "data": micro,
        "loss_fn": lambda model, batch: compute_loss(model, batch[0], batch[1]),
        "make_optimizer": make_optimizer,
        "num_classes": vocab_size,
        "task": "lm",
    }


def main():
    torch.manual_seed(seed)
    train_data, val_data = build_datasets()
    model = RNNModel()
    optimizer = make_optimizer(model.parameters())
    steps_per_epoch = train_data.size(0) // batch_size
    total_steps = steps_per_epoch * epochs
    n_params = sum(p.numel() for p in model.parameters())
    print(f"| model params {n_params/1e3:.1f}K | train seqs {train_data.size(0)} | "
          f"val seqs {val_data.size(0)} | bptt {seq_len} | batch {batch_size} x accum {accum_steps}")

    step = 0
    t_start = time.time()
    for epoch in range(1, epochs + 1):
        model.train()
        epoch_start = time.time()
        log_start = time.time()
        running = 0.0
        for batch_idx, (data, target) in enumerate(train_batches(train_data, epoch)):
            for g in optimizer.param_groups:
                g["lr"] = lr_at(step, total_steps)
            optimizer.zero_grad(set_to_none=True)
            batch_loss = 0.0
            for micro_data, micro_target in iter_microbatches(data, target, accum_steps):
                loss = compute_loss(model, micro_data, micro_target) / accum_steps
                loss.backward()
                batch_loss += loss.item()
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
            optimizer.step()
            step += 1
            running += batch_loss
            if (batch_idx + 1) % log_interval == 0:
                cur = running / log_interval
                ms = (time.time() - log_start) * 1000 / log_interval
                print(f"| epoch {epoch:3d} | {batch_idx + 1:5d}/{steps_per_epoch:5d} batches | "
                      f"lr {optimizer.param_groups[0]['lr']:.2e} | ms/batch {ms:6.2f} | "
                      f"loss {cur:5.2f} | ppl {math.exp(cur):8.2f}")
                running = 0.0
                log_start = time.time()
        val_loss = evaluate(model, val_data)
        print("-" * 89)
        print(f"| end of epoch {epoch:3d} | time: {time.time() - epoch_start:5.2f}s | "
              f"valid loss {val_loss:5.2f} | valid ppl {math.exp(val_loss):8.2f}")
        print("-" * 89)
    print(f"| done | total time {time.time() - t_start:.1f}s")


if __name__ == "__main__":
    main()
