"""
Small GPT on a synthetic recipe corpus, tokenized with a tiny byte-pair-style
tokenizer trained on the corpus itself. nanoGPT-style training loop.
"""
import math
import os
import random
import re
import time
from collections import Counter
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F

# -----------------------------------------------------------------------------
out_dir = os.path.dirname(os.path.abspath(__file__))
seed = 1337
n_recipes = 900
num_merges = 260
eval_interval = 100
eval_iters = 10
log_interval = 20
batch_size = 16
block_size = 64
n_layer = 3
n_head = 4
n_embd = 64
dropout = 0.0
learning_rate = 2e-3
max_iters = 400
weight_decay = 1e-1
beta1, beta2 = 0.9, 0.95
grad_clip = 1.0
warmup_iters = 40
lr_decay_iters = 400
min_lr = 2e-4
device = "cpu"
torch.set_num_threads(1)
# -----------------------------------------------------------------------------

PROTEINS = ["chicken", "tofu", "salmon", "beef", "chickpeas", "shrimp", "lentils", "pork", "mushrooms", "eggs"]
STYLES = ["lemon garlic", "smoky paprika", "ginger soy", "honey mustard", "green curry",
          "tomato basil", "chili lime", "miso butter", "herb crusted", "sweet and sour"]
DISHES = ["stew", "stir fry", "traybake", "skewers", "soup", "salad", "pasta", "rice bowl", "tacos", "curry"]
PANTRY = [("olive oil", "tbsp"), ("garlic", "cloves"), ("onion", "whole"), ("rice", "cups"),
          ("stock", "cups"), ("butter", "tbsp"), ("flour", "tbsp"), ("coconut milk", "cans"),
          ("tomatoes", "whole"), ("spinach", "handfuls"), ("soy sauce", "tbsp"), ("honey", "tbsp"),
          ("lime juice", "tbsp"), ("paprika", "tsp"), ("cumin", "tsp"), ("parsley", "handfuls")]
METHODS = {"stew": ("simmer", "low heat", 40), "stir fry": ("fry", "high heat", 8),
           "traybake": ("roast", "200 degrees", 35), "skewers": ("grill", "medium heat", 12),
           "soup": ("simmer", "low heat", 25), "salad": ("toss", "room temperature", 5),
           "pasta": ("boil", "high heat", 10), "rice bowl": ("steam", "medium heat", 18),
           "tacos": ("fry", "medium heat", 10), "curry": ("simmer", "medium heat", 30)}


def generate_recipes(n, rng):
    docs = []
    for _ in range(n):
        protein, style, dish = rng.choice(PROTEINS), rng.choice(STYLES), rng.choice(DISHES)
        name = f"{style} {protein} {dish}"
        serves = rng.choice([2, 2, 4, 4, 6])
        ings = rng.sample(PANTRY, rng.randint(3, 5))
        verb, heat, mins = METHODS[dish]
        mins = mins + rng.choice([-5, 0, 0, 5])
        lines = [f"title: {name}", f"serves: {serves}", "ingredients:"]
        lines.append(f"- {serves * 150} g {protein}")
        for item, unit in ings:
            lines.append(f"- {rng.randint(1, 4)} {unit} {item}")
        lines.append("method:")
        first, second = ings[0][0], ings[1][0]
        lines.append(f"1. heat the {first} and add the {protein}.")
        lines.append(f"2. stir in the {second} and the rest of the ingredients.")
        lines.append(f"3. {verb} at {heat} for {mins} minutes.")
        lines.append(f"4. serve the {name} to {serves} people.")
        docs.append("\n".join(lines) + "\n<|end|>\n")
    return "".join(docs)


PRETOK = re.compile(r"<\|end\|>| ?[a-z]+| ?\d+| ?[^\sa-z\d]|\n")


class Tokenizer:
    def __init__(self, text, num_merges):
        words = Counter(PRETOK.findall(text))
        self.specials = ["<|end|>"]
        base = sorted({c for w in words if w not in self.specials for c in w})
        self.vocab = self.specials + base
        splits = {w: tuple(w) for w in words if w not in self.specials}
        self.merges = []
        for _ in range(num_merges):
            pairs = Counter()
            for w, sym in splits.items():
                for a, b in zip(sym, sym[1:]):
                    pairs[a, b] += words[w]
            if not pairs:
                break
            best = max(pairs, key=pairs.get)
            self.merges.append(best)
            self.vocab.append(best[0] + best[1])
            splits = {w: self._merge(sym, best) for w, sym in splits.items()}
        self.stoi = {t: i for i, t in enumerate(self.vocab)}
        self.cache = {w: [self.stoi[s] for s in sym] for w, sym in splits.items()}
        self.cache.update({s: [self.stoi[s]] for s in self.specials})

    @staticmethod
    def _merge(sym, pair):
        out, i = [], 0
        while i < len(sym):
            if i < len(sym) - 1 and (sym[i], sym[i + 1]) == pair:
                out.append(sym[i] + sym[i + 1])
                i += 2
            else:
                out.append(sym[i])
                i += 1
        return tuple(out)

    def encode(self, text):
        ids = []
        for w in PRETOK.findall(text):
            ids.extend(self.cache[w])
        return ids

    def decode(self, ids):
        return "".join(self.vocab[i] for i in ids)


