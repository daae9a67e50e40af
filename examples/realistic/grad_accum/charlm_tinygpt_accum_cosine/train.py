"""Tiny character-level GPT on a synthetic ship's-log corpus.

nanoGPT-style loop: micro-batches of 12 x 64 chars, 4 gradient accumulation
steps per iteration, bf16 autocast on CPU, AdamW with warmup + cosine decay
and grad clipping at 1.0.
"""
import math
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# ----------------------------------------------------------------------------
seed = 1337
out_dir = os.path.dirname(os.path.abspath(__file__))
corpus_path = os.path.join(out_dir, "shiplog.txt")
block_size = 64
batch_size = 12                 # micro-batch
gradient_accumulation_steps = 4
n_layer, n_head, n_embd = 2, 4, 64
dropout = 0.2
max_iters = 150
learning_rate = 3e-3
min_lr = 3e-4
warmup_iters = 15
lr_decay_iters = 150
weight_decay = 0.1
beta1, beta2 = 0.9, 0.95
grad_clip = 1.0
eval_interval = 30
eval_iters = 8
log_interval = 10
ptdtype = torch.bfloat16

torch.set_num_threads(1)


# ---------------------------------------------------------------- corpus
SHIPS = ["Albatross", "Marguerite", "North Star", "Kestrel", "Dauntless", "Perseverance"]
PORTS = ["Lisbon", "Bristol", "Valparaiso", "Halifax", "Cape Town", "Bergen", "Macau"]
WINDS = ["N", "NE", "E", "SE", "S", "SW", "W", "NW"]
WEATHER = ["fair", "overcast", "squalls", "fog", "heavy rain", "clear skies", "light drizzle"]
EVENTS = [
    "sighted a whale off the {side} bow",
    "hands employed repairing the {part}",
    "reefed the {part} as the wind freshened",
    "spoke the brig {ship} bound for {port}",
    "divine service held on deck",
    "one man sick, excused duty",
    "sounded, {n} fathoms, sandy bottom",
    "lost sight of land at {h} bells",
]
PARTS = ["mainsail", "foretopsail", "jib", "mizzen", "rigging", "longboat"]


def _log_entry(rng, day):
    ship = SHIPS[rng.integers(len(SHIPS))]
    lat = rng.integers(0, 60)
    lon = rng.integers(0, 90)
    ev = EVENTS[rng.integers(len(EVENTS))].format(
        side=["port", "starboard"][rng.integers(2)],
        part=PARTS[rng.integers(len(PARTS))],
        ship=SHIPS[rng.integers(len(SHIPS))],
        port=PORTS[rng.integers(len(PORTS))],
        n=rng.integers(5, 40),
        h=rng.integers(1, 9),
    )
    return (
        f"Day {day}. {ship}, lat {lat} {'NS'[rng.integers(2)]}, lon {lon} {'EW'[rng.integers(2)]}. "
        f"Wind {WINDS[rng.integers(len(WINDS))]}, {WEATHER[rng.integers(len(WEATHER))]}. "
        f"Made {rng.integers(40, 220)} miles. {ev.capitalize()}.\n"
    )


def ensure_corpus(path=corpus_path, n_entries=4000):
    if not os.path.exists(path):
        rng = np.random.default_rng(seed)
        with open(path, "w") as f:
            for d in range(n_entries):
                f.write(_log_entry(rng, d % 365 + 1))
    with open(path) as f:
        return f.read()


def prepare_data():
    text = ensure_corpus()
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    n = int(0.9 * len(data))
    return data[:n], data[n:], len(chars)


def get_batch(data, gen):
    ix = torch.randint(len(data) - block_size - 1, (batch_size,), generator=gen)
    x = torch.stack([data[i:i + block_size] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + block_size] for i in ix])
    return x, y


# ---------------------------------------------------------------- model
class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(n_embd, dim=2)
        q = q.view(B, T, n_head, C // n_head).transpose(1, 2)
        k = k.view(B, T, n_head, C // n_head).transpose(1, 2)
        v = v.view(B, T, n_head, C // n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=dropout if self.training else 0.0)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(n_embd, 4 * n_embd), nn.GELU(),
            nn.Linear(4 * n_embd, n_embd), nn.Dropout(dropout),
        )

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList([Block() for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight") or pn.endswith("mlp.2.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    def _init_weights(self, m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def forward(self, idx):
        T = idx.shape[1]
        pos = torch.arange(T, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for blk in self.h:
            x = blk(x)
        return self.lm_head(self.ln_f(x))


def compute_loss(model, batch):
    x, y = batch
    with torch.autocast(device_type="cpu", dtype=ptdtype):
        logits = model(x)
    return F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.view(-1))


def make_optimizer(params):
    params = [p for p in params if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=learning_rate, betas=(beta1, beta2))


def get_lr(it):
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * ratio))
    return min_lr + coeff * (learning_rate - min_lr)


@torch.no_grad()
def estimate_loss(model, splits, gen):
    out = {}
    model.eval()
    for name, data in splits.items():
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            losses[k] = compute_loss(model, get_batch(data, gen)).item()
        out[name] = losses.mean().item()
    model.train()
    return out


def make_target():
    torch.manual_seed(seed)
    train_data, _, vocab_size = prepare_data()
    gen = torch.Generator().manual_seed(seed)
    return {
        "model": GPT(vocab_size),
        "data": [get_batch(train_data, gen) for _ in range(gradient_accumulation_steps)],
        "loss_fn": compute_loss,
        "make_optimizer": make_optimizer,
        "num_classes": vocab_size,
        "task": "lm",
    }


# ---------------------------------------------------------------- train
def main():
    torch.manual_seed(seed)
    train_data, val_data, vocab_size = prepare_data()
    print(f"vocab size {vocab_size}, train tokens {len(train_data):,}, val tokens {len(val_data):,}")
    tokens_per_iter = gradient_accumulation_steps * batch_size * block_size
    print(f"tokens per iteration will be: {tokens_per_iter:,}")
    model = GPT(vocab_size)
    n_params = sum(p.numel() for p in model.parameters()) - model.wpe.weight.numel()
    print(f"number of parameters: {n_params / 1e6:.2f}M")
    optimizer = make_optimizer(model.parameters())
    train_gen = torch.Generator().manual_seed(seed)
    eval_gen = torch.Generator().manual_seed(seed + 1)

    model.train()
    t0 = time.time()
    for it in range(max_iters + 1):
        lr = get_lr(it)
        for pg in optimizer.param_groups:
            pg["lr"] = lr

        if it % eval_interval == 0:
            losses = estimate_loss(model, {"train": train_data, "val": val_data}, eval_gen)
            print(f"step {it}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
        if it == max_iters:
            break

        for micro_step in range(gradient_accumulation_steps):
            loss = compute_loss(model, get_batch(train_data, train_gen))
            loss = loss / gradient_accumulation_steps
            loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

        t1 = time.time()
        dt, t0 = t1 - t0, t1
        if it % log_interval == 0:
            lossf = loss.item() * gradient_accumulation_steps
            print(f"iter {it}: loss {lossf:.4f}, norm {norm:.2f}, lr {lr:.2e}, time {dt * 1000:.2f}ms")


if __name__ == "__main__":
    main()
