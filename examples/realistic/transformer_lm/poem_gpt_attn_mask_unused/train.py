"""Word-level GPT trained on procedurally generated rhyming quatrains.

Every poem is a title line followed by two ABAB stanzas.  Lines are drawn
from a handful of templates, the last word of lines 1/3 and 2/4 of each
stanza rhyme, and the subject chosen in the title recurs in the body, so a
good model has to track both local syntax and longer-range structure.
"""
import math
import random
import time
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

# -----------------------------------------------------------------------------
# config
seed = 1337
block_size = 48
batch_size = 16
max_iters = 400
eval_interval = 100
eval_iters = 6
log_interval = 20
learning_rate = 2e-3
min_lr = 2e-4
warmup_iters = 40
lr_decay_iters = 400
weight_decay = 0.1
beta1, beta2 = 0.9, 0.95
grad_clip = 1.0
n_layer = 3
n_head = 4
n_embd = 64
dropout = 0.0
bias = False
# -----------------------------------------------------------------------------

RHYMES = {
    "night": ["night", "light", "bright", "flight", "sight", "white"],
    "sea": ["sea", "free", "tree", "me", "be", "thee"],
    "day": ["day", "way", "grey", "stay", "away", "may"],
    "rain": ["rain", "again", "plain", "lane", "remain", "vain"],
    "stone": ["stone", "alone", "known", "own", "bone", "grown"],
    "fire": ["fire", "higher", "desire", "choir", "wire", "spire"],
}
SUBJECTS = ["moon", "river", "sparrow", "widow", "sailor", "garden", "lantern", "mountain"]
ADJS = ["old", "quiet", "golden", "broken", "silver", "distant", "gentle", "hollow", "cold", "wild"]
NOUNS = ["wind", "heart", "road", "field", "bell", "shadow", "voice", "candle", "harbour", "meadow"]
VERBS_PAST = ["wandered", "whispered", "lingered", "trembled", "faded", "waited", "sang", "fell"]
VERBS_PRES = ["wanders", "whispers", "lingers", "trembles", "fades", "waits", "sings", "falls"]
PREPS = ["into", "beneath", "across", "beyond", "toward", "upon", "through"]
TITLE_FORMS = [["the", "{s}"], ["a", "song", "of", "the", "{s}"], ["to", "the", "{s}"], ["elegy", "for", "the", "{s}"]]


def make_line(rng, subject, end_word, tense):
    verbs = VERBS_PAST if tense == "past" else VERBS_PRES
    form = rng.randrange(4)
    if form == 0:
        words = ["the", rng.choice(ADJS), rng.choice(NOUNS), rng.choice(verbs), rng.choice(PREPS), "the", end_word]
    elif form == 1:
        words = ["and", "the", subject, rng.choice(verbs), rng.choice(PREPS), "the", rng.choice(ADJS), end_word]
    elif form == 2:
        words = ["where", rng.choice(NOUNS), "and", rng.choice(NOUNS), rng.choice(verbs), "like", end_word]
    else:
        words = ["o", rng.choice(ADJS), subject, ",", "you", rng.choice(verbs), "in", end_word]
    return words + ["\n"]


def make_poem(rng):
    subject = rng.choice(SUBJECTS)
    tense = rng.choice(["past", "present"])
    title = [w.format(s=subject) for w in rng.choice(TITLE_FORMS)]
    toks = ["<title>"] + title + ["\n"]
    for _ in range(2):
        fam_a, fam_b = rng.sample(list(RHYMES), 2)
        a1, a2 = rng.sample(RHYMES[fam_a], 2)
        b1, b2 = rng.sample(RHYMES[fam_b], 2)
        for end in (a1, b1, a2, b2):
            toks += make_line(rng, subject, end, tense)
        toks.append("<stanza>")
    toks.append("<end>")
    return toks


def build_corpus(n_poems, seed):
    rng = random.Random(seed)
    toks = []
    for _ in range(n_poems):
        toks += make_poem(rng)
    return toks


corpus = build_corpus(3000, seed=11)
vocab = sorted(set(corpus))
vocab_size = len(vocab)
stoi = {w: i for i, w in enumerate(vocab)}
itos = {i: w for w, i in stoi.items()}
data = torch.tensor([stoi[w] for w in corpus], dtype=torch.long)
n = int(0.9 * len(data))
train_data = data[:n]
val_data = data[n:]


def get_batch(split, generator=None):
    d = train_data if split == "train" else val_data
    ix = torch.randint(len(d) - block_size - 1, (batch_size,), generator=generator)
    x = torch.stack([d[i:i + block_size] for i in ix])
    y = torch.stack([d[i + 1:i + 1 + block_size] for i in ix])
    return x, y


# -----------------------------------------------------------------------------
# model


@dataclass
class GPTConfig:
    block_size: int = 48
    vocab_size: int = 128
    n_layer: int = 3
    n_head: int = 4
    n_embd: int = 64
    dropout: float = 0.0
    bias: bool = False


class LayerNorm(nn.Module):
    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


