"""BiLSTM slot tagger (BIO tags) on a synthetic booking-utterance corpus.

Utterances are variable length; each batch is padded to its longest sequence
and run through the LSTM with pack_padded_sequence. Padding positions carry
tag id -100 so CrossEntropyLoss skips them.
"""
import math
import random
import time

import numpy as np
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

SEED = 1234
VOCAB_SIZE = 300
PAD_ID = 0
IGNORE_INDEX = -100
SLOT_TYPES = ["city", "date", "airline", "class"]
TAGS = ["O"] + [f"{p}-{s}" for s in SLOT_TYPES for p in ("B", "I")]
NUM_TAGS = len(TAGS)

CONFIG = dict(
    n_train=2400,
    n_val=400,
    batch_size=48,
    embed_dim=64,
    hidden_dim=96,
    dropout=0.2,
    lr=2e-3,
    weight_decay=1e-5,
    epochs=12,
    lr_step_size=4,
    lr_gamma=0.5,
    clip_norm=1.0,
)


# --------------------------------------------------------------------------
# synthetic corpus
# --------------------------------------------------------------------------
def build_lexicon(rng):
    """Split the vocabulary into filler words, slot values and trigger words.

    Slot values are ambiguous on purpose: the same token can be a city or an
    airline depending on the trigger word before it ("to X" vs "with X").
    """
    ids = list(range(1, VOCAB_SIZE))
    rng.shuffle(ids)
    lex = {}
    lex["filler"] = ids[:120]
    lex["value"] = ids[120:260]           # shared pool for all slot types
    triggers = ids[260:VOCAB_SIZE]
    per = len(triggers) // len(SLOT_TYPES)
    lex["trigger"] = {s: triggers[i * per:(i + 1) * per] for i, s in enumerate(SLOT_TYPES)}
    return lex


def make_utterance(rng, lex):
    tokens, tags = [], []
    n_slots = rng.randint(1, 3)
    slots = rng.sample(SLOT_TYPES, n_slots)
    for slot in slots:
        for _ in range(rng.randint(0, 4)):
            tokens.append(rng.choice(lex["filler"]))
            tags.append(TAGS.index("O"))
        tokens.append(rng.choice(lex["trigger"][slot]))
        tags.append(TAGS.index("O"))
        span = rng.randint(1, 3)
        for j in range(span):
            tokens.append(rng.choice(lex["value"]))
            tags.append(TAGS.index(("B-" if j == 0 else "I-") + slot))
    for _ in range(rng.randint(0, 3)):
        tokens.append(rng.choice(lex["filler"]))
        tags.append(TAGS.index("O"))
    return tokens, tags


def build_dataset(n, rng, lex):
    return [make_utterance(rng, lex) for _ in range(n)]


def collate(examples):
    """Pad a list of (tokens, tags) to the longest utterance in the batch."""
    lengths = torch.tensor([len(t) for t, _ in examples], dtype=torch.long)
    max_len = int(lengths.max())
    x = torch.full((len(examples), max_len), PAD_ID, dtype=torch.long)
    y = torch.full((len(examples), max_len), IGNORE_INDEX, dtype=torch.long)
    for i, (toks, tags) in enumerate(examples):
        x[i, : len(toks)] = torch.tensor(toks)
        y[i, : len(tags)] = torch.tensor(tags)
    return x, y, lengths


def iterate_batches(dataset, batch_size, shuffle, rng=None):
    order = list(range(len(dataset)))
    if shuffle:
        rng.shuffle(order)
    for start in range(0, len(order), batch_size):
        yield collate([dataset[i] for i in order[start:start + batch_size]])


def get_data():
    rng = random.Random(SEED)
    lex = build_lexicon(rng)
    train = build_dataset(CONFIG["n_train"], rng, lex)
    val = build_dataset(CONFIG["n_val"], rng, lex)
    return train, val


