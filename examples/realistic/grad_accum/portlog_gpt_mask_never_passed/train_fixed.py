"""
Character-level GPT on harbour-master port call logs, with gradient accumulation.
nanoGPT-style single file: config globals at the top, flat training loop.
"""
import math
import os
import time

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F

# -----------------------------------------------------------------------------
# config
out_dir = "out-portlog"
eval_interval = 40
eval_iters = 8
log_interval = 10
gradient_accumulation_steps = 4
batch_size = 16
block_size = 64
n_layer = 2
n_head = 4
n_embd = 64
dropout = 0.0
learning_rate = 2e-3
max_iters = 240
warmup_iters = 20
lr_decay_iters = 240
min_lr = 1e-4
weight_decay = 0.1
beta1, beta2 = 0.9, 0.95
grad_clip = 1.0
seed = 1337
# -----------------------------------------------------------------------------

VESSELS = ["NORDIC STAR", "MAERSK KALMAR", "EVER GIVEN", "CMA CGM RHONE", "HAFNIA LISE",
           "STENA FORTH", "MSC ANNA", "ATLANTIC SUN", "BALTIC TRADER", "OCEAN PEARL"]
PORTS = ["ROTTERDAM", "HAMBURG", "ANTWERP", "FELIXSTOWE", "GDANSK", "LE HAVRE", "BREMERHAVEN"]
STATUS = ["ARRIVED", "BERTHED", "LOADING", "DISCHARGING", "DEPARTED", "ANCHORED"]


def build_corpus(n_lines=6000, seed=0):
    rng = np.random.default_rng(seed)
    lines = []
    day, minute = 1, 0
    for _ in range(n_lines):
        minute += int(rng.integers(3, 90))
        if minute >= 1440:
            day, minute = day % 28 + 1, minute - 1440
        v = VESSELS[rng.integers(len(VESSELS))]
        lines.append(f"2024-03-{day:02d} {minute // 60:02d}:{minute % 60:02d} VESSEL={v} "
                     f"PORT={PORTS[rng.integers(len(PORTS))]} BERTH={rng.integers(1, 40):02d} "
                     f"TEU={int(rng.integers(2, 240)) * 10} STATUS={STATUS[rng.integers(len(STATUS))]}")
    return "\n".join(lines) + "\n"


text = build_corpus()
chars = sorted(set(text))
vocab_size = len(chars)
stoi = {c: i for i, c in enumerate(chars)}
data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
n = int(0.9 * len(data))
train_data, val_data = data[:n], data[n:]


def get_batch(split, gen=None):
    d = train_data if split == "train" else val_data
    ix = torch.randint(len(d) - block_size - 1, (batch_size,), generator=gen)
    x = torch.stack([d[i:i + block_size] for i in ix])
    y = torch.stack([d[i + 1:i + 1 + block_size] for i in ix])
    return x, y


class PortLogGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.drop = nn.Dropout(dropout)
        layer = nn.TransformerEncoderLayer(d_model=n_embd, nhead=n_head, dim_feedforward=4 * n_embd,
                                           dropout=dropout, activation="gelu", batch_first=True,
                                           norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, num_layers=n_layer, enable_nested_tensor=False)
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.register_buffer("causal_mask", nn.Transformer.generate_square_subsequent_mask(block_size),
                             persistent=False)
        self.apply(self._init_weights)

    def _init_weights(self, m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        x = self.blocks(x, mask=self.causal_mask[:t, :t], is_causal=True)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


def configure_optimizers(model):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=learning_rate, betas=(beta1, beta2))


def get_lr(it):
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (learning_rate - min_lr)


@torch.no_grad()
def estimate_loss(model):
    out = {}
    model.eval()
    g = torch.Generator().manual_seed(seed + 1)
    for split in ["train", "val"]:
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            X, Y = get_batch(split, g)
            _, loss = model(X, Y)
            losses[k] = loss.item()
        out[split] = losses.mean()
    model.train()
    return out


def loss_fn(model, batch):
    X, Y = batch
    _, loss = model(X, Y)
    return loss / gradient_accumulation_steps


def make_target():
    torch.manual_seed(seed)
    model = PortLogGPT()
    return {"model": model, "data": [get_batch("train") for _ in range(gradient_accumulation_steps)],
            "loss_fn": loss_fn, "optimizer": configure_optimizers(model)}


if __name__ == "__main__":
    torch.manual_seed(seed)
    tokens_per_iter = gradient_accumulation_steps * batch_size * block_size
    print(f"tokens per iteration will be: {tokens_per_iter:,}")
    print(f"found vocab_size = {vocab_size} (inside {len(text):,} chars)")
    model = PortLogGPT()
    print(f"number of parameters: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M")
    optimizer = configure_optimizers(model)
    X, Y = get_batch("train")
    t0 = time.time()
    for iter_num in range(max_iters + 1):
        lr = get_lr(iter_num)
        for pg in optimizer.param_groups:
            pg["lr"] = lr
        if iter_num % eval_interval == 0:
            losses = estimate_loss(model)
            print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
        if iter_num == max_iters:
            break
        for micro_step in range(gradient_accumulation_steps):
            _, loss = model(X, Y)
            loss = loss / gradient_accumulation_steps
            X, Y = get_batch("train")
            loss.backward()
        if grad_clip != 0.0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        t1 = time.time()
        dt, t0 = t1 - t0, t1
        if iter_num % log_interval == 0:
            lossf = loss.item() * gradient_accumulation_steps
            print(f"iter {iter_num}: loss {lossf:.4f}, time {dt * 1000:.2f}ms, lr {lr:.2e}")
