"""Char-level GPT on a synthetic "ship log" corpus.

Micro-batches of 8 sequences, 8 micro-batches per optimizer step (effective
batch 64), bf16 autocast on CPU, AdamW with linear warmup + cosine decay.
"""
import math
import random
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

torch.set_num_threads(1)

# ----------------------------------------------------------------------------
# config
block_size = 64
micro_batch_size = 8
grad_accum_steps = 8
num_epochs = 2
n_layer = 2
n_head = 4
n_embd = 96
dropout = 0.0
learning_rate = 3e-3
weight_decay = 0.1
betas = (0.9, 0.95)
warmup_ratio = 0.1
min_lr_ratio = 0.1
max_grad_norm = 1.0
logging_steps = 10
eval_steps = 40
seed = 1337

# ----------------------------------------------------------------------------
# data

SHIPS = ["aurora", "belle", "corsair", "dauntless", "ember", "falcon", "gale", "heron"]
PORTS = ["lisbon", "oslo", "genoa", "bergen", "cadiz", "malta", "riga", "tunis"]
CARGO = ["grain", "timber", "salt", "copper", "wool", "coffee", "tea", "iron"]
WINDS = ["north", "south", "east", "west"]
STATES = ["calm", "rough", "fair", "heavy"]


def make_corpus(n_entries=6000, seed=0):
    rng = random.Random(seed)
    lines = []
    for day in range(n_entries):
        ship = rng.choice(SHIPS)
        src, dst = rng.sample(PORTS, 2)
        cargo = rng.choice(CARGO)
        tons = rng.randint(10, 99)
        wind = rng.choice(WINDS)
        sea = rng.choice(STATES)
        kind = rng.random()
        if kind < 0.4:
            lines.append(f"day {day % 365}: the {ship} left {src} for {dst} with {tons} tons of {cargo}.")
        elif kind < 0.7:
            lines.append(f"day {day % 365}: wind from the {wind}, sea {sea}. the {ship} holds course to {dst}.")
        else:
            lines.append(f"day {day % 365}: the {ship} reached {dst} and unloaded {tons} tons of {cargo}.")
    return "\n".join(lines) + "\n"


class CharTokenizer:
    def __init__(self, text):
        self.chars = sorted(set(text))
        self.stoi = {c: i for i, c in enumerate(self.chars)}
        self.itos = {i: c for c, i in self.stoi.items()}

    @property
    def vocab_size(self):
        return len(self.chars)

    def encode(self, s):
        return [self.stoi[c] for c in s]

    def decode(self, ids):
        return "".join(self.itos[i] for i in ids)


class CharWindows(Dataset):
    """Non-overlapping windows of block_size+1 tokens; x/y are shifted by one."""

    def __init__(self, ids, block_size):
        self.ids = ids
        self.block_size = block_size
        self.n = (len(ids) - 1) // block_size

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        start = i * self.block_size
        chunk = self.ids[start:start + self.block_size + 1]
        return chunk[:-1], chunk[1:]


def build_data():
    text = make_corpus(seed=seed)
    tok = CharTokenizer(text)
    ids = torch.tensor(tok.encode(text), dtype=torch.long)
    n_train = int(0.9 * len(ids))
    train_ds = CharWindows(ids[:n_train], block_size)
    val_ds = CharWindows(ids[n_train:], block_size)
    g = torch.Generator().manual_seed(seed)
    train_loader = DataLoader(train_ds, batch_size=micro_batch_size, shuffle=True,
                              drop_last=True, generator=g)
    val_loader = DataLoader(val_ds, batch_size=64, shuffle=False)
    return tok, train_loader, val_loader


# ----------------------------------------------------------------------------
# model

