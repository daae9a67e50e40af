"""BiLSTM part-of-speech style tagger on synthetic sentences.

Sentences come from a small HMM over tags. A block of the vocabulary is
ambiguous (the same word can be a NOUN or a VERB), so the tag has to be read
from context. Batches are bucketed by length to cut down on padding; padded
positions carry label -100 and are ignored by the loss.
"""
import json
import math
import random
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

SEED = 42
TAGS = ["DET", "NOUN", "VERB", "ADJ", "PRON", "ADP", "ADV", "PUNCT"]
NUM_TAGS = len(TAGS)
PAD_ID, UNK_ID = 0, 1
IGNORE_INDEX = -100

N_TRAIN, N_VAL = 3000, 500
MIN_LEN, MAX_LEN = 4, 45
BATCH_SIZE = 32
EPOCHS = 6
PEAK_LR = 3e-3
WARMUP_RATIO = 0.1
LOGGING_STEPS = 20

torch.set_num_threads(1)

# tag transition matrix (rows: previous tag, plus a start row at the end)
_T = {
    "DET":   {"NOUN": 0.6, "ADJ": 0.4},
    "NOUN":  {"VERB": 0.45, "ADP": 0.2, "PUNCT": 0.25, "NOUN": 0.1},
    "VERB":  {"DET": 0.4, "PRON": 0.15, "ADV": 0.2, "ADP": 0.15, "PUNCT": 0.1},
    "ADJ":   {"NOUN": 0.8, "ADJ": 0.2},
    "PRON":  {"VERB": 0.85, "ADV": 0.15},
    "ADP":   {"DET": 0.7, "PRON": 0.3},
    "ADV":   {"VERB": 0.6, "ADJ": 0.2, "PUNCT": 0.2},
    "PUNCT": {"DET": 0.5, "PRON": 0.4, "ADV": 0.1},
    "<s>":   {"DET": 0.55, "PRON": 0.35, "ADV": 0.1},
}


def build_lexicon(rng):
    """Word ids per tag. Ids 2..41 are ambiguous NOUN/VERB words."""
    next_id = 2
    ambiguous = list(range(next_id, next_id + 40))
    next_id += 40
    sizes = {"DET": 6, "NOUN": 120, "VERB": 90, "ADJ": 60, "PRON": 10, "ADP": 12, "ADV": 30, "PUNCT": 4}
    lex = {}
    for tag in TAGS:
        lex[tag] = list(range(next_id, next_id + sizes[tag]))
        next_id += sizes[tag]
    lex["NOUN"] += ambiguous
    lex["VERB"] += ambiguous
    return lex, next_id


def sample_sentence(rng, lex):
    n = int(rng.integers(MIN_LEN, MAX_LEN + 1))
    prev, words, tags = "<s>", [], []
    for _ in range(n):
        options = _T[prev]
        tag = rng.choice(list(options), p=np.array(list(options.values())) / sum(options.values()))
        words.append(int(rng.choice(lex[tag])))
        tags.append(TAGS.index(tag))
        prev = tag
    return words, tags


def build_corpus(seed):
    rng = np.random.default_rng(seed)
    lex, vocab_size = build_lexicon(rng)
    train = [sample_sentence(rng, lex) for _ in range(N_TRAIN)]
    val = [sample_sentence(rng, lex) for _ in range(N_VAL)]
    return train, val, vocab_size


def collate(examples):
    lengths = torch.tensor([len(w) for w, _ in examples], dtype=torch.long)
    T = int(lengths.max())
    input_ids = torch.full((len(examples), T), PAD_ID, dtype=torch.long)
    labels = torch.full((len(examples), T), IGNORE_INDEX, dtype=torch.long)
    for i, (w, t) in enumerate(examples):
        input_ids[i, : len(w)] = torch.tensor(w)
        labels[i, : len(t)] = torch.tensor(t)
    return {"input_ids": input_ids, "lengths": lengths, "labels": labels}


def bucketed_batches(dataset, batch_size, seed):
    """Sort by length (with a little noise), cut into batches, shuffle batch order."""
    rng = random.Random(seed)
    keyed = sorted(range(len(dataset)), key=lambda i: len(dataset[i][0]) + rng.random())
    batches = [keyed[s : s + batch_size] for s in range(0, len(keyed), batch_size)]
    rng.shuffle(batches)
    for b in batches:
        yield collate([dataset[i] for i in b])


def sequential_batches(dataset, batch_size):
    for s in range(0, len(dataset), batch_size):
        yield collate(dataset[s : s + batch_size])


