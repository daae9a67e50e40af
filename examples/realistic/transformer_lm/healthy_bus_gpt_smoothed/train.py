"""Train a small character-level GPT on generated bus departure-board text.

nanoGPT-flavoured: pre-LN blocks, tied input/output embeddings, dropout,
AdamW with decoupled weight decay, linear warmup then cosine decay, grad clipping,
label-smoothed cross-entropy.
"""
import math
import random
import time
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    seed: int = 2024
    block_size: int = 40
    batch_size: int = 24
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    dropout: float = 0.1
    label_smoothing: float = 0.1
    lr: float = 2e-3
    min_lr: float = 2e-4
    warmup_iters: int = 60
    max_iters: int = 700
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    eval_interval: int = 100
    eval_iters: int = 8
    log_interval: int = 50


cfg = Config()

DESTS = ["harbour", "airport", "old town", "university", "hospital", "stadium",
         "riverside", "park and ride", "north gate", "market"]
STATUS = ["on time", "on time", "on time", "delayed", "cancelled", "boarding"]
OPERATORS = ["citylink", "greenbus", "metro"]


def departure(rng):
    route = rng.randint(1, 99)
    hh, mm = rng.randint(5, 23), rng.choice(range(0, 60, 5))
    status = rng.choice(STATUS)
    if status == "delayed":
        status = f"delayed {rng.randint(2, 25)} min"
    return (f"{rng.choice(OPERATORS)} {route} to {rng.choice(DESTS)} dep {hh:02d}:{mm:02d} "
            f"stand {rng.choice('ABCDEFGH')}{rng.randint(1, 4)} {status}\n")


def make_corpus(n_lines, seed):
    rng = random.Random(seed)
    return "".join(departure(rng) for _ in range(n_lines))


train_text = make_corpus(3000, cfg.seed)
val_text = make_corpus(400, cfg.seed + 1)
chars = sorted(set(train_text) | set(val_text))
stoi = {ch: i for i, ch in enumerate(chars)}
itos = {i: ch for i, ch in enumerate(chars)}
vocab_size = len(chars)
train_ids = torch.tensor([stoi[c] for c in train_text], dtype=torch.long)
val_ids = torch.tensor([stoi[c] for c in val_text], dtype=torch.long)


def get_batch(split, generator=None):
    data = train_ids if split == "train" else val_ids
    ix = torch.randint(len(data) - cfg.block_size - 1, (cfg.batch_size,), generator=generator)
    x = torch.stack([data[i:i + cfg.block_size] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + cfg.block_size] for i in ix])
    return x, y


class CausalSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.n_head = c.n_head
        self.c_attn = nn.Linear(c.n_embd, 3 * c.n_embd)
        self.c_proj = nn.Linear(c.n_embd, c.n_embd)
        self.attn_dropout = c.dropout
        self.resid_dropout = nn.Dropout(c.dropout)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.attn_dropout if self.training else 0.0, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c.n_embd)
        self.attn = CausalSelfAttention(c)
        self.ln_2 = nn.LayerNorm(c.n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(c.n_embd, 4 * c.n_embd), nn.GELU(),
            nn.Linear(4 * c.n_embd, c.n_embd), nn.Dropout(c.dropout))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.wte = nn.Embedding(vocab_size, c.n_embd)
        self.wpe = nn.Embedding(c.block_size, c.n_embd)
        self.drop = nn.Dropout(c.dropout)
        self.h = nn.ModuleList([Block(c) for _ in range(c.n_layer)])
        self.ln_f = nn.LayerNorm(c.n_embd)
        self.lm_head = nn.Linear(c.n_embd, vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight") or pn.endswith("mlp.2.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * c.n_layer))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        T = idx.size(1)
        pos = torch.arange(T, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1),
                               label_smoothing=self.c.label_smoothing)
        return logits, loss

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=0.5, generator=None):
        for _ in range(max_new_tokens):
            logits, _ = self(idx[:, -self.c.block_size:])
            probs = F.softmax(logits[:, -1, :] / temperature, dim=-1)
            idx = torch.cat((idx, torch.multinomial(probs, 1, generator=generator)), dim=1)
        return idx


def loss_fn(model, batch):
    x, y = batch
    return model(x, y)[1]


def make_optimizer(params):
    params = [p for p in params if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.95))


def get_lr(it):
    if it < cfg.warmup_iters:
        return cfg.lr * (it + 1) / (cfg.warmup_iters + 1)
    decay_ratio = (it - cfg.warmup_iters) / (cfg.max_iters - cfg.warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return cfg.min_lr + coeff * (cfg.lr - cfg.min_lr)


def make_target():
    torch.manual_seed(cfg.seed)
    model = GPT(cfg)
    g = torch.Generator().manual_seed(cfg.seed)
    data = [get_batch("train", g) for _ in range(3)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model.parameters()), "make_optimizer": make_optimizer,
            "num_classes": vocab_size, "task": "lm"}


@torch.no_grad()
def estimate_loss(model):
    model.eval()
    out = {}
    for split in ("train", "val"):
        g = torch.Generator().manual_seed(cfg.seed + 5)
        out[split] = sum(loss_fn(model, get_batch(split, g)).item()
                         for _ in range(cfg.eval_iters)) / cfg.eval_iters
    model.train()
    return out


def main():
    torch.manual_seed(cfg.seed)
    print(f"found vocab_size = {vocab_size} (inferred from corpus)")
    print(f"train has {len(train_ids):,} tokens, val has {len(val_ids):,} tokens")
    model = GPT(cfg)
    n_params = sum(p.numel() for p in model.parameters()) - model.wpe.weight.numel()
    print(f"number of parameters: {n_params / 1e6:.2f}M")
    optimizer = make_optimizer(model.parameters())

    t0 = time.time()
    for it in range(cfg.max_iters + 1):
        lr = get_lr(it)
        for group in optimizer.param_groups:
            group["lr"] = lr

        if it % cfg.eval_interval == 0:
            losses = estimate_loss(model)
            print(f"step {it}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
        if it == cfg.max_iters:
            break

        X, Y = get_batch("train")
        _, loss = model(X, Y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()

        t1 = time.time()
        dt, t0 = t1 - t0, t1
        if it % cfg.log_interval == 0:
            print(f"iter {it}: loss {loss.item():.4f}, time {dt * 1000:.2f}ms, mfu -100.00%")

    model.eval()
    prompt = torch.tensor([[stoi[c] for c in "metro 7"]], dtype=torch.long)
    sample = model.generate(prompt, 160, generator=torch.Generator().manual_seed(cfg.seed))
    print("---------------")
    print("".join(itos[i] for i in sample[0].tolist()))
    print("---------------")


if __name__ == "__main__":
    main()
