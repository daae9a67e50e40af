# Character-level GRU language model over service telemetry (one JSON record per line).
# Setup follows the classic pytorch/examples word_language_model recipe: plain SGD with a
# large learning rate, long BPTT windows, logging every `log_interval` batches.
import math
import random
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

args = dict(
    emsize=64,
    nhid=128,
    bptt=256,
    batch_size=32,
    lr=20.0,
    epochs=3,
    batches_per_epoch=60,
    log_interval=10,
    eval_batches=6,
    seed=1111,
)

HOSTS = ["edge", "core", "db", "cache", "auth", "queue"]
TAGS = ["disk", "net", "cpu", "mem", "io", "tls", "gc"]


def make_record(rng, i):
    host = f"{rng.choice(HOSTS)}-{rng.randint(1, 40):02d}"
    level = rng.choice(["INFO"] * 6 + ["WARN", "ERROR"])
    tags = ", ".join(f'"{rng.choice(TAGS)}"' for _ in range(rng.randint(1, 4)))
    ok = "true" if level == "INFO" else "false"
    return (f'{{"id": {i}, "host": "{host}", "level": "{level}", '
            f'"lat_ms": {rng.randint(1, 999)}, "tags": [{tags}], "ok": {ok}}}\n')


class Corpus:
    def __init__(self, n_records=7000, seed=0):
        rng = random.Random(seed)
        text = "".join(make_record(rng, i) for i in range(n_records))
        self.chars = sorted(set(text))
        self.stoi = {c: i for i, c in enumerate(self.chars)}
        ids = torch.tensor([self.stoi[c] for c in text], dtype=torch.long)
        n_val = len(ids) // 10
        self.train, self.valid = ids[:-n_val], ids[-n_val:]


def get_batch(source, bptt, batch_size, gen):
    starts = torch.randint(0, len(source) - bptt - 1, (batch_size,), generator=gen)
    x = torch.stack([source[s:s + bptt] for s in starts])
    y = torch.stack([source[s + 1:s + bptt + 1] for s in starts])
    return x, y


class CharGRU(nn.Module):
    def __init__(self, ntoken, emsize, nhid, dropout=0.1):
        super().__init__()
        self.encoder = nn.Embedding(ntoken, emsize)
        self.rnn = nn.GRU(emsize, nhid, batch_first=True)
        self.drop = nn.Dropout(dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        self.init_weights()

    def init_weights(self):
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def forward(self, x, hidden=None):
        out, hidden = self.rnn(self.drop(self.encoder(x)), hidden)
        return self.decoder(self.drop(out)), hidden


def loss_fn(model, batch):
    x, y = batch
    logits, _ = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))


def make_optimizer(params):
    return torch.optim.SGD(params, lr=args["lr"])


def grad_norm(model):
    norms = [p.grad.detach().norm() for p in model.parameters() if p.grad is not None]
    return torch.norm(torch.stack(norms)).item()


def make_target():
    torch.manual_seed(args["seed"])
    corpus = Corpus()
    gen = torch.Generator().manual_seed(args["seed"])
    data = [get_batch(corpus.train, args["bptt"], args["batch_size"], gen) for _ in range(3)]
    model = CharGRU(len(corpus.chars), args["emsize"], args["nhid"])
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model.parameters()), "make_optimizer": make_optimizer,
            "num_classes": len(corpus.chars), "task": "lm"}


@torch.no_grad()
def evaluate(model, source):
    model.eval()
    gen = torch.Generator().manual_seed(0)
    total = 0.0
    for _ in range(args["eval_batches"]):
        total += loss_fn(model, get_batch(source, args["bptt"], args["batch_size"], gen)).item()
    model.train()
    return total / args["eval_batches"]


def main():
    torch.manual_seed(args["seed"])
    corpus = Corpus()
    print(f"| corpus: {len(corpus.train)} train chars, {len(corpus.valid)} valid chars, vocab {len(corpus.chars)}")
    model = CharGRU(len(corpus.chars), args["emsize"], args["nhid"])
    print(f"| model: {sum(p.numel() for p in model.parameters())} parameters")
    optimizer = make_optimizer(model.parameters())
    gen = torch.Generator().manual_seed(args["seed"])
    for epoch in range(1, args["epochs"] + 1):
        epoch_start = time.time()
        model.train()
        total_loss, max_norm, start = 0.0, 0.0, time.time()
        for batch_idx in range(1, args["batches_per_epoch"] + 1):
            batch = get_batch(corpus.train, args["bptt"], args["batch_size"], gen)
            optimizer.zero_grad()
            loss = loss_fn(model, batch)
            loss.backward()
            max_norm = max(max_norm, grad_norm(model))
            optimizer.step()
            total_loss += loss.item()
            if batch_idx % args["log_interval"] == 0:
                cur_loss = total_loss / args["log_interval"]
                elapsed = time.time() - start
                print(f"| epoch {epoch:3d} | {batch_idx:5d}/{args['batches_per_epoch']:5d} batches | "
                      f"lr {optimizer.param_groups[0]['lr']:02.2f} | ms/batch {elapsed * 1000 / args['log_interval']:5.2f} | "
                      f"loss {cur_loss:5.2f} | ppl {math.exp(min(cur_loss, 700)):8.2f} | grad_norm(max) {max_norm:8.2f}")
                total_loss, max_norm, start = 0.0, 0.0, time.time()
        val_loss = evaluate(model, corpus.valid)
        print("-" * 89)
        print(f"| end of epoch {epoch:3d} | time: {time.time() - epoch_start:5.2f}s | valid loss {val_loss:5.2f} | "
              f"valid ppl {math.exp(min(val_loss, 700)):8.2f}")
        print("-" * 89)


if __name__ == "__main__":
    main()