class BiLSTMTagger(nn.Module):
    def __init__(self, vocab_size, emb_dim=64, hidden=96, num_tags=NUM_TAGS, dropout=0.5):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, emb_dim, padding_idx=PAD_ID)
        self.emb_dropout = nn.Dropout(dropout)
        self.lstm = nn.LSTM(emb_dim, hidden, batch_first=True, bidirectional=True)
        self.out_dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(2 * hidden, num_tags)

    def forward(self, input_ids, lengths):
        x = self.emb_dropout(self.embed(input_ids))
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, _ = self.lstm(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=input_ids.size(1))
        return self.classifier(self.out_dropout(out))  # (B, T, num_tags)


def loss_fn(model, batch):
    logits = model(batch["input_ids"], batch["lengths"])
    return F.cross_entropy(logits.reshape(-1, NUM_TAGS), batch["labels"].reshape(-1), ignore_index=IGNORE_INDEX)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=PEAK_LR, weight_decay=0.01)


def linear_warmup_decay(optimizer, num_warmup, num_total):
    def lr_lambda(step):
        if step < num_warmup:
            return float(step + 1) / float(max(1, num_warmup))
        return max(0.0, float(num_total - step) / float(max(1, num_total - num_warmup)))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)


@torch.no_grad()
def evaluate(model, dataset):
    model.eval()
    t0 = time.time()
    loss_sum, correct, n_tok = 0.0, 0, 0
    for batch in sequential_batches(dataset, 128):
        logits = model(batch["input_ids"], batch["lengths"])
        labels = batch["labels"]
        mask = labels != IGNORE_INDEX
        loss_sum += F.cross_entropy(logits.reshape(-1, NUM_TAGS), labels.reshape(-1),
                                    ignore_index=IGNORE_INDEX, reduction="sum").item()
        correct += ((logits.argmax(-1) == labels) & mask).sum().item()
        n_tok += mask.sum().item()
    model.train()
    return {"eval_loss": round(loss_sum / n_tok, 4), "eval_accuracy": round(correct / n_tok, 4),
            "eval_runtime": round(time.time() - t0, 4)}


def make_target():
    torch.manual_seed(SEED)
    train, _, vocab_size = build_corpus(SEED)
    data = []
    for i, batch in enumerate(bucketed_batches(train, BATCH_SIZE, seed=SEED)):
        data.append(batch)
        if i == 5:
            break
    return {
        "model": BiLSTMTagger(vocab_size),
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "num_classes": NUM_TAGS,
        "task": "classification",
    }


def main():
    torch.manual_seed(SEED)
    train, val, vocab_size = build_corpus(SEED)
    model = BiLSTMTagger(vocab_size)
    optimizer = make_optimizer(model.parameters())
    steps_per_epoch = math.ceil(len(train) / BATCH_SIZE)
    total_steps = EPOCHS * steps_per_epoch
    scheduler = linear_warmup_decay(optimizer, int(WARMUP_RATIO * total_steps), total_steps)

    print("***** Running training *****")
    print(f"  Num examples = {len(train)}")
    print(f"  Num Epochs = {EPOCHS}")
    print(f"  Instantaneous batch size per device = {BATCH_SIZE}")
    print(f"  Total optimization steps = {total_steps}")
    print(f"  Number of trainable parameters = {sum(p.numel() for p in model.parameters() if p.requires_grad)}")

    t_start = time.time()
    step, interval_loss, interval_n, total_loss = 0, 0.0, 0, 0.0
    for epoch in range(EPOCHS):
        model.train()
        for batch in bucketed_batches(train, BATCH_SIZE, seed=SEED + epoch):
            loss = loss_fn(model, batch)
            optimizer.zero_grad()
            loss.backward()
            grad_norm = nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()
            scheduler.step()
            step += 1
            interval_loss += loss.item()
            interval_n += 1
            total_loss += loss.item()
            if step % LOGGING_STEPS == 0:
                print({"loss": round(interval_loss / interval_n, 4), "grad_norm": round(float(grad_norm), 4),
                       "learning_rate": float(f"{scheduler.get_last_lr()[0]:.4e}"),
                       "epoch": round(step / steps_per_epoch, 2)})
                interval_loss, interval_n = 0.0, 0
        metrics = evaluate(model, val)
        metrics["epoch"] = float(epoch + 1)
        print(metrics)
    runtime = time.time() - t_start
    print({"train_runtime": round(runtime, 4), "train_steps_per_second": round(step / runtime, 3),
           "train_loss": round(total_loss / step, 4), "epoch": float(EPOCHS)})


if __name__ == "__main__":
    main()
