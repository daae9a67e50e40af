#!/usr/bin/env python
"""Char-level decoder-only transformer on a dump of service config files.

The dump is generated in memory: YAML-ish deployment configs for a fleet of
services, some of which carry an inline PEM certificate.
"""
import base64
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)

SEED = 7
N_FILES = 520
CTX = 64
BATCH = 16
D_MODEL = 64
N_HEADS = 4
N_LAYERS = 2
DROPOUT = 0.0
MAX_STEPS = 500
WARMUP = 30
PEAK_LR = 3e-3
FINAL_LR = 3e-4
WD = 0.1
CLIP = 1.0
LOG_EVERY = 10
EVAL_EVERY = 100
EVAL_BATCHES = 20

SERVICES = ["auth-api", "billing", "search", "ingest", "notifier", "gateway", "reports",
            "scheduler", "media", "profile"]
TEAMS = ["core", "payments", "platform", "growth", "data"]
LEVELS = ["debug", "info", "info", "warn"]
REGIONS = ["eu-west-1", "us-east-1", "ap-south-1"]


def make_dump(n_files, rng):
    files = []
    for i in range(n_files):
        svc = SERVICES[rng.integers(len(SERVICES))]
        team = TEAMS[rng.integers(len(TEAMS))]
        region = REGIONS[rng.integers(len(REGIONS))]
        major, minor, patch = rng.integers(1, 4), rng.integers(0, 10), rng.integers(0, 20)
        port = [8080, 8081, 9090, 3000][rng.integers(4)]
        replicas = int(rng.integers(1, 7))
        db = "db-%02d.%s.internal" % (rng.integers(1, 13), region)
        lines = [
            "# file: deploy/%s/%s.yaml" % (region, svc),
            "service: %s" % svc,
            "owner: team-%s" % team,
            "region: %s" % region,
            "image: registry.local/%s:%d.%d.%d" % (svc, major, minor, patch),
            "replicas: %d" % replicas,
            "port: %d" % port,
            "env:",
            "  LOG_LEVEL: %s" % LEVELS[rng.integers(len(LEVELS))],
            "  DB_HOST: %s" % db,
            "  SERVICE_NAME: %s" % svc,
            "healthcheck:",
            "  path: /healthz",
            "  port: %d" % port,
            "  interval: %ds" % [5, 10, 15, 30][rng.integers(4)],
        ]
        if rng.random() < 0.03:
            der = rng.integers(0, 256, size=int(rng.integers(360, 480)), dtype=np.uint8).tobytes()
            b64 = base64.b64encode(der).decode()
            lines.append("tls:")
            lines.append("  cert: |")
            lines.append("    -----BEGIN CERTIFICATE-----")
            for j in range(0, len(b64), 64):
                lines.append("    " + b64[j:j + 64])
            lines.append("    -----END CERTIFICATE-----")
        lines.append("---")
        files.append("\n".join(lines) + "\n")
    return files


def build_dataset():
    rng = np.random.default_rng(SEED)
    files = make_dump(N_FILES, rng)
    text = "".join(files)
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = np.array([stoi[c] for c in text], dtype=np.int64)
    split = int(0.9 * len(data))
    return chars, torch.from_numpy(data[:split]), torch.from_numpy(data[split:])


def sample_batch(data, gen=None):
    starts = torch.randint(0, len(data) - CTX - 1, (BATCH,), generator=gen)
    offs = torch.arange(CTX)
    x = data[starts[:, None] + offs]
    y = data[starts[:, None] + offs + 1]
    return x, y


