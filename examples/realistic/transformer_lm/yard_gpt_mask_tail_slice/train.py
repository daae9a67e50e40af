"""Char-level GPT on rail-yard dispatch messages (nanoGPT-style, CPU sized)."""
import math
import random
import time
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

# -----------------------------------------------------------------------------
# run config
batch_size = 32
train_ctx = 48            # training window; the model itself supports up to block_size
max_iters = 700
eval_interval = 175
eval_iters = 20
log_interval = 25
learning_rate = 3e-3
min_lr = 3e-4
warmup_iters = 50
weight_decay = 0.1
grad_clip = 1.0
seed = 1337
# -----------------------------------------------------------------------------


def make_corpus(n_lines=5200, seed=0):
    rng = random.Random(seed)
    yards = ["NORTH", "SOUTH", "EAST", "KILN", "DOCK", "MILL"]
    kinds = ["COAL", "GRAIN", "STEEL", "TANK", "BOX", "AUTO"]
    lines = []
    for _ in range(n_lines):
        train_no = rng.randint(100, 999)
        src, dst = rng.sample(yards, 2)
        hh, mm = rng.randint(0, 23), rng.choice([0, 15, 30, 45])
        cars = rng.randint(8, 60)
        kind = rng.choice(kinds)
        track = rng.randint(1, 9)
        if rng.random() < 0.5:
            lines.append(f"TRN {train_no} {src}>{dst} DEP {hh:02d}:{mm:02d} TRK {track} {cars} {kind}\n")
        else:
            late = rng.choice([5, 10, 20, 40])
            lines.append(f"TRN {train_no} HOLD {src} TRK {track} LATE {late}M {kind}\n")
    return "".join(lines)


text = make_corpus()
chars = sorted(set(text))
vocab_size = len(chars)
stoi = {ch: i for i, ch in enumerate(chars)}
itos = {i: ch for ch, i in stoi.items()}
encode = lambda s: [stoi[c] for c in s]
decode = lambda ids: "".join(itos[i] for i in ids)

data = torch.tensor(encode(text), dtype=torch.long)
n = int(0.9 * len(data))
train_data, val_data = data[:n], data[n:]


def get_batch(split, gen=None):
    d = train_data if split == "train" else val_data
    ix = torch.randint(len(d) - train_ctx - 1, (batch_size,), generator=gen)
    x = torch.stack([d[i:i + train_ctx] for i in ix])
    y = torch.stack([d[i + 1:i + 1 + train_ctx] for i in ix])
    return x, y


@dataclass
class GPTConfig:
    block_size: int = 128
    vocab_size: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    dropout: float = 0.0


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=False)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=False)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        mask = torch.tril(torch.ones(config.block_size, config.block_size, dtype=torch.bool))
        self.register_buffer("mask", mask.view(1, 1, config.block_size, config.block_size), persistent=False)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        hs = C // self.n_head
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(~self.mask[:, :, -T:, :T], float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=False)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=False)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=nn.LayerNorm(config.n_embd),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def get_num_params(self):
        n_params = sum(p.numel() for p in self.parameters())
        return n_params - self.transformer.wpe.weight.numel()

    def forward(self, idx, targets=None):
        b, t = idx.size()
        assert t <= self.config.block_size, f"sequence length {t} > block size {self.config.block_size}"
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        logits = self.lm_head(x)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss

    def configure_optimizers(self, weight_decay, learning_rate, betas):
        params = [p for p in self.parameters() if p.requires_grad]
        decay = [p for p in params if p.dim() >= 2]
        nodecay = [p for p in params if p.dim() < 2]
        groups = [
            {"params": decay, "weight_decay": weight_decay},
            {"params": nodecay, "weight_decay": 0.0},
        ]
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas)

    def estimate_mfu(self, fwdbwd_per_iter, dt):
        N = self.get_num_params()
        cfg = self.config
        L, H, Q, T = cfg.n_layer, cfg.n_head, cfg.n_embd // cfg.n_head, train_ctx
        flops_per_token = 6 * N + 12 * L * H * Q * T
        flops_per_iter = flops_per_token * T * fwdbwd_per_iter
        flops_achieved = flops_per_iter * (1.0 / dt)
        flops_promised = 312e12
        return flops_achieved / flops_promised

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, max_ctx=None):
        max_ctx = max_ctx or self.config.block_size
        for _ in range(max_new_tokens):
            idx_cond = idx if idx.size(1) <= max_ctx else idx[:, -max_ctx:]
            logits, _ = self(idx_cond)
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < v[:, [-1]]] = -float("Inf")
            probs = F.softmax(logits, dim=-1)
            idx_next = torch.multinomial(probs, num_samples=1)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx


