"""Tiny nanoGPT-style character model on generated ferry-terminal announcements.
Aggressive schedule: 10-iter warmup to 3e-3, cosine decay to 3e-4, grad clip 1.0."""
import math
import random
import time
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

out_interval = 2
eval_interval = 50
eval_iters = 10
max_iters = 300
batch_size = 16
block_size = 64
learning_rate = 3e-3
min_lr = 3e-4
warmup_iters = 10
lr_decay_iters = 300
weight_decay = 0.1
beta1, beta2 = 0.9, 0.95
grad_clip = 1.0
seed = 2024

PORTS = ["KIEL", "OSLO", "GOTHENBURG", "FREDERIKSHAVN", "TRAVEMUNDE", "HELSINKI", "TALLINN", "ROSTOCK"]
SHIPS = ["STENA NORDICA", "COLOR MAGIC", "PETER PAN", "FINNMAID", "VIKING GRACE", "MEGASTAR"]


def ferry_corpus(n=2200, seed=5):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        ship, port = rng.choice(SHIPS), rng.choice(PORTS)
        gate, deck = rng.randint(1, 9), rng.randint(2, 9)
        hh, mm = rng.randint(5, 23), rng.choice(["00", "15", "30", "45"])
        r = rng.random()
        if r < 0.35:
            out.append(f"{ship} TO {port} DEPARTS {hh:02d}:{mm} FROM GATE {gate}. CHECK-IN CLOSES 30 MINUTES BEFORE.")
        elif r < 0.6:
            out.append(f"CAR DRIVERS FOR {port}, PLEASE RETURN TO DECK {deck}. {ship} IS READY FOR DISEMBARKATION.")
        elif r < 0.8:
            delay = rng.choice([10, 20, 40, 60, 90])
            out.append(f"{ship} FROM {port} IS DELAYED BY {delay} MINUTES. NEW ARRIVAL {hh:02d}:{mm}.")
        else:
            out.append(f"FOOT PASSENGERS TO {port}: BOARDING NOW AT GATE {gate}. HAVE YOUR TICKET READY.")
    return "\n".join(out) + "\n"


text = ferry_corpus()
chars = sorted(set(text))
vocab_size = len(chars)
stoi = {ch: i for i, ch in enumerate(chars)}
itos = {i: ch for i, ch in enumerate(chars)}
encoded = torch.tensor([stoi[c] for c in text], dtype=torch.long)
split = int(0.9 * len(encoded))
train_data, val_data = encoded[:split], encoded[split:]


def get_batch(which, generator=None):
    src = train_data if which == "train" else val_data
    ix = torch.randint(len(src) - block_size - 1, (batch_size,), generator=generator)
    x = torch.stack([src[i:i + block_size] for i in ix])
    y = torch.stack([src[i + 1:i + block_size + 1] for i in ix])
    return x, y


@dataclass
class GPTConfig:
    block_size: int = block_size
    vocab_size: int = vocab_size
    n_layer: int = 3
    n_head: int = 4
    n_embd: int = 96
    dropout: float = 0.0
    bias: bool = False


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.n_head = config.n_head
        self.dropout = config.dropout

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=nn.LayerNorm(config.n_embd, bias=config.bias),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)

    def forward(self, idx, targets=None):
        T = idx.size(1)
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(T, device=idx.device))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = None if targets is None else F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss

    @torch.no_grad()
    def generate(self, idx, n_new, temperature=0.8):
        for _ in range(n_new):
            logits, _ = self(idx[:, -self.config.block_size:])
            idx = torch.cat([idx, torch.multinomial(F.softmax(logits[:, -1] / temperature, -1), 1)], 1)
        return idx


def configure_optimizers(params):
    params = [p for p in params if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=learning_rate, betas=(beta1, beta2))


def get_lr(it):
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * decay_ratio)) * (learning_rate - min_lr)


def loss_fn(model, batch):
    return model(*batch)[1]


@torch.no_grad()
def estimate_loss(model):
    model.eval()
    g = torch.Generator().manual_seed(123)
    out = {s: torch.tensor([loss_fn(model, get_batch(s, g)).item() for _ in range(eval_iters)]).mean()
           for s in ("train", "val")}
    model.train()
    return out


def make_target():
    torch.manual_seed(seed)
    model = GPT(GPTConfig())
    g = torch.Generator().manual_seed(7)
    data = [get_batch("train", g) for _ in range(3)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": configure_optimizers(model.parameters()),
            "make_optimizer": configure_optimizers, "task": "lm"}


def main():
    torch.manual_seed(seed)
    model = GPT(GPTConfig())
    print(f"number of parameters: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M")
    optimizer = configure_optimizers(model.parameters())
    gen = torch.Generator().manual_seed(seed)
    n_clipped = 0
    t0 = time.time()
    for it in range(max_iters + 1):
        lr = get_lr(it)
        for g in optimizer.param_groups:
            g["lr"] = lr
        if it % eval_interval == 0:
            losses = estimate_loss(model)
            print(f"step {it}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}, "
                  f"lr {lr:.2e}, clipped {n_clipped}/{it} steps")
        if it == max_iters:
            break
        _, loss = model(*get_batch("train", gen))
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        n_clipped += int(norm.item() > grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        t1 = time.time()
        dt, t0 = t1 - t0, t1
        if it % out_interval == 0:
            print(f"iter {it}: loss {loss.item():.4f}, time {dt * 1000:.2f}ms, mfu -100.00%, grad norm {norm.item():.3f}")
    model.eval()
    torch.manual_seed(0)
    start = torch.tensor([[stoi["\n"]]])
    print("".join(itos[i] for i in model.generate(start, 160)[0].tolist()))


if __name__ == "__main__":
    main()
