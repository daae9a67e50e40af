"""Tiny GPT on synthetic arithmetic strings ("417+58=475;"), variable length,
right-padded per micro-batch.

Gradient accumulation normalises by the number of real target tokens in the
whole accumulation window (not per micro-batch), so long and short micro-batches
are weighted the same way a single big batch would weight them.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)

# -----------------------------------------------------------------------------
seed = 42
chars = list("0123456789+-=;")
PAD = 0                      # id 0 is reserved for padding
stoi = {c: i + 1 for i, c in enumerate(chars)}
itos = {i: c for c, i in stoi.items()}
vocab_size = len(chars) + 1
IGNORE = -100

n_layer, n_head, n_embd = 2, 4, 96
block_size = 24
dropout = 0.1
micro_batch_size = 32
gradient_accumulation_steps = 4
max_iters = 300
learning_rate = 2e-3
min_lr = 2e-4
warmup_iters = 30
weight_decay = 0.1
grad_clip = 1.0
eval_interval = 50
log_interval = 10
n_train, n_val = 40000, 2000


# -----------------------------------------------------------------------------
def gen_expr(rng):
    a = int(rng.integers(0, 10 ** rng.integers(1, 4)))
    b = int(rng.integers(0, 10 ** rng.integers(1, 4)))
    if rng.random() < 0.5:
        return f"{a}+{b}={a + b};"
    return f"{a}-{b}={a - b};"


def build_corpus():
    rng = np.random.default_rng(seed)
    train = [gen_expr(rng) for _ in range(n_train)]
    val = [gen_expr(rng) for _ in range(n_val)]
    return train, val


def collate(strings):
    """Right-pad a list of strings -> (x, y) with y = x shifted by one, padding ignored."""
    enc = [[stoi[c] for c in s][:block_size + 1] for s in strings]
    T = max(len(e) for e in enc) - 1
    x = torch.full((len(enc), T), PAD, dtype=torch.long)
    y = torch.full((len(enc), T), IGNORE, dtype=torch.long)
    for i, e in enumerate(enc):
        t = torch.tensor(e)
        x[i, :len(e) - 1] = t[:-1]
        y[i, :len(e) - 1] = t[1:]
    return x, y


def accumulation_windows(corpus, rng):
    """Yields one optimizer step worth of micro-batches: a list of (x, y, window_tokens)."""
    per_step = micro_batch_size * gradient_accumulation_steps
    while True:
        idx = rng.permutation(len(corpus))
        for s in range(0, len(idx) - per_step + 1, per_step):
            micro = [collate([corpus[j] for j in idx[s + k * micro_batch_size:
                                                       s + (k + 1) * micro_batch_size]])
                     for k in range(gradient_accumulation_steps)]
            window_tokens = sum(int((y != IGNORE).sum()) for _, y in micro)
            yield [(x, y, window_tokens) for x, y in micro]


# -----------------------------------------------------------------------------
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(),
                                 nn.Linear(4 * n_embd, n_embd), nn.Dropout(dropout))
        self.resid_drop = nn.Dropout(dropout)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(n_embd, dim=2)
        q, k, v = (t.view(B, T, n_head, C // n_head).transpose(1, 2) for t in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                             dropout_p=dropout if self.training else 0.0)
        att = att.transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.resid_drop(self.c_proj(att))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList([Block() for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight
        self.apply(self._init_weights)

    def _init_weights(self, m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, 0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, 0.0, 0.02)

    def forward(self, idx):
        T = idx.size(1)
        x = self.drop(self.wte(idx) + self.wpe(torch.arange(T)))
        for blk in self.blocks:
            x = blk(x)
        return self.lm_head(self.ln_f(x))


def compute_loss(model, batch):
    x, y, window_tokens = batch
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        logits = model(x)
    loss_sum = F.cross_entropy(logits.float().view(-1, vocab_size), y.view(-1),
                               ignore_index=IGNORE, reduction="sum")
    return loss_sum / window_tokens


def make_optimizer(params):
    params = [p for p in params if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=learning_rate, betas=(0.9, 0.95))


def get_lr(it):
    if it < warmup_iters:
        return learning_rate * (it + 1) / warmup_iters
    ratio = (it - warmup_iters) / (max_iters - warmup_iters)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (learning_rate - min_lr)


@torch.no_grad()
def estimate_val_loss(model, val):
    model.eval()
    tot, n = 0.0, 0
    for s in range(0, len(val), 250):
        x, y = collate(val[s:s + 250])
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            logits = model(x)
        tot += F.cross_entropy(logits.float().view(-1, vocab_size), y.view(-1),
                               ignore_index=IGNORE, reduction="sum").item()
        n += int((y != IGNORE).sum())
    model.train()
    return tot / n


def make_target():
    torch.manual_seed(seed)
    train, _ = build_corpus()
    windows = accumulation_windows(train, np.random.default_rng(seed))
    data = next(windows) + next(windows)
    return {
        "model": GPT(),
        "data": data,
        "loss_fn": compute_loss,
        "make_optimizer": make_optimizer,
        "num_classes": vocab_size,
        "task": "lm",
    }


def main():
    torch.manual_seed(seed)
    train, val = build_corpus()
    windows = accumulation_windows(train, np.random.default_rng(seed))
    model = GPT()
    optimizer = make_optimizer(model.parameters())
    print(f"number of parameters: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M")
    print(f"tokens per iteration will be: ~{micro_batch_size * gradient_accumulation_steps} sequences "
          f"({micro_batch_size} x {gradient_accumulation_steps} micro-steps)")

    t0 = time.time()
    for it in range(max_iters + 1):
        lr = get_lr(min(it, max_iters - 1))
        for g in optimizer.param_groups:
            g["lr"] = lr

        if it % eval_interval == 0:
            print(f"step {it}: val loss {estimate_val_loss(model, val):.4f}")
        if it == max_iters:
            break

        window = next(windows)
        step_loss = 0.0
        for batch in window:
            loss = compute_loss(model, batch)
            loss.backward()
            step_loss += loss.item()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

        t1 = time.time()
        dt, t0 = t1 - t0, t1
        if it % log_interval == 0:
            print(f"iter {it}: loss {step_loss:.4f}, norm {grad_norm:.4f}, lr {lr:.2e}, "
                  f"tokens {window[0][2]}, time {dt * 1000:.2f}ms")


if __name__ == "__main__":
    main()
