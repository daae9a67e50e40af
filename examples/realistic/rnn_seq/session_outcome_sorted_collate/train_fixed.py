"""Session outcome classifier for the web analytics team.

Raw clickstream export (`events.csv`, one row per tracked event) is grouped into
per-session event sequences and joined with the session table (`sessions.csv`,
outcome assigned by the attribution job: purchase / abandoned_cart / browse /
support). A GRU over the event-type embeddings (packed, variable length)
predicts the outcome. Lightning-style epoch logs.
"""
import argparse
import os
import tempfile
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_sequence

CONFIG = dict(
    seed=11,
    n_sessions=3000,
    batch_size=64,
    epochs=10,
    lr=2e-3,
    emb_dim=32,
    hidden=64,
    val_frac=0.2,
    grad_clip=1.0,
)

EVENTS = ["home_view", "search", "search_refine", "category_view", "product_view", "product_zoom", "review_read",
          "size_guide", "add_to_cart", "remove_from_cart", "cart_view", "wishlist_add", "coupon_apply",
          "checkout_start", "shipping_form", "payment_form", "payment_fail", "payment_ok", "order_confirm",
          "faq_view", "order_status", "returns_page", "contact_form", "chat_open", "chat_message", "account_login",
          "newsletter_popup", "ad_impression", "heartbeat", "exit_intent"]
OUTCOMES = ["purchase", "abandoned_cart", "browse", "support"]
PAD = 0


def _intent_profiles(rng):
    """Event-type distributions per latent intent, plus a shared background."""
    idx = {e: i for i, e in enumerate(EVENTS)}
    base = rng.dirichlet(np.full(len(EVENTS), 2.0))
    boosts = {
        "purchase": ["product_view", "add_to_cart", "checkout_start", "shipping_form", "payment_form", "size_guide"],
        "abandoned_cart": ["add_to_cart", "cart_view", "remove_from_cart", "coupon_apply", "exit_intent",
                           "shipping_form"],
        "browse": ["category_view", "product_view", "search", "search_refine", "review_read", "wishlist_add"],
        "support": ["faq_view", "order_status", "returns_page", "contact_form", "account_login", "chat_open"],
    }
    tails = {
        "purchase": [["payment_form", "payment_ok", "order_confirm"], ["payment_ok", "order_confirm"],
                     ["shipping_form", "payment_form"]],
        "abandoned_cart": [["checkout_start", "shipping_form", "exit_intent"], ["payment_form", "payment_fail"],
                           ["cart_view", "exit_intent"]],
        "browse": [["product_view", "product_view"], ["search", "category_view"], ["review_read"]],
        "support": [["contact_form"], ["chat_open", "chat_message", "chat_message"], ["order_status", "faq_view"]],
    }
    profiles = []
    for name in OUTCOMES:
        p = base.copy()
        for e in boosts[name]:
            p[idx[e]] += 0.06
        profiles.append(p / p.sum())
    return profiles, {k: [[idx[e] for e in t] for t in v] for k, v in tails.items()}


def write_exports(out_dir, n, seed):
    rng = np.random.default_rng(seed)
    profiles, tails = _intent_profiles(rng)
    session_ids = rng.choice(np.arange(10_000_000, 99_999_999), size=n, replace=False)
    intent = rng.choice(len(OUTCOMES), size=n, p=[0.22, 0.2, 0.43, 0.15])
    device = rng.choice(["desktop", "mobile", "tablet"], size=n, p=[0.4, 0.5, 0.1])

    sid, ev, secs = [], [], []
    for i in range(n):
        k = intent[i]
        length = int(np.clip(rng.gamma(2.0, 7.0), 3, 70))
        seq = list(rng.choice(len(EVENTS), size=length, p=profiles[k]))
        if rng.random() < 0.75:  # intent-specific ending (sometimes lost by the tracker)
            t = tails[OUTCOMES[k]]
            seq += t[rng.integers(0, len(t))]
        start = rng.integers(0, 30 * 86400)
        sid += [session_ids[i]] * len(seq)
        ev += seq
        secs.append(start + np.cumsum(rng.exponential(20.0, size=len(seq))))
    ts = pd.Timestamp("2024-03-01") + pd.to_timedelta(np.concatenate(secs).round(3), unit="s")

    # attribution job output: mostly the intent, sometimes wrong
    outcome = np.where(rng.random(n) < 0.1, rng.integers(0, len(OUTCOMES), size=n), intent)
    events = pd.DataFrame({"session_id": sid, "ts": ts, "event_type": np.array(EVENTS)[ev]})
    events = events.sample(frac=1.0, random_state=seed)
    sessions = pd.DataFrame({"session_id": session_ids, "device": device,
                             "outcome": np.array(OUTCOMES)[outcome]})
    ev_path, sess_path = os.path.join(out_dir, "events.csv"), os.path.join(out_dir, "sessions.csv")
    events.to_csv(ev_path, index=False)
    sessions.to_csv(sess_path, index=False)
    return ev_path, sess_path


class SessionDataset(torch.utils.data.Dataset):
    def __init__(self, seqs, labels):
        self.seqs, self.labels = seqs, labels

    def __len__(self):
        return len(self.seqs)

    def __getitem__(self, i):
        return torch.as_tensor(self.seqs[i], dtype=torch.long), int(self.labels[i])


