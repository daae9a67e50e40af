"""Intent classification for short voice-assistant commands.

Token ids come from an upstream tokenizer (synthetic here). Sequences are
variable length, padded per batch and fed through a packed GRU encoder.
"""
import math
import random
import time

import numpy as np
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_sequence
from torch.utils.data import DataLoader, Dataset

SEED = 1234
PAD_ID = 0
NOT_ID = 1
VOCAB_SIZE = 240
NUM_INTENTS = 12
KEYWORDS_PER_INTENT = 6
MIN_LEN, MAX_LEN = 4, 24

EMBED_DIM = 32
HIDDEN_DIM = 48
BATCH_SIZE = 64
EPOCHS = 12
LR = 3e-3
WEIGHT_DECAY = 1e-5

torch.set_num_threads(1)


def set_seed(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


# ----------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------
def _keyword_table():
    # ids 2 .. 2 + NUM_INTENTS * KEYWORDS_PER_INTENT are intent keywords,
    # everything above is generic filler vocabulary
    start = 2
    table = {}
    for c in range(NUM_INTENTS):
        table[c] = list(range(start + c * KEYWORDS_PER_INTENT, start + (c + 1) * KEYWORDS_PER_INTENT))
    return table


def generate_commands(n, seed):
    rng = np.random.default_rng(seed)
    kw = _keyword_table()
    filler_lo = 2 + NUM_INTENTS * KEYWORDS_PER_INTENT
    seqs, labels = [], []
    for _ in range(n):
        label = int(rng.integers(NUM_INTENTS))
        length = int(rng.integers(MIN_LEN, MAX_LEN + 1))
        toks = list(rng.integers(filler_lo, VOCAB_SIZE, size=length))
        # one or two keywords for the true intent
        for _ in range(1):
            toks[int(rng.integers(length))] = int(rng.choice(kw[label]))
        # negated distractor ("not the alarm, the timer")
        if rng.random() < 0.5 and length >= 6:
            other = int((label + rng.integers(1, NUM_INTENTS)) % NUM_INTENTS)
            pos = int(rng.integers(0, length - 1))
            if toks[pos] not in kw[label] and toks[pos + 1] not in kw[label]:
                toks[pos] = NOT_ID
                toks[pos + 1] = int(rng.choice(kw[other]))
        seqs.append(np.asarray(toks, dtype=np.int64))
        labels.append(label)
    return seqs, np.asarray(labels, dtype=np.int64)


class CommandDataset(Dataset):
    def __init__(self, seqs, labels):
        self.seqs = seqs
        self.labels = labels

    def __len__(self):
        return len(self.seqs)

    def __getitem__(self, i):
        return torch.from_numpy(self.seqs[i]), int(self.labels[i])


def collate_commands(items):
    seqs, labels = zip(*items)
    lengths = torch.tensor([len(s) for s in seqs], dtype=torch.long)
    tokens = pad_sequence(seqs, batch_first=True, padding_value=PAD_ID)
    return {"tokens": tokens, "lengths": lengths, "labels": torch.tensor(labels, dtype=torch.long)}


def build_loaders():
    tr_x, tr_y = generate_commands(3000, seed=SEED)
    va_x, va_y = generate_commands(1000, seed=SEED + 1)
    g = torch.Generator().manual_seed(SEED)
    train_dl = DataLoader(CommandDataset(tr_x, tr_y), batch_size=BATCH_SIZE, shuffle=True,
                          collate_fn=collate_commands, generator=g)
    val_dl = DataLoader(CommandDataset(va_x, va_y), batch_size=256, shuffle=False,
                        collate_fn=collate_commands)
    return train_dl, val_dl


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class IntentGRU(nn.Module):
    def __init__(self, vocab_size, embed_dim, hidden_dim, num_classes, dropout=0.2):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=PAD_ID)
        self.encoder = nn.GRU(embed_dim, hidden_dim, batch_first=True, bidirectional=True)
        self.dropout = nn.Dropout(dropout)
        # classifier head returns class probabilities so the serving code can
        # threshold on confidence directly
        self.classifier = nn.Sequential(
            nn.Linear(2 * hidden_dim, hidden_dim),
            nn.ReLU(),
            nn.Linear(hidden_dim, num_classes),
            nn.Softmax(dim=-1),
        )

    def forward(self, tokens, lengths):
        emb = self.dropout(self.embedding(tokens))
        packed = pack_padded_sequence(emb, lengths.cpu(), batch_first=True, enforce_sorted=False)
        _, h_n = self.encoder(packed)
        # h_n: (2, B, H) -> concat last forward / backward states
        feats = torch.cat([h_n[0], h_n[1]], dim=-1)
        return self.classifier(self.dropout(feats))


criterion = nn.CrossEntropyLoss()


def compute_loss(model, batch):
    out = model(batch["tokens"], batch["lengths"])
    return criterion(out, batch["labels"])


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY)


def build_model():
    return IntentGRU(VOCAB_SIZE, EMBED_DIM, HIDDEN_DIM, NUM_INTENTS)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    tot_loss, tot_correct, n = 0.0, 0, 0
    for batch in loader:
        out = model(batch["tokens"], batch["lengths"])
        loss = criterion(out, batch["labels"])
        bs = batch["labels"].size(0)
        tot_loss += loss.item() * bs
        tot_correct += (out.argmax(-1) == batch["labels"]).sum().item()
        n += bs
    model.train()
    return tot_loss / n, tot_correct / n


def make_target():
    set_seed(SEED)
    train_dl, _ = build_loaders()
    data = []
    for i, batch in enumerate(train_dl):
        data.append(batch)
        if i == 4:
            break
    return {
        "model": build_model(),
        "data": data,
        "loss_fn": compute_loss,
        "make_optimizer": make_optimizer,
        "num_classes": NUM_INTENTS,
        "task": "classification",
    }


def main():
    set_seed(SEED)
    train_dl, val_dl = build_loaders()
    model = build_model()
    optimizer = make_optimizer(model.parameters())
    n_params = sum(p.numel() for p in model.parameters())
    print(f"Model: IntentGRU, {n_params:,} trainable params")
    print(f"Train on {len(train_dl.dataset)} samples, validate on {len(val_dl.dataset)} samples")

    for epoch in range(1, EPOCHS + 1):
        t0 = time.time()
        model.train()
        run_loss, run_correct, seen = 0.0, 0, 0
        for batch in train_dl:
            optimizer.zero_grad()
            out = model(batch["tokens"], batch["lengths"])
            loss = criterion(out, batch["labels"])
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()
            bs = batch["labels"].size(0)
            run_loss += loss.item() * bs
            run_correct += (out.argmax(-1) == batch["labels"]).sum().item()
            seen += bs
        val_loss, val_acc = evaluate(model, val_dl)
        dt = time.time() - t0
        print(f"Epoch {epoch}/{EPOCHS}")
        print(f"{len(train_dl)}/{len(train_dl)} - {dt:.0f}s - loss: {run_loss / seen:.4f} - "
              f"accuracy: {run_correct / seen:.4f} - val_loss: {val_loss:.4f} - val_accuracy: {val_acc:.4f}")


if __name__ == "__main__":
    main()
