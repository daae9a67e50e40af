"""BiLSTM part-of-speech tagger on a synthetic English-like treebank.

Sentences come from a small grammar with words that are ambiguous between
noun and verb (e.g. "watch", "book"), so the tag depends on context. Batches
are padded per batch; padded positions carry the label -100 and are ignored
by the loss.
"""
import math
import random
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

SEED = 1234
PAD_IDX = 0
UNK_IDX = 1
IGNORE_INDEX = -100
TAGS = ["DET", "ADJ", "NOUN", "VERB", "ADP", "ADV", "PRON", "CONJ", "PUNCT"]
TAG2ID = {t: i for i, t in enumerate(TAGS)}

LEXICON = {
    "DET": ["the", "a", "this", "that", "every", "some"],
    "ADJ": ["small", "old", "red", "quiet", "heavy", "new", "bright", "strange"],
    "NOUN": ["dog", "teacher", "car", "river", "city", "letter", "garden", "window"],
    "VERB": ["sees", "likes", "opens", "carries", "finds", "paints", "leaves"],
    "ADP": ["in", "near", "under", "with", "behind", "over"],
    "ADV": ["quickly", "often", "never", "slowly", "always"],
    "PRON": ["she", "he", "they", "it", "we"],
    "CONJ": ["and", "but", "while"],
    "PUNCT": [".", "!", "?"],
}
# words that can be a noun or a verb depending on context
AMBIGUOUS = ["watch", "book", "run", "play", "fly", "light", "point", "train"]

TRAIN_CONFIG = dict(
    learning_rate=3e-3,
    per_device_train_batch_size=32,
    num_train_epochs=6,
    weight_decay=0.01,
    warmup_ratio=0.05,
    logging_steps=40,
    max_grad_norm=1.0,
)


def noun(rng):
    return (rng.choice(AMBIGUOUS), "NOUN") if rng.random() < 0.3 else (rng.choice(LEXICON["NOUN"]), "NOUN")


def verb(rng):
    return (rng.choice(AMBIGUOUS), "VERB") if rng.random() < 0.3 else (rng.choice(LEXICON["VERB"]), "VERB")


def noun_phrase(rng):
    if rng.random() < 0.25:
        return [(rng.choice(LEXICON["PRON"]), "PRON")]
    out = [(rng.choice(LEXICON["DET"]), "DET")]
    for _ in range(rng.choice([0, 0, 1, 1, 2])):
        out.append((rng.choice(LEXICON["ADJ"]), "ADJ"))
    out.append(noun(rng))
    return out


def verb_phrase(rng):
    out = []
    if rng.random() < 0.3:
        out.append((rng.choice(LEXICON["ADV"]), "ADV"))
    out.append(verb(rng))
    if rng.random() < 0.7:
        out += noun_phrase(rng)
    if rng.random() < 0.4:
        out.append((rng.choice(LEXICON["ADP"]), "ADP"))
        out += noun_phrase(rng)
    return out


def generate_sentence(rng):
    sent = noun_phrase(rng) + verb_phrase(rng)
    if rng.random() < 0.35:
        sent.append((rng.choice(LEXICON["CONJ"]), "CONJ"))
        sent += noun_phrase(rng) + verb_phrase(rng)
    sent.append((rng.choice(LEXICON["PUNCT"]), "PUNCT"))
    # a little annotation noise, as in any real treebank
    return [(w, t if rng.random() > 0.02 else rng.choice(TAGS)) for w, t in sent]


def build_vocab(sentences):
    words = sorted({w for s in sentences for w, _ in s})
    stoi = {"<pad>": PAD_IDX, "<unk>": UNK_IDX}
    for w in words:
        stoi[w] = len(stoi)
    return stoi


def encode(sentences, stoi):
    return [([stoi.get(w, UNK_IDX) for w, _ in s], [TAG2ID[t] for _, t in s]) for s in sentences]


def collate(examples):
    lengths = torch.tensor([len(w) for w, _ in examples], dtype=torch.long)
    T = int(lengths.max())
    input_ids = torch.full((len(examples), T), PAD_IDX, dtype=torch.long)
    labels = torch.full((len(examples), T), IGNORE_INDEX, dtype=torch.long)
    for i, (w, t) in enumerate(examples):
        input_ids[i, :len(w)] = torch.tensor(w)
        labels[i, :len(t)] = torch.tensor(t)
    return {"input_ids": input_ids, "lengths": lengths, "labels": labels}


def make_batches(data, batch_size, shuffle, seed=0):
    idx = list(range(len(data)))
    if shuffle:
        random.Random(seed).shuffle(idx)
    return [collate([data[i] for i in idx[s:s + batch_size]]) for s in range(0, len(idx), batch_size)]