def rotary_tables(head_dim, seq_len, base=10000.0):
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim))
    angles = torch.outer(torch.arange(seq_len).float(), inv_freq)
    return torch.cos(angles), torch.sin(angles)


def apply_rotary(x, cos, sin):
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return out.flatten(-2)


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.dropout = config.dropout
        cos, sin = rotary_tables(config.n_embd // config.n_head, config.block_size)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def forward(self, x, attn_mask=None):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        cos, sin = self.rope_cos[:T], self.rope_sin[:T]
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask,
            dropout_p=self.dropout if self.training else 0.0,
        )
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x, attn_mask=None):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=LayerNorm(config.n_embd, bias=config.bias),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        causal = torch.ones(config.block_size, config.block_size, dtype=torch.bool).tril()
        self.register_buffer("causal_mask", causal, persistent=False)
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
        return sum(p.numel() for p in self.parameters())

    def forward(self, idx, targets=None):
        b, t = idx.size()
        assert t <= self.config.block_size, f"Cannot forward sequence of length {t}"
        x = self.transformer.drop(self.transformer.wte(idx))
        mask = self.causal_mask[:t, :t]
        for block in self.transformer.h:
            x = block(x, mask)
        x = self.transformer.ln_f(x)
        if targets is not None:
            logits = self.lm_head(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        else:
            logits = self.lm_head(x[:, [-1], :])
            loss = None
        return logits, loss

    def configure_optimizers(self, weight_decay, learning_rate, betas):
        param_dict = {pn: p for pn, p in self.named_parameters() if p.requires_grad}
        decay_params = [p for n, p in param_dict.items() if p.dim() >= 2]
        nodecay_params = [p for n, p in param_dict.items() if p.dim() < 2]
        optim_groups = [
            {"params": decay_params, "weight_decay": weight_decay},
            {"params": nodecay_params, "weight_decay": 0.0},
        ]
        return torch.optim.AdamW(optim_groups, lr=learning_rate, betas=betas)

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
        for _ in range(max_new_tokens):
            idx_cond = idx if idx.size(1) <= self.config.block_size else idx[:, -self.config.block_size:]
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
    if it > lr_decay_iters:
        return min_lr
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return min_lr + coeff * (learning_rate - min_lr)


def build_model():
    config = GPTConfig(block_size=block_size, vocab_size=vocab_size, n_layer=n_layer,
                       n_head=n_head, n_embd=n_embd, dropout=dropout, bias=bias)
    return GPT(config)


def loss_fn(model, batch):
    x, y = batch
    _, loss = model(x, y)
    return loss


def make_optimizer(params):
    params = [p for p in params if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=learning_rate, betas=(beta1, beta2))


@torch.no_grad()
def estimate_loss(model, generator):
    out = {}
    model.eval()
    for split in ["train", "val"]:
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            losses[k] = loss_fn(model, get_batch(split, generator)).item()
        out[split] = losses.mean()
    model.train()
    return out


def make_target():
    torch.manual_seed(seed)
    model = build_model()
    g = torch.Generator().manual_seed(0)
    batches = [get_batch("train", g) for _ in range(4)]
    return {
        "model": model,
        "batch": batches[0],
        "data": batches,
        "loss_fn": loss_fn,
        "optimizer": model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2)),
        "make_optimizer": make_optimizer,
        "task": "classification",
        "num_classes": vocab_size,
    }


def main():
    torch.manual_seed(seed)
    print(f"corpus: {len(corpus):,} tokens, vocab size {vocab_size}")
    print(f"train has {len(train_data):,} tokens, val has {len(val_data):,} tokens")
    model = build_model()
    print(f"number of parameters: {model.get_num_params() / 1e6:.2f}M")
    optimizer = model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2))
    batch_gen = torch.Generator().manual_seed(seed)
    eval_gen = torch.Generator().manual_seed(4242)

    X, Y = get_batch("train", batch_gen)
    t0 = time.time()
    iter_num = 0
    best_val_loss = 1e9
    while True:
        lr = get_lr(iter_num)
        for param_group in optimizer.param_groups:
            param_group["lr"] = lr

        if iter_num % eval_interval == 0:
            losses = estimate_loss(model, eval_gen)
            print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
            best_val_loss = min(best_val_loss, losses["val"].item())
        if iter_num >= max_iters:
            break

        _, loss = model(X, Y)
        X, Y = get_batch("train", batch_gen)
        loss.backward()
        if grad_clip != 0.0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

        t1 = time.time()
        dt = t1 - t0
        t0 = t1
        if iter_num % log_interval == 0:
            print(f"iter {iter_num}: loss {loss.item():.4f}, time {dt * 1000:.2f}ms, lr {lr:.1e}")
        iter_num += 1

    print(f"best val loss {best_val_loss:.4f}")
    model.eval()
    torch.manual_seed(0)
    start = torch.tensor([[stoi["<title>"]]], dtype=torch.long)
    out = model.generate(start, 60, temperature=0.8, top_k=20)[0].tolist()
    text = " ".join(itos[i] for i in out).replace(" \n ", "\n").replace(" \n", "\n")
    print("---------------")
    print(text)
    print("---------------")


if __name__ == "__main__":
    main()
