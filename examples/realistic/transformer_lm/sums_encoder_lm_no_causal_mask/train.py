"""Decoder-only LM built from nn.TransformerEncoder, trained on addition records.

Every record is one padded example "<bos>a+b=c<eos>" with operands of 1-3 digits.
The operands are random; everything after "=" is determined by them.
"""
import math
import random
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 1234
BLOCK_SIZE = 32
BATCH_SIZE = 48
MAX_ITERS = 400
EVAL_INTERVAL = 100
EVAL_ITERS = 10
LOG_INTERVAL = 20
LR = 1e-3
WARMUP = 30
D_MODEL = 64
N_HEAD = 4
N_LAYER = 2
D_FF = 256
DROPOUT = 0.0

VOCAB = ["<pad>", "<bos>", "<eos>", "+", "="] + [str(d) for d in range(10)]
PAD, BOS, EOS = 0, 1, 2
stoi = {s: i for i, s in enumerate(VOCAB)}


def encode_record(a, b):
    body = f"{a}+{b}={a + b}"
    return [BOS] + [stoi[ch] for ch in body] + [EOS]


def make_records(n, seed):
    rng = random.Random(seed)
    recs = []
    for _ in range(n):
        a = rng.randint(0, 10 ** rng.randint(1, 3) - 1)
        b = rng.randint(0, 10 ** rng.randint(1, 3) - 1)
        recs.append(encode_record(a, b))
    return recs


def pad_records(recs, block_size):
    out = torch.full((len(recs), block_size + 1), PAD, dtype=torch.long)
    for i, r in enumerate(recs):
        r = r[:block_size + 1]
        out[i, :len(r)] = torch.tensor(r)
    return out


train_rows = pad_records(make_records(20000, seed=1), BLOCK_SIZE)
val_rows = pad_records(make_records(2000, seed=2), BLOCK_SIZE)


def get_batch(split, gen=None):
    rows = train_rows if split == "train" else val_rows
    ix = torch.randint(len(rows), (BATCH_SIZE,), generator=gen)
    chunk = rows[ix]
    return chunk[:, :-1], chunk[:, 1:]


class EncoderLM(nn.Module):
    def __init__(self, vocab_size, block_size, d_model, n_head, n_layer, d_ff, dropout):
        super().__init__()
        self.block_size = block_size
        self.tok_emb = nn.Embedding(vocab_size, d_model, padding_idx=PAD)
        self.pos_emb = nn.Embedding(block_size, d_model)
        layer = nn.TransformerEncoderLayer(
            d_model, n_head, dim_feedforward=d_ff, dropout=dropout,
            activation="gelu", batch_first=True, norm_first=True,
        )
        self.encoder = nn.TransformerEncoder(layer, n_layer, enable_nested_tensor=False)
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)
        self.register_buffer(
            "causal_mask", nn.Transformer.generate_square_subsequent_mask(block_size), persistent=False
        )

    def forward(self, idx):
        B, T = idx.shape
        pos = torch.arange(T, device=idx.device)
        h = self.tok_emb(idx) + self.pos_emb(pos)[None]
        pad_mask = torch.zeros(B, T, device=idx.device).masked_fill(idx == PAD, float("-inf"))
        h = self.encoder(h, src_key_padding_mask=pad_mask)
        return self.head(self.ln_f(h))

    @torch.no_grad()
    def complete(self, prompt, max_new=8):
        idx = torch.tensor([prompt], dtype=torch.long)
        for _ in range(max_new):
            logits = self(idx[:, -self.block_size:])
            nxt = logits[0, -1].argmax().item()
            idx = torch.cat([idx, torch.tensor([[nxt]])], dim=1)
            if nxt == EOS:
                break
        return idx[0].tolist()


def lm_loss(model, batch):
    x, y = batch
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1), ignore_index=PAD)


def build_model():
    return EncoderLM(len(VOCAB), BLOCK_SIZE, D_MODEL, N_HEAD, N_LAYER, D_FF, DROPOUT)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=LR, betas=(0.9, 0.98), weight_decay=0.01)


def lr_at(it):
    if it < WARMUP:
        return LR * (it + 1) / WARMUP
    progress = (it - WARMUP) / max(1, MAX_ITERS - WARMUP)
    return LR * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


@torch.no_grad()
def estimate_loss(model, gen):
    model.eval()
    out = {}
    for split in ("train", "val"):
        out[split] = sum(lm_loss(model, get_batch(split, gen)).item() for _ in range(EVAL_ITERS)) / EVAL_ITERS
    model.train()
    return out


def decode(ids):
    return "".join(VOCAB[i] for i in ids if i not in (BOS, EOS, PAD))


def make_target():
    torch.manual_seed(SEED)
    model = build_model()
    gen = torch.Generator().manual_seed(0)
    batches = [get_batch("train", gen) for _ in range(3)]
    return {
        "model": model,
        "batch": batches[0],
        "data": batches,
        "loss_fn": lm_loss,
        "optimizer": make_optimizer(model.parameters()),
        "make_optimizer": make_optimizer,
        "task": "lm",
        "num_classes": len(VOCAB),
    }


def main():
    torch.manual_seed(SEED)
    model = build_model()
    print(f"vocab {len(VOCAB)}, {len(train_rows)} train records, {len(val_rows)} val records")
    print(f"number of parameters: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M")
    opt = make_optimizer(model.parameters())
    batch_gen = torch.Generator().manual_seed(SEED)
    eval_gen = torch.Generator().manual_seed(99)
    t0 = time.time()
    for it in range(MAX_ITERS + 1):
        for g in opt.param_groups:
            g["lr"] = lr_at(it)
        if it % EVAL_INTERVAL == 0:
            losses = estimate_loss(model, eval_gen)
            print(f"step {it}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
        if it == MAX_ITERS:
            break
        loss = lm_loss(model, get_batch("train", batch_gen))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        t1 = time.time()
        dt, t0 = t1 - t0, t1
        if it % LOG_INTERVAL == 0:
            print(f"iter {it}: loss {loss.item():.4f}, time {dt * 1000:.2f}ms, mfu -100.00%")

    model.eval()
    for a, b in [(47, 385), (906, 18), (5, 7)]:
        prompt = encode_record(a, b)
        prompt = prompt[:prompt.index(stoi["="]) + 1]
        print(f"{a}+{b}= ->", decode(model.complete(prompt))[len(f"{a}+{b}="):])


if __name__ == "__main__":
    main()
