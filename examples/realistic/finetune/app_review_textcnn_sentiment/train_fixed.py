"""Fine-tune a pretrained TextCNN review encoder for 3-way app-review sentiment.

Stage 1 pretrains the encoder on a large corpus of electronics reviews with
binary polarity labels (negative / positive) and writes the encoder weights and
its vocabulary to ./checkpoints.
Stage 2 freezes the encoder and trains a new classification head on a small
labelled set of app-store reviews (negative / mixed / positive).
"""
import json
import math
import os
import time
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

RUN_DIR = os.path.dirname(os.path.abspath(__file__))
DATA_DIR = os.path.join(RUN_DIR, "data")
CKPT_DIR = os.path.join(RUN_DIR, "checkpoints")
torch.set_num_threads(1)

PAD, UNK = "<pad>", "<unk>"
LABEL_NAMES = ["negative", "mixed", "positive"]


@dataclass
class Config:
    vocab_size: int = 256
    max_len: int = 48
    emb_dim: int = 48
    n_filters: int = 64
    kernel_sizes: tuple = (2, 3, 4)
    # stage 1
    pretrain_docs: int = 8000
    pretrain_epochs: int = 2
    pretrain_lr: float = 2e-3
    pretrain_batch_size: int = 64
    # stage 2
    train_docs: int = 600
    eval_docs: int = 800
    num_labels: int = 3
    batch_size: int = 32
    learning_rate: float = 3e-3
    weight_decay: float = 0.01
    num_train_epochs: int = 12
    warmup_ratio: float = 0.1
    dropout: float = 0.1
    logging_steps: int = 25
    seed: int = 42


# ----------------------------------------------------------------------------
# synthetic review corpora
# ----------------------------------------------------------------------------
FUNCTION_WORDS = ("the a and i it is was this to of for my with but on so very just "
                  "really that have has after").split()
POSITIVE_WORDS = ("great love excellent amazing perfect awesome smooth reliable fantastic "
                  "happy helpful solid nice impressed recommend fast easy brilliant superb "
                  "enjoy").split()
NEGATIVE_WORDS = ("terrible hate awful broken useless slow crash buggy worst annoying "
                  "disappointed refund poor laggy junk waste frustrating horrible unusable "
                  "fails").split()
SHARED_NOUNS = ("price quality design support time day week month version feature "
                "problem experience option setting menu button color size update "
                "account money service issue screen sound").split()
ELECTRONICS_NOUNS = ("battery charger cable headphones speaker laptop keyboard mouse monitor "
                     "remote adapter port usb hdmi bluetooth case charger_port earbuds tablet "
                     "camera lens tripod router modem printer ink").split()
APP_NOUNS = ("app login notification subscription ads widget sync password profile feed "
             "download dark_mode premium trial tab search chat upload backup calendar "
             "reminder playlist map checkout cart").split()


def _zipf_probs(n, rng, s=1.1):
    ranks = rng.permutation(n) + 1
    p = 1.0 / ranks ** s
    return p / p.sum()


