"""Pretrain a small word-level GPT on synthetic warehouse dispatch logs.

Megatron-style loop: micro-batches accumulated into one global batch, bf16 autocast
on CPU, AdamW with linear warmup + cosine decay, global grad-norm clipping.
"""
import math
import random
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 1234
SEQ_LEN = 48
MICRO_BATCH = 16
GLOBAL_BATCH = 64
TRAIN_ITERS = 160
WARMUP_ITERS = 16
LR = 2e-3
MIN_LR = 1e-4
WEIGHT_DECAY = 0.1
CLIP_GRAD = 1.0
EVAL_INTERVAL = 40
EVAL_ITERS = 8
LOG_INTERVAL = 10
D_MODEL = 96
N_HEAD = 4
N_LAYER = 2

# ---------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------
TRUCKS = [f"truck{i}" for i in range(1, 13)]
DOCKS = ["dock_a", "dock_b", "dock_c", "dock_d", "dock_e"]
GOODS = ["cement", "timber", "steel", "glass", "paint", "tiles", "cable", "pipes"]
CITIES = ["leeds", "york", "hull", "derby", "bath", "ely", "wells", "ripon"]
NUMS = [str(i) for i in range(10)]
DRIVERS = ["ana", "bo", "cem", "dev", "eli", "fay"]


def dispatch_line(rng):
    truck, dock = rng.choice(TRUCKS), rng.choice(DOCKS)
    kind = rng.random()
    if kind < 0.45:
        words = [truck, "leaves", dock, "at", rng.choice(NUMS), rng.choice(NUMS), ":",
                 rng.choice(["0", "3"]), "0", "carrying", rng.choice(NUMS), "pallets", "of",
                 rng.choice(GOODS), "to", rng.choice(CITIES)]
    elif kind < 0.75:
        words = [truck, "arrives", "at", dock, "from", rng.choice(CITIES), "driver",
                 rng.choice(DRIVERS), "delay", rng.choice(NUMS), "min"]
    else:
        good = rng.choice(GOODS)
        words = ["stock", good, dock, "count", rng.choice(NUMS), rng.choice(NUMS),
                 "reorder", "yes" if rng.random() < 0.3 else "no"]
    return words + ["<eol>"]


def build_corpus(n_lines, seed):
    rng = random.Random(seed)
    toks = []
    for _ in range(n_lines):
        toks.extend(dispatch_line(rng))
    return toks


def build_vocab():
    words = set(TRUCKS + DOCKS + GOODS + CITIES + NUMS + DRIVERS)
    words |= {"leaves", "at", ":", "carrying", "pallets", "of", "to", "arrives", "from",
              "driver", "delay", "min", "stock", "count", "reorder", "yes", "no", "<eol>"}
    itos = sorted(words)
    return {w: i for i, w in enumerate(itos)}, itos


STOI, ITOS = build_vocab()
VOCAB = len(ITOS)


def encode(words):
    return torch.tensor([STOI[w] for w in words], dtype=torch.long)


def load_splits():
    train = encode(build_corpus(9000, SEED))
    valid = encode(build_corpus(1000, SEED + 1))
    return train, valid


def get_batch(data, batch_size, gen):
    ix = torch.randint(len(data) - SEQ_LEN - 1, (batch_size,), generator=gen)
    x = torch.stack([data[i:i + SEQ_LEN] for i in ix])
    y = torch.stack([data[i + 1:i + SEQ_LEN + 1] for i in ix])
    return x, y


# ---------------------------------------------------------------------------
# model
# ---------------------------------------------------------------------------
class CausalSelfAttention(nn.Module):
    def __init__(self, d_model, n_head, max_len):
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        mask = torch.ones(max_len, max_len, dtype=torch.bool).triu(1)
        self.register_buffer("attn_mask", mask, persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=self.attn_mask[:T, :T])
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, d_model, n_head, max_len):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_head, max_len)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(),
                                 nn.Linear(4 * d_model, d_model))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab, d_model=D_MODEL, n_head=N_HEAD, n_layer=N_LAYER, max_len=SEQ_LEN):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, d_model)
        self.pos_emb = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_head, max_len) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.head.weight = self.tok_emb.weight
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * n_layer))

    @staticmethod
    def _init_weights(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx):
        T = idx.size(1)
        pos = torch.arange(T, device=idx.device)
        x = self.tok_emb(idx) + self.pos_emb(pos)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


