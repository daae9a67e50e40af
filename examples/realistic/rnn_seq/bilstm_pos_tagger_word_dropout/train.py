"""Part-of-speech tagger: BiLSTM over word ids, one tag per token.

Sentences come from a small synthetic grammar with noun/verb-ambiguous words, so some
tags can only be resolved from context. Padded positions carry label -100 and are
ignored by the loss. Word dropout (random UNK replacement) + dropout regularise training.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence

SEED = 2024
PAD_ID, UNK_ID = 0, 1
IGNORE_INDEX = -100
TAGS = ["DET", "ADJ", "NOUN", "VERB", "ADV", "ADP", "PRON", "CONJ", "PUNCT"]
TAG2ID = {t: i for i, t in enumerate(TAGS)}
N_TRAIN, N_VAL = 3000, 600
BATCH_SIZE = 32
EMB_DIM = 48
HIDDEN = 64
EPOCHS = 5
LR = 3e-3
WARMUP_RATIO = 0.06
WORD_DROPOUT = 0.15
DROPOUT = 0.4
LOGGING_STEPS = 50


def build_lexicon():
    lex = {
        "DET": [f"det{i}" for i in range(6)],
        "ADJ": [f"adj{i}" for i in range(40)],
        "NOUN": [f"noun{i}" for i in range(80)],
        "VERB": [f"verb{i}" for i in range(50)],
        "ADV": [f"adv{i}" for i in range(20)],
        "ADP": [f"adp{i}" for i in range(10)],
        "PRON": [f"pron{i}" for i in range(8)],
        "CONJ": [f"conj{i}" for i in range(3)],
        "PUNCT": [".", ","],
    }
    # words that can be either a noun or a verb depending on context ("run", "play", ...)
    ambiguous = [f"amb{i}" for i in range(25)]
    words = ["<pad>", "<unk>"] + [w for ws in lex.values() for w in ws] + ambiguous
    vocab = {w: i for i, w in enumerate(words)}
    return lex, ambiguous, vocab


LEXICON, AMBIGUOUS, VOCAB = build_lexicon()


def noun_phrase(rng, out):
    if rng.random() < 0.2:
        out.append(("PRON", str(rng.choice(LEXICON["PRON"]))))
        return
    out.append(("DET", str(rng.choice(LEXICON["DET"]))))
    for _ in range(int(rng.integers(0, 3))):
        out.append(("ADJ", str(rng.choice(LEXICON["ADJ"]))))
    word = str(rng.choice(AMBIGUOUS)) if rng.random() < 0.3 else str(rng.choice(LEXICON["NOUN"]))
    out.append(("NOUN", word))


def verb_phrase(rng, out):
    word = str(rng.choice(AMBIGUOUS)) if rng.random() < 0.3 else str(rng.choice(LEXICON["VERB"]))
    out.append(("VERB", word))
    if rng.random() < 0.3:
        out.append(("ADV", str(rng.choice(LEXICON["ADV"]))))
    if rng.random() < 0.6:
        noun_phrase(rng, out)
    if rng.random() < 0.35:
        out.append(("ADP", str(rng.choice(LEXICON["ADP"]))))
        noun_phrase(rng, out)


def generate_sentence(rng):
    out = []
    noun_phrase(rng, out)
    verb_phrase(rng, out)
    if rng.random() < 0.3:
        out.append(("PUNCT", ","))
        out.append(("CONJ", str(rng.choice(LEXICON["CONJ"]))))
        noun_phrase(rng, out)
        verb_phrase(rng, out)
    out.append(("PUNCT", "."))
    words = [VOCAB[w] for _, w in out]
    tags = [TAG2ID[t] for t, _ in out]
    return words, tags


def build_datasets(seed=SEED):
    rng = np.random.default_rng(seed)
    train = [generate_sentence(rng) for _ in range(N_TRAIN)]
    val = [generate_sentence(rng) for _ in range(N_VAL)]
    return train, val


def collate(examples):
    words = [torch.tensor(w, dtype=torch.long) for w, _ in examples]
    tags = [torch.tensor(t, dtype=torch.long) for _, t in examples]
    lengths = torch.tensor([len(w) for w in words], dtype=torch.long)
    return {
        "input_ids": pad_sequence(words, batch_first=True, padding_value=PAD_ID),
        "lengths": lengths,
        "labels": pad_sequence(tags, batch_first=True, padding_value=IGNORE_INDEX),
    }


def iterate_batches(data, batch_size, shuffle, generator=None):
    order = torch.randperm(len(data), generator=generator).tolist() if shuffle else list(range(len(data)))
    for start in range(0, len(data), batch_size):
        yield collate([data[i] for i in order[start:start + batch_size]])


class BiLSTMTagger(nn.Module):
    def __init__(self, vocab_size, num_tags, emb_dim=EMB_DIM, hidden=HIDDEN,
                 word_dropout=WORD_DROPOUT, dropout=DROPOUT):
        super().__init__()
        self.word_dropout = word_dropout
        self.embedding = nn.Embedding(vocab_size, emb_dim, padding_idx=PAD_ID)
        self.emb_dropout = nn.Dropout(dropout)
        self.lstm = nn.LSTM(emb_dim, hidden, batch_first=True, bidirectional=True)
        self.out_dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(2 * hidden, num_tags)

    def forward(self, input_ids, lengths):
        if self.training and self.word_dropout > 0:
            drop = (torch.rand(input_ids.shape) < self.word_dropout) & (input_ids != PAD_ID)
            input_ids = input_ids.masked_fill(drop, UNK_ID)
        emb = self.emb_dropout(self.embedding(input_ids))
        packed = pack_padded_sequence(emb, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, _ = self.lstm(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=input_ids.size(1))
        return self.classifier(self.out_dropout(out))  # (B, T, num_tags)


def build_model():
    return BiLSTMTagger(len(VOCAB), len(TAGS))


criterion = nn.CrossEntropyLoss(ignore_index=IGNORE_INDEX)


def loss_fn(model, batch):
    logits = model(batch["input_ids"], batch["lengths"])
    return criterion(logits.reshape(-1, logits.size(-1)), batch["labels"].reshape(-1))


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=LR, weight_decay=0.01)


def evaluate(model, data):
    model.eval()
    total_loss, total_tok, correct, amb_correct, amb_total = 0.0, 0, 0, 0, 0
    amb_ids = torch.tensor([VOCAB[w] for w in AMBIGUOUS])
    with torch.no_grad():
        for batch in iterate_batches(data, 200, shuffle=False):
            logits = model(batch["input_ids"], batch["lengths"])
            labels = batch["labels"]
            mask = labels != IGNORE_INDEX
            ntok = mask.sum().item()
            total_loss += criterion(logits.reshape(-1, logits.size(-1)), labels.reshape(-1)).item() * ntok
            total_tok += ntok
            hit = (logits.argmax(-1) == labels) & mask
            correct += hit.sum().item()
            is_amb = torch.isin(batch["input_ids"], amb_ids) & mask
            amb_correct += (hit & is_amb).sum().item()
            amb_total += is_amb.sum().item()
    model.train()
    return total_loss / total_tok, correct / total_tok, amb_correct / max(amb_total, 1)


def make_target():
    torch.manual_seed(SEED)
    train, _ = build_datasets()
    g = torch.Generator().manual_seed(SEED)
    data = []
    for i, batch in enumerate(iterate_batches(train, BATCH_SIZE, shuffle=True, generator=g)):
        data.append(batch)
        if i == 5:
            break
    return {
        "model": build_model(),
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "num_classes": len(TAGS),
        "task": "classification",
    }


def main():
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    train, val = build_datasets()
    model = build_model()
    optimizer = make_optimizer(model.parameters())
    steps_per_epoch = math.ceil(len(train) / BATCH_SIZE)
    total_steps = EPOCHS * steps_per_epoch
    warmup = int(WARMUP_RATIO * total_steps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: (s + 1) / warmup if s < warmup else max(0.0, (total_steps - s) / (total_steps - warmup)))
    print("***** Running training *****")
    print(f"  Num examples = {len(train)}")
    print(f"  Num Epochs = {EPOCHS}")
    print(f"  Batch size = {BATCH_SIZE}")
    print(f"  Total optimization steps = {total_steps}")
    print(f"  Number of trainable parameters = {sum(p.numel() for p in model.parameters() if p.requires_grad)}")
    g = torch.Generator().manual_seed(SEED)
    step, running, n_running = 0, 0.0, 0
    t0 = time.time()
    for epoch in range(EPOCHS):
        for batch in iterate_batches(train, BATCH_SIZE, shuffle=True, generator=g):
            loss = loss_fn(model, batch)
            loss.backward()
            grad_norm = nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            step += 1
            running += loss.item()
            n_running += 1
            if step % LOGGING_STEPS == 0:
                print({"loss": round(running / n_running, 4), "grad_norm": round(grad_norm.item(), 4),
                       "learning_rate": float(f"{scheduler.get_last_lr()[0]:.3e}"),
                       "epoch": round(step / steps_per_epoch, 2)})
                running, n_running = 0.0, 0
        eval_loss, eval_acc, eval_amb = evaluate(model, val)
        print({"eval_loss": round(eval_loss, 4), "eval_accuracy": round(eval_acc, 4),
               "eval_ambiguous_accuracy": round(eval_amb, 4), "epoch": float(epoch + 1)})
    runtime = time.time() - t0
    print({"train_runtime": round(runtime, 2), "train_steps_per_second": round(total_steps / runtime, 2),
           "epoch": float(EPOCHS)})


if __name__ == "__main__":
    main()