def make_corpus(domain, n_docs, label_set, seed):
    """Generate reviews for one product domain.

    Each domain has its own word-frequency profile (people reviewing headphones
    and people reviewing apps do not use the same words equally often).
    """
    rng = np.random.default_rng(seed)
    dom_rng = np.random.default_rng({"electronics": 11, "apps": 23}[domain])
    nouns = SHARED_NOUNS + (ELECTRONICS_NOUNS if domain == "electronics" else APP_NOUNS)
    p_func = 1.0 / np.arange(1, len(FUNCTION_WORDS) + 1) ** 0.9
    p_func /= p_func.sum()
    p_noun = _zipf_probs(len(nouns), dom_rng)
    p_pos = _zipf_probs(len(POSITIVE_WORDS), dom_rng, s=0.8)
    p_neg = _zipf_probs(len(NEGATIVE_WORDS), dom_rng, s=0.8)

    labels = rng.choice(label_set, size=n_docs)
    names = [LABEL_NAMES[l] if len(label_set) == 3 else ("negative", "positive")[l] for l in labels]
    share_pos = np.array([{"negative": 0.03, "mixed": 0.5, "positive": 0.97}[n] for n in names])
    lengths = rng.integers(12, 40, size=n_docs)
    doc_idx = np.repeat(np.arange(n_docs), lengths)
    n_tok = len(doc_idx)
    kind = rng.random(n_tok)
    func = np.array(FUNCTION_WORDS)[rng.choice(len(FUNCTION_WORDS), size=n_tok, p=p_func)]
    noun = np.array(nouns)[rng.choice(len(nouns), size=n_tok, p=p_noun)]
    pos = np.array(POSITIVE_WORDS)[rng.choice(len(POSITIVE_WORDS), size=n_tok, p=p_pos)]
    neg = np.array(NEGATIVE_WORDS)[rng.choice(len(NEGATIVE_WORDS), size=n_tok, p=p_neg)]
    senti = np.where(rng.random(n_tok) < share_pos[doc_idx], pos, neg)
    toks = np.where(kind < 0.38, func, np.where(kind < 0.82, noun, senti))
    bounds = np.cumsum(lengths)[:-1]
    texts = [" ".join(t) for t in np.split(toks, bounds)]
    return pd.DataFrame({"text": texts, "label": labels})


def prepare_data(cfg):
    os.makedirs(DATA_DIR, exist_ok=True)
    files = {
        "electronics_reviews.csv": ("electronics", cfg.pretrain_docs, (0, 1), cfg.seed),
        "app_reviews_train.csv": ("apps", cfg.train_docs, (0, 1, 2), cfg.seed + 1),
        "app_reviews_eval.csv": ("apps", cfg.eval_docs, (0, 1, 2), cfg.seed + 2),
    }
    for fname, (domain, n, label_set, seed) in files.items():
        path = os.path.join(DATA_DIR, fname)
        if not os.path.exists(path):
            make_corpus(domain, n, label_set, seed).to_csv(path, index=False)


# ----------------------------------------------------------------------------
# tokenisation
# ----------------------------------------------------------------------------
def tokenize(text):
    return text.lower().split()


def build_vocab(texts, max_size):
    counts = Counter(tok for t in texts for tok in tokenize(t))
    itos = [PAD, UNK] + [w for w, _ in counts.most_common(max_size - 2)]
    return {w: i for i, w in enumerate(itos)}


def save_vocab(vocab, path):
    with open(path, "w") as f:
        json.dump(vocab, f)


def load_vocab(path):
    with open(path) as f:
        return json.load(f)


def encode(texts, vocab, max_len):
    ids = np.zeros((len(texts), max_len), dtype=np.int64)
    unk = vocab[UNK]
    for i, t in enumerate(texts):
        toks = [vocab.get(w, unk) for w in tokenize(t)][:max_len]
        ids[i, : len(toks)] = toks
    return ids


class ReviewDataset(Dataset):
    def __init__(self, input_ids, labels):
        self.input_ids = torch.as_tensor(input_ids)
        self.labels = torch.tensor(np.asarray(labels), dtype=torch.long)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return {"input_ids": self.input_ids[i], "labels": self.labels[i]}


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class TextCNNEncoder(nn.Module):
    def __init__(self, vocab_size, emb_dim, n_filters, kernel_sizes):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, emb_dim, padding_idx=0)
        self.convs = nn.ModuleList([nn.Conv1d(emb_dim, n_filters, k) for k in kernel_sizes])
        self.output_dim = n_filters * len(kernel_sizes)

    def forward(self, input_ids):
        x = self.embedding(input_ids).transpose(1, 2)  # B, E, T
        feats = [F.relu(conv(x)).amax(dim=-1) for conv in self.convs]
        return torch.cat(feats, dim=-1)


class ReviewClassifier(nn.Module):
    def __init__(self, encoder, num_labels, dropout):
        super().__init__()
        self.encoder = encoder
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(encoder.output_dim, num_labels)

    def forward(self, input_ids):
        return self.classifier(self.dropout(self.encoder(input_ids)))


