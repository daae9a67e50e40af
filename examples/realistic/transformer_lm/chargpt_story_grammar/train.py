"""
Character-level GPT on a synthetic story corpus (nanoGPT-style training loop).

The corpus is produced by a small stochastic grammar (characters, places,
actions, dialogue) so the run is fully self-contained and reproducible.
"""
import math
import random
import time
import inspect

import torch
import torch.nn as nn
from torch.nn import functional as F

# -----------------------------------------------------------------------------
# config
out_seed = 1337
corpus_chars = 250_000
batch_size = 16
block_size = 48
n_layer = 3
n_head = 4
n_embd = 64
dropout = 0.1
bias = True
learning_rate = 2e-3
max_iters = 500
warmup_iters = 50
lr_decay_iters = 500
min_lr = 1e-4
weight_decay = 0.1
beta1, beta2 = 0.9, 0.99
grad_clip = 1.0
eval_interval = 100
eval_iters = 10
log_interval = 20
# -----------------------------------------------------------------------------

NAMES = ["anna", "boris", "clara", "dmitri", "elena", "felix", "greta", "hugo", "ines", "jonas"]
PLACES = ["the market", "the harbour", "the old mill", "the library", "the forest", "the station"]
OBJECTS = ["a lantern", "a letter", "the map", "a basket of apples", "the key", "a small dog"]
VERBS_PAST = ["walked to", "ran to", "looked around", "waited at", "arrived at", "left"]
FEELINGS = ["tired", "happy", "worried", "curious", "cold", "hungry"]
SAYINGS = ["we should go home", "have you seen the key", "it is getting late",
           "look at the sky", "i found something", "follow me"]


def make_sentence(rng):
    a, b = rng.sample(NAMES, 2)
    kind = rng.random()
    if kind < 0.3:
        return f"{a} {rng.choice(VERBS_PAST)} {rng.choice(PLACES)}."
    if kind < 0.5:
        return f"{a} was {rng.choice(FEELINGS)}, so {a} sat down."
    if kind < 0.7:
        return f"\"{rng.choice(SAYINGS)},\" said {a} to {b}."
    if kind < 0.85:
        return f"{a} gave {b} {rng.choice(OBJECTS)}."
    return f"then {a} and {b} went to {rng.choice(PLACES)} together."


def generate_corpus(n_chars, seed):
    rng = random.Random(seed)
    paragraphs, total = [], 0
    while total < n_chars:
        para = " ".join(make_sentence(rng) for _ in range(rng.randint(3, 7)))
        paragraphs.append(para)
        total += len(para) + 2
    return "\n\n".join(paragraphs)[:n_chars]


def prepare_data(seed=out_seed):
    text = generate_corpus(corpus_chars, seed)
    chars = sorted(set(text))
    stoi = {ch: i for i, ch in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    n = int(0.9 * len(data))
    return {"train": data[:n], "val": data[n:], "vocab_size": len(chars), "itos": chars}


def get_batch(data, split, generator=None):
    d = data[split]
    ix = torch.randint(len(d) - block_size, (batch_size,), generator=generator)
    x = torch.stack([d[i:i + block_size] for i in ix])
    y = torch.stack([d[i + 1:i + 1 + block_size] for i in ix])
    return x, y


# -----------------------------------------------------------------------------
# model

class LayerNorm(nn.Module):
    """LayerNorm with an optional bias (PyTorch's doesn't support bias=False)."""

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, input):
        return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):

    def __init__(self, n_embd, n_head, block_size, dropout, bias):
        super().__init__()
        assert n_embd % n_head == 0
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)
        self.n_head = n_head
        self.n_embd = n_embd
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size))
                             .view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):

    def __init__(self, n_embd, dropout, bias):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd, bias=bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * n_embd, n_embd, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):

    def __init__(self, n_embd, n_head, block_size, dropout, bias):
        super().__init__()
        self.ln_1 = LayerNorm(n_embd, bias=bias)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size, dropout, bias)
        self.ln_2 = LayerNorm(n_embd, bias=bias)
        self.mlp = MLP(n_embd, dropout, bias)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):

    def __init__(self, vocab_size, block_size, n_layer, n_head, n_embd, dropout, bias):
        super().__init__()
        self.block_size = block_size
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, n_embd),
            wpe=nn.Embedding(block_size, n_embd),
            drop=nn.Dropout(dropout),
            h=nn.ModuleList([Block(n_embd, n_head, block_size, dropout, bias) for _ in range(n_layer)]),
            ln_f=LayerNorm(n_embd, bias=bias),
        ))
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        # weight tying
        self.transformer.wte.weight = self.lm_head.weight

        self.apply(self._init_weights)
        # scaled init for the residual projections, per GPT-2
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def get_num_params(self, non_embedding=True):
        n_params = sum(p.numel() for p in self.parameters())
        if non_embedding:
            n_params -= self.transformer.wpe.weight.numel()
        return n_params

    def forward(self, idx, targets=None):
        b, t = idx.size()
        assert t <= self.block_size
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        tok_emb = self.transformer.wte(idx)
        pos_emb = self.transformer.wpe(pos)
        x = self.transformer.drop(tok_emb + pos_emb)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        logits = self.lm_head(x)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss

    def configure_optimizers(self, weight_decay, learning_rate, betas, verbose=False):
        return configure_adamw(self.parameters(), weight_decay, learning_rate, betas, verbose)


