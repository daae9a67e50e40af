"""GRU classifier for web-shop sessions (sequence of event ids -> session outcome).

Sessions have very different lengths (4..90 events), so the dataset keeps sequences
ordered by length and a bucket sampler draws batches of neighbouring lengths, which
keeps padding (and GRU time) low. Batches are packed with pack_padded_sequence.
"""
import logging
import random
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_sequence

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
log = logging.getLogger("session_clf")

EVENTS = ["<pad>", "home", "view", "search", "filter", "add_cart", "remove_cart", "wishlist", "checkout",
          "shipping", "payment", "confirm", "coupon", "help", "chat", "faq", "contact", "login", "logout",
          "review", "compare"]
E = {name: i for i, name in enumerate(EVENTS)}
OUTCOMES = ["purchase", "abandoned_cart", "browse_only", "support"]

CFG = dict(n_train=3000, n_val=800, batch_size=64, emb=24, hidden=64, lr=3e-3, epochs=8, clip=1.0, seed=0)


def generate_sessions(n, seed):
    rng = random.Random(seed)
    filler = [E["view"], E["search"], E["filter"], E["home"], E["compare"], E["review"], E["wishlist"], E["login"]]
    seqs, labels = [], []
    for _ in range(n):
        y = rng.randrange(len(OUTCOMES))
        length = rng.randint(4, 90)
        s = [rng.choice(filler) for _ in range(length)]
        if y == 0:      # cart, checkout, payment, confirm in order
            pos = sorted(rng.sample(range(length), 3))
            s[pos[0]] = E["add_cart"]
            s[pos[1]] = E["checkout"]
            s[pos[2]] = rng.choice([E["payment"], E["confirm"]])
        elif y == 1:    # carted, maybe started checkout, never paid
            pos = sorted(rng.sample(range(length), 2))
            s[pos[0]] = E["add_cart"]
            s[pos[1]] = rng.choice([E["checkout"], E["shipping"], E["remove_cart"], E["view"]])
        elif y == 2:    # only browsing, sometimes a coupon page
            if rng.random() < 0.3:
                s[rng.randrange(length)] = E["coupon"]
        else:           # support contact somewhere, maybe a cart too
            s[rng.randrange(length)] = rng.choice([E["help"], E["chat"], E["faq"], E["contact"]])
            if rng.random() < 0.4:
                s[rng.randrange(length)] = E["add_cart"]
        seqs.append(s)
        labels.append(y)
    return seqs, labels


class SessionDataset(torch.utils.data.Dataset):
    def __init__(self, seqs, labels):
        order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
        self.seqs = [seqs[i] for i in order]
        self.labels = [labels[i] for i in order]

    def __len__(self):
        return len(self.seqs)

    def __getitem__(self, i):
        return torch.tensor(self.seqs[i], dtype=torch.long), self.labels[i]


class BucketBatchSampler(torch.utils.data.Sampler):
    """Dataset is length-ordered: cut it into contiguous batches, shuffle batch order."""

    def __init__(self, n, batch_size, shuffle, seed=0):
        self.batches = [list(range(i, min(i + batch_size, n))) for i in range(0, n, batch_size)]
        self.shuffle = shuffle
        self.rng = random.Random(seed)

    def __iter__(self):
        order = list(range(len(self.batches)))
        if self.shuffle:
            self.rng.shuffle(order)
        for b in order:
            yield self.batches[b]

    def __len__(self):
        return len(self.batches)


def collate(items):
    seqs, labels = zip(*items)
    lengths = torch.tensor([len(s) for s in seqs])
    return pad_sequence(seqs, batch_first=True), lengths, torch.tensor(labels)


def make_loader(seqs, labels, shuffle, seed=0):
    ds = SessionDataset(seqs, labels)
    sampler = BucketBatchSampler(len(ds), CFG["batch_size"], shuffle, seed)
    return torch.utils.data.DataLoader(ds, batch_sampler=sampler, collate_fn=collate)


class SessionGRU(nn.Module):
    def __init__(self, n_events=len(EVENTS), emb=CFG["emb"], hidden=CFG["hidden"], n_classes=len(OUTCOMES)):
        super().__init__()
        self.emb = nn.Embedding(n_events, emb, padding_idx=0)
        self.gru = nn.GRU(emb, hidden, batch_first=True)
        self.out = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, n_classes))

    def forward(self, x, lengths):
        packed = pack_padded_sequence(self.emb(x), lengths, batch_first=True, enforce_sorted=False)
        _, h = self.gru(packed)
        return self.out(h[-1])


def loss_fn(model, batch):
    x, lengths, y = batch
    return F.cross_entropy(model(x, lengths), y)


def make_optimizer(params):
    return torch.optim.Adam(params, lr=CFG["lr"])


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    tot, correct, n = 0.0, 0, 0
    for x, lengths, y in loader:
        logits = model(x, lengths)
        tot += F.cross_entropy(logits, y, reduction="sum").item()
        correct += (logits.argmax(1) == y).sum().item()
        n += len(y)
    model.train()
    return tot / n, correct / n


def build():
    torch.manual_seed(CFG["seed"])
    np.random.seed(CFG["seed"])
    tr_x, tr_y = generate_sessions(CFG["n_train"], seed=1)
    va_x, va_y = generate_sessions(CFG["n_val"], seed=2)
    train_loader = make_loader(tr_x, tr_y, shuffle=True, seed=CFG["seed"])
    val_loader = make_loader(va_x, va_y, shuffle=False)
    model = SessionGRU()
    return model, train_loader, val_loader


def make_target():
    model, train_loader, _ = build()
    it = iter(train_loader)
    data = [next(it) for _ in range(3)]
    return {
        "model": model,
        "batch": data[0],
        "data": data,
        "loss_fn": loss_fn,
        "optimizer": make_optimizer(model.parameters()),
        "make_optimizer": make_optimizer,
        "num_classes": len(OUTCOMES),
        "task": "classification",
    }


def main():
    model, train_loader, val_loader = build()
    optimizer = make_optimizer(model.parameters())
    log.info("train sessions=%d val sessions=%d batches/epoch=%d params=%d", CFG["n_train"], CFG["n_val"],
             len(train_loader), sum(p.numel() for p in model.parameters()))
    step = 0
    for epoch in range(1, CFG["epochs"] + 1):
        t0 = time.time()
        run_loss, run_n = 0.0, 0
        for batch in train_loader:
            loss = loss_fn(model, batch)
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), CFG["clip"])
            optimizer.step()
            step += 1
            run_loss += loss.item()
            run_n += 1
            if step % 20 == 0:
                log.info("epoch %d step %d loss=%.4f", epoch, step, run_loss / run_n)
        val_loss, val_acc = evaluate(model, val_loader)
        log.info("epoch %d done train_loss=%.4f val_loss=%.4f val_acc=%.3f (%.1fs)", epoch, run_loss / run_n,
                 val_loss, val_acc, time.time() - t0)


if __name__ == "__main__":
    main()
