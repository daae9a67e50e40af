"""Support-ticket intent classification with a tiny pretrained transformer.

1. Source task: a 2-layer transformer encoder is trained to route historical
   tickets to 4 coarse support queues and saved (state dict + vocab).
2. Fine-tuning: the encoder is reloaded, a new intent head is attached, the
   encoder stays frozen for the first `freeze_epochs` epochs and is then
   unfrozen with a 2x lower learning rate (linear warmup + linear decay,
   label smoothing, token-dropout augmentation). HF Trainer-style logging.
"""
import json
import math
import os
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

RUN_DIR = os.path.dirname(os.path.abspath(__file__))
ENCODER_CKPT = os.path.join(RUN_DIR, "ticket_router_encoder.pt")
TICKETS_CSV = os.path.join(RUN_DIR, "labelled_tickets.csv")

PAD, CLS, MASK, UNK = 0, 1, 2, 3
SPECIALS = ["[PAD]", "[CLS]", "[MASK]", "[UNK]"]
MAX_LEN = 24

INTENTS = {
    "refund_request": ["refund", "money", "back", "return", "charged", "twice", "reimburse"],
    "cancel_subscription": ["cancel", "subscription", "stop", "renewal", "unsubscribe", "membership"],
    "login_issue": ["login", "password", "locked", "sign", "reset", "code", "2fa"],
    "bug_report": ["crash", "error", "broken", "freezes", "bug", "blank", "screen"],
    "feature_request": ["add", "option", "support", "wish", "dark", "mode", "export"],
    "shipping_status": ["order", "delivery", "tracking", "arrive", "package", "shipped"],
    "billing_question": ["invoice", "plan", "price", "charged", "tax", "receipt", "subscription"],
}
INTENT_NAMES = list(INTENTS)
CONFUSABLE = {0: 6, 1: 6, 2: 3, 3: 2, 4: 3, 5: 0, 6: 0}
PRODUCTS = ["app", "website", "account", "card", "laptop", "headphones", "router", "camera", "watch", "tablet"]
FILLER = ["hi", "hello", "i", "my", "the", "a", "is", "it", "please", "help", "thanks", "why", "can", "you",
          "was", "not", "still", "again", "today", "yesterday", "since", "week", "need", "want", "this",
          "urgent", "asap", "and", "for", "on", "with", "me", "there", "no", "just", "when"]


@dataclass
class Args:
    seed: int = 0
    train_batch_size: int = 32
    eval_batch_size: int = 256
    num_train_epochs: int = 20
    freeze_epochs: int = 2
    learning_rate: float = 3e-3
    encoder_lr_ratio: float = 0.5
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    label_smoothing: float = 0.1
    token_dropout: float = 0.15
    logging_steps: int = 10
    n_train_per_intent: int = 40
    n_eval_per_intent: int = 60


# --------------------------------------------------------------------------
# synthetic tickets
# --------------------------------------------------------------------------
def make_ticket(rng, intent):
    words = list(rng.choice(FILLER, size=int(rng.integers(4, 10))))
    kw = INTENTS[INTENT_NAMES[intent]]
    n_kw = int(rng.integers(2, 4))
    for _ in range(n_kw):
        src = CONFUSABLE[intent] if rng.random() < 0.15 else intent
        words.append(rng.choice(INTENTS[INTENT_NAMES[src]]))
    words += list(rng.choice(PRODUCTS, size=int(rng.integers(1, 3))))
    rng.shuffle(words)
    return " ".join(words[: MAX_LEN - 1])


def write_labelled_tickets(path, args):
    rng = np.random.default_rng(args.seed + 11)
    rows = []
    for split, n in (("train", args.n_train_per_intent), ("eval", args.n_eval_per_intent)):
        for i in range(len(INTENTS)):
            for _ in range(n):
                label = i if rng.random() > 0.04 else int(rng.integers(0, len(INTENTS)))
                rows.append({"split": split, "text": make_ticket(rng, i), "intent": INTENT_NAMES[label]})
    df = pd.DataFrame(rows).sample(frac=1.0, random_state=args.seed).reset_index(drop=True)
    df.to_csv(path, index=False)


