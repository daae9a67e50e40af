"""Route incoming support tickets to a queue (billing / escalation / general / technical).

Ticket metadata + CRM attributes -> one-hot categoricals and scaled numerics -> MLP.
Queues are imbalanced, so the cross-entropy is class-weighted (inverse frequency).
"""
import math
import os
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

SEED = 2024
HERE = os.path.dirname(os.path.abspath(__file__))
TARGET = "queue"
CAT_COLS = ["product", "channel", "tier", "region"]
NUM_COLS = ["message_length", "num_attachments", "sentiment", "prior_tickets_90d",
            "invoice_term_score", "error_term_score", "account_age_days", "seats"]
LOG_COLS = ["message_length", "seats", "account_age_days"]

BATCH_SIZE = 128
EPOCHS = 10
LR = 1e-3
LOG_EVERY = 250


def load_tickets():
    tickets = pd.read_csv(os.path.join(HERE, "tickets.csv"))
    customers = pd.read_csv(os.path.join(HERE, "customers.csv"))
    df = tickets.merge(customers, on="customer_id", how="left")
    for col in LOG_COLS:
        df[col] = np.log1p(df[col])
    return df


def stratified_split(df, val_frac=0.2):
    val_df = df.groupby(TARGET, group_keys=False).sample(frac=val_frac, random_state=SEED)
    train_df = df.drop(val_df.index)
    return train_df.reset_index(drop=True), val_df.reset_index(drop=True)


class TicketEncoder:
    def fit(self, df):
        self.classes = sorted(df[TARGET].unique())
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        self.categories = {c: sorted(df[c].unique()) for c in CAT_COLS}
        self.mu = df[NUM_COLS].mean()
        self.sigma = df[NUM_COLS].std()
        return self

    def transform(self, df):
        onehots = [pd.get_dummies(pd.Categorical(df[c], categories=self.categories[c]), prefix=c, dtype=np.float32)
                   for c in CAT_COLS]
        num = (df[NUM_COLS] - self.mu) / self.sigma
        x = pd.concat([num.reset_index(drop=True)] + onehots, axis=1).values.astype(np.float32)
        y = df[TARGET].map(self.class_to_idx).to_numpy(dtype=np.int64, copy=True)
        return torch.from_numpy(x), torch.from_numpy(y).long()


def inverse_frequency_weights(train_df, classes):
    counts = train_df[TARGET].value_counts().reindex(classes)
    weights = len(train_df) / (len(classes) * counts)
    return torch.tensor(weights.values, dtype=torch.float32)


def prepare():
    df = load_tickets()
    train_df, val_df = stratified_split(df)
    enc = TicketEncoder().fit(train_df)
    x_tr, y_tr = enc.transform(train_df)
    x_va, y_va = enc.transform(val_df)
    class_weights = inverse_frequency_weights(train_df, enc.classes)
    return enc, (x_tr, y_tr), (x_va, y_va), class_weights


def make_loader(x, y, shuffle):
    g = torch.Generator().manual_seed(SEED)
    return DataLoader(TensorDataset(x, y), batch_size=BATCH_SIZE, shuffle=shuffle, generator=g)


class TicketRouter(nn.Module):
    def __init__(self, d_in, n_classes, hidden=256, dropout=0.2):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_in, hidden), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden, hidden // 2), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(hidden // 2, n_classes),
        )

    def forward(self, x):
        return self.net(x)


def make_loss_fn(class_weights):
    def loss_fn(model, batch):
        x, y = batch
        return F.cross_entropy(model(x), y, weight=class_weights)
    return loss_fn


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR, weight_decay=1e-5)


@torch.no_grad()
def evaluate(model, x, y, n_classes):
    model.eval()
    logits = model(x)
    loss = F.cross_entropy(logits, y).item()
    pred = logits.argmax(1)
    recalls, f1s = [], []
    for k in range(n_classes):
        tp = ((pred == k) & (y == k)).sum().item()
        fp = ((pred == k) & (y != k)).sum().item()
        fn = ((pred != k) & (y == k)).sum().item()
        prec = tp / max(tp + fp, 1)
        rec = tp / max(tp + fn, 1)
        recalls.append(rec)
        f1s.append(2 * prec * rec / max(prec + rec, 1e-12))
    model.train()
    return {
        "loss": loss,
        "acc": (pred == y).float().mean().item(),
        "macro_f1": float(np.mean(f1s)),
        "balanced_acc": float(np.mean(recalls)),
        "recall": recalls,
        "f1": f1s,
    }


def make_target():
    torch.manual_seed(SEED)
    enc, (x_tr, y_tr), _, class_weights = prepare()
    loader = make_loader(x_tr, y_tr, shuffle=True)
    batches = []
    for batch in loader:
        batches.append(batch)
        if len(batches) == 5:
            break
    return {
        "model": TicketRouter(x_tr.shape[1], len(enc.classes)),
        "data": batches,
        "loss_fn": make_loss_fn(class_weights),
        "make_optimizer": make_optimizer,
        "num_classes": len(enc.classes),
        "task": "classification",
    }


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    enc, (x_tr, y_tr), (x_va, y_va), class_weights = prepare()
    n_classes = len(enc.classes)
    print(f"classes: {enc.classes}")
    print(f"train: {tuple(x_tr.shape)}  val: {tuple(x_va.shape)}")
    print("class weights: " + ", ".join(f"{w:.3f}" for w in class_weights.tolist()))

    model = TicketRouter(x_tr.shape[1], n_classes)
    loss_fn = make_loss_fn(class_weights)
    opt = make_optimizer(model.parameters())
    loader = make_loader(x_tr, y_tr, shuffle=True)
    total_steps = EPOCHS * len(loader)
    warmup = 100
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, total_steps) / total_steps)))

    step = 0
    t0 = time.time()
    for epoch in range(EPOCHS):
        for batch in loader:
            loss = loss_fn(model, batch)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            step += 1
            if step % LOG_EVERY == 0:
                print(f"step {step:5d}/{total_steps} | epoch {epoch} | loss {loss.item():.4f} | "
                      f"lr {sched.get_last_lr()[0]:.2e} | {1000 * (time.time() - t0) / step:.1f} ms/step")
        m = evaluate(model, x_va, y_va, n_classes)
        print(f"[eval] epoch {epoch} | val_loss {m['loss']:.4f} | val_acc {m['acc']:.4f} | "
              f"val_macro_f1 {m['macro_f1']:.4f} | val_balanced_acc {m['balanced_acc']:.4f}")

    m = evaluate(model, x_va, y_va, n_classes)
    print("\nper-queue validation metrics")
    print(f"{'queue':<12}{'recall':>8}{'f1':>8}{'support':>9}")
    for k, name in enumerate(enc.classes):
        print(f"{name:<12}{m['recall'][k]:>8.3f}{m['f1'][k]:>8.3f}{(y_va == k).sum().item():>9d}")
    print(f"done in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