def build_encoder(cfg):
    return TextCNNEncoder(cfg.vocab_size, cfg.emb_dim, cfg.n_filters, cfg.kernel_sizes)


# ----------------------------------------------------------------------------
# stage 1: pretraining on electronics polarity
# ----------------------------------------------------------------------------
def pretrain_encoder(cfg):
    torch.manual_seed(cfg.seed)
    df = pd.read_csv(os.path.join(DATA_DIR, "electronics_reviews.csv"))
    vocab = build_vocab(df["text"], cfg.vocab_size)
    ds = ReviewDataset(encode(df["text"], vocab, cfg.max_len), df["label"].values)
    loader = DataLoader(ds, batch_size=cfg.pretrain_batch_size, shuffle=True)
    model = ReviewClassifier(build_encoder(cfg), num_labels=2, dropout=0.2)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.pretrain_lr)
    model.train()
    for epoch in range(cfg.pretrain_epochs):
        tot, correct, n = 0.0, 0, 0
        for batch in loader:
            logits = model(batch["input_ids"])
            loss = F.cross_entropy(logits, batch["labels"])
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += loss.item() * len(batch["labels"])
            correct += (logits.argmax(-1) == batch["labels"]).sum().item()
            n += len(batch["labels"])
        print(f"[pretrain] epoch {epoch + 1}/{cfg.pretrain_epochs} "
              f"loss={tot / n:.4f} acc={correct / n:.4f}")
    os.makedirs(CKPT_DIR, exist_ok=True)
    torch.save(model.encoder.state_dict(), os.path.join(CKPT_DIR, "encoder.pt"))
    save_vocab(vocab, os.path.join(CKPT_DIR, "vocab.json"))


def load_pretrained_encoder(cfg):
    path = os.path.join(CKPT_DIR, "encoder.pt")
    if not os.path.exists(path):
        pretrain_encoder(cfg)
    encoder = build_encoder(cfg)
    encoder.load_state_dict(torch.load(path, map_location="cpu"))
    return encoder


# ----------------------------------------------------------------------------
# stage 2: fine-tuning on app reviews
# ----------------------------------------------------------------------------
def load_finetune_datasets(cfg):
    train_df = pd.read_csv(os.path.join(DATA_DIR, "app_reviews_train.csv"))
    eval_df = pd.read_csv(os.path.join(DATA_DIR, "app_reviews_eval.csv"))
    vocab = load_vocab(os.path.join(CKPT_DIR, "vocab.json"))
    train_ds = ReviewDataset(encode(train_df["text"], vocab, cfg.max_len), train_df["label"].values)
    eval_ds = ReviewDataset(encode(eval_df["text"], vocab, cfg.max_len), eval_df["label"].values)
    return train_ds, eval_ds


def build_model(cfg, encoder):
    model = ReviewClassifier(encoder, cfg.num_labels, cfg.dropout)
    for p in model.encoder.parameters():
        p.requires_grad = False
    return model


def create_optimizer(cfg, model):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if name.endswith("bias") else decay).append(p)
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.learning_rate,
    )


def linear_schedule_with_warmup(optimizer, warmup_steps, total_steps):
    def lr_lambda(step):
        if step < warmup_steps:
            return step / max(1, warmup_steps)
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)


