"""
Tiny character-level GPT on a synthetic recipe corpus.

Loosely follows nanoGPT's train.py: a single file, a config block, a GPT with
pre-LN blocks and weight tying, AdamW with decoupled weight decay on 2D params,
linear warmup + cosine decay, gradient accumulation and bf16 autocast.
"""
import argparse
import math
import os
import random
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# -----------------------------------------------------------------------------
# config
batch_size = 8                    # micro-batch size
block_size = 32
gradient_accumulation_steps = 4
n_layer = 2
n_head = 4
n_embd = 48
dropout = 0.0
bias = False
learning_rate = 3e-3
max_iters = 200
warmup_iters = 20
lr_decay_iters = 200
min_lr = 3e-4
weight_decay = 0.1
beta1, beta2 = 0.9, 0.99
grad_clip = 1.0
eval_interval = 50
eval_iters = 10
log_interval = 10
seed = 1337
dtype = "bfloat16"
device = "cpu"
# -----------------------------------------------------------------------------

ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
ctx = torch.autocast(device_type="cpu", dtype=ptdtype, enabled=(dtype == "bfloat16"))

INGREDIENTS = ["flour", "sugar", "butter", "milk", "eggs", "salt", "rice", "onion", "garlic", "basil"]
VERBS = ["mix", "stir", "whisk", "fold", "chop", "boil", "bake", "fry"]


def build_corpus(n_lines=6000, rng_seed=0):
    rng = random.Random(rng_seed)
    lines = []
    for _ in range(n_lines):
        kind = rng.random()
        if kind < 0.4:
            lines.append(f"add {rng.randint(1, 950)} g {rng.choice(INGREDIENTS)}.")
        elif kind < 0.8:
            lines.append(f"{rng.choice(VERBS)} the {rng.choice(INGREDIENTS)} for {rng.randint(2, 95)} min at {rng.randint(100, 250)}c.")
        else:
            lines.append(f"serve with {rng.choice(INGREDIENTS)} and {rng.choice(INGREDIENTS)}.")
    return "\n".join(lines) + "\n"


def get_data():
    text = build_corpus()
    chars = sorted(set(text))
    stoi = {ch: i for i, ch in enumerate(chars)}
    itos = {i: ch for ch, i in stoi.items()}
    data = np.array([stoi[c] for c in text], dtype=np.int64)
    n = int(0.9 * len(data))
    return data[:n], data[n:], stoi, itos


def get_batch(data, gen):
    ix = torch.randint(len(data) - block_size - 1, (batch_size,), generator=gen)
    x = torch.stack([torch.from_numpy(data[i:i + block_size]) for i in ix.tolist()])
    y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + block_size]) for i in ix.tolist()])
    return x, y


class LayerNorm(nn.Module):
    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.n_head = n_head
        # causal mask to ensure that attention is only applied to the left in the input sequence
        self.register_buffer("bias", torch.triu(torch.ones(block_size, block_size))
                             .view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd, bias=bias)
        self.c_proj = nn.Linear(4 * n_embd, n_embd, bias=bias)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = LayerNorm(n_embd, bias)
        self.attn = CausalSelfAttention()
        self.ln_2 = LayerNorm(n_embd, bias)
        self.mlp = MLP()

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, vocab_size):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList([Block() for _ in range(n_layer)])
        self.ln_f = LayerNorm(n_embd, bias)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        B, T = idx.size()
        pos = torch.arange(0, T, dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss

    def configure_optimizers(self, weight_decay, learning_rate, betas):
        params = [p for p in self.parameters() if p.requires_grad]
        decay = [p for p in params if p.dim() >= 2]
        nodecay = [p for p in params if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": weight_decay},
                  {"params": nodecay, "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas)

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=0.8):
        for _ in range(max_new_tokens):
            idx_cond = idx[:, -block_size:]
            logits, _ = self(idx_cond)
            probs = F.softmax(logits[:, -1, :].float() / temperature, dim=-1)
            idx = torch.cat((idx, torch.multinomial(probs, num_samples=1)), dim=1)
        return idx


def get_lr(it):
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return min_lr + coeff * (learning_rate - min_lr)


def loss_fn(model, batch):
    x, y = batch
    with ctx:
        _, loss = model(x, y)
    return loss


def make_target():
    torch.manual_seed(seed)
    train_data, _, stoi, _ = get_data()
    gen = torch.Generator().manual_seed(seed)
    model = GPT(len(stoi))
    data = [get_batch(train_data, gen) for _ in range(4)]
    optimizer = model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2))
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": optimizer, "task": "lm", "num_classes": len(stoi)}


@torch.no_grad()
def estimate_loss(model, train_data, val_data, gen):
    out = {}
    model.eval()
    for split, d in (("train", train_data), ("val", val_data)):
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            X, Y = get_batch(d, gen)
            with ctx:
                _, loss = model(X, Y)
            losses[k] = loss.item()
        out[split] = losses.mean().item()
    model.train()
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--max_iters", type=int, default=max_iters)
    parser.add_argument("--sample_len", type=int, default=160)
    args = parser.parse_args()

    torch.manual_seed(seed)
    train_data, val_data, stoi, itos = get_data()
    vocab_size = len(stoi)
    print(f"found vocab_size = {vocab_size} (inside synthetic recipes)")
    print(f"train has {len(train_data):,} tokens, val has {len(val_data):,} tokens")
    tokens_per_iter = gradient_accumulation_steps * batch_size * block_size
    print(f"tokens per iteration will be: {tokens_per_iter:,}")

    model = GPT(vocab_size)
    print(f"number of parameters: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M")
    optimizer = model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2))
    gen = torch.Generator().manual_seed(seed)
    eval_gen = torch.Generator().manual_seed(seed + 1)

    X, Y = get_batch(train_data, gen)
    t0 = time.time()
    for iter_num in range(args.max_iters + 1):
        lr = get_lr(iter_num)
        for param_group in optimizer.param_groups:
            param_group["lr"] = lr

        if iter_num % eval_interval == 0:
            losses = estimate_loss(model, train_data, val_data, eval_gen)
            print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
        if iter_num == args.max_iters:
            break

        for micro_step in range(gradient_accumulation_steps):
            with ctx:
                logits, loss = model(X, Y)
                loss = loss / gradient_accumulation_steps
            X, Y = get_batch(train_data, gen)
            loss.backward()
        if grad_clip != 0.0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

        t1 = time.time()
        dt = t1 - t0
        t0 = t1
        if iter_num % log_interval == 0:
            lossf = loss.item() * gradient_accumulation_steps
            print(f"iter {iter_num}: loss {lossf:.4f}, time {dt * 1000:.2f}ms")

    model.eval()
    start = torch.tensor([[stoi["\n"]]], dtype=torch.long)
    with ctx:
        out = model.generate(start, args.sample_len)
    print("---------------")
    print("".join(itos[i] for i in out[0].tolist()))
    print("---------------")


if __name__ == "__main__":
    main()
