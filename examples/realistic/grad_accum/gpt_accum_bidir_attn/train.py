"""Pretrain a tiny GPT on a synthetic event-token stream with gradient accumulation.

The stream imitates tokenised machine event logs: a sparse first-order Markov
chain over a 64-token vocabulary (each token has 3-5 likely successors).
Megatron-style logging: one line per `log_interval` optimizer steps.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# ----------------------------------------------------------------------------- config
SEED = 1234
VOCAB = 64
N_TOKENS = 120_000
SEQ_LEN = 32
MICRO_BS = 16
ACCUM = 4                      # global batch = MICRO_BS * ACCUM sequences
TRAIN_ITERS = 300
LR = 2e-3
MIN_LR = 1e-4
WARMUP = 30
WEIGHT_DECAY = 0.1
CLIP = 1.0
D_MODEL = 96
N_HEAD = 4
N_LAYER = 2
LOG_INTERVAL = 20
EVAL_INTERVAL = 50
EVAL_ITERS = 10


# ----------------------------------------------------------------------------- data
def build_corpus(seed=SEED):
    rng = np.random.default_rng(seed)
    trans = np.zeros((VOCAB, VOCAB))
    for t in range(VOCAB):
        k = rng.integers(3, 6)
        nxt = rng.choice(VOCAB, size=k, replace=False)
        trans[t, nxt] = rng.dirichlet(np.ones(k) * 2.0)
    cdf = trans.cumsum(1)
    u = rng.random(N_TOKENS)
    toks = np.empty(N_TOKENS, dtype=np.int64)
    toks[0] = 0
    for i in range(1, N_TOKENS):
        toks[i] = min(np.searchsorted(cdf[toks[i - 1]], u[i]), VOCAB - 1)
    return torch.from_numpy(toks)


class TokenStream:
    def __init__(self, tokens, seq_len, micro_bs, seed):
        self.tokens = tokens
        self.seq_len = seq_len
        self.micro_bs = micro_bs
        self.g = torch.Generator().manual_seed(seed)

    def next_batch(self):
        ix = torch.randint(len(self.tokens) - self.seq_len - 1, (self.micro_bs,), generator=self.g)
        x = torch.stack([self.tokens[i:i + self.seq_len] for i in ix])
        y = torch.stack([self.tokens[i + 1:i + 1 + self.seq_len] for i in ix])
        return x, y


# ----------------------------------------------------------------------------- model
class SelfAttention(nn.Module):
    def __init__(self, d_model, n_head):
        super().__init__()
        self.n_head = n_head
        self.head_dim = d_model // n_head
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        k = k.view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        v = v.view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        att = F.softmax(att, dim=-1)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, d_model, n_head):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = SelfAttention(d_model, n_head)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        x = x + self.mlp(self.ln2(x))
        return x


class GPT(nn.Module):
    def __init__(self, vocab, seq_len, d_model, n_head, n_layer):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, d_model)
        self.pos_emb = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList([Block(d_model, n_head) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.head.weight = self.tok_emb.weight
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx):
        T = idx.shape[1]
        pos = torch.arange(T, device=idx.device)
        x = self.tok_emb(idx) + self.pos_emb(pos)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


def lm_loss(model, batch):
    x, y = batch
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))


# ----------------------------------------------------------------------------- optim
def make_optimizer(model_or_params):
    if isinstance(model_or_params, nn.Module):
        decay, no_decay = [], []
        for n, p in model_or_params.named_parameters():
            (decay if p.dim() >= 2 else no_decay).append(p)
        groups = [{"params": decay, "weight_decay": WEIGHT_DECAY},
                  {"params": no_decay, "weight_decay": 0.0}]
    else:
        groups = [{"params": list(model_or_params), "weight_decay": WEIGHT_DECAY}]
    return torch.optim.AdamW(groups, lr=LR, betas=(0.9, 0.95))


def lr_at(it):
    if it < WARMUP:
        return LR * (it + 1) / WARMUP
    progress = (it - WARMUP) / max(1, TRAIN_ITERS - WARMUP)
    return MIN_LR + 0.5 * (LR - MIN_LR) * (1 + math.cos(math.pi * progress))


@torch.no_grad()
def evaluate(model, stream):
    model.eval()
    losses = [lm_loss(model, stream.next_batch()).item() for _ in range(EVAL_ITERS)]
    model.train()
    return sum(losses) / len(losses)


@torch.no_grad()
def next_token_accuracy(model, tokens, n_prompts=64, prompt_len=32, seed=7):
    """Score greedy next-token prediction the way generation uses the model:
    only the prompt is fed and the prediction at the last position is taken."""
    model.eval()
    g = torch.Generator().manual_seed(seed)
    ix = torch.randint(len(tokens) - prompt_len - 1, (n_prompts,), generator=g)
    prompts = torch.stack([tokens[i:i + prompt_len] for i in ix])
    target = torch.stack([tokens[i + prompt_len] for i in ix])
    logits = model(prompts)[:, -1, :]
    nll = F.cross_entropy(logits, target).item()
    acc = (logits.argmax(-1) == target).float().mean().item()
    model.train()
    return nll, acc


# ----------------------------------------------------------------------------- setup
def build(seed=SEED):
    torch.manual_seed(seed)
    tokens = build_corpus(seed)
    n_val = len(tokens) // 10
    train_tokens, val_tokens = tokens[:-n_val], tokens[-n_val:]
    model = GPT(VOCAB, SEQ_LEN, D_MODEL, N_HEAD, N_LAYER)
    train_stream = TokenStream(train_tokens, SEQ_LEN, MICRO_BS, seed)
    val_stream = TokenStream(val_tokens, SEQ_LEN, MICRO_BS, seed + 1)
    return model, train_stream, val_stream, val_tokens


def make_target():
    model, train_stream, _, _ = build()
    data = [train_stream.next_batch() for _ in range(ACCUM)]
    return {
        "model": model,
        "batch": data[0],
        "data": data,
        "loss_fn": lm_loss,
        "optimizer": make_optimizer(model),
        "make_optimizer": make_optimizer,
        "num_classes": VOCAB,
        "task": "lm",
    }


def main():
    model, train_stream, val_stream, val_tokens = build()
    opt = make_optimizer(model)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"> number of parameters: {n_params}")
    print(f"> micro batch size: {MICRO_BS} | grad accumulation steps: {ACCUM} | "
          f"global batch size: {MICRO_BS * ACCUM} | seq length: {SEQ_LEN}")
    print("> training ...")

    t0 = time.time()
    consumed = 0
    for it in range(1, TRAIN_ITERS + 1):
        lr = lr_at(it - 1)
        for group in opt.param_groups:
            group["lr"] = lr
        opt.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for _ in range(ACCUM):
            loss = lm_loss(model, train_stream.next_batch())
            (loss / ACCUM).backward()
            loss_sum += loss.item()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP).item()
        opt.step()
        consumed += MICRO_BS * ACCUM

        if it % LOG_INTERVAL == 0 or it == 1:
            elapsed = (time.time() - t0) * 1000 / (LOG_INTERVAL if it > 1 else 1)
            t0 = time.time()
            print(f" iteration {it:8d}/{TRAIN_ITERS:8d} | consumed samples: {consumed:10d} | "
                  f"elapsed time per iteration (ms): {elapsed:.1f} | learning rate: {lr:.3E} | "
                  f"global batch size: {MICRO_BS * ACCUM:5d} | lm loss: {loss_sum / ACCUM:.6E} | "
                  f"loss scale: 1.0 | grad norm: {grad_norm:.3f} | number of skipped iterations:   0 | "
                  f"number of nan iterations:   0 |")
        if it % EVAL_INTERVAL == 0:
            val = evaluate(model, val_stream)
            print("-" * 100)
            print(f" validation loss at iteration {it} | lm loss value: {val:.6E} | "
                  f"lm loss PPL: {math.exp(val):.6E} |")
            print("-" * 100)

    nll, acc = next_token_accuracy(model, val_tokens)
    print(f"> prompt continuation (val, 64 prompts): next-token nll {nll:.4f} | top-1 acc {acc:.3f}")


if __name__ == "__main__":
    main()