def build_vocab(texts):
    words = sorted({w for t in texts for w in t.split()})
    return {w: i for i, w in enumerate(SPECIALS + words)}


def encode(texts, vocab):
    ids = torch.full((len(texts), MAX_LEN), PAD, dtype=torch.long)
    for r, t in enumerate(texts):
        toks = [CLS] + [vocab.get(w, UNK) for w in t.split()][: MAX_LEN - 1]
        ids[r, : len(toks)] = torch.tensor(toks)
    return ids


# --------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------
class TinyEncoder(nn.Module):
    def __init__(self, vocab_size, d=64, heads=4, layers=2, ff=128, dropout=0.1):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, d, padding_idx=PAD)
        self.pos = nn.Embedding(MAX_LEN, d)
        layer = nn.TransformerEncoderLayer(d, heads, ff, dropout, batch_first=True, norm_first=True)
        self.layers = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.d = d

    def forward(self, ids):
        pos = torch.arange(ids.size(1), device=ids.device)
        h = self.tok(ids) + self.pos(pos)[None]
        h = self.layers(h, src_key_padding_mask=ids.eq(PAD))
        return self.norm(h)


class IntentClassifier(nn.Module):
    def __init__(self, encoder, num_labels, dropout=0.2):
        super().__init__()
        self.encoder = encoder
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(encoder.d, num_labels)

    def forward(self, ids):
        h = self.encoder(ids)
        keep = ids.ne(PAD).unsqueeze(-1).float()
        pooled = (h * keep).sum(1) / keep.sum(1).clamp(min=1.0)
        return self.classifier(self.dropout(pooled))


QUEUE_OF_INTENT = [0, 0, 1, 2, 2, 3, 0]  # payments, account, tech, logistics


