"""
Small LLaMA-style decoder (RMSNorm, SwiGLU, RoPE) trained as a word-level LM
on synthetic TinyStories-like children's stories.

Usage: python train.py
"""
import math
import re
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# ----------------------------------------------------------------------------- config
seed = 42
n_stories = 2500
batch_size = 16
block_size = 64
max_iters = 600
eval_interval = 100
eval_iters = 10
log_interval = 25
peak_lr = 3e-3
min_lr = 3e-4
warmup_iters = 50
weight_decay = 0.1
grad_clip = 1.0
dim = 64
n_layers = 2
n_heads = 4
device = "cpu"

# ----------------------------------------------------------------------------- data
NAMES = ["Lily", "Tom", "Mia", "Ben", "Sara", "Max", "Lucy", "Sam", "Anna", "Tim", "Zoe", "Leo",
         "Emma", "Jack", "Ella", "Finn", "Rosa", "Ned", "Ivy", "Otto"]
ANIMALS = ["dog", "cat", "bunny", "bird", "frog", "duck", "puppy", "kitten", "fox", "bear"]
PLACES = ["park", "garden", "forest", "beach", "yard", "house", "farm", "lake"]
THINGS = ["ball", "kite", "box", "shell", "hat", "book", "cake", "key", "flower", "stone", "boat", "drum"]
ADJS = ["red", "big", "small", "shiny", "soft", "old", "blue", "funny", "tiny", "pretty"]
FEELS = ["happy", "sad", "scared", "excited", "proud", "tired", "surprised"]
VERBS = ["play", "run", "dig", "sing", "jump", "read", "swim", "draw"]


def make_story(rng):
    name = NAMES[rng.integers(len(NAMES))]
    friend = NAMES[rng.integers(len(NAMES))]
    while friend == name:
        friend = NAMES[rng.integers(len(NAMES))]
    he = "she" if name in {"Lily", "Mia", "Sara", "Lucy", "Anna", "Zoe", "Emma", "Ella", "Rosa", "Ivy"} else "he"
    his = "her" if he == "she" else "his"
    pet = ANIMALS[rng.integers(len(ANIMALS))]
    place = PLACES[rng.integers(len(PLACES))]
    thing = THINGS[rng.integers(len(THINGS))]
    adj = ADJS[rng.integers(len(ADJS))]
    verb = VERBS[rng.integers(len(VERBS))]
    feel = FEELS[rng.integers(len(FEELS))]
    s = [f"Once upon a time, there was a little {'girl' if he == 'she' else 'boy'} named {name}."]
    s.append(f"{name} had a {pet} and loved to {verb} in the {place}.")
    s.append(f"One day, {name} found a {adj} {thing} in the {place}.")
    if rng.random() < 0.5:
        s.append(f"{he.capitalize()} showed the {thing} to {his} friend {friend}.")
        s.append(f"\" Look at my {adj} {thing} ! \" said {name}.")
        s.append(f"{friend} was {feel} and wanted to {verb} with the {thing} too.")
    else:
        s.append(f"The {pet} wanted the {thing} and ran away with it.")
        s.append(f"{name} was {feel}. {he.capitalize()} looked for the {pet} all over the {place}.")
        s.append(f"At last, {he} saw the {pet} with {friend} by the {PLACES[rng.integers(len(PLACES))]}.")
    s.append(f"{name} and {friend} played with the {adj} {thing} until the sun went down.")
    s.append(f"From that day on, {name} kept the {thing} in {his} room.")
    return " ".join(s)


def tokenize(text):
    return re.findall(r"[A-Za-z]+|[.,!?\"]", text)


rng = np.random.default_rng(seed)
stories = [make_story(rng) for _ in range(n_stories)]
words = []
for st in stories:
    words.extend(tokenize(st) + ["<eos>"])
vocab = ["<eos>"] + sorted(set(words) - {"<eos>"})
vocab_size = len(vocab)
stoi = {w: i for i, w in enumerate(vocab)}
ids = np.array([stoi[w] for w in words], dtype=np.int64)
split = int(0.9 * len(ids))
train_ids, val_ids = ids[:split], ids[split:]


def get_batch(split_name, gen):
    src = train_ids if split_name == "train" else val_ids
    ix = gen.integers(0, len(src) - block_size - 1, size=batch_size)
    x = torch.from_numpy(np.stack([src[i:i + block_size] for i in ix]))
    y = torch.from_numpy(np.stack([src[i + 1:i + 1 + block_size] for i in ix]))
    return x.to(device), y.to(device)


# ----------------------------------------------------------------------------- model
@dataclass
class ModelArgs:
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    vocab_size: int = 256
    max_seq_len: int = 64
    norm_eps: float = 1e-5


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


def precompute_rope(head_dim, seq_len, theta=10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2).float() / head_dim))
    t = torch.arange(seq_len).float()
    ang = torch.outer(t, freqs)
    return torch.cos(ang), torch.sin(ang)


