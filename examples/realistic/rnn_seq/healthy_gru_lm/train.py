"""Character-level GRU language model on generated railway announcements.

    python train.py [--steps 400] [--lr 3e-3]
"""
import argparse
import logging
import math
import random
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

logger = logging.getLogger("charlm")

STATIONS = ["Aldgate", "Bramley", "Crewe", "Dunmore", "Elmstead", "Fairlop", "Glenrock", "Harwich",
            "Ilford", "Kingsbay", "Lowmoor", "Marsden"]
OPERATORS = ["Northern", "Coastway", "Midland Express", "Valley Lines"]
REASONS = ["a signal failure", "an earlier fault", "congestion", "a shortage of crew", "a broken down train",
           "late running of a previous service"]


def announcement(rng):
    h, m = rng.randint(5, 23), rng.choice([0, 5, 10, 12, 15, 20, 25, 30, 35, 40, 42, 45, 50, 55])
    dest = rng.choice(STATIONS)
    calls = rng.sample([s for s in STATIONS if s != dest], rng.randint(1, 4))
    kind = rng.random()
    head = f"The {h:02d}:{m:02d} {rng.choice(OPERATORS)} service to {dest}"
    if kind < 0.45:
        return (f"{head} will depart from platform {rng.randint(1, 9)}. "
                f"Calling at {', '.join(calls)} and {dest}.\n")
    if kind < 0.8:
        return (f"{head} is delayed by approximately {rng.choice([5, 10, 15, 20, 30])} minutes "
                f"due to {rng.choice(REASONS)}. We apologise for the delay.\n")
    return f"{head} has been cancelled due to {rng.choice(REASONS)}.\n"


def build_corpus(n_chars=300_000, seed=0):
    rng = random.Random(seed)
    parts, total = [], 0
    while total < n_chars:
        s = announcement(rng)
        parts.append(s)
        total += len(s)
    text = "".join(parts)
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    split = int(0.9 * len(data))
    return data[:split], data[split:], chars


class CharGRU(nn.Module):
    def __init__(self, vocab, emb=48, hidden=192, layers=1, dropout=0.1):
        super().__init__()
        self.emb = nn.Embedding(vocab, emb)
        self.gru = nn.GRU(emb, hidden, num_layers=layers, batch_first=True)
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, x, h=None):
        out, h = self.gru(self.emb(x), h)
        return self.head(self.drop(out)), h


def sample_batch(data, seq_len, batch_size, gen=None):
    ix = torch.randint(len(data) - seq_len - 1, (batch_size,), generator=gen)
    x = torch.stack([data[i:i + seq_len] for i in ix])
    y = torch.stack([data[i + 1:i + seq_len + 1] for i in ix])
    return x, y


def loss_fn(model, batch):
    x, y = batch
    logits, _ = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))


def make_optimizer(params, lr=3e-3):
    return torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.99), weight_decay=0.01)


def cosine_with_warmup(step, total, warmup, base_lr, min_ratio=0.05):
    if step < warmup:
        return base_lr * (step + 1) / warmup
    p = (step - warmup) / max(1, total - warmup)
    return base_lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * p)))


def parse_args(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=96)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--log-every", type=int, default=25)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def make_target():
    args = parse_args([])
    torch.manual_seed(args.seed)
    train, _, chars = build_corpus()
    model = CharGRU(len(chars))
    data = [sample_batch(train, args.seq_len, args.batch_size) for _ in range(4)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model.parameters(), args.lr),
            "make_optimizer": lambda params: make_optimizer(params, args.lr), "task": "lm"}


@torch.no_grad()
def evaluate(model, data, args, n_batches=8):
    model.eval()
    g = torch.Generator().manual_seed(1234)
    losses = [loss_fn(model, sample_batch(data, args.seq_len, args.batch_size, g)).item() for _ in range(n_batches)]
    model.train()
    return sum(losses) / len(losses)


@torch.no_grad()
def generate(model, chars, prompt="The ", n=80):
    stoi = {c: i for i, c in enumerate(chars)}
    model.eval()
    x = torch.tensor([[stoi[c] for c in prompt]])
    logits, h = model(x)
    out = prompt
    g = torch.Generator().manual_seed(0)
    for _ in range(n):
        probs = F.softmax(logits[0, -1] / 0.8, dim=-1)
        nxt = torch.multinomial(probs, 1, generator=g)
        out += chars[nxt.item()]
        logits, h = model(nxt.view(1, 1), h)
    model.train()
    return out


def main():
    torch.set_num_threads(1)  # small GRU: one thread is faster on CPU
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s][%(levelname)s] - %(message)s")
    args = parse_args()
    torch.manual_seed(args.seed)
    train, val, chars = build_corpus()
    logger.info("corpus: %d train chars, %d val chars, vocab %d", len(train), len(val), len(chars))
    model = CharGRU(len(chars))
    logger.info("model: CharGRU with %d parameters", sum(p.numel() for p in model.parameters()))
    opt = make_optimizer(model.parameters(), args.lr)
    t0 = time.time()
    running = 0.0
    for step in range(1, args.steps + 1):
        lr = cosine_with_warmup(step - 1, args.steps, args.warmup, args.lr)
        for g in opt.param_groups:
            g["lr"] = lr
        loss = loss_fn(model, sample_batch(train, args.seq_len, args.batch_size))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        running += loss.item()
        if step % args.log_every == 0:
            avg = running / args.log_every
            running = 0.0
            logger.info("step %d/%d | loss %.4f | bpc %.3f | lr %.2e | grad_norm %.3f | %.0f ms/step",
                        step, args.steps, avg, avg / math.log(2), lr, gnorm.item(),
                        1000 * (time.time() - t0) / step)
        if step % args.eval_every == 0 or step == args.steps:
            vl = evaluate(model, val, args)
            logger.info("eval @ step %d | val_loss %.4f | val_bpc %.3f", step, vl, vl / math.log(2))
    logger.info("sample: %r", generate(model, chars))
    logger.info("done in %.1fs", time.time() - t0)


if __name__ == "__main__":
    main()