class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.attn_drop = nn.Dropout(dropout)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(n_embd, dim=2)
        q = q.view(B, T, n_head, C // n_head).transpose(1, 2)
        k = k.view(B, T, n_head, C // n_head).transpose(1, 2)
        v = v.view(B, T, n_head, C // n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=dropout if self.training else 0.0)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(n_embd, 4 * n_embd),
            nn.GELU(),
            nn.Linear(4 * n_embd, n_embd),
            nn.Dropout(dropout),
        )

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, vocab_size):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList([Block() for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx):
        B, T = idx.shape
        pos = torch.arange(T, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def build_model(vocab_size):
    torch.manual_seed(seed)
    return GPT(vocab_size)


def configure_optimizer(params):
    params = [p for p in params if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=learning_rate, betas=betas)


def get_cosine_schedule_with_warmup(optimizer, num_warmup_steps, num_training_steps):
    def lr_lambda(step):
        if step < num_warmup_steps:
            return step / max(1, num_warmup_steps)
        progress = (step - num_warmup_steps) / max(1, num_training_steps - num_warmup_steps)
        cosine = 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
        return min_lr_ratio + (1.0 - min_lr_ratio) * cosine
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)


def compute_loss(model, batch):
    x, y = batch
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        logits = model(x)
    return F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.view(-1))


@torch.no_grad()
def evaluate(model, val_loader):
    model.eval()
    total, count = 0.0, 0
    for batch in val_loader:
        loss = compute_loss(model, batch)
        total += loss.item() * batch[0].size(0)
        count += batch[0].size(0)
    model.train()
    return total / count


def make_target():
    tok, train_loader, _ = build_data()
    model = build_model(tok.vocab_size)
    data = []
    for i, batch in enumerate(train_loader):
        data.append(batch)
        if len(data) == grad_accum_steps:
            break
    return {
        "model": model,
        "data": data,
        "loss_fn": compute_loss,
        "make_optimizer": configure_optimizer,
        "num_classes": tok.vocab_size,
        "task": "lm",
    }


def main():
    random.seed(seed)
    torch.manual_seed(seed)
    tok, train_loader, val_loader = build_data()
    model = build_model(tok.vocab_size)
    n_params = sum(p.numel() for p in model.parameters())
    optimizer = configure_optimizer(model.parameters())

    num_training_steps = len(train_loader) * num_epochs
    num_warmup_steps = int(warmup_ratio * num_training_steps)
    scheduler = get_cosine_schedule_with_warmup(optimizer, num_warmup_steps, num_training_steps)

    steps_per_epoch = len(train_loader) // grad_accum_steps
    max_steps = steps_per_epoch * num_epochs
    print(f"***** Running training *****")
    print(f"  Num examples = {len(train_loader.dataset)}")
    print(f"  Num epochs = {num_epochs}")
    print(f"  Micro batch size = {micro_batch_size}")
    print(f"  Gradient accumulation steps = {grad_accum_steps}")
    print(f"  Total optimization steps = {max_steps}")
    print(f"  Number of trainable parameters = {n_params}")

    model.train()
    global_step = 0
    running_loss, running_count = 0.0, 0
    t0 = time.time()
    for epoch in range(num_epochs):
        micro_step = 0
        optimizer.zero_grad(set_to_none=True)
        for batch in train_loader:
            loss = compute_loss(model, batch)
            (loss / grad_accum_steps).backward()
            running_loss += loss.item()
            running_count += 1
            micro_step += 1
            if micro_step % grad_accum_steps != 0:
                continue

            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            global_step += 1

            if global_step % logging_steps == 0:
                logs = {
                    "loss": round(running_loss / running_count, 4),
                    "grad_norm": round(grad_norm.item(), 4),
                    "learning_rate": float(f"{scheduler.get_last_lr()[0]:.4e}"),
                    "epoch": round(global_step / steps_per_epoch, 2),
                }
                print(logs)
                running_loss, running_count = 0.0, 0
            if global_step % eval_steps == 0 or global_step == max_steps:
                val_loss = evaluate(model, val_loader)
                print({"eval_loss": round(val_loss, 4), "epoch": round(global_step / steps_per_epoch, 2)})

    runtime = time.time() - t0
    print({"train_runtime": round(runtime, 2), "train_steps_per_second": round(global_step / runtime, 3),
           "epoch": float(num_epochs)})
    model.eval()
    ctx = torch.tensor([tok.encode("day 12: the ")])
    with torch.no_grad():
        for _ in range(60):
            logits = model(ctx[:, -block_size:])[:, -1, :]
            nxt = torch.argmax(logits, dim=-1, keepdim=True)
            ctx = torch.cat([ctx, nxt], dim=1)
    print("sample:", repr(tok.decode(ctx[0].tolist())))


if __name__ == "__main__":
    main()
