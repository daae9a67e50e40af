"""Character-level GPT on generated harbor-control radio traffic.

nanoGPT-style loop (get_batch / estimate_loss / cosine LR with warmup), but the
blocks use torch's nn.MultiheadAttention instead of a hand-written attention."""
import math
import random
import time
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

# -----------------------------------------------------------------------------
max_iters = 300
eval_interval = 50
eval_iters = 10
log_interval = 10
batch_size = 16
block_size = 64
learning_rate = 1e-3
min_lr = 1e-4
warmup_iters = 20
lr_decay_iters = 300
weight_decay = 0.1
grad_clip = 1.0
seed = 1337
# -----------------------------------------------------------------------------

VESSELS = ["MARIA K", "NORDIC STAR", "BALTIC ROSE", "ELBE TRADER", "SEA FALCON", "KAPITAN LEV",
           "OCEAN PEARL", "RIVER QUEEN", "ARCTIC WIND", "SANTA LUCIA", "ORION", "HELGA"]
BERTHS = ["ALPHA", "BRAVO", "CHARLIE", "DELTA", "ECHO"]
TUGS = ["TUG BISON", "TUG OTTER", "TUG RAVEN"]


def harbor_corpus(n_lines=2500, seed=7):
    rng = random.Random(seed)
    lines = []
    for _ in range(n_lines):
        v = rng.choice(VESSELS)
        b = rng.choice(BERTHS)
        n = rng.randint(1, 12)
        hh, mm = rng.randint(0, 23), rng.choice([0, 15, 30, 45])
        kind = rng.random()
        if kind < 0.3:
            lines.append(f"{v}, HARBOR CONTROL. PROCEED TO BERTH {b} {n}. {rng.choice(TUGS)} WILL ASSIST. OVER.")
        elif kind < 0.55:
            lines.append(f"HARBOR CONTROL, {v}. REQUEST PILOT AT {hh:02d}{mm:02d}. DRAFT {rng.randint(5, 14)} METERS. OVER.")
        elif kind < 0.75:
            lines.append(f"{v}, HOLD POSITION AT ANCHORAGE {n}. CHANNEL BUSY UNTIL {hh:02d}{mm:02d}. OVER.")
        elif kind < 0.9:
            lines.append(f"ALL STATIONS, VISIBILITY {rng.choice(['GOOD', 'MODERATE', 'POOR'])}. WIND {rng.randint(0, 35)} KNOTS. OUT.")
        else:
            lines.append(f"{v}, CLEARED TO DEPART BERTH {b} {n}. CONTACT VTS ON CHANNEL {rng.randint(10, 16)}. OVER.")
    return "\n".join(lines) + "\n"


text = harbor_corpus()
chars = sorted(set(text))
vocab_size = len(chars)
stoi = {c: i for i, c in enumerate(chars)}
itos = {i: c for c, i in stoi.items()}
data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
n = int(0.9 * len(data))
train_data, val_data = data[:n], data[n:]


def get_batch(split, gen=None):
    d = train_data if split == "train" else val_data
    ix = torch.randint(len(d) - block_size - 1, (batch_size,), generator=gen)
    x = torch.stack([d[i:i + block_size] for i in ix])
    y = torch.stack([d[i + 1:i + 1 + block_size] for i in ix])
    return x, y


@dataclass
class GPTConfig:
    block_size: int = block_size
    vocab_size: int = vocab_size
    n_layer: int = 3
    n_head: int = 4
    n_embd: int = 96
    dropout: float = 0.0
    bias: bool = False


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = nn.MultiheadAttention(config.n_embd, config.n_head, dropout=config.dropout,
                                          bias=config.bias, batch_first=True)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = nn.Sequential(
            nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias),
            nn.GELU(),
            nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias),
            nn.Dropout(config.dropout),
        )
        mask = torch.tril(torch.ones(config.block_size, config.block_size, dtype=torch.bool))
        self.register_buffer("attn_mask", mask, persistent=False)

    def forward(self, x):
        T = x.size(1)
        h = self.ln_1(x)
        a, _ = self.attn(h, h, h, attn_mask=self.attn_mask[:T, :T], need_weights=False)
        x = x + a
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList([Block(config) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)

    def _init_weights(self, m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        B, T = idx.shape
        pos = torch.arange(T, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for blk in self.blocks:
            x = blk(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=0.8):
        for _ in range(max_new_tokens):
            logits, _ = self(idx[:, -self.config.block_size:])
            probs = F.softmax(logits[:, -1, :] / temperature, dim=-1)
            idx = torch.cat((idx, torch.multinomial(probs, 1)), dim=1)
        return idx


def configure_optimizers(params, lr=learning_rate):
    params = [p for p in params if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95))


def get_lr(it):
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (learning_rate - min_lr)


def lm_loss(model, batch):
    x, y = batch
    _, loss = model(x, y)
    return loss


@torch.no_grad()
def estimate_loss(model):
    out = {}
    model.eval()
    g = torch.Generator().manual_seed(0)
    for split in ["train", "val"]:
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            losses[k] = lm_loss(model, get_batch(split, g)).item()
        out[split] = losses.mean()
    model.train()
    return out


def make_target():
    torch.manual_seed(seed)
    model = GPT(GPTConfig())
    g = torch.Generator().manual_seed(1)
    batches = [get_batch("train", g) for _ in range(3)]
    return {"model": model, "batch": batches[0], "data": batches, "loss_fn": lm_loss,
            "optimizer": configure_optimizers(model.parameters()),
            "make_optimizer": configure_optimizers, "task": "lm"}


def main():
    torch.manual_seed(seed)
    model = GPT(GPTConfig())
    print(f"number of parameters: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M")
    print(f"vocab_size {vocab_size}, train tokens {len(train_data):,}, val tokens {len(val_data):,}")
    optimizer = configure_optimizers(model.parameters())
    gen = torch.Generator().manual_seed(seed)
    t0 = time.time()
    for it in range(max_iters + 1):
        lr = get_lr(it)
        for group in optimizer.param_groups:
            group["lr"] = lr
        if it % eval_interval == 0:
            losses = estimate_loss(model)
            print(f"step {it}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
        if it == max_iters:
            break
        loss = lm_loss(model, get_batch("train", gen))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        t1 = time.time()
        dt, t0 = t1 - t0, t1
        if it % log_interval == 0:
            print(f"iter {it}: loss {loss.item():.4f}, time {dt * 1000:.2f}ms, mfu -100.00%")
    model.eval()
    ctx = torch.tensor([[stoi["\n"]]], dtype=torch.long)
    torch.manual_seed(0)
    print("".join(itos[i] for i in model.generate(ctx, 160)[0].tolist()))


if __name__ == "__main__":
    main()
