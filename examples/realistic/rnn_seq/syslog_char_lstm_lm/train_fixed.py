"""Character-level LSTM language model over syslog-style lines.

Each log line is one training sequence (variable length, right-padded per batch).
Loosely follows the pytorch/examples word_language_model recipe: plain SGD with a
large learning rate, gradient-norm clipping, and LR annealing when val loss stalls.
"""
import math
import random
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)

# ----------------------------------------------------------------------------
# config
seed = 1337
n_train_lines = 3000
n_val_lines = 150
batch_size = 32
emb_dim = 48
hidden_dim = 96
num_layers = 2
dropout = 0.1
learning_rate = 20.0
grad_clip = 0.25
max_iters = 120
eval_interval = 30
log_interval = 10
PAD = 0  # index 0 is reserved for padding

# ----------------------------------------------------------------------------
# synthetic syslog generator

USERS = ["alice", "bob", "carol", "dave", "eve", "mallory", "root", "deploy", "git", "backup"]
HOSTS = ["web01", "web02", "db01", "cache03", "ci-runner", "bastion"]
DAEMONS = ["sshd", "cron", "systemd", "kernel", "nginx", "sudo"]
MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
UNITS = ["nginx.service", "redis.service", "docker.service", "cron.service", "ssh.service"]


def _ip(rng):
    return f"10.{rng.randint(0, 3)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"


def make_line(rng):
    ts = f"{rng.choice(MONTHS)} {rng.randint(1, 28):2d} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
    host = rng.choice(HOSTS)
    daemon = rng.choice(DAEMONS)
    pid = rng.randint(200, 32000)
    if daemon == "sshd":
        kind = rng.random()
        if kind < 0.5:
            msg = f"Accepted publickey for {rng.choice(USERS)} from {_ip(rng)} port {rng.randint(1024, 65535)} ssh2"
        elif kind < 0.8:
            msg = f"Failed password for invalid user {rng.choice(USERS)} from {_ip(rng)} port {rng.randint(1024, 65535)} ssh2"
        else:
            msg = f"Disconnected from user {rng.choice(USERS)} {_ip(rng)} port {rng.randint(1024, 65535)}"
    elif daemon == "cron":
        msg = f"({rng.choice(USERS)}) CMD (/usr/local/bin/{rng.choice(['rotate', 'backup', 'sync', 'report'])}.sh)"
    elif daemon == "systemd":
        verb = rng.choice(["Started", "Stopped", "Reloaded"])
        msg = f"{verb} {rng.choice(UNITS)}."
    elif daemon == "kernel":
        msg = f"[{rng.randint(100, 99999)}.{rng.randint(0, 999999):06d}] eth0: link {rng.choice(['up', 'down'])}"
    elif daemon == "nginx":
        msg = f"{_ip(rng)} \"GET /api/v1/{rng.choice(['users', 'orders', 'health', 'items'])} HTTP/1.1\" {rng.choice([200, 200, 200, 301, 404, 500])}"
    else:
        msg = f"{rng.choice(USERS)} : TTY=pts/{rng.randint(0, 9)} ; PWD=/home ; USER=root ; COMMAND=/bin/systemctl restart {rng.choice(UNITS)}"
    tag = f"{daemon}[{pid}]" if daemon != "kernel" else "kernel"
    return f"{ts} {host} {tag}: {msg}"


def build_corpus(seed=seed):
    rng = random.Random(seed)
    lines = [make_line(rng) for _ in range(n_train_lines + n_val_lines)]
    chars = sorted(set("".join(lines)))
    # 0 = pad, 1 = BOS, 2 = EOS, then characters
    stoi = {ch: i + 3 for i, ch in enumerate(chars)}
    return lines[:n_train_lines], lines[n_train_lines:], stoi


def encode(line, stoi):
    return [1] + [stoi[c] for c in line] + [2]


def make_batch(encoded_lines):
    """Right-pad a list of token lists; returns inputs, next-char targets (-100 on pads), lengths."""
    lengths = torch.tensor([len(s) - 1 for s in encoded_lines])
    T = int(lengths.max())
    x = torch.full((len(encoded_lines), T), PAD, dtype=torch.long)
    y = torch.full((len(encoded_lines), T), -100, dtype=torch.long)
    for i, s in enumerate(encoded_lines):
        s = torch.tensor(s)
        x[i, : len(s) - 1] = s[:-1]
        y[i, : len(s) - 1] = s[1:]
    return x, y, lengths


