"""Session-level campaign attribution from clickstream event sequences.

Each session is a variable-length stream of event tokens. The session is
attributed to one of four campaigns; the campaign landing event opens the
session and is followed by ordinary browsing events. A GRU reads the packed
session and the final hidden state is classified.
"""
import json
import math
import random
import time

import numpy as np
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_sequence
from torch.utils.data import DataLoader, Dataset

SEED = 2024
NUM_CAMPAIGNS = 4
NUM_BROWSE_EVENTS = 40
MIN_EVENTS, MAX_EVENTS = 10, 35
LABEL_NOISE = 0.05                         # mis-attributed sessions in the CRM export
N_TRAIN, N_VAL = 3000, 600
BATCH_SIZE = 64
EPOCHS = 12
LR = 2e-3
LOG_EVERY = 25

PAD_IDX = 0
# 0 = pad, 1..4 = campaign landing events, 5.. = browsing events
CAMPAIGN_TOKENS = list(range(1, NUM_CAMPAIGNS + 1))
BROWSE_TOKENS = list(range(NUM_CAMPAIGNS + 1, NUM_CAMPAIGNS + 1 + NUM_BROWSE_EVENTS))
VOCAB_SIZE = 1 + NUM_CAMPAIGNS + NUM_BROWSE_EVENTS


def set_seed(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


# ---------------------------------------------------------------- data
def simulate_sessions(n, seed):
    rng = np.random.default_rng(seed)
    # browsing behaviour is shared across campaigns (Zipf-like popularity)
    pop = 1.0 / np.arange(1, NUM_BROWSE_EVENTS + 1) ** 0.8
    pop /= pop.sum()
    sessions, labels = [], []
    for _ in range(n):
        campaign = int(rng.integers(NUM_CAMPAIGNS))
        length = int(rng.integers(MIN_EVENTS, MAX_EVENTS + 1))
        browse = rng.choice(BROWSE_TOKENS, size=length, p=pop).tolist()
        sessions.append([CAMPAIGN_TOKENS[campaign]] + browse)
        label = campaign
        if rng.random() < LABEL_NOISE:
            label = int(rng.integers(NUM_CAMPAIGNS))
        labels.append(label)
    return sessions, labels


class SessionDataset(Dataset):
    def __init__(self, sessions, labels):
        self.sessions = [torch.tensor(s, dtype=torch.long) for s in sessions]
        self.labels = torch.tensor(labels, dtype=torch.long)

    def __len__(self):
        return len(self.sessions)

    def __getitem__(self, i):
        return self.sessions[i], self.labels[i]


def collate_sessions(batch):
    seqs, labels = zip(*batch)
    lengths = torch.tensor([len(s) for s in seqs])
    return pad_sequence(seqs, batch_first=True, padding_value=PAD_IDX), lengths, torch.stack(labels)


def make_loaders():
    tr_s, tr_y = simulate_sessions(N_TRAIN, SEED)
    va_s, va_y = simulate_sessions(N_VAL, SEED + 1)
    g = torch.Generator().manual_seed(SEED)
    train_dl = DataLoader(SessionDataset(tr_s, tr_y), batch_size=BATCH_SIZE, shuffle=True,
                          collate_fn=collate_sessions, generator=g, drop_last=True)
    val_dl = DataLoader(SessionDataset(va_s, va_y), batch_size=200, shuffle=False,
                        collate_fn=collate_sessions)
    return train_dl, val_dl


# ---------------------------------------------------------------- model
class SessionGRU(nn.Module):
    def __init__(self, emb_dim=32, hidden=64, dropout=0.3):
        super().__init__()
        self.embed = nn.Embedding(VOCAB_SIZE, emb_dim, padding_idx=PAD_IDX)
        self.gru = nn.GRU(emb_dim, hidden, batch_first=True)
        self.drop = nn.Dropout(dropout)
        self.classifier = nn.Linear(hidden, NUM_CAMPAIGNS)

    def forward(self, tokens, lengths):
        x = self.drop(self.embed(tokens))
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        _, h_n = self.gru(packed)                    # h_n: (1, B, H), last valid step of each session
        return self.classifier(self.drop(h_n[-1]))


criterion = nn.CrossEntropyLoss()


def loss_fn(model, batch):
    tokens, lengths, labels = batch
    return criterion(model(tokens, lengths), labels)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=LR, weight_decay=0.01)


@torch.no_grad()
def evaluate(model, dl):
    model.eval()
    loss_sum, correct, n = 0.0, 0, 0
    for tokens, lengths, labels in dl:
        logits = model(tokens, lengths)
        loss_sum += nn.functional.cross_entropy(logits, labels, reduction="sum").item()
        correct += (logits.argmax(-1) == labels).sum().item()
        n += labels.numel()
    model.train()
    return {"eval_loss": round(loss_sum / n, 4), "eval_accuracy": round(correct / n, 4)}


def train():
    torch.set_num_threads(1)
    set_seed(SEED)
    train_dl, val_dl = make_loaders()
    model = SessionGRU()
    optimizer = make_optimizer(model.parameters())
    steps_per_epoch = len(train_dl)
    total_steps = EPOCHS * steps_per_epoch
    print("***** Running training *****")
    print(f"  Num examples = {len(train_dl.dataset)}")
    print(f"  Num Epochs = {EPOCHS}")
    print(f"  Batch size = {BATCH_SIZE}")
    print(f"  Total optimization steps = {total_steps}")
    step, running, t0 = 0, 0.0, time.time()
    for epoch in range(EPOCHS):
        for batch in train_dl:
            optimizer.zero_grad()
            loss = loss_fn(model, batch)
            loss.backward()
            grad_norm = nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            step += 1
            running += loss.item()
            if step % LOG_EVERY == 0:
                print({"loss": round(running / LOG_EVERY, 4), "grad_norm": round(float(grad_norm), 4),
                       "learning_rate": LR, "epoch": round(step / steps_per_epoch, 2)})
                running = 0.0
        metrics = evaluate(model, val_dl)
        metrics["epoch"] = float(epoch + 1)
        print(metrics)
    print({"train_runtime": round(time.time() - t0, 2), "train_steps": step})
    return model


def make_target():
    set_seed(SEED)
    train_dl, _ = make_loaders()
    it = iter(train_dl)
    return {
        "model": SessionGRU(),
        "data": [next(it) for _ in range(4)],
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "num_classes": NUM_CAMPAIGNS,
        "task": "classification",
    }


if __name__ == "__main__":
    train()
