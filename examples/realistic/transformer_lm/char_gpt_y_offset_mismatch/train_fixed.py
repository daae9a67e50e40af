"""
Character-level GPT on synthetic coastal weather bulletins (nanoGPT-style, CPU).
"""
import math
import random
import time

import torch
import torch.nn as nn
from torch.nn import functional as F

# -----------------------------------------------------------------------------
out_dir = 'out-bulletins'
eval_interval = 100
log_interval = 20
eval_iters = 10
batch_size = 16
block_size = 64
n_layer = 2
n_head = 4
n_embd = 96
dropout = 0.0
learning_rate = 2e-3
max_iters = 500
weight_decay = 0.1
beta1, beta2 = 0.9, 0.99
grad_clip = 1.0
warmup_iters = 50
min_lr = 2e-4
seed = 1337
# -----------------------------------------------------------------------------

STATIONS = ['harbor', 'north cape', 'east point', 'lighthouse', 'west shoal', 'bay bridge']
DAYS = ['monday', 'tuesday', 'wednesday', 'thursday', 'friday', 'saturday', 'sunday']
DIRS = ['north', 'northeast', 'east', 'southeast', 'south', 'southwest', 'west', 'northwest']
SEAS = ['calm', 'slight', 'moderate', 'rough']
VIS = ['good', 'moderate', 'poor']


def make_text(n, rng):
    lines = []
    for _ in range(n):
        wind = rng.randint(2, 38)
        sea = SEAS[min(3, wind // 10)]
        vis = rng.choice(VIS)
        lines.append(f"{rng.choice(DAYS)} {rng.choice(STATIONS)}: wind {rng.choice(DIRS)} {wind} knots, "
                     f"sea {sea}, visibility {vis}.\n")
    return ''.join(lines)


text = make_text(6000, random.Random(seed))
chars = sorted(set(text))
vocab_size = len(chars)
stoi = {ch: i for i, ch in enumerate(chars)}
itos = {i: ch for i, ch in enumerate(chars)}
encode = lambda s: [stoi[c] for c in s]
decode = lambda l: ''.join(itos[i] for i in l)

data = torch.tensor(encode(text), dtype=torch.long)
n = int(0.9 * len(data))
train_data = data[:n]
val_data = data[n:]


def get_batch(split):
    data = train_data if split == 'train' else val_data
    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([data[i:i + block_size] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + block_size] for i in ix])
    return x, y


class CausalSelfAttention(nn.Module):

    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.register_buffer('bias', torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(n_embd, dim=2)
        k = k.view(B, T, n_head, C // n_head).transpose(1, 2)
        q = q.view(B, T, n_head, C // n_head).transpose(1, 2)
        v = v.view(B, T, n_head, C // n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))
        att = F.softmax(att, dim=-1)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
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
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):

    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList([Block() for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0):
        for _ in range(max_new_tokens):
            logits, _ = self(idx[:, -block_size:])
            probs = F.softmax(logits[:, -1, :] / temperature, dim=-1)
            idx = torch.cat((idx, torch.multinomial(probs, num_samples=1)), dim=1)
        return idx


def configure_optimizers(params):
    params = [p for p in params if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    nodecay = [p for p in params if p.dim() < 2]
    groups = [{'params': decay, 'weight_decay': weight_decay}, {'params': nodecay, 'weight_decay': 0.0}]
    return torch.optim.AdamW(groups, lr=learning_rate, betas=(beta1, beta2))


def loss_fn(model, batch):
    X, Y = batch
    _, loss = model(X, Y)
    return loss


def get_lr(it):
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    decay_ratio = (it - warmup_iters) / (max_iters - warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return min_lr + coeff * (learning_rate - min_lr)


@torch.no_grad()
def estimate_loss(model):
    out = {}
    model.eval()
    for split in ['train', 'val']:
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            losses[k] = loss_fn(model, get_batch(split)).item()
        out[split] = losses.mean()
    model.train()
    return out


def make_target():
    torch.manual_seed(seed)
    model = GPT()
    data = [get_batch('train') for _ in range(3)]
    return {'model': model, 'batch': data[0], 'data': data, 'loss_fn': loss_fn,
            'optimizer': configure_optimizers(model.parameters()), 'make_optimizer': configure_optimizers,
            'num_classes': vocab_size, 'task': 'lm'}


def main():
    torch.manual_seed(seed)
    model = GPT()
    print(f"vocab size {vocab_size}, {len(train_data):,} train chars, {len(val_data):,} val chars")
    print("number of parameters: %.2fM" % (sum(p.numel() for p in model.parameters()) / 1e6,))
    optimizer = configure_optimizers(model.parameters())

    X, Y = get_batch('train')
    t0 = time.time()
    for iter_num in range(max_iters + 1):
        lr = get_lr(iter_num)
        for param_group in optimizer.param_groups:
            param_group['lr'] = lr

        if iter_num % eval_interval == 0:
            losses = estimate_loss(model)
            print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
        if iter_num == max_iters:
            break

        loss = loss_fn(model, (X, Y))
        X, Y = get_batch('train')
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()

        t1 = time.time()
        dt = t1 - t0
        t0 = t1
        if iter_num % log_interval == 0:
            print(f"iter {iter_num}: loss {loss.item():.4f}, time {dt * 1000:.2f}ms, mfu -100.00%")

    model.eval()
    start = torch.tensor([encode('monday harbor: ')], dtype=torch.long)
    print('---------------')
    print(decode(model.generate(start, 120, temperature=0.8)[0].tolist()))
    print('---------------')


if __name__ == '__main__':
    main()
