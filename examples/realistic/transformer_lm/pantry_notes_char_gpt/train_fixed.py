"""
Small character-level GPT trained on a synthetic recipe corpus.

Architecture follows nanoGPT (pre-LN blocks, learned positional embeddings).
Input and output embeddings are kept separate: at this size tying them made the
early loss curve noticeably worse. Everything runs on CPU in under a minute.
"""
import math
import os
import random
import time

import torch
import torch.nn as nn
from torch.nn import functional as F

# -----------------------------------------------------------------------------
# config
seed = 1337
block_size = 32
batch_size = 32
n_layer = 3
n_head = 4
n_embd = 64
dropout = 0.0
bias = False

learning_rate = 1e-3
min_lr = 1e-4
weight_decay = 0.1
beta1, beta2 = 0.9, 0.95
grad_clip = 1.0
max_iters = 800
warmup_iters = 60
lr_decay_iters = 800
eval_interval = 100
eval_iters = 10
log_interval = 50
n_recipes = 1500
# -----------------------------------------------------------------------------

device = "cpu"
torch.set_num_threads(1)


# -----------------------------------------------------------------------------
# synthetic corpus

INGREDIENTS = ["flour", "sugar", "butter", "eggs", "milk", "salt", "yeast", "honey",
               "garlic", "onion", "tomato", "basil", "rice", "beans", "cheese", "lemon",
               "pepper", "carrot", "oats", "cream"]
UNITS = ["cup", "cups", "tbsp", "tsp", "g", "ml", "pinch"]
VERBS = ["mix", "stir", "whisk", "fold", "bake", "simmer", "chop", "knead", "fry", "boil"]
DISHES = ["bread", "soup", "cake", "stew", "pie", "salad", "risotto", "pancakes", "muffins"]
ADJS = ["easy", "quick", "rustic", "sweet", "spicy", "creamy", "classic", "lemony"]


def make_recipe(rng):
    dish = rng.choice(DISHES)
    title = f"{rng.choice(ADJS)} {rng.choice(INGREDIENTS)} {dish}"
    ings = rng.sample(INGREDIENTS, rng.randint(3, 6))
    lines = [f"# {title}", "ingredients:"]
    for ing in ings:
        qty = rng.choice(["1", "2", "3", "1/2", "1/4", "100", "250"])
        lines.append(f"- {qty} {rng.choice(UNITS)} {ing}")
    lines.append("steps:")
    for i, ing in enumerate(ings[: rng.randint(2, 4)]):
        mins = rng.choice([5, 10, 15, 20, 30, 45])
        lines.append(f"{i + 1}. {rng.choice(VERBS)} the {ing} for {mins} min.")
    lines.append(f"serve the {dish} warm.")
    return "\n".join(lines) + "\n\n"


def build_corpus(n, seed):
    rng = random.Random(seed)
    return "".join(make_recipe(rng) for _ in range(n))


def prepare_data():
    text = build_corpus(n_recipes, seed)
    chars = sorted(set(text))
    stoi = {ch: i for i, ch in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    n = int(0.9 * len(data))
    return data[:n], data[n:], len(chars)


def get_batch(split_data, gen):
    ix = torch.randint(len(split_data) - block_size, (batch_size,), generator=gen)
    x = torch.stack([split_data[i:i + block_size] for i in ix])
    y = torch.stack([split_data[i + 1:i + 1 + block_size] for i in ix])
    return x.to(device), y.to(device)


# -----------------------------------------------------------------------------
# model

class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        assert n_embd % n_head == 0
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.tril(torch.ones(block_size, block_size))
                             .view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(n_embd, dim=2)
        k = k.view(B, T, n_head, C // n_head).transpose(1, 2)
        q = q.view(B, T, n_head, C // n_head).transpose(1, 2)
        v = v.view(B, T, n_head, C // n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd, bias=bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * n_embd, n_embd, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd, bias=bias)
        self.attn = CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(n_embd, bias=bias)
        self.mlp = MLP()

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, vocab_size):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, n_embd),
            wpe=nn.Embedding(block_size, n_embd),
            drop=nn.Dropout(dropout),
            h=nn.ModuleList([Block() for _ in range(n_layer)]),
            ln_f=nn.LayerNorm(n_embd, bias=bias),
        ))
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)

        # init all weights, with scaled init on the residual projections (GPT-2)
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
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        tok_emb = self.transformer.wte(idx)
        pos_emb = self.transformer.wpe(pos)
        x = self.transformer.drop(tok_emb + pos_emb)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
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
        return torch.optim.AdamW(optim_groups, lr=learning_rate, betas=betas)


def get_lr(it):
    # linear warmup, then cosine decay down to min_lr
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return min_lr + coeff * (learning_rate - min_lr)


def make_scheduler(optimizer):
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda=lambda it: get_lr(it) / learning_rate)


def compute_loss(model, batch):
    x, y = batch
    _, loss = model(x, y)
    return loss


@torch.no_grad()
def estimate_loss(model, train_data, val_data):
    out = {}
    model.eval()
    gen = torch.Generator().manual_seed(seed + 1)
    for split, data in [("train", train_data), ("val", val_data)]:
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            losses[k] = compute_loss(model, get_batch(data, gen)).item()
        out[split] = losses.mean().item()
    model.train()
    return out


def make_optimizer(params):
    # same grouping as GPT.configure_optimizers, but usable on a bare param list
    params = [p for p in params if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    nodecay = [p for p in params if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": weight_decay},
         {"params": nodecay, "weight_decay": 0.0}],
        lr=learning_rate, betas=(beta1, beta2))
    make_scheduler(optimizer)  # puts the step-0 learning rate into the param groups
    return optimizer


def make_target():
    torch.manual_seed(seed)
    train_data, val_data, vocab_size = prepare_data()
    model = GPT(vocab_size)
    gen = torch.Generator().manual_seed(seed)
    data = [get_batch(train_data, gen) for _ in range(4)]
    return {
        "model": model,
        "data": data,
        "loss_fn": compute_loss,
        "make_optimizer": make_optimizer,
        "num_classes": vocab_size,
        "task": "lm",
    }


def main():
    torch.manual_seed(seed)
    train_data, val_data, vocab_size = prepare_data()
    print(f"train has {len(train_data):,} tokens, val has {len(val_data):,} tokens, vocab size {vocab_size}")

    model = GPT(vocab_size).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"number of parameters: {n_params / 1e6:.2f}M")
    optimizer = model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2))
    scheduler = make_scheduler(optimizer)

    gen = torch.Generator().manual_seed(seed)
    t0 = time.time()
    for iter_num in range(max_iters + 1):
        if iter_num % eval_interval == 0:
            losses = estimate_loss(model, train_data, val_data)
            print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
        if iter_num == max_iters:
            break

        batch = get_batch(train_data, gen)
        loss = compute_loss(model, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        scheduler.step()

        t1 = time.time()
        dt = t1 - t0
        t0 = t1
        if iter_num % log_interval == 0:
            print(f"iter {iter_num}: loss {loss.item():.4f}, time {dt * 1000:.2f}ms")


if __name__ == "__main__":
    main()
