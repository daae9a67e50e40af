"""
Character-level GPT on synthetic stage-play dialogue, with random character
substitution noise on the inputs (typo robustness).

Usage: python train.py
"""
import math
import os
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F

# -----------------------------------------------------------------------------
# config
out_dir = os.path.dirname(os.path.abspath(__file__))
seed = 1337
batch_size = 16
block_size = 64
max_iters = 600
eval_interval = 100
eval_iters = 10
log_interval = 25
learning_rate = 2e-3
min_lr = 2e-4
warmup_iters = 40
lr_decay_iters = 600
weight_decay = 0.1
beta1, beta2 = 0.9, 0.99
grad_clip = 1.0
n_layer = 2
n_head = 4
n_embd = 64
dropout = 0.0
noise_p = 0.2
device = "cpu"
# -----------------------------------------------------------------------------

SPEAKERS = ["HAMLET", "OPHELIA", "GERTRUDE", "HORATIO", "POLONIUS", "LAERTES", "MARCELLUS"]
OPENERS = ["My lord", "Good madam", "Sweet friend", "Alas", "Nay", "Indeed", "Hark", "Pray you", "O"]
SUBJ = ["the king", "my father", "the night", "this ghost", "the queen", "your honour", "the court",
        "our watch", "the play", "that letter", "my heart", "the sword", "this castle"]
VERB = ["doth speak of", "hath seen", "would know", "shall remember", "cannot forget", "did swear by",
        "must answer for", "hath betrayed", "doth fear", "will follow"]
OBJ = ["the truth", "a murder most foul", "his secret", "the poisoned cup", "the cold air",
       "a thousand sorrows", "the grave", "this madness", "a promise", "the morning"]
TAILS = ["!", ".", "?", ", I think.", ", and no more.", ", upon my life.", ", as you say."]
STAGE = ["[Exit {s}.]", "[Enter {s}.]", "[{s} draws a sword.]", "[Aside.]", "[Flourish. Exeunt.]"]


def build_corpus(n_scenes=220, rs=0):
    rng = np.random.default_rng(rs)
    out = []
    for sc in range(n_scenes):
        out.append(f"SCENE {sc % 5 + 1}. A room in the castle.\n\n")
        cast = list(rng.choice(SPEAKERS, size=int(rng.integers(2, 4)), replace=False))
        for t in range(int(rng.integers(8, 16))):
            spk = cast[t % len(cast)] if rng.random() < 0.8 else cast[rng.integers(len(cast))]
            lines = []
            for _ in range(int(rng.integers(1, 4))):
                sent = f"{SUBJ[rng.integers(len(SUBJ))]} {VERB[rng.integers(len(VERB))]} {OBJ[rng.integers(len(OBJ))]}"
                if rng.random() < 0.5:
                    sent = f"{OPENERS[rng.integers(len(OPENERS))]}, {sent}"
                lines.append(sent[0].upper() + sent[1:] + TAILS[rng.integers(len(TAILS))])
            out.append(f"{spk}:\n" + "\n".join(lines) + "\n\n")
            if rng.random() < 0.1:
                out.append(STAGE[rng.integers(len(STAGE))].format(s=cast[rng.integers(len(cast))].title()) + "\n\n")
    return "".join(out)


text = build_corpus()
chars = sorted(set(text))
vocab_size = len(chars)
stoi = {ch: i for i, ch in enumerate(chars)}
itos = {i: ch for i, ch in enumerate(chars)}


def encode(s):
    return [stoi[c] for c in s]


def decode(ids):
    return "".join(itos[i] for i in ids)


data = np.array(encode(text), dtype=np.uint16)
n = int(0.9 * len(data))
train_data = data[:n]
val_data = data[n:]


def add_char_noise(x, p, rng):
    """Replace a fraction p of the input characters with random ones."""
    noise = torch.from_numpy(rng.random(x.shape) < p)
    x[noise] = torch.from_numpy(rng.integers(0, vocab_size, size=int(noise.sum())))
    return x