def get_lr(it):
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > max_iters:
        return min_lr
    decay_ratio = (it - warmup_iters) / (max_iters - warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return min_lr + coeff * (learning_rate - min_lr)


def build_model():
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=vocab_size))


def loss_fn(model, batch):
    x, y = batch
    _, loss = model(x, y)
    return loss


def make_target():
    model = build_model()
    gen = torch.Generator().manual_seed(seed)
    data_batches = [get_batch("train", gen) for _ in range(3)]
    make_optimizer = lambda params: torch.optim.AdamW(params, lr=learning_rate, betas=(0.9, 0.95),
                                                      weight_decay=weight_decay)
    return {
        "model": model,
        "batch": data_batches[0],
        "data": data_batches,
        "loss_fn": loss_fn,
        "optimizer": model.configure_optimizers(weight_decay, learning_rate, (0.9, 0.95)),
        "make_optimizer": make_optimizer,
        "num_classes": vocab_size,
        "task": "lm",
    }


@torch.no_grad()
def estimate_loss(model, gen):
    out = {}
    model.eval()
    for split in ["train", "val"]:
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            losses[k] = loss_fn(model, get_batch(split, gen)).item()
        out[split] = losses.mean().item()
    model.train()
    return out


def main():
    torch.manual_seed(seed)
    random.seed(seed)
    print(f"vocab size {vocab_size}, train tokens {len(train_data):,}, val tokens {len(val_data):,}")
    model = build_model()
    print("number of parameters: %.2fM" % (model.get_num_params() / 1e6,))
    optimizer = model.configure_optimizers(weight_decay, learning_rate, (0.9, 0.95))
    batch_gen = torch.Generator().manual_seed(seed)
    eval_gen = torch.Generator().manual_seed(seed + 1)

    X, Y = get_batch("train", batch_gen)
    t0 = time.time()
    running_mfu = -1.0
    for it in range(max_iters + 1):
        lr = get_lr(it)
        for group in optimizer.param_groups:
            group["lr"] = lr

        if it % eval_interval == 0:
            losses = estimate_loss(model, eval_gen)
            print(f"step {it}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
        if it == max_iters:
            break

        loss = loss_fn(model, (X, Y))
        X, Y = get_batch("train", batch_gen)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if grad_clip != 0.0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()

        t1 = time.time()
        dt = t1 - t0
        t0 = t1
        if it % log_interval == 0:
            if it >= 5:
                mfu = model.estimate_mfu(batch_size, dt)
                running_mfu = mfu if running_mfu == -1.0 else 0.9 * running_mfu + 0.1 * mfu
            print(f"iter {it}: loss {loss.item():.4f}, time {dt * 1000:.2f}ms, mfu {running_mfu * 100:.2f}%")

    model.eval()
    start = torch.tensor([encode("TRN ")], dtype=torch.long)
    torch.manual_seed(seed)
    sample = model.generate(start, 120, temperature=0.8, top_k=10, max_ctx=train_ctx)
    print("---------------")
    print(decode(sample[0].tolist()))
    print("---------------")


if __name__ == "__main__":
    main()
