"""
Character-level GPT on a synthetic recipe corpus (nanoGPT-style).

Usage: python train.py
"""
import math
import os
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

# -----------------------------------------------------------------------------
# config
out_dir = os.path.dirname(os.path.abspath(__file__))
seed = 1337
batch_size = 16
block_size = 64
max_iters = 600
eval_interval = 100
eval_iters = 10
log_interval = 25
learning_rate = 2e-3
min_lr = 2e-4
warmup_iters = 40
lr_decay_iters = 600
weight_decay = 0.1
beta1, beta2 = 0.9, 0.99
grad_clip = 1.0
n_layer = 2
n_head = 4
n_embd = 64
dropout = 0.0
device = "cpu"
# -----------------------------------------------------------------------------

INGREDIENTS = ["flour", "sugar", "butter", "eggs", "milk", "salt", "garlic", "onion",
               "olive oil", "tomatoes", "basil", "rice", "chicken", "lemon juice",
               "black pepper", "cream", "honey", "carrots", "potatoes", "cheese",
               "yeast", "water", "vanilla", "cinnamon", "spinach", "mushrooms",
               "ginger", "soy sauce", "chickpeas", "lentils", "paprika", "cumin",
               "coriander", "parsley", "thyme", "rosemary", "zucchini", "eggplant",
               "bell pepper", "shallots", "walnuts", "almonds", "oats", "yogurt",
               "brown sugar", "cocoa powder", "baking soda", "pork belly", "salmon",
               "prawns", "coconut milk", "lime zest", "chili flakes", "feta", "beef stock",
               "white wine", "peas", "leeks", "celery", "apples", "pears", "dates"]
UNITS = ["cup", "cups", "tbsp", "tsp", "g", "kg", "ml", "l", "pinch of", "cloves", "handful of"]
STYLES = ["Roasted", "Spiced", "Creamy", "Smoky", "Quick", "Rustic", "Sticky", "Crispy",
          "Slow-Cooked", "Grandma's", "Baked", "Grilled", "Summer", "Winter", "Easy"]
KINDS = ["Soup", "Stew", "Cake", "Bread", "Pie", "Salad", "Curry", "Risotto", "Tart",
         "Pasta", "Gratin", "Muffins", "Stir-Fry", "Casserole", "Porridge", "Tagine"]
STEPS = [
    "Preheat the oven to {t} degrees.",
    "In a large bowl, mix the {a} and the {b}.",
    "Add the {a} and stir until smooth.",
    "Heat the {a} in a pan over medium heat.",
    "Whisk the {a} with the {b} for {m} minutes.",
    "Bake for {m} minutes until golden.",
    "Season with {a} and serve warm.",
    "Let the dough rest for {m} minutes.",
    "Simmer gently for {m} minutes, stirring often.",
    "Pour the mixture into a greased tin.",
    "Chop the {a} finely and set aside.",
    "Fry the {a} until soft, about {m} minutes.",
    "Fold in the {a} and the {b} gently.",
    "Roast the {a} at {t} degrees for {m} minutes.",
    "Blend the {a} with a splash of {b} until creamy.",
    "Cover and chill for {m} minutes before slicing.",
    "Toss the {a} with the {b} and a little salt.",
    "Garnish with {a} just before serving.",
    "Drain the {a} and return to the pot.",
    "Reduce the heat and add the {a}; cook for {m} more minutes.",
]
NOTES = ["Tip: {a} can be swapped for {b}.", "Keeps for {d} days in the fridge.",
         "Freezes well for up to {d} weeks.", "Best eaten on the day.",
         "Serve with crusty bread.", "Double the {a} for a richer version."]


def build_corpus(n_recipes=800, rs=0):
    rng = np.random.default_rng(rs)
    out = []
    for _ in range(n_recipes):
        dish = f"{STYLES[rng.integers(len(STYLES))]} {INGREDIENTS[rng.integers(len(INGREDIENTS))].title()} {KINDS[rng.integers(len(KINDS))]}"
        serves = int(rng.integers(2, 9))
        lines = [f"# {dish}", f"Serves {serves}. Prep {int(rng.integers(1, 12)) * 5} min.", "Ingredients:"]
        chosen = rng.choice(len(INGREDIENTS), size=int(rng.integers(3, 8)), replace=False)
        for i in chosen:
            q = int(rng.integers(1, 5)) if rng.random() < 0.6 else int(rng.integers(10, 750))
            u = UNITS[rng.integers(len(UNITS))]
            lines.append(f"- {q} {u} {INGREDIENTS[i]}")
        lines.append("Method:")
        names = [INGREDIENTS[i] for i in chosen]
        for k in range(int(rng.integers(3, 8))):
            s = STEPS[rng.integers(len(STEPS))]
            a, b = rng.choice(names, size=2, replace=False)
            lines.append(f"{k + 1}. " + s.format(a=a, b=b, t=int(rng.choice([160, 170, 180, 190, 200, 220, 240])),
                                                m=int(rng.integers(1, 13)) * 5))
        if rng.random() < 0.5:
            a, b = rng.choice(INGREDIENTS, size=2, replace=False)
            lines.append(NOTES[rng.integers(len(NOTES))].format(a=a, b=b, d=int(rng.integers(2, 7))))
        out.append("\n".join(lines) + "\n\n")
    return "".join(out)


