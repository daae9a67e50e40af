"""
Tiny char-level GPT trained on a heartbeat/status log from a small cluster.
The log is extremely regular: eight nodes report in random order,
almost always "OK". nanoGPT-style training loop and logging.
"""
import math
import random
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

config = dict(
    seed=7,
    n_lines=9000,
    block_size=96,
    batch_size=12,
    n_layer=2,
    n_head=4,
    n_embd=64,
    dropout=0.0,
    learning_rate=1e-3,
    min_lr=1e-4,
    warmup_iters=40,
    max_iters=600,
    weight_decay=0.1,
    grad_clip=1.0,
    eval_interval=100,
    eval_iters=10,
    log_interval=25,
)


def make_log(n_lines, rng):
    lines = []
    for _ in range(n_lines):
        node = rng.randint(1, 8)
        status = 'OK' if rng.random() < 0.95 else 'WARN'
        lines.append(f"heartbeat node-{node:02d} status {status}\n")
    return ''.join(lines)


class Corpus:
    def __init__(self, cfg):
        text = make_log(cfg['n_lines'], random.Random(cfg['seed']))
        self.chars = sorted(set(text))
        self.stoi = {c: i for i, c in enumerate(self.chars)}
        ids = torch.tensor([self.stoi[c] for c in text], dtype=torch.long)
        cut = int(0.9 * len(ids))
        self.splits = {'train': ids[:cut], 'val': ids[cut:]}
        self.block_size = cfg['block_size']
        self.batch_size = cfg['batch_size']

    @property
    def vocab_size(self):
        return len(self.chars)

    def decode(self, ids):
        return ''.join(self.chars[i] for i in ids)

    def get_batch(self, split, gen):
        d = self.splits[split]
        ix = torch.randint(len(d) - self.block_size - 1, (self.batch_size,), generator=gen)
        x = torch.stack([d[i:i + self.block_size] for i in ix])
        y = torch.stack([d[i + 1:i + 1 + self.block_size] for i in ix])
        return x, y


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C = cfg['n_embd']
        self.n_head = cfg['n_head']
        self.ln_1 = nn.LayerNorm(C)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.mlp = nn.Sequential(nn.Linear(C, 4 * C), nn.GELU(), nn.Linear(4 * C, C))

    def attn(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).view(B, T, 3, self.n_head, C // self.n_head).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, cfg, vocab_size):
        super().__init__()
        self.block_size = cfg['block_size']
        self.wte = nn.Embedding(vocab_size, cfg['n_embd'])
        self.wpe = nn.Embedding(cfg['block_size'], cfg['n_embd'])
        self.h = nn.ModuleList([Block(cfg) for _ in range(cfg['n_layer'])])
        self.ln_f = nn.LayerNorm(cfg['n_embd'])
        self.lm_head = nn.Linear(cfg['n_embd'], vocab_size, bias=False)
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx, targets=None):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1)))
        for blk in self.h:
            x = blk(x)
        logits = self.lm_head(self.ln_f(x))
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.flatten(0, 1), targets.flatten())

    @torch.no_grad()
    def generate(self, idx, n_new):
        for _ in range(n_new):
            logits, _ = self(idx[:, -self.block_size:])
            nxt = torch.multinomial(F.softmax(logits[:, -1], dim=-1), 1)
            idx = torch.cat([idx, nxt], dim=1)
        return idx


def loss_fn(model, batch):
    return model(*batch)[1]


def make_optimizer(params, cfg=config):
    params = list(params)
    decay = [p for p in params if p.dim() >= 2]
    other = [p for p in params if p.dim() < 2]
    return torch.optim.AdamW([{'params': decay, 'weight_decay': cfg['weight_decay']},
                              {'params': other, 'weight_decay': 0.0}],
                             lr=cfg['learning_rate'], betas=(0.9, 0.95))


def get_lr(it, cfg=config):
    if it < cfg['warmup_iters']:
        return cfg['learning_rate'] * (it + 1) / cfg['warmup_iters']
    ratio = (it - cfg['warmup_iters']) / (cfg['max_iters'] - cfg['warmup_iters'])
    return cfg['min_lr'] + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (cfg['learning_rate'] - cfg['min_lr'])


@torch.no_grad()
def estimate_loss(model, corpus, gen, cfg=config):
    model.eval()
    out = {s: sum(loss_fn(model, corpus.get_batch(s, gen)).item() for _ in range(cfg['eval_iters'])) / cfg['eval_iters']
           for s in ('train', 'val')}
    model.train()
    return out


def setup(cfg=config):
    torch.manual_seed(cfg['seed'])
    corpus = Corpus(cfg)
    model = GPT(cfg, corpus.vocab_size)
    return corpus, model, make_optimizer(model.parameters(), cfg)


def make_target():
    corpus, model, optimizer = setup()
    gen = torch.Generator().manual_seed(config['seed'])
    data = [corpus.get_batch('train', gen) for _ in range(3)]
    return {'model': model, 'batch': data[0], 'data': data, 'loss_fn': loss_fn,
            'optimizer': optimizer, 'make_optimizer': make_optimizer,
            'num_classes': corpus.vocab_size, 'task': 'lm'}


def main(cfg=config):
    corpus, model, optimizer = setup(cfg)
    g_train = torch.Generator().manual_seed(cfg['seed'])
    g_eval = torch.Generator().manual_seed(cfg['seed'] + 1)
    print(f"vocab_size = {corpus.vocab_size}, train {len(corpus.splits['train']):,} chars, "
          f"val {len(corpus.splits['val']):,} chars")
    print("number of parameters: %.2fM" % (sum(p.numel() for p in model.parameters()) / 1e6))

    t0 = time.time()
    for it in range(cfg['max_iters'] + 1):
        lr = get_lr(it, cfg)
        for pg in optimizer.param_groups:
            pg['lr'] = lr
        if it % cfg['eval_interval'] == 0:
            losses = estimate_loss(model, corpus, g_eval, cfg)
            print(f"step {it}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
        if it == cfg['max_iters']:
            break
        loss = loss_fn(model, corpus.get_batch('train', g_train))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg['grad_clip'])
        optimizer.step()
        t1 = time.time()
        dt, t0 = t1 - t0, t1
        if it % cfg['log_interval'] == 0:
            print(f"iter {it}: loss {loss.item():.4f}, time {dt * 1000:.2f}ms, mfu -100.00%")

    model.eval()
    prompt = torch.tensor([[corpus.stoi[c] for c in "heartbeat "]], dtype=torch.long)
    torch.manual_seed(cfg['seed'])
    print(corpus.decode(model.generate(prompt, 120)[0].tolist()))


if __name__ == '__main__':
    main()