def routing_pretrain(path, seed=5, n=4000, epochs=4):
    """Source task: route historical tickets to one of 4 support queues (cheap, plentiful labels)."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    intents = rng.integers(0, len(INTENTS), n)
    texts = [make_ticket(rng, int(i)) for i in intents]
    queues = torch.tensor([QUEUE_OF_INTENT[i] for i in intents])
    vocab = build_vocab(texts + [" ".join(FILLER + PRODUCTS + [w for v in INTENTS.values() for w in v])])
    ids = encode(texts, vocab)
    enc = TinyEncoder(len(vocab))
    router = IntentClassifier(enc, 4)
    opt = torch.optim.AdamW(router.parameters(), lr=1e-3, weight_decay=0.01)
    for ep in range(epochs):
        perm = torch.randperm(n)
        tot, cnt = 0.0, 0
        for i in range(0, n, 64):
            idx = perm[i:i + 64]
            loss = F.cross_entropy(router(ids[idx]), queues[idx])
            opt.zero_grad(); loss.backward(); opt.step()
            tot += loss.item(); cnt += 1
        print(f"[routing-pretrain] epoch {ep + 1}/{epochs} loss {tot / cnt:.4f}")
    torch.save({"encoder": enc.state_dict(), "vocab": vocab}, path)


# --------------------------------------------------------------------------
# fine-tuning
# --------------------------------------------------------------------------
def token_dropout(ids, p):
    drop = ids.gt(CLS) & (torch.rand(ids.shape) < p)
    return ids.masked_fill(drop, MASK)


def make_loss_fn(args):
    def loss_fn(model, batch):
        ids, labels = batch
        logits = model(token_dropout(ids, args.token_dropout))
        return F.cross_entropy(logits, labels, label_smoothing=args.label_smoothing)
    return loss_fn


def set_encoder_trainable(model, flag):
    for p in model.encoder.parameters():
        p.requires_grad_(flag)


def build_optimizer(model, args):
    enc_decay = [p for n, p in model.encoder.named_parameters() if p.ndim >= 2]
    enc_no_decay = [p for n, p in model.encoder.named_parameters() if p.ndim < 2]
    enc_lr = args.learning_rate * args.encoder_lr_ratio
    return torch.optim.AdamW([
        {"params": enc_decay, "lr": enc_lr, "weight_decay": args.weight_decay},
        {"params": enc_no_decay, "lr": enc_lr, "weight_decay": 0.0},
        {"params": list(model.classifier.parameters()), "lr": args.learning_rate, "weight_decay": args.weight_decay},
    ])


def linear_warmup_decay(opt, warmup, total):
    return torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: s / max(1, warmup) if s < warmup else max(0.0, (total - s) / max(1, total - warmup)))


def setup(args):
    if not os.path.exists(ENCODER_CKPT):
        routing_pretrain(ENCODER_CKPT)
    if not os.path.exists(TICKETS_CSV):
        write_labelled_tickets(TICKETS_CSV, args)
    torch.manual_seed(args.seed)
    ckpt = torch.load(ENCODER_CKPT, map_location="cpu")
    vocab = ckpt["vocab"]
    df = pd.read_csv(TICKETS_CSV)
    label2id = {n: i for i, n in enumerate(INTENT_NAMES)}
    tr, ev = df[df.split == "train"], df[df.split == "eval"]
    train_ds = TensorDataset(encode(tr.text.tolist(), vocab), torch.tensor(tr.intent.map(label2id).values))
    eval_ds = TensorDataset(encode(ev.text.tolist(), vocab), torch.tensor(ev.intent.map(label2id).values))
    train_dl = DataLoader(train_ds, batch_size=args.train_batch_size, shuffle=True)
    eval_dl = DataLoader(eval_ds, batch_size=args.eval_batch_size)
    encoder = TinyEncoder(len(vocab))
    encoder.load_state_dict(ckpt["encoder"])
    model = IntentClassifier(encoder, len(INTENT_NAMES))
    set_encoder_trainable(model, False)
    optimizer = build_optimizer(model, args)
    return model, optimizer, train_dl, eval_dl


@torch.no_grad()
def evaluate(model, dl):
    model.eval()
    t0 = time.time()
    tot, correct, n = 0.0, 0, 0
    for ids, labels in dl:
        logits = model(ids)
        tot += F.cross_entropy(logits, labels, reduction="sum").item()
        correct += (logits.argmax(-1) == labels).sum().item()
        n += len(labels)
    model.train()
    return {"eval_loss": round(tot / n, 4), "eval_accuracy": round(correct / n, 4),
            "eval_runtime": round(time.time() - t0, 4)}


def make_target():
    args = Args()
    model, optimizer, train_dl, eval_dl = setup(args)
    model.train()
    return {"model": model, "data": train_dl, "val_data": eval_dl, "loss_fn": make_loss_fn(args),
            "optimizer": optimizer, "num_classes": len(INTENT_NAMES), "task": "classification"}


def main():
    torch.set_num_threads(1)
    args = Args()
    model, optimizer, train_dl, eval_dl = setup(args)
    loss_fn = make_loss_fn(args)
    spe = len(train_dl)
    total = spe * args.num_train_epochs
    sched = linear_warmup_decay(optimizer, int(args.warmup_ratio * total), total)
    print(f"***** Running training *****\n  Num examples = {len(train_dl.dataset)}\n"
          f"  Num Epochs = {args.num_train_epochs}\n  Total optimization steps = {total}\n"
          f"  Encoder frozen for first {args.freeze_epochs} epochs")
    t0 = time.time()
    model.train()
    step, run, nrun, all_loss = 0, 0.0, 0, 0.0
    for epoch in range(args.num_train_epochs):
        if epoch == args.freeze_epochs:
            set_encoder_trainable(model, True)
            print(f"Unfreezing encoder at epoch {epoch}")
        for batch in train_dl:
            loss = loss_fn(model, batch)
            optimizer.zero_grad()
            loss.backward()
            gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            sched.step()
            step += 1
            run += loss.item(); nrun += 1; all_loss += loss.item()
            if step % args.logging_steps == 0:
                print({"loss": round(run / nrun, 4), "grad_norm": round(float(gn), 4),
                       "learning_rate": float(f"{sched.get_last_lr()[2]:.4e}"), "epoch": round(step / spe, 2)})
                run, nrun = 0.0, 0
        m = evaluate(model, eval_dl)
        m["epoch"] = float(epoch + 1)
        print(m)
    rt = time.time() - t0
    print({"train_runtime": round(rt, 2), "train_loss": round(all_loss / step, 4), "epoch": float(args.num_train_epochs)})


if __name__ == "__main__":
    main()
