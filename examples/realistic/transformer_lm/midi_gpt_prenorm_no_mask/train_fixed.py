"""GPT on note-event token streams (MIDI-like REMI/event encoding).

Pieces are generated procedurally: a random key, a four-bar chord
progression that repeats, a bass note on every downbeat and a melody that
moves mostly stepwise through the scale, favouring chord tones on strong
beats.  Events are encoded as VEL_x / ON_p / SHIFT_d / OFF_p tokens with a
BAR token at every barline, as in common symbolic-music LM pipelines.
"""
import math
import random
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

config = dict(
    seed=0,
    n_pieces=900,
    bars_per_piece=8,
    context=48,
    batch_size=16,
    d_model=64,
    n_heads=4,
    n_layers=3,
    dropout=0.0,
    lr=3e-3,
    min_lr=3e-4,
    weight_decay=0.05,
    warmup_steps=40,
    max_steps=500,
    grad_clip=1.0,
    eval_every=100,
    eval_batches=6,
    log_every=20,
)

# ---------------------------------------------------------------------------
# tokenizer / synthetic corpus

PITCH_LO, PITCH_HI = 36, 84
SHIFTS = [1, 2, 3, 4, 6, 8]
VELS = [48, 64, 80, 96]
MAJOR = [0, 2, 4, 5, 7, 9, 11]
MINOR = [0, 2, 3, 5, 7, 8, 10]
PROGRESSIONS = [[0, 4, 5, 3], [0, 3, 4, 4], [5, 3, 0, 4], [0, 5, 3, 4], [0, 3, 0, 4]]

TOKENS = ["<pad>", "<bos>", "<eos>", "BAR"]
TOKENS += [f"VEL_{v}" for v in VELS]
TOKENS += [f"SHIFT_{d}" for d in SHIFTS]
TOKENS += [f"ON_{p}" for p in range(PITCH_LO, PITCH_HI + 1)]
TOKENS += [f"OFF_{p}" for p in range(PITCH_LO, PITCH_HI + 1)]
tok2id = {t: i for i, t in enumerate(TOKENS)}
id2tok = {i: t for t, i in tok2id.items()}
vocab_size = len(TOKENS)


def scale_pitch(root, scale, degree, octave):
    return root + 12 * (octave + degree // 7) + scale[degree % 7]


def render_piece(rng, n_bars):
    root = rng.randrange(0, 12)
    scale = MAJOR if rng.random() < 0.6 else MINOR
    prog = rng.choice(PROGRESSIONS)
    rhythm = rng.choice([[2, 2, 2, 2], [4, 2, 2], [3, 1, 2, 2], [2, 2, 4], [1, 1, 2, 4]])
    vel = rng.choice(VELS)
    degree = rng.randrange(7, 12)
    events = ["<bos>"]
    for bar in range(n_bars):
        chord = prog[bar % len(prog)]
        chord_tones = {chord % 7, (chord + 2) % 7, (chord + 4) % 7}
        events.append("BAR")
        bass = scale_pitch(root, scale, chord, 3)
        events += [f"VEL_{vel}", f"ON_{bass}"]
        for i, dur in enumerate(rhythm):
            step = rng.choice([-2, -1, -1, 0, 1, 1, 2])
            degree = min(max(degree + step, 7), 16)
            if i == 0 and degree % 7 not in chord_tones:
                degree += 1 if (degree + 1) % 7 in chord_tones else -1
            pitch = scale_pitch(root, scale, degree, 3)
            pitch = min(max(pitch, PITCH_LO), PITCH_HI)
            events += [f"ON_{pitch}", f"SHIFT_{dur}", f"OFF_{pitch}"]
        events.append(f"OFF_{bass}")
        if rng.random() < 0.15:
            vel = rng.choice(VELS)
    events.append("<eos>")
    return [tok2id[e] for e in events]


def build_dataset(cfg):
    rng = random.Random(cfg["seed"] + 101)
    stream = []
    for _ in range(cfg["n_pieces"]):
        stream += render_piece(rng, cfg["bars_per_piece"])
    stream = torch.tensor(stream, dtype=torch.long)
    split = int(len(stream) * 0.9)
    return stream[:split], stream[split:]


train_ids, val_ids = build_dataset(config)


def sample_batch(ids, cfg, gen):
    T = cfg["context"]
    starts = torch.randint(0, len(ids) - T - 1, (cfg["batch_size"],), generator=gen)
    xb = torch.stack([ids[s:s + T] for s in starts])
    yb = torch.stack([ids[s + 1:s + T + 1] for s in starts])
    return xb, yb


# ---------------------------------------------------------------------------
# model


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, dropout, max_rel=16):
        super().__init__()
        self.max_rel = max_rel
        self.rel_bias = nn.Embedding(2 * max_rel + 1, n_heads)
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.attn_drop = nn.Dropout(dropout)
        self.proj_drop = nn.Dropout(dropout)

    def relative_bias(self, T, device):
        pos = torch.arange(T, device=device)
        rel = (pos[None, :] - pos[:, None]).clamp(-self.max_rel, self.max_rel) + self.max_rel
        return self.rel_bias(rel).permute(2, 0, 1).unsqueeze(0)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_heads, self.head_dim).unbind(dim=2)
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * self.scale
        scores = scores + self.relative_bias(T, x.device)
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
        weights = self.attn_drop(scores.softmax(dim=-1))
        ctx = torch.einsum("bhqk,bkhd->bqhd", weights, v).reshape(B, T, C)
        return self.proj_drop(self.out(ctx))