def load_data():
    rng = random.Random(SEED)
    train = [generate_sentence(rng) for _ in range(3000)]
    val = [generate_sentence(rng) for _ in range(600)]
    stoi = build_vocab(train)
    return encode(train, stoi), encode(val, stoi), stoi


class BiLSTMTagger(nn.Module):
    def __init__(self, vocab_size, num_tags, emb_dim=64, hidden=64, dropout=0.5):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, emb_dim, padding_idx=PAD_IDX)
        self.emb_dropout = nn.Dropout(dropout)
        self.lstm = nn.LSTM(emb_dim, hidden, batch_first=True, bidirectional=True)
        self.out_dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(2 * hidden, num_tags)

    def forward(self, input_ids, lengths):
        emb = self.emb_dropout(self.embedding(input_ids))
        packed = pack_padded_sequence(emb, lengths, batch_first=True, enforce_sorted=False)
        out, _ = self.lstm(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=input_ids.size(1))
        return self.classifier(self.out_dropout(out))


def loss_fn(model, batch):
    logits = model(batch["input_ids"], batch["lengths"])
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), batch["labels"].reshape(-1),
                           ignore_index=IGNORE_INDEX)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=TRAIN_CONFIG["learning_rate"],
                             weight_decay=TRAIN_CONFIG["weight_decay"])


def make_target():
    torch.manual_seed(SEED)
    train, _, stoi = load_data()
    batches = make_batches(train, TRAIN_CONFIG["per_device_train_batch_size"], shuffle=True, seed=SEED)
    return {
        "model": BiLSTMTagger(len(stoi), len(TAGS)),
        "data": batches[:6],
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "num_classes": len(TAGS),
        "task": "classification",
    }


@torch.no_grad()
def evaluate(model, batches):
    model.eval()
    total, correct, n_tok = 0.0, 0, 0
    for batch in batches:
        logits = model(batch["input_ids"], batch["lengths"])
        mask = batch["labels"] != IGNORE_INDEX
        total += F.cross_entropy(logits[mask], batch["labels"][mask], reduction="sum").item()
        correct += (logits.argmax(-1)[mask] == batch["labels"][mask]).sum().item()
        n_tok += mask.sum().item()
    model.train()
    return {"eval_loss": round(total / n_tok, 4), "eval_accuracy": round(correct / n_tok, 4)}


def main():
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    np.random.seed(SEED)
    cfg = TRAIN_CONFIG
    train, val, stoi = load_data()
    model = BiLSTMTagger(len(stoi), len(TAGS))
    optimizer = make_optimizer(model.parameters())
    val_batches = make_batches(val, 128, shuffle=False)

    steps_per_epoch = math.ceil(len(train) / cfg["per_device_train_batch_size"])
    total_steps = steps_per_epoch * cfg["num_train_epochs"]
    warmup = int(cfg["warmup_ratio"] * total_steps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: (s + 1) / warmup if s < warmup else max(0.0, (total_steps - s) / (total_steps - warmup)))

    print("***** Running training *****")
    print(f"  Num examples = {len(train)}")
    print(f"  Num Epochs = {cfg['num_train_epochs']}")
    print(f"  Instantaneous batch size per device = {cfg['per_device_train_batch_size']}")
    print(f"  Total optimization steps = {total_steps}")
    print(f"  Number of trainable parameters = {sum(p.numel() for p in model.parameters() if p.requires_grad)}")

    start = time.time()
    step, window_loss, window_n = 0, 0.0, 0
    for epoch in range(cfg["num_train_epochs"]):
        model.train()
        for batch in make_batches(train, cfg["per_device_train_batch_size"], shuffle=True, seed=SEED + epoch):
            loss = loss_fn(model, batch)
            optimizer.zero_grad()
            loss.backward()
            grad_norm = nn.utils.clip_grad_norm_(model.parameters(), cfg["max_grad_norm"])
            optimizer.step()
            scheduler.step()
            step += 1
            window_loss += loss.item()
            window_n += 1
            if step % cfg["logging_steps"] == 0:
                print({"loss": round(window_loss / window_n, 4), "grad_norm": round(grad_norm.item(), 4),
                       "learning_rate": float(f"{scheduler.get_last_lr()[0]:.4e}"),
                       "epoch": round(step / steps_per_epoch, 2)})
                window_loss, window_n = 0.0, 0
        metrics = evaluate(model, val_batches)
        metrics["epoch"] = float(epoch + 1)
        print(metrics)
    runtime = time.time() - start
    print({"train_runtime": round(runtime, 2), "train_samples_per_second": round(len(train) * cfg["num_train_epochs"] / runtime, 3),
           "train_steps_per_second": round(total_steps / runtime, 3), "epoch": float(cfg["num_train_epochs"])})


if __name__ == "__main__":
    main()
