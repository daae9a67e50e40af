"""
Character-level GPT on a synthetic corpus of recipe steps.

Small nanoGPT-style decoder with a KV cache for fast sampling. Everything
(data, model, training loop) lives in this file; run with `python train.py`.
"""
import math
import random
import time
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

# -----------------------------------------------------------------------------
# config
seed = 1337
batch_size = 32
block_size = 32
max_iters = 300
eval_interval = 50
eval_iters = 10
log_interval = 20
learning_rate = 3e-3
min_lr = 3e-4
warmup_iters = 40
weight_decay = 0.1
beta1, beta2 = 0.9, 0.95
grad_clip = 1.0
n_layer = 2
n_head = 4
n_embd = 96
dropout = 0.0
# -----------------------------------------------------------------------------

VERBS = ["chop", "dice", "slice", "mince", "whisk", "stir", "fold", "simmer", "roast", "saute", "grate", "season"]
ITEMS = ["onion", "garlic", "carrot", "tomato", "butter", "flour", "sugar", "basil", "lemon", "pepper",
         "ginger", "celery", "rice", "cream", "salmon", "chicken", "lentils", "spinach", "leek", "thyme",
         "cumin", "honey", "mint", "potato", "squash", "tofu", "shallot", "fennel", "almonds", "yogurt"]
TOOLS = ["pan", "pot", "bowl", "oven", "skillet", "wok", "tray"]
HEAT = ["low", "medium", "high"]


def make_corpus(n_recipes, rng):
    lines = []
    for r in range(n_recipes):
        lines.append(f"recipe {rng.randint(1, 999)}: serves {rng.randint(1, 8)}")
        for s in range(rng.randint(3, 7)):
            kind = rng.random()
            a, b = rng.sample(ITEMS, 2)
            if kind < 0.4:
                lines.append(f"{s + 1}. {rng.choice(VERBS)} the {a} and the {b}.")
            elif kind < 0.7:
                lines.append(f"{s + 1}. heat the {rng.choice(TOOLS)} on {rng.choice(HEAT)} for {rng.randint(2, 25)} min.")
            else:
                lines.append(f"{s + 1}. add {rng.randint(1, 500)}g {a} to the {rng.choice(TOOLS)}, then {rng.choice(VERBS)}.")
        lines.append("")
    return "\n".join(lines)


def build_data():
    rng = random.Random(seed)
    text = make_corpus(1500, rng)
    chars = sorted(set(text))
    stoi = {ch: i for i, ch in enumerate(chars)}
    itos = {i: ch for ch, i in stoi.items()}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    n = int(0.9 * len(data))
    return data[:n], data[n:], stoi, itos


def get_batch(split_data, gen):
    ix = torch.randint(len(split_data) - block_size - 1, (batch_size,), generator=gen)
    x = torch.stack([split_data[i:i + block_size] for i in ix])
    y = torch.stack([split_data[i + 1:i + 1 + block_size] for i in ix])
    return x, y


# -----------------------------------------------------------------------------
# model

@dataclass
class GPTConfig:
    vocab_size: int
    block_size: int = block_size
    n_layer: int = n_layer
    n_head: int = n_head
    n_embd: int = n_embd
    dropout: float = dropout


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        assert cfg.n_embd % cfg.n_head == 0
        self.n_head = cfg.n_head
        self.n_embd = cfg.n_embd
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.attn_dropout = nn.Dropout(cfg.dropout)
        self.resid_dropout = nn.Dropout(cfg.dropout)
        mask = torch.tril(torch.ones(cfg.block_size, cfg.block_size))
        self.register_buffer("bias", mask.view(1, 1, cfg.block_size, cfg.block_size), persistent=False)

    def forward(self, x, past_kv=None):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        hs = C // self.n_head
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)
        if past_kv is not None:
            pk, pv = past_kv
            k = torch.cat([pk, k], dim=2)
            v = torch.cat([pv, v], dim=2)
        S = k.size(2)

        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        # the T new queries sit at positions S-T .. S-1 of the cached sequence
        att = att.masked_fill(self.bias[:, :, S - T:S, :S] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y)), (k, v)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd)
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = MLP(cfg)

    def forward(self, x, past_kv=None):
        a, present = self.attn(self.ln_1(x), past_kv)
        x = x + a
        x = x + self.mlp(self.ln_2(x))
        return x, present