def prepare_data():
    rng = random.Random(seed)
    text = generate_recipes(n_recipes, rng)
    tok = Tokenizer(text, num_merges)
    ids = np.array(tok.encode(text), dtype=np.uint16)
    n = int(0.9 * len(ids))
    return tok, ids[:n], ids[n:]


def get_batch(data):
    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([torch.from_numpy(data[i:i + block_size].astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + block_size].astype(np.int64)) for i in ix])
    return x.to(device), y.to(device)


# -----------------------------------------------------------------------------
@dataclass
class GPTConfig:
    block_size: int = 64
    vocab_size: int = 512
    n_layer: int = 3
    n_head: int = 4
    n_embd: int = 64
    dropout: float = 0.0
    bias: bool = True


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.register_buffer("bias", torch.tril(torch.ones(config.block_size, config.block_size))
                             .view(1, 1, config.block_size, config.block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.n_embd)
        self.pos_emb = nn.Embedding(config.block_size, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList([Block(config) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.tok_emb.weight = self.lm_head.weight  # weight tying
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

    def get_num_params(self):
        return sum(p.numel() for p in self.parameters()) - self.pos_emb.weight.numel()

    def forward(self, idx, targets=None):
        b, t = idx.size()
        assert t <= self.config.block_size
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.drop(self.tok_emb(idx) + self.pos_emb(pos))
        for block in self.blocks:
            x = block(x)
        x = self.ln_f(x)
        logits = self.lm_head(x)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss

    def configure_optimizers(self, weight_decay, learning_rate, betas):
        param_dict = {pn: p for pn, p in self.named_parameters() if p.requires_grad}
        decay_params = [p for n, p in param_dict.items() if p.dim() >= 2]
        nodecay_params = [p for n, p in param_dict.items() if p.dim() < 2]
        optim_groups = [
            {"params": decay_params, "weight_decay": weight_decay},
            {"params": nodecay_params, "weight_decay": 0.0},
        ]
        print(f"num decayed parameter tensors: {len(decay_params)}, with {sum(p.numel() for p in decay_params):,} parameters")
        print(f"num non-decayed parameter tensors: {len(nodecay_params)}, with {sum(p.numel() for p in nodecay_params):,} parameters")
        return torch.optim.AdamW(optim_groups, lr=learning_rate, betas=betas)


def get_lr(it):
    if it < warmup_iters:
        return learning_rate * it / warmup_iters
    if it > lr_decay_iters:
        return min_lr
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return min_lr + coeff * (learning_rate - min_lr)


def loss_fn(model, batch):
    X, Y = batch
    _, loss = model(X, Y)
    return loss


def build():
    torch.manual_seed(seed)
    np.random.seed(seed)
    tok, train_data, val_data = prepare_data()
    config = GPTConfig(block_size=block_size, vocab_size=len(tok.vocab), n_layer=n_layer,
                       n_head=n_head, n_embd=n_embd, dropout=dropout)
    model = GPT(config).to(device)
    optimizer = model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2))
    return tok, train_data, val_data, model, optimizer


def make_target():
    tok, train_data, val_data, model, optimizer = build()
    g = torch.get_rng_state()
    torch.manual_seed(seed + 1)
    batches = [get_batch(train_data) for _ in range(8)]
    val_batches = [get_batch(val_data) for _ in range(4)]
    torch.set_rng_state(g)
    return {
        "model": model,
        "data": batches,
        "val_data": val_batches,
        "loss_fn": loss_fn,
        "optimizer": optimizer,
        "num_classes": len(tok.vocab),
        "task": "language_modeling",
    }


@torch.no_grad()
def estimate_loss(model, train_data, val_data):
    out = {}
    model.eval()
    for split, data in [("train", train_data), ("val", val_data)]:
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            X, Y = get_batch(data)
            _, loss = model(X, Y)
            losses[k] = loss.item()
        out[split] = losses.mean()
    model.train()
    return out


if __name__ == "__main__":
    tok, train_data, val_data, model, optimizer = build()
    print(f"vocab size {len(tok.vocab)} ({len(tok.merges)} merges), "
          f"{len(train_data):,} train tokens, {len(val_data):,} val tokens")
    print("number of parameters: %.2fM" % (model.get_num_params() / 1e6,))
    t_start = time.time()
    t0 = time.time()
    iter_num = 0
    best_val_loss = 1e9
    while True:
        lr = get_lr(iter_num)
        for param_group in optimizer.param_groups:
            param_group["lr"] = lr
        if iter_num % eval_interval == 0 or iter_num == max_iters:
            losses = estimate_loss(model, train_data, val_data)
            print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
            best_val_loss = min(best_val_loss, losses["val"].item())
        if iter_num == max_iters:
            break
        X, Y = get_batch(train_data)
        logits, loss = model(X, Y)
        loss.backward()
        if grad_clip != 0.0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        t1 = time.time()
        dt = t1 - t0
        t0 = t1
        if iter_num % log_interval == 0:
            print(f"iter {iter_num}: loss {loss.item():.4f}, time {dt * 1000:.2f}ms")
        iter_num += 1
    print(f"best val loss {best_val_loss:.4f}, total time {time.time() - t_start:.1f}s")
