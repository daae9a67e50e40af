"""Decoder-only LM on a synthetic lead-sheet corpus (chord symbols + melody notes).

bf16 autocast on CPU, gradient accumulation to a global batch of 32 sequences,
linear warmup then cosine decay (LambdaLR, stepped once per optimizer step),
global grad-norm clipping at 1.0.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 17
SEQ_LEN = 64
MICRO_BATCH = 8
ACCUM_STEPS = 4
ITERS = 240
PEAK_LR = 3e-3
MIN_LR_RATIO = 0.1
WARMUP_ITERS = 24
WEIGHT_DECAY = 0.05
GRAD_CLIP = 1.0
D_MODEL, N_HEADS, N_LAYERS = 96, 4, 2
LOG_EVERY, EVAL_EVERY, EVAL_BATCHES = 20, 60, 8

NOTES = ["C", "D", "E", "F", "G", "A", "B"]
CHORDS = {"I": [0, 2, 4], "ii": [1, 3, 5], "IV": [3, 5, 0], "V": [4, 6, 1], "vi": [5, 0, 2]}
PROGRESSIONS = [["I", "IV", "V", "I"], ["I", "vi", "ii", "V"], ["vi", "IV", "I", "V"], ["ii", "V", "I", "I"]]


def make_corpus(n_songs, rng):
    toks = []
    for _ in range(n_songs):
        key = rng.integers(7)
        toks.append(f"<key:{NOTES[key]}>")
        prog = PROGRESSIONS[rng.integers(len(PROGRESSIONS))]
        for bar in range(8):
            chord = prog[bar % 4]
            toks += ["|", f"[{chord}]"]
            tones = CHORDS[chord]
            for beat in range(4):
                if beat == 0:
                    deg = tones[0]
                else:
                    deg = tones[rng.integers(3)] if rng.random() < 0.8 else rng.integers(7)
                octave = 4 if rng.random() < 0.85 else 5
                toks.append(f"{NOTES[(key + deg) % 7]}{octave}")
        toks.append("<end>")
    return toks


def load_data(seed=SEED):
    rng = np.random.default_rng(seed)
    toks = make_corpus(2600, rng)
    vocab = sorted(set(toks))
    stoi = {t: i for i, t in enumerate(vocab)}
    ids = torch.tensor([stoi[t] for t in toks], dtype=torch.long)
    split = int(len(ids) * 0.9)
    return ids[:split], ids[split:], vocab


def sample_batch(ids, gen, batch_size=MICRO_BATCH):
    starts = torch.randint(0, len(ids) - SEQ_LEN - 1, (batch_size,), generator=gen)
    offs = torch.arange(SEQ_LEN + 1)
    chunk = ids[starts[:, None] + offs]
    return chunk[:, :-1], chunk[:, 1:]


class LeadSheetLM(nn.Module):
    def __init__(self, vocab_size):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, D_MODEL)
        self.pos = nn.Parameter(torch.zeros(1, SEQ_LEN, D_MODEL))
        layer = nn.TransformerEncoderLayer(D_MODEL, N_HEADS, dim_feedforward=4 * D_MODEL, dropout=0.0,
                                           activation="gelu", batch_first=True, norm_first=True)
        self.decoder = nn.TransformerEncoder(layer, N_LAYERS, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(D_MODEL)
        self.out = nn.Linear(D_MODEL, vocab_size)
        nn.init.normal_(self.embed.weight, std=0.02)
        nn.init.normal_(self.pos, std=0.02)
        nn.init.normal_(self.out.weight, std=0.02)
        nn.init.zeros_(self.out.bias)
        self.register_buffer("causal", nn.Transformer.generate_square_subsequent_mask(SEQ_LEN), persistent=False)

    def forward(self, x):
        T = x.size(1)
        h = self.embed(x) + self.pos[:, :T]
        h = self.decoder(h, mask=self.causal[:T, :T], is_causal=True)
        return self.out(self.norm(h))


def loss_fn(model, batch):
    x, y = batch
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(x)
    return F.cross_entropy(logits.float().flatten(0, 1), y.flatten())


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=PEAK_LR, betas=(0.9, 0.95), weight_decay=WEIGHT_DECAY)


def lr_lambda(step):
    if step < WARMUP_ITERS:
        return (step + 1) / WARMUP_ITERS
    t = min(1.0, (step - WARMUP_ITERS) / (ITERS - WARMUP_ITERS))
    return MIN_LR_RATIO + (1 - MIN_LR_RATIO) * 0.5 * (1 + math.cos(math.pi * t))


@torch.no_grad()
def eval_loss(model, ids, gen):
    model.eval()
    vals = [loss_fn(model, sample_batch(ids, gen)).item() for _ in range(EVAL_BATCHES)]
    model.train()
    return float(np.mean(vals))


def build():
    torch.manual_seed(SEED)
    train_ids, val_ids, vocab = load_data()
    model = LeadSheetLM(len(vocab))
    optimizer = make_optimizer(model.parameters())
    return model, optimizer, train_ids, val_ids, vocab


def make_target():
    model, optimizer, train_ids, _, vocab = build()
    gen = torch.Generator().manual_seed(SEED)
    data = [sample_batch(train_ids, gen) for _ in range(3)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": optimizer, "make_optimizer": make_optimizer,
            "num_classes": len(vocab), "task": "lm"}


def main():
    model, optimizer, train_ids, val_ids, vocab = build()
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)
    g_train = torch.Generator().manual_seed(SEED)
    g_val = torch.Generator().manual_seed(SEED + 100)
    global_bs = MICRO_BATCH * ACCUM_STEPS
    print(f"> vocab {len(vocab)} | train tokens {len(train_ids)} | val tokens {len(val_ids)} | "
          f"params {sum(p.numel() for p in model.parameters()):,} | autocast bf16")

    tic = time.perf_counter()
    for it in range(1, ITERS + 1):
        lr = scheduler.get_last_lr()[0]
        running = 0.0
        for micro in range(ACCUM_STEPS):
            loss = loss_fn(model, sample_batch(train_ids, g_train))
            (loss / ACCUM_STEPS).backward()
            running += loss.item() / ACCUM_STEPS
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        nan_iter = int(not torch.isfinite(gnorm))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()

        if it % LOG_EVERY == 0 or it == 1:
            n = 1 if it == 1 else LOG_EVERY
            dt = (time.perf_counter() - tic) * 1000 / n
            tic = time.perf_counter()
            print(f" iteration {it:8d}/{ITERS:8d} | consumed samples: {it * global_bs:10d} | "
                  f"elapsed time per iteration (ms): {dt:.1f} | learning rate: {lr:.3E} | "
                  f"global batch size: {global_bs:5d} | lm loss: {running:.6E} | loss scale: 1.0 | "
                  f"grad norm: {gnorm.item():.3f} | number of skipped iterations:   0 | "
                  f"number of nan iterations: {nan_iter:3d} |")
        if it % EVAL_EVERY == 0:
            v = eval_loss(model, val_ids, g_val)
            msg = f" validation loss at iteration {it} | lm loss value: {v:.6E} | lm loss PPL: {math.exp(v):.6E} | "
            print("-" * len(msg))
            print(msg)
            print("-" * len(msg))


if __name__ == "__main__":
    main()