def get_batch(split, rng, noise_p=0.0):
    src = train_data if split == "train" else val_data
    ix = rng.integers(0, len(src) - block_size - 1, size=batch_size)
    batch = torch.from_numpy(np.stack([src[i:i + block_size + 1] for i in ix]).astype(np.int64))
    x, y = batch[:, :-1].clone(), batch[:, 1:]
    if noise_p > 0:
        x = add_char_noise(x, noise_p, rng)
    return x.to(device), y.to(device)


# -----------------------------------------------------------------------------
# model

@dataclass
class GPTConfig:
    block_size: int = 64
    vocab_size: int = 65
    n_layer: int = 3
    n_head: int = 4
    n_embd: int = 96
    dropout: float = 0.0
    bias: bool = False


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.register_buffer("bias", torch.tril(torch.ones(config.block_size, config.block_size))
                             .view(1, 1, config.block_size, config.block_size))

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
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
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
            ln_f=nn.LayerNorm(config.n_embd, bias=config.bias),
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
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        logits = self.lm_head(x)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))
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
    def generate(self, idx, max_new_tokens, temperature=1.0):
        for _ in range(max_new_tokens):
            idx_cond = idx[:, -self.config.block_size:]
            logits, _ = self(idx_cond)
            probs = F.softmax(logits[:, -1, :] / temperature, dim=-1)
            idx = torch.cat((idx, torch.multinomial(probs, num_samples=1)), dim=1)
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
    torch.manual_seed(seed)
    cfg = GPTConfig(block_size=block_size, vocab_size=vocab_size, n_layer=n_layer,
                    n_head=n_head, n_embd=n_embd, dropout=dropout)
    model = GPT(cfg).to(device)
    optimizer = model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2))
    return model, optimizer


@torch.no_grad()
def estimate_loss(model):
    out = {}
    model.eval()
    for split in ["train", "val"]:
        eval_rng = np.random.default_rng(seed + 1)
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            X, Y = get_batch(split, eval_rng)
            _, loss = model(X, Y)
            losses[k] = loss.item()
        out[split] = losses.mean().item()
    model.train()
    return out


def lm_loss(model, batch):
    X, Y = batch
    _, loss = model(X, Y)
    return loss


def make_target():
    model, optimizer = build_model()
    rng = np.random.default_rng(seed)
    batches = [get_batch("train", rng, noise_p) for _ in range(4)]
    val_batches = [get_batch("val", np.random.default_rng(seed + 1)) for _ in range(2)]
    return {
        "model": model,
        "data": batches,
        "val_data": val_batches,
        "loss_fn": lm_loss,
        "optimizer": optimizer,
        "task": "language_modeling",
        "vocab_size": vocab_size,
    }


def main():
    torch.set_num_threads(1)
    print(f"vocab size: {vocab_size}, train tokens: {len(train_data):,}, val tokens: {len(val_data):,}")
    model, optimizer = build_model()
    print(f"number of parameters: {model.get_num_params() / 1e6:.2f}M")
    train_rng = np.random.default_rng(seed)
    t0 = time.time()
    t_start = t0
    best_val = float("inf")
    for it in range(max_iters + 1):
        lr = get_lr(it)
        for g in optimizer.param_groups:
            g["lr"] = lr
        if it % eval_interval == 0:
            losses = estimate_loss(model)
            print(f"step {it}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
            best_val = min(best_val, losses["val"])
        if it == max_iters:
            break
        X, Y = get_batch("train", train_rng, noise_p)
        _, loss = model(X, Y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if grad_clip != 0.0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        t1 = time.time()
        dt = t1 - t0
        t0 = t1
        if it % log_interval == 0:
            print(f"iter {it}: loss {loss.item():.4f}, time {dt * 1000:.2f}ms, lr {lr:.2e}")
    print(f"best val loss {best_val:.4f}, total time {time.time() - t_start:.1f}s")
    ctx = torch.tensor([encode("HAMLET:\n")], dtype=torch.long)
    print(decode(model.generate(ctx, 120)[0].tolist()))


if __name__ == "__main__":
    main()
