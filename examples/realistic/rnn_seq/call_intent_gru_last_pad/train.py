"""Call-center intent classifier: Embedding -> GRU -> Linear.

Transcribed caller utterances (synthetic) are routed to one of 8 intents
(billing, cancel, tech_support, ...). A caller usually states the reason up
front ("hi i want to cancel ..."), then rambles; intent keywords keep popping
up through the rest of the turn, mixed with keywords of other intents.

Utterances are right-padded per batch with pad_sequence. Log lines follow the
Lightning progress-bar summary style.
"""
import argparse
import math
import random
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, Dataset

INTENTS = ["billing", "cancel", "tech_support", "upgrade", "address_change",
           "refund", "outage", "password_reset"]
NUM_INTENTS = len(INTENTS)
PAD, UNK, BOS = 0, 1, 2
N_FILLER = 300
N_GENERIC_OPEN = 6
N_OPEN_PER_INTENT = 3
N_KW_PER_INTENT = 8
FILLER_OFF = 3
GENERIC_OPEN_OFF = FILLER_OFF + N_FILLER
OPEN_OFF = GENERIC_OPEN_OFF + N_GENERIC_OPEN
KW_OFF = OPEN_OFF + NUM_INTENTS * N_OPEN_PER_INTENT
VOCAB_SIZE = KW_OFF + NUM_INTENTS * N_KW_PER_INTENT


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--train_size", type=int, default=4000)
    p.add_argument("--val_size", type=int, default=1000)
    p.add_argument("--min_len", type=int, default=5)
    p.add_argument("--max_len", type=int, default=60)
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--max_epochs", type=int, default=8)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--weight_decay", type=float, default=1e-2)
    p.add_argument("--embed_dim", type=int, default=32)
    p.add_argument("--hidden_size", type=int, default=64)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--log_every_n_steps", type=int, default=25)
    p.add_argument("--seed", type=int, default=7)
    return p.parse_known_args()[0]


def synth_utterance(rng, intent, length):
    """Opening phrase (mostly intent specific) + rambling with sparse keywords."""
    toks = [BOS]
    if rng.random() < 0.75:
        toks.append(OPEN_OFF + intent * N_OPEN_PER_INTENT + rng.randrange(N_OPEN_PER_INTENT))
    else:
        toks.append(GENERIC_OPEN_OFF + rng.randrange(N_GENERIC_OPEN))
    while len(toks) < length:
        r = rng.random()
        if r < 0.07:
            toks.append(KW_OFF + intent * N_KW_PER_INTENT + rng.randrange(N_KW_PER_INTENT))
        elif r < 0.11:
            other = rng.randrange(NUM_INTENTS)
            toks.append(KW_OFF + other * N_KW_PER_INTENT + rng.randrange(N_KW_PER_INTENT))
        elif r < 0.13:
            toks.append(UNK)
        else:
            # zipf-ish filler words ("uh", "the", "my", "account", ...)
            toks.append(FILLER_OFF + min(int(rng.paretovariate(1.2)) - 1, N_FILLER - 1))
    return toks[:length]


class IntentDataset(Dataset):
    def __init__(self, n, args, seed):
        rng = random.Random(seed)
        self.items = []
        for _ in range(n):
            intent = rng.randrange(NUM_INTENTS)
            length = rng.randint(args.min_len, args.max_len)
            self.items.append((torch.tensor(synth_utterance(rng, intent, length)), intent))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def collate(batch):
    seqs, labels = zip(*batch)
    lengths = torch.tensor([len(s) for s in seqs])
    tokens = pad_sequence(seqs, batch_first=True, padding_value=PAD)
    return tokens, lengths, torch.tensor(labels)


class IntentGRU(nn.Module):
    def __init__(self, vocab, embed_dim, hidden, n_out, dropout):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed_dim, padding_idx=PAD)
        self.gru = nn.GRU(embed_dim, hidden, batch_first=True)
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(hidden, n_out)

    def forward(self, tokens, lengths):
        out, _ = self.gru(self.embed(tokens))
        last = out[:, -1, :]
        return self.head(self.drop(last))


def loss_fn(model, batch):
    tokens, lengths, labels = batch
    logits = model(tokens, lengths)
    return F.cross_entropy(logits, labels)


def make_optimizer(params):
    args = parse_args()
    return torch.optim.AdamW(params, lr=args.lr, weight_decay=args.weight_decay)


def build(args):
    torch.manual_seed(args.seed)
    train_ds = IntentDataset(args.train_size, args, seed=args.seed)
    val_ds = IntentDataset(args.val_size, args, seed=args.seed + 1000)
    model = IntentGRU(VOCAB_SIZE, args.embed_dim, args.hidden_size, NUM_INTENTS, args.dropout)
    return model, train_ds, val_ds


def make_loader(ds, args, shuffle):
    g = torch.Generator().manual_seed(args.seed)
    return DataLoader(ds, batch_size=args.batch_size, shuffle=shuffle, collate_fn=collate, generator=g)


def make_target():
    args = parse_args()
    model, train_ds, _ = build(args)
    data = []
    for b in make_loader(train_ds, args, shuffle=True):
        data.append(b)
        if len(data) == 10:
            break
    return {
        "model": model,
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "num_classes": NUM_INTENTS,
        "task": "classification",
    }


@torch.no_grad()
def validate(model, loader):
    model.eval()
    n, correct, total = 0, 0, 0.0
    for tokens, lengths, labels in loader:
        logits = model(tokens, lengths)
        total += F.cross_entropy(logits, labels, reduction="sum").item()
        correct += (logits.argmax(-1) == labels).sum().item()
        n += len(labels)
    model.train()
    return total / n, correct / n


def main():
    args = parse_args()
    model, train_ds, val_ds = build(args)
    train_loader = make_loader(train_ds, args, shuffle=True)
    val_loader = DataLoader(val_ds, batch_size=256, shuffle=False, collate_fn=collate)
    opt = make_optimizer(model.parameters())
    steps_per_epoch = len(train_loader)
    total_steps = steps_per_epoch * args.max_epochs
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=total_steps,
                                                pct_start=0.1, anneal_strategy="cos")

    n_params = sum(p.numel() for p in model.parameters())
    print("  | Name  | Type      | Params")
    print("-------------------------------------")
    for name, mod in model.named_children():
        print(f"  | {name:<5} | {type(mod).__name__:<9} | {sum(p.numel() for p in mod.parameters()):,}")
    print("-------------------------------------")
    print(f"{n_params:,}     Trainable params")
    print(f"train samples={len(train_ds)}  val samples={len(val_ds)}  steps/epoch={steps_per_epoch}")

    t0 = time.time()
    step = 0
    for epoch in range(args.max_epochs):
        run_loss, run_n = 0.0, 0
        for batch in train_loader:
            loss = loss_fn(model, batch)
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            step += 1
            run_loss += loss.item()
            run_n += 1
            if step % args.log_every_n_steps == 0:
                print(f"Epoch {epoch}: step {step}/{total_steps} "
                      f"train_loss_step={loss.item():.4f} lr={sched.get_last_lr()[0]:.2e}")
        val_loss, val_acc = validate(model, val_loader)
        print(f"Epoch {epoch}: 100%|##########| {steps_per_epoch}/{steps_per_epoch} "
              f"[{time.time() - t0:.1f}s] train_loss_epoch={run_loss / run_n:.4f} "
              f"val_loss={val_loss:.4f} val_acc={val_acc:.4f}")
    print(f"`Trainer.fit` stopped: `max_epochs={args.max_epochs}` reached. ({time.time() - t0:.1f}s)")


if __name__ == "__main__":
    main()