class TransformerBlock(nn.Module):
    def __init__(self, d_model, n_heads, dropout):
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.norm2 = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(
            nn.Linear(d_model, 4 * d_model),
            nn.GELU(),
            nn.Linear(4 * d_model, d_model),
            nn.Dropout(dropout),
        )

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        x = x + self.ff(self.norm2(x))
        return x


class MidiGPT(nn.Module):
    def __init__(self, vocab_size, context, d_model, n_heads, n_layers, dropout=0.0):
        super().__init__()
        self.context = context
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Parameter(torch.zeros(1, context, d_model))
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.Sequential(*[TransformerBlock(d_model, n_heads, dropout) for _ in range(n_layers)])
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.head.weight = self.tok_emb.weight
        self.apply(self._init)
        nn.init.normal_(self.pos_emb, std=0.02)

    @staticmethod
    def _init(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx, targets=None):
        B, T = idx.shape
        h = self.drop(self.tok_emb(idx) + self.pos_emb[:, :T])
        h = self.norm(self.blocks(h))
        logits = self.head(h)
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1),
                               ignore_index=tok2id["<pad>"])
        return logits, loss

    @torch.no_grad()
    def generate(self, idx, n_new, temperature=1.0):
        for _ in range(n_new):
            logits, _ = self(idx[:, -self.context:])
            probs = F.softmax(logits[:, -1] / temperature, dim=-1)
            idx = torch.cat([idx, torch.multinomial(probs, 1)], dim=1)
        return idx


def build_model(cfg=config):
    return MidiGPT(vocab_size, cfg["context"], cfg["d_model"], cfg["n_heads"], cfg["n_layers"], cfg["dropout"])


def build_optimizer(params, cfg=config):
    return torch.optim.AdamW(params, lr=cfg["lr"], betas=(0.9, 0.95), weight_decay=cfg["weight_decay"])


def lr_lambda(step, cfg=config):
    if step < cfg["warmup_steps"]:
        return (step + 1) / cfg["warmup_steps"]
    progress = min(1.0, (step - cfg["warmup_steps"]) / (cfg["max_steps"] - cfg["warmup_steps"]))
    floor = cfg["min_lr"] / cfg["lr"]
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def loss_fn(model, batch):
    xb, yb = batch
    _, loss = model(xb, yb)
    return loss


@torch.no_grad()
def evaluate(model, cfg, gen):
    model.eval()
    out = {}
    for name, ids in (("train", train_ids), ("val", val_ids)):
        vals = [loss_fn(model, sample_batch(ids, cfg, gen)).item() for _ in range(cfg["eval_batches"])]
        out[name] = sum(vals) / len(vals)
    model.train()
    return out


def make_target():
    torch.manual_seed(config["seed"])
    model = build_model()
    gen = torch.Generator().manual_seed(123)
    batches = [sample_batch(train_ids, config, gen) for _ in range(4)]
    return {
        "model": model,
        "batch": batches[0],
        "data": batches,
        "loss_fn": loss_fn,
        "optimizer": build_optimizer(model.parameters()),
        "make_optimizer": build_optimizer,
        "task": "classification",
        "num_classes": vocab_size,
    }


def main():
    cfg = config
    torch.manual_seed(cfg["seed"])
    print(f"vocab {vocab_size} | train tokens {len(train_ids):,} | val tokens {len(val_ids):,}")
    model = build_model(cfg)
    print(f"model params: {sum(p.numel() for p in model.parameters()) / 1e6:.3f}M")
    optimizer = build_optimizer(model.parameters(), cfg)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)
    train_gen = torch.Generator().manual_seed(cfg["seed"])
    eval_gen = torch.Generator().manual_seed(999)

    model.train()
    t_last = time.time()
    for step in range(cfg["max_steps"] + 1):
        if step % cfg["eval_every"] == 0:
            ev = evaluate(model, cfg, eval_gen)
            print(f"step {step}: train loss {ev['train']:.4f}, val loss {ev['val']:.4f}")
        if step == cfg["max_steps"]:
            break
        xb, yb = sample_batch(train_ids, cfg, train_gen)
        _, loss = model(xb, yb)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["grad_clip"])
        optimizer.step()
        lr = scheduler.get_last_lr()[0]
        scheduler.step()
        now = time.time()
        if step % cfg["log_every"] == 0:
            print(f"iter {step}: loss {loss.item():.4f}, time {(now - t_last) * 1000:.2f}ms, lr {lr:.1e}")
        t_last = now

    model.eval()
    torch.manual_seed(1)
    prompt = torch.tensor([[tok2id["<bos>"], tok2id["BAR"]]])
    out = model.generate(prompt, 40, temperature=0.9)[0].tolist()
    print("sample: " + " ".join(id2tok[i] for i in out))


if __name__ == "__main__":
    main()
