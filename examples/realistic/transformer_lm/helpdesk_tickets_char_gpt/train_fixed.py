# Character-level GPT on synthetic helpdesk ticket logs.
# Data pipeline adapted from pytorch/examples word_language_model
# (corpus -> parallel streams via batchify -> bptt windows via get_batch).
import math
import random
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# ----------------------------------------------------------------------------
# config
seed = 1111
n_tickets = 700
bptt = 64
batch_size = 16
eval_batch_size = 10
block_size = 64
n_layer = 2
n_head = 4
n_embd = 64
dropout = 0.1
epochs = 5
lr = 3e-3
min_lr = 3e-4
warmup_iters = 50
weight_decay = 0.1
betas = (0.9, 0.95)
clip = 1.0
log_interval = 20

torch.set_num_threads(1)


# ----------------------------------------------------------------------------
# data
USERS = ["mara", "olu", "priya", "jonas", "li wei", "sven", "ana", "tomas", "keiko", "fatima",
         "rahul", "greta", "diego", "noor", "pavel", "chloe"]
ENGINEERS = ["ken", "dora", "ravi", "ines", "mbali", "yusuf", "hana", "oskar"]
HOST_PREFIX = ["db", "web", "cache", "queue", "auth", "batch", "edge", "search"]
ISSUES = ["disk full", "high latency", "cert expired", "oom killed", "login failure",
          "packet loss", "stuck cron job", "backup failed", "dns timeout", "clock drift"]
ACTIONS = ["rotated the logs", "restarted the service", "renewed the certificate",
           "raised the memory limit", "reset the password", "replaced the nic",
           "cleared the lock file", "reran the backup", "flushed the resolver cache",
           "resynced ntp"]
FIX_FOR = dict(zip(ISSUES, ACTIONS))


def generate_corpus(n, rng):
    out = []
    for _ in range(n):
        tid = rng.randint(1000, 9999)
        user = rng.choice(USERS)
        eng = rng.choice(ENGINEERS)
        host = "%s-%02d" % (rng.choice(HOST_PREFIX), rng.randint(1, 40))
        issue = rng.choice(ISSUES)
        prio = rng.choice(["p1", "p2", "p2", "p3", "p3", "p3"])
        out.append("ticket %d [%s] opened by %s: %s on %s.\n" % (tid, prio, user, issue, host))
        out.append("assigned to %s. %s logged into %s and %s.\n" % (eng, eng, host, FIX_FOR[issue]))
        if rng.random() < 0.3:
            out.append("%s asked %s to confirm %s is healthy.\n" % (eng, user, host))
        out.append("ticket %d closed by %s (%s on %s).\n\n" % (tid, eng, issue, host))
    return "".join(out)


class Corpus:
    def __init__(self, text):
        chars = sorted(set(text))
        self.stoi = {c: i for i, c in enumerate(chars)}
        self.itos = {i: c for c, i in self.stoi.items()}
        ids = torch.tensor([self.stoi[c] for c in text], dtype=torch.long)
        n = len(ids)
        n_train, n_valid = int(0.8 * n), int(0.1 * n)
        self.train = ids[:n_train]
        self.valid = ids[n_train:n_train + n_valid]
        self.test = ids[n_train + n_valid:]

    @property
    def vocab_size(self):
        return len(self.stoi)


def batchify(data, bsz):
    # Work out how cleanly we can divide the dataset into bsz parts.
    nbatch = data.size(0) // bsz
    # Trim off any extra elements that wouldn't cleanly fit (remainders).
    data = data.narrow(0, 0, nbatch * bsz)
    # Evenly divide the data across the bsz batches.
    data = data.view(bsz, -1).t().contiguous()
    return data


def get_batch(source, i):
    seq_len = min(bptt, len(source) - 1 - i)
    data = source[i:i + seq_len]
    target = source[i + 1:i + 1 + seq_len]
    return data.t().contiguous(), target.t().contiguous()