def batch_iterator(encoded, batch_size, shuffle, seed=0):
    rng = random.Random(seed)
    epoch = 0
    while True:
        order = list(range(len(encoded)))
        if shuffle:
            rng.shuffle(order)
        for i in range(0, len(order) - batch_size + 1, batch_size):
            yield make_batch([encoded[j] for j in order[i : i + batch_size]])
        epoch += 1
        if not shuffle:
            return


# ----------------------------------------------------------------------------
# model

class CharLSTM(nn.Module):
    def __init__(self, vocab_size, emb_dim, hidden_dim, num_layers, dropout):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, emb_dim, padding_idx=PAD)
        self.lstm = nn.LSTM(emb_dim, hidden_dim, num_layers, batch_first=True, dropout=dropout)
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(hidden_dim, vocab_size)

    def forward(self, x, lengths):
        emb = self.drop(self.embed(x))
        packed = nn.utils.rnn.pack_padded_sequence(emb, lengths, batch_first=True, enforce_sorted=False)
        out, _ = self.lstm(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.size(1))
        return self.head(self.drop(out))


def compute_loss(model, batch):
    x, y, lengths = batch
    logits = model(x, lengths)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1), ignore_index=-100)


def make_optimizer(params):
    return torch.optim.SGD(params, lr=learning_rate)


def build_model(vocab_size):
    torch.manual_seed(seed)
    return CharLSTM(vocab_size, emb_dim, hidden_dim, num_layers, dropout)


@torch.no_grad()
def evaluate(model, encoded_val):
    model.eval()
    total, count = 0.0, 0
    for batch in batch_iterator(encoded_val, 50, shuffle=False):
        n = int((batch[1] != -100).sum())
        total += compute_loss(model, batch).item() * n
        count += n
    model.train()
    return total / count


def make_target():
    train_lines, _, stoi = build_corpus()
    encoded = [encode(l, stoi) for l in train_lines]
    it = batch_iterator(encoded, batch_size, shuffle=True, seed=seed)
    data = [next(it) for _ in range(4)]
    return {
        "model": build_model(len(stoi) + 3),
        "data": data,
        "loss_fn": compute_loss,
        "make_optimizer": make_optimizer,
        "num_classes": len(stoi) + 3,
        "task": "lm",
    }


def main():
    random.seed(seed)
    train_lines, val_lines, stoi = build_corpus()
    vocab_size = len(stoi) + 3
    enc_train = [encode(l, stoi) for l in train_lines]
    enc_val = [encode(l, stoi) for l in val_lines]
    print(f"train lines: {len(enc_train)}, val lines: {len(enc_val)}, vocab size: {vocab_size}")
    print(f"avg line length: {sum(map(len, enc_train)) / len(enc_train):.1f} chars")

    model = build_model(vocab_size)
    optimizer = make_optimizer(model.parameters())
    print(f"number of parameters: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M")

    lr = learning_rate
    best_val = float("inf")
    train_iter = batch_iterator(enc_train, batch_size, shuffle=True, seed=seed)
    t0 = time.time()
    for it in range(max_iters + 1):
        if it % eval_interval == 0:
            val_loss = evaluate(model, enc_val)
            print(f"step {it}: val loss {val_loss:.4f}, val ppl {math.exp(min(val_loss, 20)):.2f}, lr {lr:g}")
            if val_loss < best_val:
                best_val = val_loss
            elif it > 0:
                lr /= 2.0
                for g in optimizer.param_groups:
                    g["lr"] = lr
        if it == max_iters:
            break

        batch = next(train_iter)
        loss = compute_loss(model, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()

        if it % log_interval == 0:
            t1 = time.time()
            dt = (t1 - t0) * 1000 / (log_interval if it > 0 else 1)
            t0 = t1
            print(f"iter {it}: loss {loss.item():.4f}, time {dt:.2f}ms")

    print(f"best val loss {best_val:.4f}")


if __name__ == "__main__":
    main()