def compute_loss(model, batch):
    logits = model(batch["input_ids"])
    return F.cross_entropy(logits, batch["labels"])


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    start = time.time()
    losses, preds, labels = [], [], []
    for batch in loader:
        logits = model(batch["input_ids"])
        losses.append(F.cross_entropy(logits, batch["labels"], reduction="sum").item())
        preds.append(logits.argmax(-1))
        labels.append(batch["labels"])
    preds, labels = torch.cat(preds).numpy(), torch.cat(labels).numpy()
    f1s = []
    for c in range(3):
        tp = np.sum((preds == c) & (labels == c))
        prec = tp / max(1, np.sum(preds == c))
        rec = tp / max(1, np.sum(labels == c))
        f1s.append(0.0 if prec + rec == 0 else 2 * prec * rec / (prec + rec))
    runtime = time.time() - start
    model.train()
    return {
        "eval_loss": round(sum(losses) / len(labels), 4),
        "eval_accuracy": round(float(np.mean(preds == labels)), 4),
        "eval_f1_macro": round(float(np.mean(f1s)), 4),
        "eval_runtime": round(runtime, 4),
        "eval_samples_per_second": round(len(labels) / runtime, 3),
    }


def make_target():
    cfg = Config()
    torch.manual_seed(cfg.seed)
    prepare_data(cfg)
    encoder = load_pretrained_encoder(cfg)
    train_ds, eval_ds = load_finetune_datasets(cfg)
    torch.manual_seed(cfg.seed)
    model = build_model(cfg, encoder)
    train_loader = DataLoader(train_ds, batch_size=cfg.batch_size, shuffle=True)
    eval_loader = DataLoader(eval_ds, batch_size=128)
    return {
        "model": model,
        "data": train_loader,
        "val_data": eval_loader,
        "loss_fn": compute_loss,
        "optimizer": create_optimizer(cfg, model),
        "num_classes": cfg.num_labels,
        "task": "classification",
    }


def main():
    cfg = Config()
    t0 = time.time()
    torch.manual_seed(cfg.seed)
    prepare_data(cfg)
    pretrain_encoder(cfg)
    encoder = load_pretrained_encoder(cfg)

    train_ds, eval_ds = load_finetune_datasets(cfg)
    torch.manual_seed(cfg.seed)
    model = build_model(cfg, encoder)
    train_loader = DataLoader(train_ds, batch_size=cfg.batch_size, shuffle=True)
    eval_loader = DataLoader(eval_ds, batch_size=128)

    optimizer = create_optimizer(cfg, model)
    steps_per_epoch = len(train_loader)
    total_steps = steps_per_epoch * cfg.num_train_epochs
    scheduler = linear_schedule_with_warmup(optimizer, int(cfg.warmup_ratio * total_steps), total_steps)

    n_trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    n_total = sum(p.numel() for p in model.parameters())
    print("***** Running training *****")
    print(f"  Num examples = {len(train_ds)}")
    print(f"  Num Epochs = {cfg.num_train_epochs}")
    print(f"  Instantaneous batch size per device = {cfg.batch_size}")
    print(f"  Total optimization steps = {total_steps}")
    print(f"  Number of trainable parameters = {n_trainable:,} (of {n_total:,})")

    model.train()
    step, running, running_n, train_loss_sum = 0, 0.0, 0, 0.0
    train_start = time.time()
    for epoch in range(cfg.num_train_epochs):
        for batch in train_loader:
            loss = compute_loss(model, batch)
            optimizer.zero_grad()
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(
                [p for p in model.parameters() if p.requires_grad], 1.0)
            optimizer.step()
            scheduler.step()
            step += 1
            running += loss.item()
            running_n += 1
            train_loss_sum += loss.item()
            if step % cfg.logging_steps == 0:
                print({"loss": round(running / running_n, 4),
                       "grad_norm": round(float(grad_norm), 4),
                       "learning_rate": scheduler.get_last_lr()[0],
                       "epoch": round(step / steps_per_epoch, 2)})
                running, running_n = 0.0, 0
        metrics = evaluate(model, eval_loader)
        metrics["epoch"] = float(epoch + 1)
        print(metrics)

    runtime = time.time() - train_start
    print({"train_runtime": round(runtime, 4),
           "train_samples_per_second": round(len(train_ds) * cfg.num_train_epochs / runtime, 3),
           "train_steps_per_second": round(total_steps / runtime, 3),
           "train_loss": round(train_loss_sum / total_steps, 4),
           "epoch": float(cfg.num_train_epochs)})
    print(f"total wall time {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
