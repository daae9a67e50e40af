"""
Char-level GPT on a synthetic SQL query log (nanoGPT-style, CPU, fp32).
A single wide head (192) is enough for the alias/column structure of the corpus.
"""
import math
import random
import time

import torch
import torch.nn as nn
from torch.nn import functional as F

# config ----------------------------------------------------------------------
eval_interval = 50
log_interval = 10
eval_iters = 8
batch_size = 16
block_size = 64
n_layer = 2
n_head = 1
n_embd = 192
learning_rate = 3e-3
max_iters = 300
weight_decay = 0.0
beta1, beta2 = 0.9, 0.99
seed = 2024
# -----------------------------------------------------------------------------

TABLES = {'orders': ['id', 'customer_id', 'total', 'created_at', 'status'],
          'customers': ['id', 'name', 'country', 'signup_date'],
          'items': ['id', 'order_id', 'sku', 'qty', 'price'],
          'shipments': ['id', 'order_id', 'carrier', 'shipped_at']}
OPS = ['=', '>', '<', '>=']


def make_queries(n, rng):
    out = []
    for _ in range(n):
        t = rng.choice(list(TABLES))
        cols = rng.sample(TABLES[t], k=rng.randint(1, 3))
        alias = t[0]
        q = f"SELECT {', '.join(alias + '.' + c for c in cols)} FROM {t} {alias}"
        if rng.random() < 0.7:
            c = rng.choice(TABLES[t])
            q += f" WHERE {alias}.{c} {rng.choice(OPS)} {rng.randint(0, 999)}"
        if rng.random() < 0.3:
            q += f" ORDER BY {alias}.{rng.choice(cols)} DESC"
        if rng.random() < 0.4:
            q += f" LIMIT {rng.choice([10, 50, 100])}"
        out.append(q + ";\n")
    return ''.join(out)


text = make_queries(5000, random.Random(seed))
chars = sorted(set(text))
vocab_size = len(chars)
stoi = {c: i for i, c in enumerate(chars)}
itos = {i: c for c, i in stoi.items()}
data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
n = int(0.9 * len(data))
train_data, val_data = data[:n], data[n:]


def get_batch(split, gen=None):
    d = train_data if split == 'train' else val_data
    ix = torch.randint(len(d) - block_size, (batch_size,), generator=gen)
    x = torch.stack([d[i:i + block_size] for i in ix])
    y = torch.stack([d[i + 1:i + 1 + block_size] for i in ix])
    return x, y


class CausalSelfAttention(nn.Module):

    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.register_buffer('mask', torch.tril(torch.ones(block_size, block_size, dtype=torch.bool)))

    def forward(self, x):
        B, T, C = x.size()
        hs = C // n_head
        q, k, v = self.c_attn(x).split(n_embd, dim=2)
        q = q.view(B, T, n_head, hs).transpose(1, 2)
        k = k.view(B, T, n_head, hs).transpose(1, 2)
        v = v.view(B, T, n_head, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(~self.mask[:T, :T], float('-inf'))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class Block(nn.Module):

    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):

    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.blocks = nn.Sequential(*[Block() for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)

    def forward(self, idx, targets=None):
        t = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(t))
        logits = self.lm_head(self.ln_f(self.blocks(x)))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


def loss_fn(model, batch):
    return model(*batch)[1]


def global_grad_norm(model):
    norms = [p.grad.detach().norm(2) for p in model.parameters() if p.grad is not None]
    return torch.stack(norms).norm(2).item()


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=learning_rate, betas=(beta1, beta2), weight_decay=weight_decay)


@torch.no_grad()
def estimate_loss(model, gen):
    model.eval()
    out = {}
    for split in ('train', 'val'):
        out[split] = sum(loss_fn(model, get_batch(split, gen)).item() for _ in range(eval_iters)) / eval_iters
    model.train()
    return out


def make_target():
    torch.manual_seed(seed)
    model = GPT()
    g = torch.Generator().manual_seed(seed)
    data = [get_batch('train', g) for _ in range(3)]
    return {'model': model, 'batch': data[0], 'data': data, 'loss_fn': loss_fn,
            'optimizer': make_optimizer(model.parameters()), 'make_optimizer': make_optimizer,
            'num_classes': vocab_size, 'task': 'lm'}


def main():
    torch.manual_seed(seed)
    model = GPT()
    optimizer = make_optimizer(model.parameters())
    g_train = torch.Generator().manual_seed(seed)
    g_eval = torch.Generator().manual_seed(seed + 1)
    print(f"vocab_size = {vocab_size}, train chars {len(train_data):,}, val chars {len(val_data):,}")
    print("number of parameters: %.2fM" % (sum(p.numel() for p in model.parameters()) / 1e6,))

    t0 = time.time()
    for iter_num in range(max_iters + 1):
        if iter_num % eval_interval == 0:
            losses = estimate_loss(model, g_eval)
            print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
        if iter_num == max_iters:
            break
        X, Y = get_batch('train', g_train)
        loss = loss_fn(model, (X, Y))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = global_grad_norm(model)
        optimizer.step()
        t1 = time.time()
        dt, t0 = t1 - t0, t1
        if iter_num % log_interval == 0:
            print(f"iter {iter_num}: loss {loss.item():.4f}, time {dt * 1000:.2f}ms, mfu -100.00%, grad norm {gnorm:.3f}")


if __name__ == '__main__':
    main()
