"""Classify captured protocol sessions by handshake variant.

Each session is a variable-length sequence of message-type tokens: a short
handshake at the start of the capture followed by a long data phase whose
message mix is the same for every variant. A unidirectional LSTM reads the
packed sequence and classifies it from its final state.
"""
import time

import numpy as np
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_sequence
from torch.utils.data import DataLoader, Dataset

SEED = 11
N_SESSIONS = 1400
MIN_LEN, MAX_LEN = 20, 40
N_CLASSES = 4
N_MSG_TYPES = 24
BATCH_SIZE = 32
EPOCHS = 16
LR = 2e-3
EMB_DIM = 16
HIDDEN = 32
PAD_IDX = 0

torch.manual_seed(SEED)
np.random.seed(SEED)
torch.set_num_threads(1)

# handshake message types per variant (ids 1..6; 7 is keep-alive/ack); the data phase uses ids 9..N_MSG_TYPES-1
HANDSHAKES = {0: [1, 2, 3], 1: [1, 4, 3], 2: [1, 5, 3], 3: [1, 6, 3]}


def simulate_sessions(n, seed):
    rng = np.random.default_rng(seed)
    data_types = np.arange(9, N_MSG_TYPES)
    data_probs = rng.dirichlet(np.ones(len(data_types)) * 2.0)
    seqs, labels = [], []
    for _ in range(n):
        y = int(rng.integers(N_CLASSES))
        T = int(rng.integers(MIN_LEN, MAX_LEN + 1))
        hs = list(HANDSHAKES[y])
        if rng.random() < 0.05:  # retransmitted handshake message
            i = int(rng.integers(len(hs)))
            hs.insert(i, hs[i])
        body = rng.choice(data_types, size=T - len(hs), p=data_probs)
        ack = rng.random(len(body)) < 0.1
        body[ack] = 7  # keep-alive / ack, any variant
        seqs.append(np.concatenate([hs, body]).astype(np.int64))
        labels.append(y)
    return seqs, np.array(labels)


class SessionDataset(Dataset):
    def __init__(self, seqs, labels):
        self.seqs, self.labels = seqs, labels

    def __len__(self):
        return len(self.seqs)

    def __getitem__(self, idx):
        return torch.from_numpy(self.seqs[idx]), int(self.labels[idx])


def collate(batch):
    seqs, ys = zip(*batch)
    lengths = torch.tensor([len(s) for s in seqs])
    return pad_sequence(seqs, batch_first=True, padding_value=PAD_IDX), lengths, torch.tensor(ys)


class TraceLSTM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(N_MSG_TYPES, EMB_DIM, padding_idx=PAD_IDX)
        self.lstm = nn.LSTM(EMB_DIM, HIDDEN, batch_first=True)
        self.fc = nn.Linear(HIDDEN, N_CLASSES)

    def forward(self, x, lengths):
        packed = pack_padded_sequence(self.emb(x), lengths.cpu(), batch_first=True, enforce_sorted=False)
        _, (h_n, _) = self.lstm(packed)
        return self.fc(h_n[-1])


criterion = nn.CrossEntropyLoss()


def loss_fn(model, batch):
    x, lengths, y = batch
    return criterion(model(x, lengths), y)


def build_loaders():
    seqs, labels = simulate_sessions(N_SESSIONS, SEED)
    n_val = N_SESSIONS // 5
    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(SessionDataset(seqs[n_val:], labels[n_val:]), batch_size=BATCH_SIZE,
                              shuffle=True, collate_fn=collate, generator=g)
    val_loader = DataLoader(SessionDataset(seqs[:n_val], labels[:n_val]), batch_size=256,
                            shuffle=False, collate_fn=collate)
    return train_loader, val_loader


def make_target():
    torch.manual_seed(SEED)
    train_loader, val_loader = build_loaders()
    model = TraceLSTM()
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    return {"model": model, "data": train_loader, "val_data": val_loader, "loss_fn": loss_fn,
            "optimizer": optimizer, "num_classes": N_CLASSES, "task": "classification"}


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    tot, correct, n = 0.0, 0, 0
    for x, lengths, y in loader:
        logits = model(x, lengths)
        tot += criterion(logits, y).item() * len(y)
        correct += (logits.argmax(-1) == y).sum().item()
        n += len(y)
    return tot / n, correct / n


def main():
    target = make_target()
    model, optimizer = target["model"], target["optimizer"]
    train_loader, val_loader = target["data"], target["val_data"]
    t_start = time.time()
    for epoch in range(1, EPOCHS + 1):
        model.train()
        tot, correct, n, gnorm = 0.0, 0, 0, 0.0
        for x, lengths, y in train_loader:
            optimizer.zero_grad()
            logits = model(x, lengths)
            loss = criterion(logits, y)
            loss.backward()
            gnorm += nn.utils.clip_grad_norm_(model.parameters(), 1.0).item()
            optimizer.step()
            tot += loss.item() * len(y)
            correct += (logits.argmax(-1) == y).sum().item()
            n += len(y)
        val_loss, val_acc = evaluate(model, val_loader)
        print(f"[epoch {epoch:02d}] train loss {tot / n:.4f} acc {correct / n:.3f} | "
              f"val loss {val_loss:.4f} acc {val_acc:.3f} | grad norm {gnorm / len(train_loader):.3f} | "
              f"{time.time() - t_start:.1f}s")


if __name__ == "__main__":
    main()
