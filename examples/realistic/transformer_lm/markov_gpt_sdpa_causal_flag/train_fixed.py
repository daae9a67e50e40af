"""Token-level GPT on a synthetic Markov-chain corpus.

The corpus is sampled from a sparse first-order chain over 48 token ids
(four successors per state with fixed probabilities), so the entropy of
the source is known and a good model should approach it.
"""
import math
import random
import time
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

# ----------------------------------------------------------------------------
# config
out_seed = 2718
block_size = 64
batch_size = 32
max_iters = 400
eval_interval = 100
eval_iters = 10
log_interval = 20
learning_rate = 3e-3
min_lr = 2e-4
warmup_iters = 30
weight_decay = 0.1
grad_clip = 1.0
n_layer = 2
n_head = 4
n_embd = 64
dropout = 0.0
# ----------------------------------------------------------------------------

N_STATES = 48
FANOUT_PROBS = torch.tensor([0.55, 0.25, 0.12, 0.08])


def make_chain(seed):
    g = torch.Generator().manual_seed(seed)
    succ = torch.stack([torch.randperm(N_STATES, generator=g)[:len(FANOUT_PROBS)]
                        for _ in range(N_STATES)])
    return succ


def sample_chain(succ, n_tokens, seed):
    g = torch.Generator().manual_seed(seed)
    choice = torch.multinomial(FANOUT_PROBS, n_tokens, replacement=True, generator=g)
    out = torch.empty(n_tokens, dtype=torch.long)
    state = 0
    for i in range(n_tokens):
        state = int(succ[state, choice[i]])
        out[i] = state
    return out


successors = make_chain(seed=3)
data = sample_chain(successors, 200_000, seed=5)
vocab_size = N_STATES
source_entropy = float(-(FANOUT_PROBS * FANOUT_PROBS.log()).sum())
n_split = int(0.9 * len(data))
train_data, val_data = data[:n_split], data[n_split:]


def get_batch(split, gen=None):
    src = train_data if split == "train" else val_data
    ix = torch.randint(len(src) - block_size - 1, (batch_size,), generator=gen)
    x = torch.stack([src[i:i + block_size] for i in ix])
    y = torch.stack([src[i + 1:i + 1 + block_size] for i in ix])
    return x, y


# ----------------------------------------------------------------------------
# model


@dataclass
class GPTConfig:
    block_size: int = 48
    vocab_size: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    dropout: float = 0.0
    bias: bool = True
    causal: bool = True


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        assert cfg.n_embd % cfg.n_head == 0
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.resid_drop = nn.Dropout(cfg.dropout)
        self.n_head = cfg.n_head
        self.n_embd = cfg.n_embd
        self.dropout = cfg.dropout
        self.causal = cfg.causal

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=None,
            dropout_p=self.dropout if self.training else 0.0,
            is_causal=self.causal,
        )
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_drop(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x):
        return self.drop(self.c_proj(F.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.h = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)])
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        B, T = idx.size()
        pos = torch.arange(T, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0):
        for _ in range(max_new_tokens):
            idx_cond = idx[:, -self.cfg.block_size:]
            logits, _ = self(idx_cond)
            probs = F.softmax(logits[:, -1, :] / temperature, dim=-1)
            idx = torch.cat([idx, torch.multinomial(probs, 1)], dim=1)
        return idx


def configure_optimizer(params, lr=learning_rate):
    params = [p for p in params if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95))


def get_lr(it):
    if it < warmup_iters:
        return learning_rate * (it + 1) / warmup_iters
    ratio = (it - warmup_iters) / max(1, max_iters - warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * min(ratio, 1.0)))
    return min_lr + coeff * (learning_rate - min_lr)


def compute_loss(model, batch):
    x, y = batch
    _, loss = model(x, y)
    return loss


def build_model():
    cfg = GPTConfig(block_size=block_size, vocab_size=vocab_size, n_layer=n_layer,
                    n_head=n_head, n_embd=n_embd, dropout=dropout)
    return GPT(cfg)


@torch.no_grad()
def estimate_loss(model, gen):
    out = {}
    model.eval()
    for split in ("train", "val"):
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            losses[k] = compute_loss(model, get_batch(split, gen)).item()
        out[split] = losses.mean().item()
    model.train()
    return out


def make_target():
    torch.manual_seed(out_seed)
    model = build_model()
    gen = torch.Generator().manual_seed(0)
    data_batches = [get_batch("train", gen) for _ in range(3)]
    return {
        "model": model,
        "batch": data_batches[0],
        "data": data_batches,
        "loss_fn": compute_loss,
        "optimizer": configure_optimizer(model.parameters()),
        "make_optimizer": configure_optimizer,
        "task": "lm",
        "num_classes": vocab_size,
    }


def main():
    torch.manual_seed(out_seed)
    model = build_model()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"vocab size {vocab_size}, {len(train_data):,} train tokens, {len(val_data):,} val tokens")
    print(f"source entropy {source_entropy:.4f} nats/token")
    print(f"number of parameters: {n_params / 1e6:.2f}M")
    optimizer = configure_optimizer(model.parameters())
    batch_gen = torch.Generator().manual_seed(out_seed)
    eval_gen = torch.Generator().manual_seed(2024)

    t0 = time.time()
    for it in range(max_iters + 1):
        lr = get_lr(it)
        for g in optimizer.param_groups:
            g["lr"] = lr

        if it % eval_interval == 0:
            losses = estimate_loss(model, eval_gen)
            print(f"step {it}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
        if it == max_iters:
            break

        batch = get_batch("train", batch_gen)
        loss = compute_loss(model, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if grad_clip > 0.0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()

        t1 = time.time()
        dt, t0 = t1 - t0, t1
        if it % log_interval == 0:
            print(f"iter {it}: loss {loss.item():.4f}, time {dt * 1000:.2f}ms, mfu -100.00%")

    model.eval()
    torch.manual_seed(0)
    sample = model.generate(torch.zeros((1, 1), dtype=torch.long), 40)[0].tolist()
    print("sample:", " ".join(str(t) for t in sample))

if __name__ == "__main__":
    main()