def collate(batch):
    seqs, labels = zip(*batch)
    lengths = torch.tensor([len(s) for s in seqs])
    # pack_padded_sequence wants the batch sorted by decreasing length
    lengths, order = lengths.sort(descending=True)
    padded = pad_sequence([seqs[i] for i in order], batch_first=True, padding_value=PAD)
    return padded, lengths, torch.tensor(labels)[order]


def build_datasets(cfg, tmp_dir):
    ev_path, sess_path = write_exports(tmp_dir, cfg["n_sessions"], cfg["seed"])
    events = pd.read_csv(ev_path, parse_dates=["ts"])
    sessions = pd.read_csv(sess_path)

    vocab = {e: i + 1 for i, e in enumerate(sorted(events["event_type"].unique()))}  # 0 = PAD
    events["tok"] = events["event_type"].map(vocab)
    events = events.sort_values(["session_id", "ts"])
    seq_by_session = events.groupby("session_id")["tok"].apply(list)

    label_map = {o: i for i, o in enumerate(OUTCOMES)}
    sessions = sessions[sessions["session_id"].isin(seq_by_session.index)].reset_index(drop=True)
    seqs = seq_by_session.loc[sessions["session_id"]].tolist()
    labels = sessions["outcome"].map(label_map).to_numpy()

    rng = np.random.default_rng(cfg["seed"])
    idx = rng.permutation(len(seqs))
    n_val = int(len(seqs) * cfg["val_frac"])
    va, tr = idx[:n_val], idx[n_val:]
    train_ds = SessionDataset([seqs[i] for i in tr], labels[tr])
    val_ds = SessionDataset([seqs[i] for i in va], labels[va])
    return train_ds, val_ds, len(vocab) + 1


class SessionGRU(nn.Module):
    def __init__(self, vocab_size, emb_dim, hidden, n_classes):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, emb_dim, padding_idx=PAD)
        self.gru = nn.GRU(emb_dim, hidden, batch_first=True)
        self.head = nn.Sequential(nn.Dropout(0.2), nn.Linear(hidden, n_classes))

    def forward(self, x, lengths):
        packed = pack_padded_sequence(self.emb(x), lengths, batch_first=True)
        _, h = self.gru(packed)
        return self.head(h[-1])


criterion = nn.CrossEntropyLoss()


def loss_fn(model, batch):
    x, lengths, y = batch
    return criterion(model(x, lengths), y)


def make_target():
    cfg = dict(CONFIG)
    torch.manual_seed(cfg["seed"])
    with tempfile.TemporaryDirectory() as tmp:
        train_ds, _, vocab_size = build_datasets(cfg, tmp)
    dl = torch.utils.data.DataLoader(train_ds, batch_size=cfg["batch_size"], shuffle=False, collate_fn=collate)
    it = iter(dl)
    data = [next(it) for _ in range(4)]
    model = SessionGRU(vocab_size, cfg["emb_dim"], cfg["hidden"], len(OUTCOMES))
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": torch.optim.Adam(model.parameters(), lr=cfg["lr"]),
            "task": "classification", "num_classes": len(OUTCOMES)}


@torch.no_grad()
def evaluate(model, dl):
    model.eval()
    tot, correct, n = 0.0, 0, 0
    for x, lengths, y in dl:
        logits = model(x, lengths)
        tot += criterion(logits, y).item() * len(y)
        correct += (logits.argmax(-1) == y).sum().item()
        n += len(y)
    model.train()
    return tot / n, correct / n


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=CONFIG["epochs"])
    p.add_argument("--lr", type=float, default=CONFIG["lr"])
    cli = p.parse_args()
    cfg = dict(CONFIG, epochs=cli.epochs, lr=cli.lr)

    np.random.seed(cfg["seed"])
    torch.manual_seed(cfg["seed"])
    with tempfile.TemporaryDirectory() as tmp:
        train_ds, val_ds, vocab_size = build_datasets(cfg, tmp)
    train_dl = torch.utils.data.DataLoader(train_ds, batch_size=cfg["batch_size"], shuffle=True, collate_fn=collate,
                                           generator=torch.Generator().manual_seed(cfg["seed"]))
    val_dl = torch.utils.data.DataLoader(val_ds, batch_size=256, shuffle=False, collate_fn=collate)

    model = SessionGRU(vocab_size, cfg["emb_dim"], cfg["hidden"], len(OUTCOMES))
    opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"])
    n_params = sum(p.numel() for p in model.parameters())
    print(f"  | Name  | Type       | Params\n  | model | SessionGRU | {n_params}")
    print(f"train sessions: {len(train_ds)}  val sessions: {len(val_ds)}  vocab: {vocab_size}")

    for epoch in range(cfg["epochs"]):
        t0 = time.time()
        tot, n = 0.0, 0
        for x, lengths, y in train_dl:
            loss = criterion(model(x, lengths), y)
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), cfg["grad_clip"])
            opt.step()
            tot += loss.item() * len(y)
            n += len(y)
        val_loss, val_acc = evaluate(model, val_dl)
        print(f"Epoch {epoch}: train_loss={tot / n:.4f} val_loss={val_loss:.4f} val_acc={val_acc:.4f} "
              f"[{time.time() - t0:.1f}s]")


if __name__ == "__main__":
    main()
