"""
Small GPT on synthetic bank-ledger lines, char level.

nanoGPT-style loop: warmup + cosine LR, AdamW (no decay on norms/biases),
gradient accumulation with loss scaled by 1/accum, bf16 autocast on CPU and
global-norm clipping at 1.0. The logged norm is the total norm *before*
clipping (what clip_grad_norm_ returns).
"""
import argparse
import math
import random
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

DEFAULTS = dict(
    micro_batch=8,
    block_size=32,
    accum_steps=4,
    n_layer=2,
    n_head=4,
    n_embd=48,
    max_lr=2e-3,
    min_lr=2e-4,
    warmup_iters=60,
    max_iters=180,
    weight_decay=0.1,
    grad_clip=1.0,
    eval_interval=30,
    eval_iters=8,
    log_interval=10,
    seed=2024,
)

ACCOUNTS = ["4471", "0932", "7710", "2285", "5106"]
KINDS = ["debit", "credit", "fee", "refund"]


def ledger_text(n_lines, seed):
    rng = random.Random(seed)
    out = []
    for _ in range(n_lines):
        m, d = rng.randint(1, 12), rng.randint(1, 28)
        acct, kind = rng.choice(ACCOUNTS), rng.choice(KINDS)
        amt = rng.randint(1, 999) if kind != "fee" else rng.choice([5, 10, 25])
        out.append(f"2024-{m:02d}-{d:02d} acct {acct} {kind} {amt}.{rng.randint(0, 99):02d}")
    return "\n".join(out) + "\n"


class Tokenizer:
    def __init__(self, text):
        self.chars = sorted(set(text))
        self.stoi = {c: i for i, c in enumerate(self.chars)}

    def encode(self, s):
        return torch.tensor([self.stoi[c] for c in s], dtype=torch.long)

    def decode(self, ids):
        return "".join(self.chars[i] for i in ids)


def prepare(cfg):
    text = ledger_text(5000, cfg["seed"])
    tok = Tokenizer(text)
    ids = tok.encode(text)
    split = int(0.9 * len(ids))
    return tok, ids[:split], ids[split:]


def get_batch(ids, cfg, gen):
    B, T = cfg["micro_batch"], cfg["block_size"]
    ix = torch.randint(len(ids) - T - 1, (B,), generator=gen)
    x = torch.stack([ids[i:i + T] for i in ix.tolist()])
    y = torch.stack([ids[i + 1:i + T + 1] for i in ix.tolist()])
    return x, y


class SelfAttention(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_head, C // self.n_head).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.ln1 = nn.LayerNorm(n_embd)
        self.attn = SelfAttention(n_embd, n_head)
        self.ln2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size, cfg):
        super().__init__()
        E = cfg["n_embd"]
        self.block_size = cfg["block_size"]
        self.tok = nn.Embedding(vocab_size, E)
        self.pos = nn.Embedding(cfg["block_size"], E)
        self.blocks = nn.Sequential(*[Block(E, cfg["n_head"]) for _ in range(cfg["n_layer"])])
        self.ln_f = nn.LayerNorm(E)
        self.head = nn.Linear(E, vocab_size, bias=False)
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx, targets=None):
        T = idx.size(1)
        x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
        logits = self.head(self.ln_f(self.blocks(x)))
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())

    @torch.no_grad()
    def generate(self, idx, n):
        for _ in range(n):
            logits, _ = self(idx[:, -self.block_size:])
            nxt = torch.multinomial(F.softmax(logits[:, -1].float(), dim=-1), 1)
            idx = torch.cat([idx, nxt], dim=1)
        return idx


def make_optimizer(model, cfg):
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": cfg["weight_decay"]},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=cfg["max_lr"], betas=(0.9, 0.95))


def get_lr(it, cfg):
    if it < cfg["warmup_iters"]:
        return cfg["max_lr"] * (it + 1) / cfg["warmup_iters"]
    ratio = (it - cfg["warmup_iters"]) / max(1, cfg["max_iters"] - cfg["warmup_iters"])
    return cfg["min_lr"] + 0.5 * (1 + math.cos(math.pi * min(1.0, ratio))) * (cfg["max_lr"] - cfg["min_lr"])


def autocast():
    return torch.autocast(device_type="cpu", dtype=torch.bfloat16)


def loss_fn(model, batch):
    x, y = batch
    with autocast():
        _, loss = model(x, y)
    return loss


def make_target():
    cfg = dict(DEFAULTS)
    torch.manual_seed(cfg["seed"])
    tok, train_ids, _ = prepare(cfg)
    gen = torch.Generator().manual_seed(cfg["seed"])
    data = [get_batch(train_ids, cfg, gen) for _ in range(4)]
    model = GPT(len(tok.chars), cfg)
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model, cfg), "task": "lm", "num_classes": len(tok.chars)}


@torch.no_grad()
def estimate_loss(model, splits, cfg, gen):
    model.eval()
    out = {}
    for name, ids in splits.items():
        out[name] = sum(loss_fn(model, get_batch(ids, cfg, gen)).item() for _ in range(cfg["eval_iters"])) / cfg["eval_iters"]
    model.train()
    return out


def main():
    parser = argparse.ArgumentParser()
    for k, v in DEFAULTS.items():
        parser.add_argument(f"--{k}", type=type(v), default=v)
    cfg = vars(parser.parse_args())

    torch.manual_seed(cfg["seed"])
    tok, train_ids, val_ids = prepare(cfg)
    model = GPT(len(tok.chars), cfg)
    optimizer = make_optimizer(model, cfg)
    print(f"vocab {len(tok.chars)}, train {len(train_ids):,} chars, val {len(val_ids):,} chars, "
          f"{sum(p.numel() for p in model.parameters()) / 1e6:.3f}M params")
    print(f"tokens per iter: {cfg['accum_steps'] * cfg['micro_batch'] * cfg['block_size']}, "
          f"dtype bfloat16 (autocast), grad_clip {cfg['grad_clip']}")
    gen = torch.Generator().manual_seed(cfg["seed"])
    eval_gen = torch.Generator().manual_seed(cfg["seed"] + 1)

    t0 = time.time()
    for it in range(cfg["max_iters"] + 1):
        lr = get_lr(it, cfg)
        for g in optimizer.param_groups:
            g["lr"] = lr
        if it % cfg["eval_interval"] == 0:
            losses = estimate_loss(model, {"train": train_ids, "val": val_ids}, cfg, eval_gen)
            print(f"step {it}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
        if it == cfg["max_iters"]:
            break

        for micro in range(cfg["accum_steps"]):
            x, y = get_batch(train_ids, cfg, gen)
            loss = loss_fn(model, (x, y)) / cfg["accum_steps"]
            loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["grad_clip"])
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

        dt = time.time() - t0
        t0 = time.time()
        if it % cfg["log_interval"] == 0:
            print(f"iter {it}: loss {loss.item() * cfg['accum_steps']:.4f}, time {dt * 1000:.2f}ms, "
                  f"lr {lr:.2e}, norm {norm.item():.4f}")

    model.eval()
    with autocast():
        out = model.generate(tok.encode("2024-").unsqueeze(0), 120)
    print("sample:\n" + tok.decode(out[0].tolist()))


if __name__ == "__main__":
    main()