class Block(nn.Module):
    def __init__(self, d, h, p):
        super().__init__()
        self.h = h
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.drop = nn.Dropout(p)
        self.p = p

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        q = q.view(B, T, self.h, C // self.h).transpose(1, 2)
        k = k.view(B, T, self.h, C // self.h).transpose(1, 2)
        v = v.view(B, T, self.h, C // self.h).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.p if self.training else 0.0)
        a = a.transpose(1, 2).reshape(B, T, C)
        x = x + self.drop(self.proj(a))
        x = x + self.drop(self.ff(self.ln2(x)))
        return x


class CharTransformer(nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.tok = nn.Embedding(vocab, D_MODEL)
        self.pos = nn.Parameter(torch.zeros(1, CTX, D_MODEL))
        self.blocks = nn.ModuleList([Block(D_MODEL, N_HEADS, DROPOUT) for _ in range(N_LAYERS)])
        self.ln_f = nn.LayerNorm(D_MODEL)
        self.head = nn.Linear(D_MODEL, vocab, bias=False)
        self.head.weight = self.tok.weight
        nn.init.normal_(self.tok.weight, std=0.02)
        nn.init.normal_(self.pos, std=0.02)
        for blk in self.blocks:
            for m in blk.modules():
                if isinstance(m, nn.Linear):
                    nn.init.normal_(m.weight, std=0.02)
                    nn.init.zeros_(m.bias)

    def forward(self, idx):
        T = idx.size(1)
        x = self.tok(idx) + self.pos[:, :T]
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


def compute_loss(model, batch):
    x, y = batch
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))


def make_optimizer(params):
    params = [p for p in params if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": WD},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=PEAK_LR, betas=(0.9, 0.95))


def lr_at(step):
    if step < WARMUP:
        return PEAK_LR * (step + 1) / WARMUP
    t = (step - WARMUP) / (MAX_STEPS - WARMUP)
    return FINAL_LR + 0.5 * (PEAK_LR - FINAL_LR) * (1 + math.cos(math.pi * t))


@torch.no_grad()
def evaluate(model, train_data, val_data):
    model.eval()
    gen = torch.Generator().manual_seed(SEED)
    out = {}
    for name, d in (("train", train_data), ("val", val_data)):
        out[name] = float(np.mean([compute_loss(model, sample_batch(d, gen)).item()
                                   for _ in range(EVAL_BATCHES)]))
    model.train()
    return out


def setup():
    torch.manual_seed(SEED)
    chars, train_data, val_data = build_dataset()
    model = CharTransformer(len(chars))
    opt = make_optimizer(model.parameters())
    return chars, train_data, val_data, model, opt


def make_target():
    chars, train_data, val_data, model, opt = setup()
    gen = torch.Generator().manual_seed(SEED + 1)
    return {
        "model": model,
        "data": [sample_batch(train_data, gen) for _ in range(8)],
        "val_data": [sample_batch(val_data, gen) for _ in range(4)],
        "loss_fn": compute_loss,
        "optimizer": opt,
        "make_optimizer": make_optimizer,
        "num_classes": len(chars),
        "task": "language_modeling",
    }


def main():
    chars, train_data, val_data, model, opt = setup()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"vocab={len(chars)} train_chars={len(train_data)} val_chars={len(val_data)} params={n_params}")
    t_begin = time.time()
    for step in range(MAX_STEPS + 1):
        if step % EVAL_EVERY == 0:
            ev = evaluate(model, train_data, val_data)
            print(f"[eval] step {step:4d} | train_loss {ev['train']:.4f} | val_loss {ev['val']:.4f} "
                  f"| val_ppl {math.exp(ev['val']):.3f}")
        if step == MAX_STEPS:
            break
        t0 = time.time()
        lr = lr_at(step)
        for g in opt.param_groups:
            g["lr"] = lr
        loss = compute_loss(model, sample_batch(train_data))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        if step % LOG_EVERY == 0:
            print(f"step {step:4d}/{MAX_STEPS} | loss {loss.item():.4f} | lr {lr:.2e} "
                  f"| grad_norm {gnorm.item():.3f} | {1000 * (time.time() - t0):.1f}ms")
    print(f"done in {time.time() - t_begin:.1f}s")


if __name__ == "__main__":
    main()
