# Bidirectional GRU sentiment classifier on synthetic product reviews.
#
# Reviews are generated from a small lexicon of polar / neutral words with
# negators ("not good") and intensifiers, so the label depends on word order.
# Sequences are padded per batch and packed before the GRU.
import json
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence
from torch.utils.data import DataLoader, Dataset

SEED = 7
DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")

hparams = {
    "vocab_size": 400,
    "emb_dim": 64,
    "hidden_size": 64,
    "dropout": 0.3,
    "batch_size": 32,
    "lr": 3e-3,
    "epochs": 8,
    "grad_clip": 5.0,
    "min_len": 6,
    "max_len": 30,
}

PAD, UNK = 0, 1


# ---------------------------------------------------------------- data ----
def generate_reviews(n, rng):
    """Each review is a bag of neutral filler words sprinkled with a few
    sentiment words; a negator flips the polarity of the next sentiment word,
    an intensifier doubles it. Label = sign of the total score."""
    V = hparams["vocab_size"]
    pos_words = list(range(2, 32))
    neg_words = list(range(32, 62))
    negators = list(range(62, 66))
    intens = list(range(66, 70))
    neutral = list(range(70, V))
    reviews = []
    while len(reviews) < n:
        length = int(rng.integers(hparams["min_len"], hparams["max_len"] + 1))
        toks = list(rng.choice(neutral, size=length))
        score = 0.0
        n_polar = int(rng.integers(1, 4))
        slots = sorted(rng.choice(np.arange(1, length), size=min(n_polar, length - 1), replace=False))
        for pos in slots:
            polar = int(rng.random() < 0.5)
            word = int(rng.choice(pos_words if polar else neg_words))
            s = 1.0 if polar else -1.0
            toks[pos] = word
            r = rng.random()
            if r < 0.3:
                toks[pos - 1] = int(rng.choice(negators))
                s = -s
            elif r < 0.45:
                toks[pos - 1] = int(rng.choice(intens))
                s = 2 * s
            score += s
        if score == 0:
            continue
        reviews.append({"tokens": [int(t) for t in toks], "label": int(score > 0)})
    return reviews


def prepare_data():
    os.makedirs(DATA_DIR, exist_ok=True)
    splits = {"train": 4000, "valid": 600}
    rng = np.random.default_rng(SEED)
    for name, n in splits.items():
        path = os.path.join(DATA_DIR, f"{name}.jsonl")
        if os.path.exists(path):
            continue
        with open(path, "w") as f:
            for r in generate_reviews(n, rng):
                f.write(json.dumps(r) + "\n")


class ReviewDataset(Dataset):
    def __init__(self, split):
        with open(os.path.join(DATA_DIR, f"{split}.jsonl")) as f:
            self.rows = [json.loads(line) for line in f]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        r = self.rows[i]
        return torch.tensor(r["tokens"], dtype=torch.long), r["label"]


def pad_collate(batch):
    seqs, labels = zip(*batch)
    lengths = torch.tensor([len(s) for s in seqs])
    padded = nn.utils.rnn.pad_sequence(seqs, batch_first=True, padding_value=PAD)
    return padded, lengths, torch.tensor(labels, dtype=torch.long)


def make_loaders():
    prepare_data()
    g = torch.Generator().manual_seed(SEED)
    train_dl = DataLoader(ReviewDataset("train"), batch_size=hparams["batch_size"], shuffle=True,
                          collate_fn=pad_collate, generator=g)
    valid_dl = DataLoader(ReviewDataset("valid"), batch_size=128, shuffle=False, collate_fn=pad_collate)
    return train_dl, valid_dl


# --------------------------------------------------------------- model ----
class BiGRUClassifier(nn.Module):
    def __init__(self, vocab_size, emb_dim, hidden_size, num_classes=2, dropout=0.3):
        super().__init__()
        self.hidden_size = hidden_size
        self.embedding = nn.Embedding(vocab_size, emb_dim, padding_idx=PAD)
        self.gru = nn.GRU(emb_dim, hidden_size, batch_first=True, bidirectional=True)
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(hidden_size * 2, num_classes)

    def forward(self, tokens, lengths):
        emb = self.dropout(self.embedding(tokens))
        packed = pack_padded_sequence(emb, lengths.cpu(), batch_first=True, enforce_sorted=False)
        _, hidden = self.gru(packed)
        # concat final forward and backward states -> (batch, 2 * hidden)
        hidden = hidden.view(-1, self.hidden_size * 2)
        return self.fc(self.dropout(hidden))


def build_model():
    return BiGRUClassifier(hparams["vocab_size"], hparams["emb_dim"], hparams["hidden_size"],
                           dropout=hparams["dropout"])


def loss_fn(model, batch):
    tokens, lengths, labels = batch
    return F.cross_entropy(model(tokens, lengths), labels)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=hparams["lr"], weight_decay=0.01)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    loss_sum, correct, n = 0.0, 0, 0
    for tokens, lengths, labels in loader:
        logits = model(tokens, lengths)
        loss_sum += F.cross_entropy(logits, labels, reduction="sum").item()
        correct += (logits.argmax(1) == labels).sum().item()
        n += labels.numel()
    model.train()
    return loss_sum / n, correct / n


def make_target():
    torch.manual_seed(SEED)
    train_dl, _ = make_loaders()
    batches = []
    for b in train_dl:
        batches.append(b)
        if len(batches) == 4:
            break
    return {
        "model": build_model(),
        "data": batches,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "num_classes": 2,
        "task": "classification",
    }


def main():
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    train_dl, valid_dl = make_loaders()
    model = build_model()
    opt = make_optimizer(model.parameters())
    print(f"[info] train={len(train_dl.dataset)} valid={len(valid_dl.dataset)} "
          f"params={sum(p.numel() for p in model.parameters()):,}")

    global_step = 0
    start = time.time()
    for epoch in range(1, hparams["epochs"] + 1):
        model.train()
        ep_loss, ep_correct, ep_n = 0.0, 0, 0
        for tokens, lengths, labels in train_dl:
            opt.zero_grad(set_to_none=True)
            logits = model(tokens, lengths)
            loss = F.cross_entropy(logits, labels)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), hparams["grad_clip"])
            opt.step()
            global_step += 1
            ep_loss += loss.item() * labels.size(0)
            ep_correct += (logits.argmax(1) == labels).sum().item()
            ep_n += labels.size(0)
            if global_step % 25 == 0:
                print(f"  step {global_step:4d}  loss {loss.item():.4f}")
        val_loss, val_acc = evaluate(model, valid_dl)
        print(f"Epoch {epoch}/{hparams['epochs']} - {time.time() - start:.0f}s - loss: {ep_loss / ep_n:.4f} "
              f"- acc: {ep_correct / ep_n:.4f} - val_loss: {val_loss:.4f} - val_acc: {val_acc:.4f}")


if __name__ == "__main__":
    main()
