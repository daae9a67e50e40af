"""
Tiny GPT on a synthetic "weather station telegram" token stream.
nanoGPT-style single file: data is generated in-process by a fixed-seed order-1
Markov source over 48 symbols, so the best achievable loss is known exactly.
"""
import math
import os
import time
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F

# -----------------------------------------------------------------------------
# config (override on the command line as in nanoGPT: python train.py max_iters=600)
out_dir = "out-telegram"
eval_interval = 100
log_interval = 20
eval_iters = 20
batch_size = 32
block_size = 32
n_layer = 2
n_head = 4
n_embd = 64
dropout = 0.0
learning_rate = 2e-3
max_iters = 600
warmup_iters = 50
lr_decay_iters = 600
min_lr = 2e-4
weight_decay = 0.1
beta1, beta2 = 0.9, 0.99
grad_clip = 1.0
seed = 1337
vocab_size = 48
n_tokens = 300_000
# -----------------------------------------------------------------------------


def make_source(seed=0):
    """Random sparse transition matrix: each symbol has ~12 plausible successors."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(vocab_size, vocab_size, generator=g) * 2.0
    keep = torch.rand(vocab_size, vocab_size, generator=g) < 12 / vocab_size
    keep[torch.arange(vocab_size), torch.randint(vocab_size, (vocab_size,), generator=g)] = True
    P = torch.softmax(logits.masked_fill(~keep, -1e9), dim=1)
    return P


def entropy_rate(P):
    pi = torch.full((vocab_size,), 1.0 / vocab_size)
    for _ in range(500):
        pi = pi @ P
    row_h = -(P * torch.log(P.clamp_min(1e-30))).sum(1)
    return (pi * row_h).sum().item()


def sample_stream(P, n, seed=1):
    g = torch.Generator().manual_seed(seed)
    out = torch.empty(n, dtype=torch.long)
    s = 0
    u = torch.rand(n, generator=g)
    cdf = P.cumsum(1)
    for i in range(n):
        s = min(int(torch.searchsorted(cdf[s], u[i]).item()), vocab_size - 1)
        out[i] = s
    return out


def prepare_data():
    P = make_source()
    data = sample_stream(P, n_tokens)
    n = int(0.9 * len(data))
    return data[:n], data[n:], entropy_rate(P)


def get_batch(split, train_data, val_data, gen=None):
    data = train_data if split == "train" else val_data
    ix = torch.randint(len(data) - block_size, (batch_size,), generator=gen)
    x = torch.stack([data[i:i + block_size] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + block_size] for i in ix])
    return x, y


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head, self.n_embd, self.dropout = config.n_head, config.n_embd, config.dropout

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None,
                                           dropout_p=self.dropout if self.training else 0, is_causal=False)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


@dataclass
class GPTConfig:
    block_size: int = 32
    vocab_size: int = 48
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    dropout: float = 0.0
    bias: bool = False


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=nn.LayerNorm(config.n_embd)))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss

    def configure_optimizers(self, weight_decay, learning_rate, betas):
        params = [p for p in self.parameters() if p.requires_grad]
        decay = [p for p in params if p.dim() >= 2]
        nodecay = [p for p in params if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": weight_decay}, {"params": nodecay, "weight_decay": 0.0}]
        print(f"num decayed parameter tensors: {len(decay)}, with {sum(p.numel() for p in decay):,} parameters")
        print(f"num non-decayed parameter tensors: {len(nodecay)}, with {sum(p.numel() for p in nodecay):,} parameters")
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas)


def model_config():
    return GPTConfig(block_size=block_size, vocab_size=vocab_size, n_layer=n_layer, n_head=n_head,
                     n_embd=n_embd, dropout=dropout)


def get_lr(it):
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return min_lr + coeff * (learning_rate - min_lr)


def make_target():
    torch.manual_seed(seed)
    train_data, val_data, _ = prepare_data()
    model = GPT(model_config())
    data = [get_batch("train", train_data, val_data) for _ in range(4)]

    def loss_fn(model, batch):
        x, y = batch
        return model(x, y)[1]

    def make_optimizer(params):
        return torch.optim.AdamW(params, lr=learning_rate, betas=(beta1, beta2), weight_decay=weight_decay)

    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model.parameters()), "make_optimizer": make_optimizer, "task": "lm"}


def main():
    torch.set_num_threads(1)  # cpu run
    import sys
    for arg in sys.argv[1:]:
        key, val = arg.split("=")
        globals()[key] = type(globals()[key])(val)
    torch.manual_seed(seed)
    t0 = time.time()
    train_data, val_data, h = prepare_data()
    print(f"generated {n_tokens:,} tokens (vocab {vocab_size}) in {time.time() - t0:.1f}s; "
          f"train has {len(train_data):,} tokens, val has {len(val_data):,} tokens")
    print(f"source entropy rate: {h:.4f} nats/token")
    model = GPT(model_config())
    print(f"number of parameters: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M")
    optimizer = model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2))

    @torch.no_grad()
    def estimate_loss():
        out = {}
        model.eval()
        for split in ["train", "val"]:
            losses = torch.zeros(eval_iters)
            for k in range(eval_iters):
                X, Y = get_batch(split, train_data, val_data)
                losses[k] = model(X, Y)[1].item()
            out[split] = losses.mean()
        model.train()
        return out

    X, Y = get_batch("train", train_data, val_data)
    t0 = time.time()
    for iter_num in range(max_iters + 1):
        lr = get_lr(iter_num)
        for group in optimizer.param_groups:
            group["lr"] = lr
        if iter_num % eval_interval == 0:
            losses = estimate_loss()
            print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
        if iter_num == max_iters:
            break
        logits, loss = model(X, Y)
        X, Y = get_batch("train", train_data, val_data)
        loss.backward()
        if grad_clip != 0.0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        t1 = time.time()
        dt, t0 = t1 - t0, t1
        if iter_num % log_interval == 0:
            print(f"iter {iter_num}: loss {loss.item():.4f}, time {dt * 1000:.2f}ms, lr {lr:.2e}")


if __name__ == "__main__":
    main()