# --------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------
class BiLSTMTagger(nn.Module):
    def __init__(self, vocab_size, num_tags, embed_dim, hidden_dim, dropout):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, embed_dim, padding_idx=PAD_ID)
        self.lstm = nn.LSTM(embed_dim, hidden_dim, batch_first=True, bidirectional=True)
        self.drop = nn.Dropout(dropout)
        self.proj = nn.Linear(2 * hidden_dim, num_tags)

    def forward(self, x, lengths):
        emb = self.drop(self.embed(x))
        packed = pack_padded_sequence(emb, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, _ = self.lstm(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=x.size(1))
        return self.proj(self.drop(out))


criterion = nn.CrossEntropyLoss(ignore_index=IGNORE_INDEX)


def compute_loss(model, batch):
    x, y, lengths = batch
    logits = model(x, lengths)
    return criterion(logits.reshape(-1, NUM_TAGS), y.reshape(-1))


def build_model():
    return BiLSTMTagger(VOCAB_SIZE, NUM_TAGS, CONFIG["embed_dim"], CONFIG["hidden_dim"], CONFIG["dropout"])


def build_optimizer(params):
    return torch.optim.Adam(params, lr=CONFIG["lr"], weight_decay=CONFIG["weight_decay"])


@torch.no_grad()
def evaluate(model, dataset):
    model.eval()
    total_loss, total_tok, correct = 0.0, 0, 0
    tp = fp = fn = 0
    for x, y, lengths in iterate_batches(dataset, 128, shuffle=False):
        logits = model(x, lengths)
        mask = y != IGNORE_INDEX
        n = int(mask.sum())
        total_loss += criterion(logits.reshape(-1, NUM_TAGS), y.reshape(-1)).item() * n
        total_tok += n
        pred = logits.argmax(-1)
        correct += int((pred[mask] == y[mask]).sum())
        # token-level F1 over slot tags (non-"O")
        p, g = pred[mask], y[mask]
        tp += int(((p == g) & (g != 0)).sum())
        fp += int(((p != g) & (p != 0)).sum())
        fn += int(((p != g) & (g != 0)).sum())
    model.train()
    f1 = 2 * tp / max(2 * tp + fp + fn, 1)
    return total_loss / total_tok, correct / total_tok, f1


def make_target():
    torch.manual_seed(SEED)
    train, _ = get_data()
    data = list(iterate_batches(train, CONFIG["batch_size"], shuffle=True, rng=random.Random(SEED)))[:4]
    return {
        "model": build_model(),
        "data": data,
        "loss_fn": compute_loss,
        "make_optimizer": build_optimizer,
        "num_classes": NUM_TAGS,
        "task": "classification",
    }


def main():
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    np.random.seed(SEED)
    train, val = get_data()
    shuffle_rng = random.Random(SEED)

    model = build_model()
    optimizer = build_optimizer(model.parameters())
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=CONFIG["lr_step_size"], gamma=CONFIG["lr_gamma"])

    n_params = sum(p.numel() for p in model.parameters())
    steps_per_epoch = math.ceil(len(train) / CONFIG["batch_size"])
    print(f"train utterances: {len(train)} | val utterances: {len(val)} | tags: {NUM_TAGS}")
    print(f"model: BiLSTMTagger ({n_params/1e3:.1f}K params) | steps/epoch: {steps_per_epoch}")

    t0 = time.time()
    for epoch in range(1, CONFIG["epochs"] + 1):
        model.train()
        running, n_batches = 0.0, 0
        for batch in iterate_batches(train, CONFIG["batch_size"], shuffle=True, rng=shuffle_rng):
            optimizer.zero_grad()
            loss = compute_loss(model, batch)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), CONFIG["clip_norm"])
            optimizer.step()
            running += loss.item()
            n_batches += 1
        scheduler.step()

        val_loss, val_acc, val_f1 = evaluate(model, val)
        lr = optimizer.param_groups[0]["lr"]
        print(f"Epoch {epoch:2d}/{CONFIG['epochs']} | train_loss {running / n_batches:.4f} | "
              f"val_loss {val_loss:.4f} | val_acc {val_acc:.4f} | slot_f1 {val_f1:.4f} | "
              f"lr {lr:.2e} | {time.time() - t0:.1f}s")

    print(f"done in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
