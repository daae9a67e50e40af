"""Character-level GPT on synthetic coastal weather bulletins.

nanoGPT-style training loop; the blocks are torch.nn.TransformerEncoderLayer
(pre-LN) used as a decoder-only stack with a causal attention mask.
"""
import math
import random
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# -----------------------------------------------------------------------------
# config
seed = 1337
block_size = 32
batch_size = 32
n_layer = 2
n_head = 4
n_embd = 64
dropout = 0.0
bias = False
learning_rate = 3e-3
min_lr = 3e-4
max_iters = 800
warmup_iters = 50
weight_decay = 0.1
grad_clip = 1.0
eval_interval = 200
eval_iters = 8
log_interval = 50
# -----------------------------------------------------------------------------

STATIONS = ["kirkwall", "wick", "tiree", "oban", "malin", "shannon", "valentia",
            "scilly", "portland", "dover", "tyne", "cromer"]
DIRS = ["n", "ne", "e", "se", "s", "sw", "w", "nw"]
TRENDS = ["r", "f", "s"]
WEATHER = ["fair", "rain", "showers", "drizzle", "fog", "squally"]


def bulletin(rng):
    st = rng.choice(STATIONS)
    wind = rng.randint(3, 45)
    gust = wind + rng.randint(4, 15)
    vis = rng.choice(["good", "mod", "poor"])
    return (f"{st} {rng.randint(0, 23):02d}z {rng.choice(DIRS)} {wind}g{gust} {rng.choice(WEATHER)} "
            f"{vis} {rng.randint(1, 19):02d}c {rng.randint(985, 1035)}{rng.choice(TRENDS)}\n")


def build_text(n, s):
    rng = random.Random(s)
    return "".join(bulletin(rng) for _ in range(n))


train_text = build_text(4000, seed)
val_text = build_text(500, seed + 1)
chars = sorted(set(train_text + val_text))
vocab_size = len(chars)
stoi = {c: i for i, c in enumerate(chars)}
itos = {i: c for c, i in stoi.items()}
train_data = torch.tensor([stoi[c] for c in train_text], dtype=torch.long)
val_data = torch.tensor([stoi[c] for c in val_text], dtype=torch.long)


def get_batch(split, gen=None):
    data = train_data if split == "train" else val_data
    ix = torch.randint(len(data) - block_size - 1, (batch_size,), generator=gen)
    x = torch.stack([data[i:i + block_size] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + block_size] for i in ix])
    return x, y


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.drop = nn.Dropout(dropout)
        layer = nn.TransformerEncoderLayer(
            d_model=n_embd, nhead=n_head, dim_feedforward=4 * n_embd, dropout=dropout,
            activation="gelu", batch_first=True, norm_first=True, bias=bias)
        self.blocks = nn.TransformerEncoder(layer, num_layers=n_layer, enable_nested_tensor=False)
        self.ln_f = nn.LayerNorm(n_embd, bias=bias)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight
        self.register_buffer("causal_mask", torch.tril(torch.ones(block_size, block_size)))
        self.apply(self._init_weights)

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        b, t = idx.shape
        pos = torch.arange(t, dtype=torch.long, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        x = self.blocks(x, mask=self.causal_mask[:t, :t])
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=0.8, gen=None):
        for _ in range(max_new_tokens):
            logits, _ = self(idx[:, -block_size:])
            probs = F.softmax(logits[:, -1, :] / temperature, dim=-1)
            idx = torch.cat((idx, torch.multinomial(probs, 1, generator=gen)), dim=1)
        return idx


def loss_fn(model, batch):
    x, y = batch
    _, loss = model(x, y)
    return loss


def make_optimizer(params):
    params = [p for p in params if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    nodecay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay},
              {"params": nodecay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=learning_rate, betas=(0.9, 0.99))


def get_lr(it):
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    ratio = (it - warmup_iters) / (max_iters - warmup_iters)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (learning_rate - min_lr)


def make_target():
    torch.manual_seed(seed)
    model = GPT()
    gen = torch.Generator().manual_seed(seed)
    data = [get_batch("train", gen) for _ in range(3)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model.parameters()), "make_optimizer": make_optimizer,
            "num_classes": vocab_size, "task": "lm"}


@torch.no_grad()
def estimate_loss(model):
    out = {}
    model.eval()
    for split in ["train", "val"]:
        gen = torch.Generator().manual_seed(seed + 99)
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            losses[k] = loss_fn(model, get_batch(split, gen)).item()
        out[split] = losses.mean().item()
    model.train()
    return out


def main():
    torch.manual_seed(seed)
    print(f"vocab_size = {vocab_size}, train has {len(train_data):,} tokens, val has {len(val_data):,} tokens")
    model = GPT()
    print(f"number of parameters: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M")
    optimizer = make_optimizer(model.parameters())

    t0 = time.time()
    for it in range(max_iters + 1):
        lr = get_lr(it)
        for param_group in optimizer.param_groups:
            param_group["lr"] = lr

        if it % eval_interval == 0:
            losses = estimate_loss(model)
            print(f"step {it}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
        if it == max_iters:
            break

        x, y = get_batch("train")
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

        t1 = time.time()
        dt, t0 = t1 - t0, t1
        if it % log_interval == 0:
            print(f"iter {it}: loss {loss.item():.4f}, time {dt * 1000:.2f}ms, mfu -100.00%")

    model.eval()
    start = torch.tensor([[stoi[c] for c in "tiree "]], dtype=torch.long)
    out = model.generate(start, 150, gen=torch.Generator().manual_seed(seed))
    print("---------------")
    print("".join(itos[i] for i in out[0].tolist()))
    print("---------------")


if __name__ == "__main__":
    main()