text = build_corpus()
chars = sorted(set(text))
vocab_size = len(chars)
stoi = {ch: i for i, ch in enumerate(chars)}
itos = {i: ch for i, ch in enumerate(chars)}


def encode(s):
    return [stoi[c] for c in s]


def decode(ids):
    return "".join(itos[i] for i in ids)


data = np.array(encode(text), dtype=np.uint16)
n = int(0.9 * len(data))
train_data = data[:n]
val_data = data[n:]


class CharChunks(Dataset):
    """Non-overlapping (block_size + 1)-token chunks of a token stream."""

    def __init__(self, tokens, block_size):
        self.tokens = tokens
        self.block_size = block_size

    def __len__(self):
        return (len(self.tokens) - 1) // self.block_size

    def __getitem__(self, i):
        start = i
        chunk = torch.from_numpy(self.tokens[start:start + self.block_size + 1].astype(np.int64))
        return chunk[:-1], chunk[1:]


def make_loader(tokens, shuffle=True):
    g = torch.Generator()
    g.manual_seed(seed)
    return DataLoader(CharChunks(tokens, block_size), batch_size=batch_size, shuffle=shuffle,
                      drop_last=True, generator=g)


def get_batch(split, rng):
    src = train_data if split == "train" else val_data
    ix = rng.integers(0, len(src) - block_size - 1, size=batch_size)
    x = torch.from_numpy(np.stack([src[i:i + block_size] for i in ix]).astype(np.int64))
    y = torch.from_numpy(np.stack([src[i + 1:i + 1 + block_size] for i in ix]).astype(np.int64))
    return x.to(device), y.to(device)


# -----------------------------------------------------------------------------
# model

@dataclass
class GPTConfig:
    block_size: int = 64
    vocab_size: int = 65
    n_layer: int = 3
    n_head: int = 4
    n_embd: int = 96
    dropout: float = 0.0
    bias: bool = False


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
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=nn.LayerNorm(config.n_embd, bias=config.bias),
        ))
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

    def get_num_params(self):
        n_params = sum(p.numel() for p in self.parameters())
        return n_params - self.transformer.wpe.weight.numel()

    def forward(self, idx, targets=None):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
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

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0):
        for _ in range(max_new_tokens):
            idx_cond = idx[:, -self.config.block_size:]
            logits, _ = self(idx_cond)
            probs = F.softmax(logits[:, -1, :] / temperature, dim=-1)
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


def build_model():
    torch.manual_seed(seed)
    cfg = GPTConfig(block_size=block_size, vocab_size=vocab_size, n_layer=n_layer,
                    n_head=n_head, n_embd=n_embd, dropout=dropout)
    model = GPT(cfg).to(device)
    optimizer = model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2))
    return model, optimizer


@torch.no_grad()
def estimate_loss(model):
    out = {}
    model.eval()
    for split in ["train", "val"]:
        eval_rng = np.random.default_rng(seed + 1)
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            X, Y = get_batch(split, eval_rng)
            _, loss = model(X, Y)
            losses[k] = loss.item()
        out[split] = losses.mean().item()
    model.train()
    return out


def lm_loss(model, batch):
    X, Y = batch
    _, loss = model(X, Y)
    return loss


def make_target():
    model, optimizer = build_model()
    loader = make_loader(train_data)
    val_batches = [get_batch("val", np.random.default_rng(seed + 1)) for _ in range(2)]
    return {
        "model": model,
        "data": loader,
        "val_data": val_batches,
        "loss_fn": lm_loss,
        "optimizer": optimizer,
        "task": "language_modeling",
        "vocab_size": vocab_size,
    }


def main():
    torch.set_num_threads(1)
    print(f"vocab size: {vocab_size}, train tokens: {len(train_data):,}, val tokens: {len(val_data):,}")
    model, optimizer = build_model()
    print(f"number of parameters: {model.get_num_params() / 1e6:.2f}M")
    loader = make_loader(train_data)
    batches = iter(loader)
    t0 = time.time()
    t_start = t0
    best_val = float("inf")
    for it in range(max_iters + 1):
        lr = get_lr(it)
        for g in optimizer.param_groups:
            g["lr"] = lr
        if it % eval_interval == 0:
            losses = estimate_loss(model)
            print(f"step {it}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
            best_val = min(best_val, losses["val"])
        if it == max_iters:
            break
        try:
            X, Y = next(batches)
        except StopIteration:
            batches = iter(loader)
            X, Y = next(batches)
        X, Y = X.to(device), Y.to(device)
        _, loss = model(X, Y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if grad_clip != 0.0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        t1 = time.time()
        dt = t1 - t0
        t0 = t1
        if it % log_interval == 0:
            print(f"iter {it}: loss {loss.item():.4f}, time {dt * 1000:.2f}ms, lr {lr:.2e}")
    print(f"best val loss {best_val:.4f}, total time {time.time() - t_start:.1f}s")
    ctx = torch.tensor([encode("# ")], dtype=torch.long)
    print(decode(model.generate(ctx, 120)[0].tolist()))


if __name__ == "__main__":
    main()