def configure_adamw(params, weight_decay, learning_rate, betas, verbose=False):
    params = [p for p in params if p.requires_grad]
    # weight matrices and embeddings get decayed, biases and layernorm gains don't
    decay_params = [p for p in params if p.dim() > 2]
    nodecay_params = [p for p in params if p.dim() < 2]
    optim_groups = [
        {"params": decay_params, "weight_decay": weight_decay},
        {"params": nodecay_params, "weight_decay": 0.0},
    ]
    if verbose:
        num_decay_params = sum(p.numel() for p in decay_params)
        num_nodecay_params = sum(p.numel() for p in nodecay_params)
        print(f"num decayed parameter tensors: {len(decay_params)}, with {num_decay_params:,} parameters")
        print(f"num non-decayed parameter tensors: {len(nodecay_params)}, with {num_nodecay_params:,} parameters")
    fused_available = "fused" in inspect.signature(torch.optim.AdamW).parameters
    extra_args = dict(fused=False) if fused_available else dict()
    return torch.optim.AdamW(optim_groups, lr=learning_rate, betas=betas, **extra_args)


def build_model(vocab_size):
    return GPT(vocab_size, block_size, n_layer, n_head, n_embd, dropout, bias)


def get_lr(it):
    # 1) linear warmup for warmup_iters steps
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    # 2) if it > lr_decay_iters, return min learning rate
    if it > lr_decay_iters:
        return min_lr
    # 3) in between, use cosine decay down to min learning rate
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return min_lr + coeff * (learning_rate - min_lr)


def compute_loss(model, batch):
    x, y = batch
    _, loss = model(x, y)
    return loss


@torch.no_grad()
def estimate_loss(model, data, generator):
    out = {}
    model.eval()
    for split in ["train", "val"]:
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            losses[k] = compute_loss(model, get_batch(data, split, generator)).item()
        out[split] = losses.mean().item()
    model.train()
    return out


def make_target():
    torch.manual_seed(out_seed)
    data = prepare_data()
    g = torch.Generator().manual_seed(out_seed)
    batches = [get_batch(data, "train", g) for _ in range(4)]
    model = build_model(data["vocab_size"])

    def make_optimizer(params):
        return configure_adamw(params, weight_decay, learning_rate, (beta1, beta2))

    return {"model": model, "data": batches, "loss_fn": compute_loss,
            "make_optimizer": make_optimizer, "num_classes": data["vocab_size"], "task": "lm"}


def main():
    torch.set_num_threads(1)
    torch.manual_seed(out_seed)
    data = prepare_data()
    print(f"found vocab_size = {data['vocab_size']} (inside synthetic story corpus)")
    print(f"train has {len(data['train']):,} tokens, val has {len(data['val']):,} tokens")
    g_train = torch.Generator().manual_seed(out_seed)
    g_eval = torch.Generator().manual_seed(out_seed + 1)

    model = build_model(data["vocab_size"])
    print(f"number of parameters: {model.get_num_params() / 1e6:.2f}M")
    optimizer = model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2), verbose=True)

    X, Y = get_batch(data, "train", g_train)
    t0 = time.time()
    iter_num = 0
    best_val_loss = 1e9
    while True:
        lr = get_lr(iter_num)
        for param_group in optimizer.param_groups:
            param_group["lr"] = lr

        if iter_num % eval_interval == 0 or iter_num == max_iters:
            losses = estimate_loss(model, data, g_eval)
            print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
            best_val_loss = min(best_val_loss, losses["val"])
        if iter_num == max_iters:
            break

        _, loss = model(X, Y)
        X, Y = get_batch(data, "train", g_train)  # prefetch next batch
        loss.backward()
        if grad_clip != 0.0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

        t1 = time.time()
        dt = t1 - t0
        t0 = t1
        if iter_num % log_interval == 0:
            print(f"iter {iter_num}: loss {loss.item():.4f}, time {dt * 1000:.2f}ms, lr {lr:.2e}")
        iter_num += 1
    print(f"best val loss {best_val_loss:.4f}")


if __name__ == "__main__":
    main()
