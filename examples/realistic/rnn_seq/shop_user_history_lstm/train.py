"""Predict whether a shop customer places an order in the next 30 days from
their clickstream history (event type + time since previous event), with a
packed LSTM over variable-length event sequences."""
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_sequence
from torch.utils.data import DataLoader, Dataset

SEED = 1234
N_USERS = 2000
MAX_LEN = 48
BATCH_SIZE = 128
EPOCHS = 8
LR = 3e-3
EMB_DIM = 16
HIDDEN = 32
PAD_IDX, UNK_IDX = 0, 1

torch.manual_seed(SEED)
np.random.seed(SEED)
torch.set_num_threads(1)

EVENT_TYPES = ["login", "view_item", "search", "add_to_cart", "purchase", "wishlist",
               "review", "coupon_view", "support_ticket", "email_unsubscribe"]
# base propensity and sensitivity to the customer's current engagement
EVENT_BASE = np.array([1.0, 2.0, 1.2, 0.0, -1.0, -0.5, -1.5, -0.3, -1.2, -2.0])
EVENT_SLOPE = np.array([0.2, 0.3, 0.2, 0.9, 1.2, 0.6, 0.8, 0.1, -1.0, -1.3])


def simulate_events(n_users, seed):
    rng = np.random.default_rng(seed)
    users, stamps, types, labels = [], [], [], {}
    start = pd.Timestamp("2023-01-01")
    for uid in range(n_users):
        user = f"u{uid:05d}"
        n_ev = int(np.clip(rng.lognormal(4.3, 0.6), 12, 320))
        noise = 0.28 * rng.normal(size=n_ev)
        states = np.empty(n_ev)
        s = rng.normal(0, 1)
        for i in range(n_ev):
            s = 0.96 * s + noise[i]
            states[i] = s
        logits = EVENT_BASE[None, :] + EVENT_SLOPE[None, :] * states[:, None]
        ev = np.argmax(logits + rng.gumbel(size=logits.shape), axis=1)
        gap_h = rng.exponential(np.exp(2.0 - 0.6 * states))
        users.append(np.full(n_ev, user))
        stamps.append(rng.uniform(0, 24 * 60) + np.cumsum(gap_h))
        types.append(np.asarray(EVENT_TYPES)[ev])
        recent = states[-10:].mean()
        labels[user] = int(rng.random() < 1 / (1 + np.exp(-(2.5 * recent - 0.3))))
    events = pd.DataFrame({
        "user_id": np.concatenate(users),
        "ts": start + pd.to_timedelta(np.concatenate(stamps), unit="h"),
        "event_type": np.concatenate(types),
    })
    events = events.sample(frac=1.0, random_state=seed).reset_index(drop=True)  # as exported from the warehouse
    target = pd.Series(labels, name="ordered_30d").rename_axis("user_id").reset_index()
    return events, target


def build_vocab(events):
    counts = events["event_type"].value_counts()
    stoi = {"<pad>": PAD_IDX, "<unk>": UNK_IDX}
    for ev in counts.index:
        stoi[ev] = len(stoi)
    return stoi


def encode_users(events, target, stoi):
    events = events.sort_values(["user_id", "ts"])
    events["gap_h"] = events.groupby("user_id")["ts"].diff().dt.total_seconds().fillna(0) / 3600.0
    y_by_user = dict(zip(target["user_id"], target["ordered_30d"]))
    samples = []
    for uid, g in events.groupby("user_id", sort=True):
        ids = [stoi.get(e, UNK_IDX) for e in g["event_type"]]
        gaps = np.log1p(g["gap_h"].to_numpy(dtype=np.float32))
        ids, gaps = ids[:MAX_LEN], gaps[:MAX_LEN]
        samples.append((np.asarray(ids, dtype=np.int64), gaps.astype(np.float32), y_by_user[uid]))
    return samples


class HistoryDataset(Dataset):
    def __init__(self, samples):
        self.samples = samples

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, idx):
        ids, gaps, y = self.samples[idx]
        return torch.from_numpy(ids), torch.from_numpy(gaps), float(y)


