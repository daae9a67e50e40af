"""GRU classifier: flag account sessions that end in a takeover.

Sessions are sequences of UI/auth event ids (variable length, right-padded).
Compromised sessions show more risky events (failed logins, password resets,
payout-detail changes, new devices, 2FA switched off) than normal ones; the
labels come from a manual review queue and carry a little noise.
"""
import logging
import math
import time

import numpy as np
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
log = logging.getLogger("session_gru")

PAD = 0
VOCAB = 30          # 0 = pad, 1..29 = event ids
RISKY = np.array([3, 5, 11, 17, 23])  # login_fail, pw_reset, payout_change, new_device, 2fa_off

CFG = dict(
    n_train=2400,
    n_val=600,
    min_len=30,
    max_len=60,
    emb_dim=32,
    hidden=64,
    batch_size=64,
    epochs=8,
    lr=0.05,
    weight_decay=1e-4,
    clip=1.0,
    seed=7,
)


def make_session(rng, cfg):
    n = int(rng.integers(cfg["min_len"], cfg["max_len"] + 1))
    # risky events are rare in normal customer traffic
    background = np.setdiff1d(np.arange(1, VOCAB), RISKY)
    seq = rng.choice(background, size=n)
    takeover = rng.random() < 0.5
    rate = 0.2 if takeover else 0.03
    hit = rng.random(n) < rate
    seq[hit] = rng.choice(RISKY, size=hit.sum())
    label = int(takeover)
    if rng.random() < 0.02:
        label = 1 - label
    return seq, label


def make_split(n, seed, cfg=CFG):
    rng = np.random.default_rng(seed)
    tokens = torch.full((n, cfg["max_len"]), PAD, dtype=torch.long)
    lengths = torch.empty(n, dtype=torch.long)
    labels = torch.empty(n, dtype=torch.long)
    for k in range(n):
        seq, y = make_session(rng, cfg)
        tokens[k, :len(seq)] = torch.from_numpy(seq)
        lengths[k] = len(seq)
        labels[k] = y
    return tokens, lengths, labels


class SessionGRU(nn.Module):
    def __init__(self, vocab=VOCAB, emb_dim=32, hidden=64, num_classes=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, emb_dim, padding_idx=PAD)
        self.gru = nn.GRU(emb_dim, hidden, batch_first=True, bidirectional=True)
        self.drop = nn.Dropout(0.2)
        self.out = nn.Linear(2 * hidden, num_classes)

    def forward(self, tokens, lengths):
        x = self.embed(tokens)
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        _, h = self.gru(packed)                      # h: (2, B, hidden)
        h = torch.cat([h[0], h[1]], dim=-1)
        return self.out(self.drop(h))


criterion = nn.CrossEntropyLoss()


def loss_fn(model, batch):
    tokens, lengths, labels = batch
    return criterion(model(tokens, lengths), labels)


def build_optimizer(params, cfg=CFG):
    return torch.optim.SGD(params, lr=cfg["lr"], momentum=0.9, weight_decay=cfg["weight_decay"])


def iterate(split, bs, shuffle, gen=None):
    tokens, lengths, labels = split
    idx = torch.randperm(len(labels), generator=gen) if shuffle else torch.arange(len(labels))
    for i in range(0, len(labels), bs):
        j = idx[i:i + bs]
        yield tokens[j], lengths[j], labels[j]


@torch.no_grad()
def evaluate(model, split, bs=256):
    model.eval()
    tot, correct, n = 0.0, 0, 0
    for batch in iterate(split, bs, shuffle=False):
        out = model(batch[0], batch[1])
        tot += criterion(out, batch[2]).item() * len(batch[2])
        correct += (out.argmax(-1) == batch[2]).sum().item()
        n += len(batch[2])
    model.train()
    return tot / n, correct / n


_SPLITS = {}


def get_splits(cfg=CFG):
    if not _SPLITS:
        _SPLITS["train"] = make_split(cfg["n_train"], cfg["seed"])
        _SPLITS["val"] = make_split(cfg["n_val"], cfg["seed"] + 100)
    return _SPLITS["train"], _SPLITS["val"]


def make_target():
    torch.manual_seed(CFG["seed"])
    train, _ = get_splits()
    model = SessionGRU(emb_dim=CFG["emb_dim"], hidden=CFG["hidden"])
    gen = torch.Generator().manual_seed(CFG["seed"])
    it = iterate(train, CFG["batch_size"], True, gen)
    data = [next(it) for _ in range(3)]
    return {
        "model": model,
        "batch": data[0],
        "data": data,
        "loss_fn": loss_fn,
        "optimizer": build_optimizer(model.parameters()),
        "make_optimizer": build_optimizer,
        "num_classes": 2,
        "task": "classification",
    }


def main():
    cfg = CFG
    torch.manual_seed(cfg["seed"])
    train, val = get_splits(cfg)
    log.info("train sessions=%d (pos rate %.3f) val sessions=%d", len(train[2]),
             train[2].float().mean().item(), len(val[2]))
    model = SessionGRU(emb_dim=cfg["emb_dim"], hidden=cfg["hidden"])
    log.info("model params=%d", sum(p.numel() for p in model.parameters()))
    optimizer = build_optimizer(model.parameters(), cfg)
    gen = torch.Generator().manual_seed(cfg["seed"])
    steps_per_epoch = math.ceil(len(train[2]) / cfg["batch_size"])
    step = 0
    for epoch in range(1, cfg["epochs"] + 1):
        t0 = time.time()
        run_loss, run_n = 0.0, 0
        for batch in iterate(train, cfg["batch_size"], True, gen):
            loss = loss_fn(model, batch)
            optimizer.zero_grad()
            loss.backward()
            gnorm = nn.utils.clip_grad_norm_(model.parameters(), cfg["clip"])
            optimizer.step()
            step += 1
            run_loss += loss.item() * len(batch[2])
            run_n += len(batch[2])
            if step % 20 == 0:
                log.info("epoch %d step %d/%d loss=%.4f grad_norm=%.3f", epoch,
                         step - (epoch - 1) * steps_per_epoch, steps_per_epoch, loss.item(), gnorm.item())
        val_loss, val_acc = evaluate(model, val)
        log.info("epoch %d done train_loss=%.4f val_loss=%.4f val_acc=%.3f (%.1fs)",
                 epoch, run_loss / run_n, val_loss, val_acc, time.time() - t0)
    log.info("final val_loss=%.4f val_acc=%.3f", val_loss, val_acc)


if __name__ == "__main__":
    main()