class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.h = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)])
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None, past_kvs=None):
        B, T = idx.size()
        offset = 0 if past_kvs is None else past_kvs[0][0].size(2)
        pos = torch.arange(offset, offset + T, dtype=torch.long, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        presents = []
        for i, block in enumerate(self.h):
            x, present = block(x, None if past_kvs is None else past_kvs[i])
            presents.append(present)
        x = self.ln_f(x)
        logits = self.lm_head(x)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss, presents

    def configure_optimizers(self, weight_decay, learning_rate, betas):
        params = [p for p in self.parameters() if p.requires_grad]
        decay = [p for p in params if p.dim() >= 2]
        no_decay = [p for p in params if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": weight_decay},
                  {"params": no_decay, "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas)

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=0.8, gen=None):
        past = None
        cur = idx
        for _ in range(max_new_tokens):
            if idx.size(1) >= self.cfg.block_size:
                past, cur = None, idx[:, -self.cfg.block_size + 1:]
            logits, _, past = self(cur, past_kvs=past)
            probs = F.softmax(logits[:, -1, :] / temperature, dim=-1)
            nxt = torch.multinomial(probs, 1, generator=gen)
            idx = torch.cat([idx, nxt], dim=1)
            cur = nxt
        return idx


def get_lr(it):
    if it < warmup_iters:
        return learning_rate * (it + 1) / warmup_iters
    ratio = (it - warmup_iters) / max(1, max_iters - warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * min(1.0, ratio)))
    return min_lr + coeff * (learning_rate - min_lr)


def compute_loss(model, batch):
    x, y = batch
    _, loss, _ = model(x, y)
    return loss


@torch.no_grad()
def estimate_loss(model, train_data, val_data):
    out = {}
    model.eval()
    for name, d in (("train", train_data), ("val", val_data)):
        g = torch.Generator().manual_seed(seed + 1)
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            losses[k] = compute_loss(model, get_batch(d, g)).item()
        out[name] = losses.mean().item()
    model.train()
    return out


def make_optimizer(params):
    params = [p for p in params if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=learning_rate, betas=(beta1, beta2))


def make_target():
    torch.manual_seed(seed)
    train_data, val_data, stoi, _ = build_data()
    model = GPT(GPTConfig(vocab_size=len(stoi)))
    g = torch.Generator().manual_seed(seed)
    data = [get_batch(train_data, g) for _ in range(3)]
    return {
        "model": model,
        "batch": data[0],
        "data": data,
        "loss_fn": compute_loss,
        "optimizer": model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2)),
        "make_optimizer": make_optimizer,
        "num_classes": len(stoi),
        "task": "lm",
    }


def main():
    torch.manual_seed(seed)
    train_data, val_data, stoi, itos = build_data()
    print(f"corpus: {len(train_data) + len(val_data):,} chars, vocab size {len(stoi)}")
    model = GPT(GPTConfig(vocab_size=len(stoi)))
    n_params = sum(p.numel() for p in model.parameters()) - model.wpe.weight.numel()
    print(f"number of parameters: {n_params / 1e6:.2f}M")
    optimizer = model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2))
    g = torch.Generator().manual_seed(seed)

    t0 = time.time()
    for it in range(max_iters + 1):
        lr = get_lr(it)
        for group in optimizer.param_groups:
            group["lr"] = lr

        if it % eval_interval == 0:
            losses = estimate_loss(model, train_data, val_data)
            print(f"step {it}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
        if it == max_iters:
            break

        batch = get_batch(train_data, g)
        loss = compute_loss(model, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if grad_clip != 0.0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()

        t1 = time.time()
        dt = t1 - t0
        t0 = t1
        if it % log_interval == 0:
            print(f"iter {it}: loss {loss.item():.4f}, time {dt * 1000:.2f}ms, mfu -100.00%")

    model.eval()
    prompt = torch.tensor([[stoi[c] for c in "recipe "]], dtype=torch.long)
    out = model.generate(prompt, 160, gen=torch.Generator().manual_seed(seed))
    print("---------------")
    print("".join(itos[i] for i in out[0].tolist()))
    print("---------------")


if __name__ == "__main__":
    main()