def collate_batch(batch):
    ids, gaps, ys = zip(*batch)
    lengths = torch.tensor([len(t) for t in ids], dtype=torch.long)
    ids = pad_sequence(ids, batch_first=True, padding_value=PAD_IDX)
    gaps = pad_sequence(gaps, batch_first=True, padding_value=0.0)
    return ids, gaps, lengths, torch.tensor(ys, dtype=torch.float32)


class HistoryLSTM(nn.Module):
    def __init__(self, vocab_size, emb_dim=EMB_DIM, hidden=HIDDEN):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, emb_dim, padding_idx=PAD_IDX)
        self.lstm = nn.LSTM(emb_dim + 1, hidden, batch_first=True)
        self.dropout = nn.Dropout(0.2)
        self.out = nn.Linear(hidden, 1)

    def forward(self, ids, gaps, lengths):
        x = torch.cat([self.emb(ids), gaps.unsqueeze(-1)], dim=-1)
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        _, (h_n, _) = self.lstm(packed)
        return self.out(self.dropout(h_n[-1])).squeeze(-1)


def build_data():
    events, target = simulate_events(N_USERS, SEED)
    users = target["user_id"].to_numpy()
    rng = np.random.default_rng(SEED)
    val_users = set(rng.choice(users, size=int(0.2 * len(users)), replace=False))
    is_val = events["user_id"].isin(val_users)
    stoi = build_vocab(events[~is_val])
    train_samples = encode_users(events[~is_val], target, stoi)
    val_samples = encode_users(events[is_val], target, stoi)
    return train_samples, val_samples, stoi


criterion = nn.BCEWithLogitsLoss()


def loss_fn(model, batch):
    ids, gaps, lengths, y = batch
    return criterion(model(ids, gaps, lengths), y)


def make_target():
    torch.manual_seed(SEED)
    train_samples, val_samples, stoi = build_data()
    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(HistoryDataset(train_samples), batch_size=BATCH_SIZE, shuffle=True,
                              collate_fn=collate_batch, generator=g)
    val_loader = DataLoader(HistoryDataset(val_samples), batch_size=512, shuffle=False,
                            collate_fn=collate_batch)
    model = HistoryLSTM(len(stoi))
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=1e-2)
    return {
        "model": model,
        "data": train_loader,
        "val_data": val_loader,
        "loss_fn": loss_fn,
        "optimizer": optimizer,
        "num_classes": 2,
        "task": "classification",
    }


def roc_auc(y_true, scores):
    order = np.argsort(scores)
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    pos = y_true == 1
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return (ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    losses, ys, scores = [], [], []
    for ids, gaps, lengths, y in loader:
        logits = model(ids, gaps, lengths)
        losses.append(criterion(logits, y).item() * len(y))
        ys.append(y.numpy())
        scores.append(logits.numpy())
    ys, scores = np.concatenate(ys), np.concatenate(scores)
    acc = ((scores > 0) == (ys == 1)).mean()
    return sum(losses) / len(ys), roc_auc(ys, scores), acc


def main():
    target = make_target()
    model, optimizer = target["model"], target["optimizer"]
    train_loader, val_loader = target["data"], target["val_data"]
    n_params = sum(p.numel() for p in model.parameters())
    print(f"train users: {len(train_loader.dataset)}  val users: {len(val_loader.dataset)}  params: {n_params}")
    step, t_start = 0, time.time()
    for epoch in range(1, EPOCHS + 1):
        model.train()
        t0, tot, n = time.time(), 0.0, 0
        for batch in train_loader:
            optimizer.zero_grad()
            loss = loss_fn(model, batch)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            step += 1
            tot += loss.item() * len(batch[-1])
            n += len(batch[-1])
            if step % 5 == 0:
                print(f"epoch {epoch} | step {step:4d} | loss {loss.item():.4f}")
        val_loss, val_auc, val_acc = evaluate(model, val_loader)
        print(f"epoch {epoch} done | train_loss {tot / n:.4f} | val_loss {val_loss:.4f} | "
              f"val_auc {val_auc:.4f} | val_acc {val_acc:.4f} | {time.time() - t0:.1f}s")
    print(f"total time {time.time() - t_start:.1f}s")


if __name__ == "__main__":
    main()