def loss_fn(model, batch):
    x, y = batch
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(x)
    return F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.view(-1))


def make_optimizer(params):
    params = [p for p in params if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": WEIGHT_DECAY},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=LR, betas=(0.9, 0.95), eps=1e-8)


def lr_at(it):
    if it < WARMUP_ITERS:
        return LR * (it + 1) / WARMUP_ITERS
    frac = (it - WARMUP_ITERS) / max(1, TRAIN_ITERS - WARMUP_ITERS)
    return MIN_LR + 0.5 * (LR - MIN_LR) * (1 + math.cos(math.pi * min(frac, 1.0)))


def make_target():
    torch.manual_seed(SEED)
    train, _ = load_splits()
    gen = torch.Generator().manual_seed(SEED)
    model = GPT(VOCAB)
    data = [get_batch(train, MICRO_BATCH, gen) for _ in range(3)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model.parameters()), "make_optimizer": make_optimizer,
            "num_classes": VOCAB, "task": "lm"}


@torch.no_grad()
def evaluate(model, valid, gen):
    model.eval()
    losses = [loss_fn(model, get_batch(valid, MICRO_BATCH, gen)).item() for _ in range(EVAL_ITERS)]
    model.train()
    return sum(losses) / len(losses)


@torch.no_grad()
def generate(model, prompt, n_new):
    model.eval()
    idx = encode(prompt).unsqueeze(0)
    for _ in range(n_new):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(idx[:, -SEQ_LEN:])
        idx = torch.cat([idx, logits[:, -1].float().argmax(-1, keepdim=True)], dim=1)
    model.train()
    return " ".join(ITOS[i] for i in idx[0].tolist())


def main():
    torch.manual_seed(SEED)
    random.seed(SEED)
    train, valid = load_splits()
    print(f"> vocab size: {VOCAB} | train tokens: {len(train)} | valid tokens: {len(valid)}")
    model = GPT(VOCAB)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"> number of parameters: {n_params}")
    optimizer = make_optimizer(model.parameters())
    accum_steps = GLOBAL_BATCH // MICRO_BATCH
    print(f"> micro batch size: {MICRO_BATCH} | global batch size: {GLOBAL_BATCH} | "
          f"num micro batches: {accum_steps} | params dtype: torch.bfloat16 (autocast)")
    train_gen = torch.Generator().manual_seed(SEED)
    t0 = time.time()
    log_loss, log_norm, nan_iters = 0.0, 0.0, 0
    for it in range(TRAIN_ITERS):
        lr = lr_at(it)
        for g in optimizer.param_groups:
            g["lr"] = lr
        step_loss = 0.0
        for _ in range(accum_steps):
            batch = get_batch(train, MICRO_BATCH, train_gen)
            loss = loss_fn(model, batch)
            (loss / accum_steps).backward()
            step_loss += loss.item() / accum_steps
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP_GRAD).item()
        if not math.isfinite(grad_norm):
            nan_iters += 1
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        log_loss += step_loss
        log_norm += grad_norm
        if (it + 1) % LOG_INTERVAL == 0:
            elapsed = (time.time() - t0) * 1000 / LOG_INTERVAL
            print(f" iteration {it + 1:>8}/{TRAIN_ITERS:>8} | consumed samples: {(it + 1) * GLOBAL_BATCH:>10} | "
                  f"elapsed time per iteration (ms): {elapsed:.1f} | learning rate: {lr:.3E} | "
                  f"global batch size: {GLOBAL_BATCH:>5} | lm loss: {log_loss / LOG_INTERVAL:.6E} | "
                  f"loss scale: 1.0 | grad norm: {log_norm / LOG_INTERVAL:.3f} | "
                  f"number of skipped iterations:   0 | number of nan iterations: {nan_iters:>3} |")
            log_loss, log_norm, t0 = 0.0, 0.0, time.time()
        if (it + 1) % EVAL_INTERVAL == 0:
            val = evaluate(model, valid, torch.Generator().manual_seed(SEED + 7))
            print("-" * 100)
            print(f" validation loss at iteration {it + 1} | lm loss value: {val:.6E} | "
                  f"lm loss PPL: {math.exp(min(val, 20)):.6E} | ")
            print("-" * 100)
    for prompt in (["truck3", "leaves"], ["stock", "steel"]):
        print(f"> sample: {generate(model, prompt, 30)}")


if __name__ == "__main__":
    main()