# ----------------------------------------------------------------------------
# model
class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size))
                             .view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(n_embd, dim=2)
        k = k.view(B, T, n_head, C // n_head).transpose(1, 2)
        q = q.view(B, T, n_head, C // n_head).transpose(1, 2)
        v = v.view(B, T, n_head, C // n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * n_embd, n_embd)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = MLP()

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, vocab_size):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList([Block() for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
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

    def forward(self, idx):
        b, t = idx.size()
        assert t <= block_size, f"Cannot forward sequence of length {t}, block size is only {block_size}"
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        x = self.ln_f(x)
        return self.lm_head(x)


def configure_optimizer(model):
    params = {pn: p for pn, p in model.named_parameters() if p.requires_grad}
    decay = [p for p in params.values() if p.dim() >= 2]
    no_decay = [p for p in params.values() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=betas)


def get_lr(it, total_iters):
    if it < warmup_iters:
        return lr * (it + 1) / warmup_iters
    ratio = (it - warmup_iters) / max(1, total_iters - warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * min(1.0, ratio)))
    return min_lr + coeff * (lr - min_lr)


def criterion(model, batch):
    data, targets = batch
    logits = model(data)
    return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def evaluate(model, data_source):
    model.eval()
    total_loss, total_tokens = 0.0, 0
    with torch.no_grad():
        for i in range(0, data_source.size(0) - 1, bptt):
            data, targets = get_batch(data_source, i)
            loss = criterion(model, (data, targets))
            total_loss += loss.item() * targets.numel()
            total_tokens += targets.numel()
    return total_loss / total_tokens


def build():
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    text = generate_corpus(n_tickets, random.Random(seed))
    corpus = Corpus(text)
    train_data = batchify(corpus.train, batch_size)
    val_data = batchify(corpus.valid, eval_batch_size)
    test_data = batchify(corpus.test, eval_batch_size)
    model = GPT(corpus.vocab_size)
    optimizer = configure_optimizer(model)
    return corpus, train_data, val_data, test_data, model, optimizer


def make_target():
    corpus, train_data, val_data, test_data, model, optimizer = build()
    batches = [get_batch(train_data, i) for i in range(0, 8 * bptt, bptt)]
    val_batches = [get_batch(val_data, i) for i in range(0, 4 * bptt, bptt)]
    return {
        "model": model,
        "data": batches,
        "val_data": val_batches,
        "loss_fn": criterion,
        "optimizer": optimizer,
        "num_classes": corpus.vocab_size,
        "task": "language_modeling",
    }


if __name__ == "__main__":
    corpus, train_data, val_data, test_data, model, optimizer = build()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"corpus: {len(corpus.train)} train / {len(corpus.valid)} valid / {len(corpus.test)} test chars, vocab {corpus.vocab_size}")
    print(f"number of parameters: {n_params / 1e6:.2f}M")
    n_batches = (train_data.size(0) - 1 + bptt - 1) // bptt
    total_iters = epochs * n_batches
    it = 0
    best_val_loss = None
    t_start = time.time()
    for epoch in range(1, epochs + 1):
        epoch_start_time = time.time()
        model.train()
        total_loss = 0.0
        start_time = time.time()
        for batch, i in enumerate(range(0, train_data.size(0) - 1, bptt)):
            cur_lr = get_lr(it, total_iters)
            for group in optimizer.param_groups:
                group["lr"] = cur_lr
            data, targets = get_batch(train_data, i)
            loss = criterion(model, (data, targets))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            optimizer.step()
            it += 1
            total_loss += loss.item()
            if (batch + 1) % log_interval == 0:
                cur_loss = total_loss / log_interval
                elapsed = time.time() - start_time
                print("| epoch {:3d} | {:5d}/{:5d} batches | lr {:.2e} | ms/batch {:5.2f} | "
                      "loss {:5.2f} | ppl {:8.2f}".format(epoch, batch + 1, n_batches, cur_lr,
                                                          elapsed * 1000 / log_interval, cur_loss,
                                                          math.exp(cur_loss)))
                total_loss = 0.0
                start_time = time.time()
        val_loss = evaluate(model, val_data)
        print("-" * 89)
        print("| end of epoch {:3d} | time: {:5.2f}s | valid loss {:5.2f} | "
              "valid ppl {:8.2f}".format(epoch, (time.time() - epoch_start_time), val_loss,
                                         math.exp(val_loss)))
        print("-" * 89)
        if best_val_loss is None or val_loss < best_val_loss:
            best_val_loss = val_loss
    test_loss = evaluate(model, test_data)
    print("=" * 89)
    print("| End of training | test loss {:5.2f} | test ppl {:8.2f} | total time {:.1f}s".format(
        test_loss, math.exp(test_loss), time.time() - t_start))
    print("=" * 89)
