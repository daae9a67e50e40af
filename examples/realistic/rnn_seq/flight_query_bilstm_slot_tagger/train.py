"""BiLSTM slot tagger for flight-booking queries (ATIS-style BIO tags), Keras-style log."""
import os
import sys
import time
from collections import Counter

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence
from torch.utils.data import DataLoader, Dataset

SEED = 2024
DATA_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "queries.csv")
N_QUERIES = 3000

PAD, UNK = "<pad>", "<unk>"
IGNORE = -100
BATCH_SIZE = 64
EPOCHS = 10
LR = 2e-3
EMB, HIDDEN = 64, 96
WORD_DROPOUT = 0.25
DROPOUT = 0.5

torch.set_num_threads(1)

CITIES = ["boston", "denver", "atlanta", "dallas", "chicago", "seattle", "miami", "houston", "phoenix",
          "detroit", "orlando", "portland", "austin", "nashville", "tampa", "memphis", "pittsburgh",
          "baltimore", "charlotte", "cleveland", "oakland", "newark", "new york", "san francisco",
          "los angeles", "las vegas", "san diego", "salt lake city", "kansas city", "st louis",
          "fort worth", "washington", "philadelphia", "minneapolis", "milwaukee", "indianapolis"]
AIRLINES = ["delta", "united", "american airlines", "alaska airlines", "southwest", "jetblue", "us air", "continental"]
DAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday", "tomorrow", "today"]
TIMES = ["morning", "afternoon", "evening", "night", "early morning", "late night", "noon"]
CLASSES_ = ["first class", "business class", "economy", "coach"]

TEMPLATES = [
    "show me flights from {from} to {to}",
    "i want to fly from {from} to {to} on {day}",
    "list {airline} flights from {from} to {to} {day} {time}",
    "flights to {to} from {from} on {day} {time}",
    "what flights leave {from} for {to} in the {time}",
    "i need a {class} ticket from {from} to {to}",
    "are there any flights between {from} and {to} on {day}",
    "cheapest fare from {from} to {to} on {airline}",
    "i would like to go to {to} from {from} {day}",
    "give me the {time} flights out of {from} into {to}",
    "does {airline} fly from {from} to {to} on {day}",
    "book a {class} seat on a {airline} flight to {to} leaving {from} {day} {time}",
    "{from} to {to} {day}",
    "flights arriving in {to} from {from} {day} {time}",
    "what is the earliest flight from {from} to {to} {day}",
    "please find a flight to {to} departing from {from} {day}",
]
SLOT_TAG = {"from": "fromloc", "to": "toloc", "day": "depart_day", "time": "depart_time",
            "airline": "airline", "class": "class_type"}
FILLERS = {"from": CITIES, "to": CITIES, "day": DAYS, "time": TIMES, "airline": AIRLINES, "class": CLASSES_}


# --------------------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------------------
def generate_csv(path, seed=SEED):
    rng = np.random.default_rng(seed)
    rows = []
    for qid in range(N_QUERIES):
        template = TEMPLATES[rng.integers(len(TEMPLATES))]
        src = CITIES[rng.integers(len(CITIES))]
        dst = src
        while dst == src:
            dst = CITIES[rng.integers(len(CITIES))]
        tokens, tags = [], []
        for piece in template.split():
            if piece.startswith("{"):
                slot = piece[1:-1]
                value = src if slot == "from" else dst if slot == "to" else FILLERS[slot][rng.integers(len(FILLERS[slot]))]
                for j, w in enumerate(value.split()):
                    tokens.append(w)
                    tags.append(("B-" if j == 0 else "I-") + SLOT_TAG[slot])
            else:
                tokens.append(piece)
                tags.append("O")
        # a bit of realistic noise: dropped fillers and the odd annotation slip
        if rng.random() < 0.15 and tokens[0] in ("show", "i", "please", "give"):
            tokens, tags = tokens[1:], tags[1:]
        if rng.random() < 0.05:
            k = int(rng.integers(len(tags)))
            tags[k] = "O"
        rows.append({"qid": qid, "tokens": " ".join(tokens), "tags": " ".join(tags)})
    pd.DataFrame(rows).to_csv(path, index=False)


def load_split(seed=SEED):
    if not os.path.exists(DATA_PATH):
        generate_csv(DATA_PATH, seed)
    df = pd.read_csv(DATA_PATH)
    df["tokens"] = df["tokens"].str.split()
    df["tags"] = df["tags"].str.split()
    perm = np.random.default_rng(seed).permutation(len(df))
    n_val = int(0.15 * len(df))
    return df.iloc[perm[n_val:]].reset_index(drop=True), df.iloc[perm[:n_val]].reset_index(drop=True)


