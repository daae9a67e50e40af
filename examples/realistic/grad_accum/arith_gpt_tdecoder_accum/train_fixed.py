"""
Decoder-only char LM on synthetic addition problems ("37+48=085").

Built on torch.nn.TransformerDecoder so we don't have to maintain our own
attention code. Training loop in the nanoGPT style: random windows from one
long token stream, gradient accumulation, AdamW, warmup + cosine, clip 1.0.
"""
import argparse
import math
import random
import time
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    block_size: int = 40
    micro_batch: int = 16
    accum_steps: int = 4
    n_layer: int = 2
    n_head: int = 4
    d_model: int = 64
    dropout: float = 0.0
    lr: float = 2e-3
    min_lr: float = 2e-4
    warmup: int = 30
    max_iters: int = 300
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    eval_every: int = 50
    eval_batches: int = 8
    log_every: int = 10
    n_train_problems: int = 20000
    n_val_problems: int = 2000
    seed: int = 7


VOCAB = list("0123456789+=\n")
STOI = {c: i for i, c in enumerate(VOCAB)}
ITOS = {i: c for c, i in STOI.items()}


def make_problems(n, seed):
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        lines.append(f"{a:02d}+{b:02d}={a + b:03d}\n")
    return lines


def encode(s):
    return torch.tensor([STOI[c] for c in s], dtype=torch.long)


def build_streams(cfg):
    train = encode("".join(make_problems(cfg.n_train_problems, cfg.seed)))
    val = encode("".join(make_problems(cfg.n_val_problems, cfg.seed + 1000)))
    return train, val


def sample_batch(stream, cfg, gen):
    ix = torch.randint(0, len(stream) - cfg.block_size - 1, (cfg.micro_batch,), generator=gen)
    x = torch.stack([stream[i:i + cfg.block_size] for i in ix.tolist()])
    y = torch.stack([stream[i + 1:i + 1 + cfg.block_size] for i in ix.tolist()])
    return x, y


def sinusoidal_encoding(max_len, d_model):
    position = torch.arange(max_len).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


class DecoderOnlyLM(nn.Module):
    def __init__(self, cfg, vocab_size):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(vocab_size, cfg.d_model)
        self.register_buffer("pos_enc", sinusoidal_encoding(cfg.block_size, cfg.d_model), persistent=False)
        layer = nn.TransformerDecoderLayer(
            d_model=cfg.d_model, nhead=cfg.n_head, dim_feedforward=4 * cfg.d_model,
            dropout=cfg.dropout, activation="gelu", batch_first=True, norm_first=True)
        self.decoder = nn.TransformerDecoder(layer, num_layers=cfg.n_layer)
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, vocab_size, bias=False)
        causal = nn.Transformer.generate_square_subsequent_mask(cfg.block_size)
        self.register_buffer("causal_mask", causal, persistent=False)
        nn.init.uniform_(self.tok_emb.weight, -0.1, 0.1)
        nn.init.normal_(self.head.weight, std=0.02)

    def forward(self, idx, targets=None):
        T = idx.size(1)
        h = self.tok_emb(idx) * math.sqrt(self.cfg.d_model) + self.pos_enc[:T]
        mask = self.causal_mask[:T, :T]
        h = self.decoder(h, h, tgt_mask=mask, memory_mask=mask, tgt_is_causal=True)
        logits = self.head(self.ln_f(h))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss


def lr_at(it, cfg):
    if it < cfg.warmup:
        return cfg.lr * (it + 1) / cfg.warmup
    progress = min(1.0, (it - cfg.warmup) / max(1, cfg.max_iters - cfg.warmup))
    return cfg.min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (cfg.lr - cfg.min_lr)


def build_optimizer(model, cfg):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (decay if p.dim() >= 2 and "emb" not in name else no_decay).append(p)
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr, betas=(0.9, 0.95))


def loss_fn(model, batch):
    x, y = batch
    _, loss = model(x, y)
    return loss


def make_target():
    cfg = Config()
    torch.manual_seed(cfg.seed)
    train, _ = build_streams(cfg)
    gen = torch.Generator().manual_seed(cfg.seed)
    model = DecoderOnlyLM(cfg, len(VOCAB))
    data = [sample_batch(train, cfg, gen) for _ in range(4)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": build_optimizer(model, cfg), "task": "lm", "num_classes": len(VOCAB)}


@torch.no_grad()
def evaluate(model, stream, cfg, gen):
    model.eval()
    losses = [loss_fn(model, sample_batch(stream, cfg, gen)).item() for _ in range(cfg.eval_batches)]
    model.train()
    return sum(losses) / len(losses)


@torch.no_grad()
def answer_accuracy(model, n=100, seed=4242):
    """Greedy-decode the 3 answer digits for held-out prompts."""
    model.eval()
    rng = random.Random(seed)
    correct, shown = 0, []
    for _ in range(n):
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        ctx = encode(f"{a:02d}+{b:02d}=").unsqueeze(0)
        for _ in range(3):
            logits, _ = model(ctx)
            nxt = logits[:, -1].argmax(-1, keepdim=True)
            ctx = torch.cat([ctx, nxt], dim=1)
        pred = "".join(ITOS[i] for i in ctx[0, -3:].tolist())
        correct += pred == f"{a + b:03d}"
        if len(shown) < 4:
            shown.append(f"{a:02d}+{b:02d}={pred}")
    model.train()
    return correct / n, shown


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--max_iters", type=int, default=None)
    args = parser.parse_args()
    cfg = Config()
    if args.max_iters is not None:
        cfg.max_iters = args.max_iters

    torch.manual_seed(cfg.seed)
    train, val = build_streams(cfg)
    print(f"train tokens {len(train):,} | val tokens {len(val):,} | vocab {len(VOCAB)}")
    model = DecoderOnlyLM(cfg, len(VOCAB))
    print(f"model params: {sum(p.numel() for p in model.parameters()) / 1e3:.1f}K")
    optimizer = build_optimizer(model, cfg)
    gen = torch.Generator().manual_seed(cfg.seed)
    eval_gen = torch.Generator().manual_seed(cfg.seed + 1)

    t0 = time.time()
    for it in range(cfg.max_iters + 1):
        lr = lr_at(it, cfg)
        for g in optimizer.param_groups:
            g["lr"] = lr
        if it % cfg.eval_every == 0 or it == cfg.max_iters:
            tr, va = evaluate(model, train, cfg, eval_gen), evaluate(model, val, cfg, eval_gen)
            print(f"step {it}: train loss {tr:.4f}, val loss {va:.4f}")
        if it == cfg.max_iters:
            break

        optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for _ in range(cfg.accum_steps):
            batch = sample_batch(train, cfg, gen)
            loss = loss_fn(model, batch) / cfg.accum_steps
            loss.backward()
            total += loss.item()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()

        dt = (time.time() - t0) * 1000
        t0 = time.time()
        if it % cfg.log_every == 0:
            print(f"iter {it}: loss {total:.4f}, time {dt:.2f}ms, norm {norm.item():.3f}, lr {lr:.2e}")

    acc, shown = answer_accuracy(model)
    print(f"held-out answer accuracy (greedy): {acc * 100:.1f}%")
    for s in shown:
        print("  sample:", s)


if __name__ == "__main__":
    main()
