"""Tiny decoder-only LM over a synthetic corpus of analytics SQL queries (char level)."""
import argparse
import math
import random
import time
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class ModelArgs:
    vocab_size: int = 0
    seq_len: int = 96
    dim: int = 96
    n_layers: int = 3
    n_heads: int = 4
    dropout: float = 0.0


def get_args(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch_size", type=int, default=24)
    ap.add_argument("--lr", type=float, default=3e-2)
    ap.add_argument("--betas", type=float, nargs=2, default=(0.9, 0.98))
    ap.add_argument("--eval_every", type=int, default=50)
    ap.add_argument("--seed", type=int, default=3)
    return ap.parse_args(argv)


TABLES = {"orders": ["order_id", "customer_id", "amount", "created_at", "status"],
          "customers": ["customer_id", "country", "signup_date", "segment"],
          "events": ["event_id", "user_id", "event_type", "ts", "session_id"],
          "payments": ["payment_id", "order_id", "method", "paid_at", "amount"]}
AGGS = ["COUNT(*)", "SUM(amount)", "AVG(amount)", "MAX(created_at)", "COUNT(DISTINCT user_id)"]


def synth_query(rnd):
    t = rnd.choice(list(TABLES))
    cols = TABLES[t]
    k = rnd.randint(1, 3)
    sel = ", ".join(rnd.sample(cols, k))
    q = f"SELECT {sel}"
    if rnd.random() < 0.5:
        q += f", {rnd.choice(AGGS)} AS agg_{rnd.randint(1, 9)}"
    q += f" FROM {t}"
    if rnd.random() < 0.7:
        c = rnd.choice(cols)
        q += f" WHERE {c} {rnd.choice(['=', '>', '<', '>='])} {rnd.randint(0, 5000)}"
    if "AS agg_" in q:
        q += f" GROUP BY {sel}"
    if rnd.random() < 0.4:
        q += f" ORDER BY {rnd.choice(cols)} {rnd.choice(['ASC', 'DESC'])} LIMIT {rnd.choice([10, 50, 100, 1000])}"
    return q + ";\n"


class CharCorpus:
    def __init__(self, n_queries=12000, seed=0):
        rnd = random.Random(seed)
        text = "".join(synth_query(rnd) for _ in range(n_queries))
        self.itos = sorted(set(text))
        self.stoi = {c: i for i, c in enumerate(self.itos)}
        ids = torch.tensor([self.stoi[c] for c in text])
        cut = int(len(ids) * 0.95)
        self.train, self.val = ids[:cut], ids[cut:]

    def batch(self, split, bs, seq_len, gen):
        src = self.train if split == "train" else self.val
        ix = torch.randint(0, len(src) - seq_len - 1, (bs,), generator=gen)
        x = torch.stack([src[i:i + seq_len] for i in ix])
        y = torch.stack([src[i + 1:i + seq_len + 1] for i in ix])
        return x, y


class Attention(nn.Module):
    def __init__(self, a: ModelArgs):
        super().__init__()
        self.n_heads = a.n_heads
        self.wqkv = nn.Linear(a.dim, 3 * a.dim, bias=False)
        self.wo = nn.Linear(a.dim, a.dim, bias=False)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.wqkv(x).split(C, dim=-1)
        q, k, v = (z.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, a: ModelArgs):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(a.dim), nn.LayerNorm(a.dim)
        self.attn = Attention(a)
        self.ffn = nn.Sequential(nn.Linear(a.dim, 4 * a.dim), nn.GELU(), nn.Linear(4 * a.dim, a.dim))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.ffn(self.norm2(x))


class Transformer(nn.Module):
    def __init__(self, a: ModelArgs):
        super().__init__()
        self.tok = nn.Embedding(a.vocab_size, a.dim)
        self.pos = nn.Parameter(torch.zeros(1, a.seq_len, a.dim))
        self.layers = nn.ModuleList(Block(a) for _ in range(a.n_layers))
        self.norm = nn.LayerNorm(a.dim)
        self.out = nn.Linear(a.dim, a.vocab_size, bias=False)
        nn.init.normal_(self.pos, std=0.02)
        nn.init.normal_(self.tok.weight, std=0.02)

    def forward(self, ids):
        h = self.tok(ids) + self.pos[:, :ids.shape[1]]
        for layer in self.layers:
            h = layer(h)
        return self.out(self.norm(h))


def loss_fn(model, batch):
    x, y = batch
    logits = model(x)
    return F.cross_entropy(logits.flatten(0, 1), y.flatten())


def setup(args):
    torch.manual_seed(args.seed)
    corpus = CharCorpus()
    margs = ModelArgs(vocab_size=len(corpus.itos))
    model = Transformer(margs)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr, betas=tuple(args.betas))
    return corpus, margs, model, opt


@torch.no_grad()
def evaluate(model, corpus, margs, args, n=8):
    model.eval()
    g = torch.Generator().manual_seed(1234)
    tot = sum(loss_fn(model, corpus.batch("val", args.batch_size, margs.seq_len, g)).item() for _ in range(n))
    model.train()
    return tot / n


def main():
    args = get_args()
    corpus, margs, model, opt = setup(args)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"vocab={margs.vocab_size} train_tokens={len(corpus.train)} params={n_params / 1e3:.1f}K lr={args.lr}")
    g = torch.Generator().manual_seed(args.seed)
    t0, ema = time.time(), None
    for step in range(1, args.steps + 1):
        batch = corpus.batch("train", args.batch_size, margs.seq_len, g)
        loss = loss_fn(model, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        ema = loss.item() if ema is None else 0.9 * ema + 0.1 * loss.item()
        if step % 10 == 0:
            dt = time.time() - t0
            tps = 10 * args.batch_size * margs.seq_len / dt
            print(f"step {step:4d} | loss {loss.item():.4f} (ema {ema:.4f}) | gnorm {gnorm:.3f} | "
                  f"lr {args.lr:.1e} | {tps:,.0f} tok/s")
            t0 = time.time()
        if step % args.eval_every == 0:
            print(f"---- eval @ step {step}: val_loss {evaluate(model, corpus, margs, args):.4f} "
                  f"(ppl {math.exp(evaluate(model, corpus, margs, args)):.2f})")


def make_target():
    args = get_args([])
    corpus, margs, model, opt = setup(args)
    batch = corpus.batch("train", args.batch_size, margs.seq_len, torch.Generator().manual_seed(args.seed))
    return {"model": model, "batch": batch, "loss_fn": loss_fn, "optimizer": opt}


if __name__ == "__main__":
    main()