def build_vocab(token_lists, min_freq=2):
    counts = Counter(w for toks in token_lists for w in toks)
    itos = [PAD, UNK] + sorted(w for w, c in counts.items() if c >= min_freq)
    return {w: i for i, w in enumerate(itos)}


class TaggingDataset(Dataset):
    def __init__(self, frame, vocab, tag2id):
        self.x = [torch.tensor([vocab.get(w, vocab[UNK]) for w in toks]) for toks in frame["tokens"]]
        self.y = [torch.tensor([tag2id[t] for t in tags]) for tags in frame["tags"]]

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def collate(batch):
    xs, ys = zip(*batch)
    return {
        "tokens": pad_sequence(xs, batch_first=True, padding_value=0),
        "tags": pad_sequence(ys, batch_first=True, padding_value=IGNORE),
        "lengths": torch.tensor([len(x) for x in xs]),
    }


# --------------------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------------------
class BiLSTMTagger(nn.Module):
    def __init__(self, vocab_size, n_tags, unk_id):
        super().__init__()
        self.unk_id = unk_id
        self.emb = nn.Embedding(vocab_size, EMB, padding_idx=0)
        self.lstm = nn.LSTM(EMB, HIDDEN, batch_first=True, bidirectional=True)
        self.drop = nn.Dropout(DROPOUT)
        self.out = nn.Linear(2 * HIDDEN, n_tags)

    def forward(self, tokens, lengths):
        if self.training and WORD_DROPOUT > 0:
            drop = (torch.rand(tokens.shape) < WORD_DROPOUT) & (tokens != 0)
            tokens = tokens.masked_fill(drop, self.unk_id)
        h = self.drop(self.emb(tokens))
        packed = pack_padded_sequence(h, lengths, batch_first=True, enforce_sorted=False)
        out, _ = self.lstm(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=tokens.size(1))
        return self.out(self.drop(out))


def loss_fn(model, batch):
    logits = model(batch["tokens"], batch["lengths"])
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), batch["tags"].reshape(-1), ignore_index=IGNORE)


def build(seed=SEED):
    torch.manual_seed(seed)
    train_df, val_df = load_split(seed)
    vocab = build_vocab(train_df["tokens"])
    tags = sorted({t for ts in train_df["tags"] for t in ts} | {t for ts in val_df["tags"] for t in ts})
    tag2id = {t: i for i, t in enumerate(tags)}
    g = torch.Generator().manual_seed(seed)
    train_loader = DataLoader(TaggingDataset(train_df, vocab, tag2id), batch_size=BATCH_SIZE, shuffle=True,
                              collate_fn=collate, generator=g)
    val_loader = DataLoader(TaggingDataset(val_df, vocab, tag2id), batch_size=256, shuffle=False, collate_fn=collate)
    model = BiLSTMTagger(len(vocab), len(tag2id), vocab[UNK])
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    return model, optimizer, train_loader, val_loader, tag2id


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    tot, correct, n = 0.0, 0, 0
    for batch in loader:
        logits = model(batch["tokens"], batch["lengths"])
        y = batch["tags"]
        mask = y != IGNORE
        tot += F.cross_entropy(logits[mask], y[mask], reduction="sum").item()
        correct += (logits.argmax(-1)[mask] == y[mask]).sum().item()
        n += mask.sum().item()
    model.train()
    return tot / n, correct / n


def make_target():
    model, optimizer, train_loader, val_loader, tag2id = build()
    return {
        "model": model,
        "data": train_loader,
        "loss_fn": loss_fn,
        "optimizer": optimizer,
        "val_data": val_loader,
        "num_classes": len(tag2id),
        "task": "classification",
    }


def main():
    model, optimizer, train_loader, val_loader, tag2id = build()
    print(f"Train on {len(train_loader.dataset)} samples, validate on {len(val_loader.dataset)} samples "
          f"({len(tag2id)} tags)")
    n_batches = len(train_loader)
    for epoch in range(1, EPOCHS + 1):
        print(f"Epoch {epoch}/{EPOCHS}")
        t0 = time.time()
        tot, correct, n = 0.0, 0, 0
        for batch in train_loader:
            logits = model(batch["tokens"], batch["lengths"])
            y = batch["tags"]
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1), ignore_index=IGNORE)
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()
            mask = y != IGNORE
            k = mask.sum().item()
            tot += loss.item() * k
            correct += (logits.argmax(-1)[mask] == y[mask]).sum().item()
            n += k
        val_loss, val_acc = evaluate(model, val_loader)
        dt = time.time() - t0
        sys.stdout.write(f"{n_batches}/{n_batches} [==============================] - {dt:.0f}s "
                         f"{1000 * dt / n_batches:.0f}ms/step - loss: {tot / n:.4f} - accuracy: {correct / n:.4f} "
                         f"- val_loss: {val_loss:.4f} - val_accuracy: {val_acc:.4f}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
