"""Classify device boot logs by bootloader family (legacy vs. A/B-partition) from the
tokenised event stream of one boot. GRU over packed variable-length token sequences."""
import math
import time

import numpy as np
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_sequence
from torch.utils.data import DataLoader, Dataset

SEED = 5
N_LOGS = 4000
MIN_LEN, MAX_LEN = 20, 40
VOCAB_SIZE = 60
PAD_IDX = 0
LABEL_NOISE = 0.04
BATCH_SIZE = 64
EPOCHS = 20
LR = 3e-3
EMB, HIDDEN = 16, 32

torch.set_num_threads(1)

# token ids: 0 pad, 1 <bos>, 2-9 bootloader banner tokens, 10+ ordinary boot events
BANNER_LEGACY = [2, 3, 4, 5]
BANNER_AB = [6, 7, 8, 9]
EVENT_LO = 10


def synth_logs(n, rng):
    """A boot log: <bos>, one banner line (which identifies the bootloader family),
    then a stream of kernel/service events whose statistics do not depend on the family."""
    seqs, labels = [], []
    event_p = rng.dirichlet(np.full(VOCAB_SIZE - EVENT_LO, 0.5))
    for _ in range(n):
        label = int(rng.random() < 0.5)
        banner = rng.choice(BANNER_AB if label else BANNER_LEGACY)
        T = int(rng.integers(MIN_LEN, MAX_LEN + 1))
        events = rng.choice(np.arange(EVENT_LO, VOCAB_SIZE), size=T - 2, p=event_p)
        seqs.append(np.concatenate([[1, banner], events]).astype(np.int64))
        # asset-inventory labels are wrong for a few percent of devices
        labels.append(label if rng.random() > LABEL_NOISE else 1 - label)
    return seqs, np.array(labels)


class BootLogDataset(Dataset):
    def __init__(self, seqs, labels):
        self.seqs, self.labels = seqs, labels

    def __len__(self):
        return len(self.seqs)

    def __getitem__(self, i):
        return torch.from_numpy(self.seqs[i]), int(self.labels[i])


def collate(batch):
    toks, ys = zip(*batch)
    lengths = torch.tensor([len(t) for t in toks])
    return pad_sequence(toks, batch_first=True, padding_value=PAD_IDX), lengths, torch.tensor(ys)


class BootLogGRU(nn.Module):
    def __init__(self, vocab=VOCAB_SIZE, emb=EMB, hidden=HIDDEN, n_classes=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, emb, padding_idx=PAD_IDX)
        self.gru = nn.GRU(emb, hidden, batch_first=True)
        self.fc = nn.Linear(hidden, n_classes)

    def forward(self, toks, lengths):
        packed = pack_padded_sequence(self.emb(toks), lengths, batch_first=True, enforce_sorted=False)
        _, h_n = self.gru(packed)
        return self.fc(h_n[-1])


def build_data():
    rng = np.random.default_rng(SEED)
    torch.manual_seed(SEED)
    seqs, labels = synth_logs(N_LOGS, rng)
    perm = rng.permutation(N_LOGS)
    n_val = N_LOGS // 5
    va, tr = perm[:n_val], perm[n_val:]
    train_ds = BootLogDataset([seqs[i] for i in tr], labels[tr])
    val_ds = BootLogDataset([seqs[i] for i in va], labels[va])
    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True, collate_fn=collate, generator=g)
    val_loader = DataLoader(val_ds, batch_size=256, shuffle=False, collate_fn=collate)
    return train_loader, val_loader


criterion = nn.CrossEntropyLoss()


def loss_fn(model, batch):
    toks, lengths, y = batch
    return criterion(model(toks, lengths), y)


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR)


def make_target():
    train_loader, val_loader = build_data()
    model = BootLogGRU()
    return {
        "model": model,
        "data": train_loader,
        "val_data": val_loader,
        "loss_fn": loss_fn,
        "optimizer": make_optimizer(model.parameters()),
        "num_classes": 2,
        "task": "classification",
    }


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    tot, correct, n = 0.0, 0, 0
    for toks, lengths, y in loader:
        logits = model(toks, lengths)
        tot += criterion(logits, y).item() * len(y)
        correct += (logits.argmax(1) == y).sum().item()
        n += len(y)
    model.train()
    return tot / n, correct / n


if __name__ == "__main__":
    t0 = time.time()
    train_loader, val_loader = build_data()
    model = BootLogGRU()
    optimizer = make_optimizer(model.parameters())
    steps = len(train_loader)
    print(f"train logs: {len(train_loader.dataset)} | val logs: {len(val_loader.dataset)} | "
          f"params: {sum(p.numel() for p in model.parameters())}")
    for epoch in range(1, EPOCHS + 1):
        print(f"Epoch {epoch}/{EPOCHS}")
        ep_t = time.time()
        tot, correct, n = 0.0, 0, 0
        for toks, lengths, y in train_loader:
            optimizer.zero_grad()
            logits = model(toks, lengths)
            loss = criterion(logits, y)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()
            tot += loss.item() * len(y)
            correct += (logits.argmax(1) == y).sum().item()
            n += len(y)
        val_loss, val_acc = evaluate(model, val_loader)
        dt = time.time() - ep_t
        print(f"{steps}/{steps} - {dt:.0f}s {1000 * dt / steps:.0f}ms/step - loss: {tot / n:.4f} - "
              f"accuracy: {correct / n:.4f} - val_loss: {val_loss:.4f} - val_accuracy: {val_acc:.4f}")
    print(f"total time: {time.time() - t0:.1f}s")