def apply_rope(x, cos, sin):
    # x: (B, H, T, D)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    T = x.size(2)
    cos, sin = cos[:T], sin[:T]
    out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return out.flatten(-2)


class Attention(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.n_heads = args.n_heads
        self.head_dim = args.dim // args.n_heads
        self.q_proj = nn.Linear(args.dim, args.dim, bias=False)
        self.k_proj = nn.Linear(args.dim, args.dim, bias=False)
        self.v_proj = nn.Linear(args.dim, args.dim, bias=False)
        self.o_proj = nn.Linear(args.dim, args.dim, bias=False)

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        q = self.q_proj(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.o_proj(y)


class FeedForward(nn.Module):
    def __init__(self, dim):
        super().__init__()
        hidden = int(8 * dim / 3)
        hidden = 16 * ((hidden + 15) // 16)
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.input_layernorm = RMSNorm(args.dim, args.norm_eps)
        self.self_attn = Attention(args)
        self.post_attention_layernorm = RMSNorm(args.dim, args.norm_eps)
        self.mlp = FeedForward(args.dim)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        x = x + self.mlp(self.post_attention_layernorm(x))
        return x


class TinyLlama(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.args = args
        self.embed_tokens = nn.Embedding(args.vocab_size, args.dim)
        self.layers = nn.ModuleList([DecoderLayer(args) for _ in range(args.n_layers)])
        self.norm = RMSNorm(args.dim, args.norm_eps)
        self.lm_head = nn.Linear(args.dim, args.vocab_size, bias=False)
        cos, sin = precompute_rope(args.dim // args.n_heads, args.max_seq_len)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.reset_parameters()

    def reset_parameters(self):
        for name, p in self.named_parameters():
            if p.dim() < 2:
                continue
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                nn.init.zeros_(p)
            else:
                nn.init.normal_(p, mean=0.0, std=0.02)

    def forward(self, tokens, targets=None):
        h = self.embed_tokens(tokens)
        for layer in self.layers:
            h = layer(h, self.rope_cos, self.rope_sin)
        logits = self.lm_head(self.norm(h))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


def lr_at(it):
    if it < warmup_iters:
        return peak_lr * (it + 1) / warmup_iters
    progress = (it - warmup_iters) / max(1, max_iters - warmup_iters)
    return min_lr + 0.5 * (peak_lr - min_lr) * (1 + math.cos(math.pi * min(progress, 1.0)))


def build():
    torch.manual_seed(seed)
    args = ModelArgs(dim=dim, n_layers=n_layers, n_heads=n_heads, vocab_size=vocab_size,
                     max_seq_len=block_size)
    model = TinyLlama(args).to(device)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=peak_lr, betas=(0.9, 0.95), eps=1e-8)
    return model, optimizer


def compute_loss(model, batch):
    x, y = batch
    _, loss = model(x, y)
    return loss


@torch.no_grad()
def evaluate(model):
    model.eval()
    out = {}
    for name in ("train", "val"):
        gen = np.random.default_rng(1234)
        out[name] = float(np.mean([compute_loss(model, get_batch(name, gen)).item()
                                   for _ in range(eval_iters)]))
    model.train()
    return out


def make_target():
    model, optimizer = build()
    gen = np.random.default_rng(seed)
    return {
        "model": model,
        "data": [get_batch("train", gen) for _ in range(4)],
        "val_data": [get_batch("val", np.random.default_rng(1234)) for _ in range(2)],
        "loss_fn": compute_loss,
        "optimizer": optimizer,
        "task": "language_modeling",
        "vocab_size": vocab_size,
    }


def main():
    torch.set_num_threads(1)
    print(f"stories: {len(stories)}, vocab: {vocab_size}, train tokens: {len(train_ids)}, val tokens: {len(val_ids)}")
    model, optimizer = build()
    print(f"params: {sum(p.numel() for p in model.parameters()) / 1e3:.1f}K")
    gen = np.random.default_rng(seed)
    t0 = time.time()
    start = t0
    for it in range(max_iters + 1):
        lr = lr_at(it)
        for group in optimizer.param_groups:
            group["lr"] = lr
        if it % eval_interval == 0 or it == max_iters:
            ev = evaluate(model)
            print(f"step {it}: train loss {ev['train']:.4f}, val loss {ev['val']:.4f}, "
                  f"val ppl {math.exp(ev['val']):.2f}")
        if it == max_iters:
            break
        batch = get_batch("train", gen)
        loss = compute_loss(model, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        t1 = time.time()
        dt, t0 = t1 - t0, t1
        if it % log_interval == 0:
            print(f"iter {it}: loss {loss.item():.4f}, time {dt * 1000:.2f}ms")
    print(f"done in {time.time() - start:.1f}s")


if __name__ == "__main__":
    main()
