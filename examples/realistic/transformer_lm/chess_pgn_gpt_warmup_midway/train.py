# Character-level GPT on synthetic chess game records (PGN movetext).
# Short smoke-test budget of the long-run config: the warmup schedule is the long run's.
import math
import random
import time

import torch
import torch.nn as nn
from torch.nn import functional as F

# ---------------- config ----------------
batch_size = 16
block_size = 64
n_layer = 3
n_head = 4
n_embd = 96
dropout = 0.1
learning_rate = 2e-3
warmup_iters = 500
lr_decay_iters = 5000
min_lr = 2e-4
max_iters = 220          # smoke test; the full run uses 5000
eval_interval = 55
eval_iters = 8
log_interval = 5
weight_decay = 0.1
grad_clip = 1.0
seed = 2024
# ----------------------------------------

FILES, RANKS = "abcdefgh", "12345678"
PIECES = ["N", "B", "R", "Q", "K", ""] + [""] * 4


def random_move(rnd):
    if rnd.random() < 0.04:
        return rnd.choice(["O-O", "O-O-O"])
    p = rnd.choice(PIECES)
    cap = "x" if rnd.random() < 0.2 else ""
    if p == "" and cap:
        p = rnd.choice(FILES)
    sq = rnd.choice(FILES) + rnd.choice(RANKS)
    chk = "+" if rnd.random() < 0.07 else ""
    return f"{p}{cap}{sq}{chk}"


def random_game(rnd):
    n = rnd.randint(18, 60)
    out = []
    for i in range(1, n + 1):
        out.append(f"{i}. {random_move(rnd)} {random_move(rnd)}")
    res = rnd.choice(["1-0", "0-1", "1/2-1/2"])
    return " ".join(out) + f" {res}\n"


rnd = random.Random(seed)
text = "".join(random_game(rnd) for _ in range(2500))
chars = sorted(set(text))
vocab_size = len(chars)
stoi = {ch: i for i, ch in enumerate(chars)}
data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
split = int(0.9 * len(data))
train_data, val_data = data[:split], data[split:]


def get_batch(which, g=None):
    d = train_data if which == "train" else val_data
    ix = torch.randint(len(d) - block_size, (batch_size,), generator=g)
    x = torch.stack([d[i:i + block_size] for i in ix])
    y = torch.stack([d[i + 1:i + block_size + 1] for i in ix])
    return x, y


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.attn_drop = nn.Dropout(dropout)
        self.resid_drop = nn.Dropout(dropout)
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size))
                             .view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(n_embd, dim=2)
        k = k.view(B, T, n_head, C // n_head).transpose(1, 2)
        q = q.view(B, T, n_head, C // n_head).transpose(1, 2)
        v = v.view(B, T, n_head, C // n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = self.attn_drop(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_drop(self.c_proj(y))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(),
                                 nn.Linear(4 * n_embd, n_embd), nn.Dropout(dropout))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList([Block() for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
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
        t = idx.size(1)
        pos = torch.arange(0, t, dtype=torch.long)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None if targets is None else F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


def get_lr(it):
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return min_lr + coeff * (learning_rate - min_lr)


def build_optimizer(model):
    params = {pn: p for pn, p in model.named_parameters() if p.requires_grad}
    decay = [p for n, p in params.items() if p.dim() >= 2]
    nodecay = [p for n, p in params.items() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": nodecay, "weight_decay": 0.0}],
                             lr=learning_rate, betas=(0.9, 0.95))


@torch.no_grad()
def estimate_loss(model):
    out = {}
    model.eval()
    g = torch.Generator().manual_seed(0)
    for s in ["train", "val"]:
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            X, Y = get_batch(s, g)
            losses[k] = model(X, Y)[1].item()
        out[s] = losses.mean()
    model.train()
    return out


def loss_fn(model, batch):
    return model(*batch)[1]


def make_target():
    torch.manual_seed(seed)
    model = GPT()
    return {"model": model, "batch": get_batch("train"), "loss_fn": loss_fn,
            "optimizer": build_optimizer(model)}


if __name__ == "__main__":
    torch.manual_seed(seed)
    model = GPT()
    print(f"number of parameters: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M, "
          f"vocab_size={vocab_size}, train tokens={len(train_data):,}")
    optimizer = build_optimizer(model)
    t0 = time.time()
    for iter_num in range(max_iters + 1):
        lr = get_lr(iter_num)
        for param_group in optimizer.param_groups:
            param_group["lr"] = lr
        if iter_num % eval_interval == 0:
            losses = estimate_loss(model)
            print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}, lr {lr:.3e}")
        if iter_num == max_iters:
            break
        X, Y = get_batch("train")
        _, loss = model(X, Y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        dt = time.time() - t0
        t0 = time.time()
        if iter_num % log_interval == 0:
            print(f"iter {iter_num}: loss {loss.item():.4f}, time {dt * 1000:.2f}ms, lr {lr:.3e}")
