"""Fine-tune a small pretrained review encoder on a new sentiment dataset.

Stage 1 pre-trains a 2-layer transformer encoder on a source review corpus
(multi-task: product topic + star polarity).  Stage 2 throws the source heads away,
puts a fresh classification head on the [CLS] vector and fine-tunes on the target
store's reviews: AdamW with a small LR for the backbone and a larger one for the
new head, linear warmup then linear decay, grad clipping at 1.0.
"""
import math
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

PAD, CLS = 0, 1
N_SPECIAL = 2
N_TOPICS = 8
TOPIC_WORDS = 24
OPINION_WORDS = 20
FILLER_WORDS = 60
OPINION_START = N_SPECIAL + N_TOPICS * TOPIC_WORDS
FILLER_START = OPINION_START + 2 * OPINION_WORDS
VOCAB = FILLER_START + FILLER_WORDS
MAX_LEN = 32


@dataclass
class FinetuneConfig:
    learning_rate: float = 1e-3
    backbone_lr_scale: float = 0.01
    weight_decay: float = 0.01
    batch_size: int = 32
    epochs: int = 3
    warmup_ratio: float = 0.1
    logging_steps: int = 10
    max_grad_norm: float = 1.0
    seed: int = 42


CFG = FinetuneConfig()


# ----------------------------------------------------------------------------- data
def make_reviews(n, seed, min_len=12, opinion_range=(2, 6), agree=0.8):
    """CLS + tokens from the review's topic pool, filler pool, and a few opinion words
    whose polarity agrees with the label with probability `agree`."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, size=n)
    topics = rng.integers(0, N_TOPICS, size=n)
    lengths = rng.integers(min_len, MAX_LEN + 1, size=n)
    body = MAX_LEN - 1
    topic_tok = N_SPECIAL + topics[:, None] * TOPIC_WORDS + rng.integers(0, TOPIC_WORDS, size=(n, body))
    filler_tok = FILLER_START + rng.integers(0, FILLER_WORDS, size=(n, body))
    toks = np.where(rng.random((n, body)) < 0.45, topic_tok, filler_tok)
    n_op = rng.integers(opinion_range[0], opinion_range[1], size=n)
    pos_in_body = np.argsort(rng.random((n, body)) + (np.arange(body)[None] >= lengths[:, None] - 1), axis=1)
    polarity = np.where(rng.random((n, body)) < agree, labels[:, None], 1 - labels[:, None])
    opinion_tok = OPINION_START + (1 - polarity) * OPINION_WORDS + rng.integers(0, OPINION_WORDS, size=(n, body))
    for i in range(n):
        slots = pos_in_body[i, :n_op[i]]
        toks[i, slots] = opinion_tok[i, slots]
    ids = np.full((n, MAX_LEN), PAD, dtype=np.int64)
    ids[:, 0] = CLS
    keep = np.arange(body)[None] < (lengths[:, None] - 1)
    ids[:, 1:] = np.where(keep, toks, PAD)
    return torch.from_numpy(ids), torch.from_numpy(labels), torch.from_numpy(topics)


def batches(ids, labels, bs, shuffle, gen=None):
    n = ids.shape[0]
    order = torch.randperm(n, generator=gen) if shuffle else torch.arange(n)
    for i in range(0, n, bs):
        idx = order[i:i + bs]
        yield {"input_ids": ids[idx], "labels": labels[idx]}


# ---------------------------------------------------------------------------- model
class Encoder(nn.Module):
    def __init__(self, vocab=VOCAB, d=48, heads=4, layers=2, ff=96, max_len=MAX_LEN):
        super().__init__()
        self.tok = nn.Embedding(vocab, d, padding_idx=PAD)
        self.pos = nn.Embedding(max_len, d)
        layer = nn.TransformerEncoderLayer(d, heads, ff, dropout=0.1, batch_first=True, norm_first=True)
        self.layers = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.d = d

    def forward(self, input_ids):
        h = self.tok(input_ids) + self.pos.weight[: input_ids.shape[1]][None]
        h = self.layers(h, src_key_padding_mask=input_ids == PAD)
        return self.norm(h)


class SequenceClassifier(nn.Module):
    def __init__(self, encoder, num_labels=2):
        super().__init__()
        self.encoder = encoder
        self.pre_classifier = nn.Linear(encoder.d, encoder.d)
        self.dropout = nn.Dropout(0.1)
        self.classifier = nn.Linear(encoder.d, num_labels)

    def forward(self, input_ids):
        h = self.encoder(input_ids)[:, 0]
        h = self.dropout(torch.tanh(self.pre_classifier(h)))
        return self.classifier(h)


def classification_loss(model, batch):
    logits = model(batch["input_ids"])
    return F.cross_entropy(logits, batch["labels"])


# ------------------------------------------------------------------------- pretrain
def pretrain_encoder(steps=200, seed=0):
    """Source task: topic (8-way) + polarity on a noisier source corpus."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    ids, pol, topic = make_reviews(6000, seed=1234, min_len=8, opinion_range=(1, 5), agree=0.75)
    enc = Encoder()
    topic_head = nn.Linear(enc.d, N_TOPICS)
    pol_head = nn.Linear(enc.d, 2)
    params = list(enc.parameters()) + list(topic_head.parameters()) + list(pol_head.parameters())
    opt = torch.optim.AdamW(params, lr=2e-3, weight_decay=0.01)
    enc.train()
    for step in range(steps):
        idx = torch.randint(0, ids.shape[0], (64,), generator=gen)
        cls = enc(ids[idx])[:, 0]
        loss = F.cross_entropy(topic_head(cls), topic[idx]) + F.cross_entropy(pol_head(cls), pol[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if (step + 1) % 50 == 0:
            print(f"[pretrain] step {step + 1}/{steps} source_loss {loss.item():.4f}")
    return enc


# ------------------------------------------------------------------------- finetune
def build_model(seed=CFG.seed):
    encoder = pretrain_encoder()
    torch.manual_seed(seed)
    return SequenceClassifier(encoder, num_labels=2)


def param_groups(model, cfg=CFG):
    backbone = [p for n, p in model.named_parameters() if n.startswith("encoder.")]
    head = [p for n, p in model.named_parameters() if not n.startswith("encoder.")]
    backbone_lr = cfg.learning_rate * cfg.backbone_lr_scale
    return [
        {"params": backbone, "lr": backbone_lr},
        {"params": head, "lr": backbone_lr},
    ]


def make_optimizer(params, cfg=CFG):
    return torch.optim.AdamW(params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay)


def linear_schedule_with_warmup(optimizer, warmup, total):
    def fn(step):
        if step < warmup:
            return (step + 1) / max(1, warmup)
        return max(0.0, (total - step) / max(1, total - warmup))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, fn)


@torch.no_grad()
def evaluate(model, ids, labels, bs=256):
    model.eval()
    tot, correct, n = 0.0, 0, 0
    for b in batches(ids, labels, bs, shuffle=False):
        logits = model(b["input_ids"])
        tot += F.cross_entropy(logits, b["labels"], reduction="sum").item()
        correct += (logits.argmax(-1) == b["labels"]).sum().item()
        n += b["labels"].shape[0]
    model.train()
    return tot / n, correct / n


def load_splits():
    train_ids, train_y, _ = make_reviews(1600, seed=7)
    val_ids, val_y, _ = make_reviews(500, seed=8)
    return train_ids, train_y, val_ids, val_y


def make_target():
    model = build_model()
    train_ids, train_y, _, _ = load_splits()
    data = list(batches(train_ids[:96], train_y[:96], CFG.batch_size, shuffle=False))
    return {
        "model": model,
        "batch": data[0],
        "data": data,
        "loss_fn": classification_loss,
        "optimizer": make_optimizer(param_groups(model)),
        "make_optimizer": make_optimizer,
        "num_classes": 2,
        "task": "classification",
    }


def main():
    t0 = time.time()
    model = build_model()
    train_ids, train_y, val_ids, val_y = load_splits()
    steps_per_epoch = math.ceil(train_ids.shape[0] / CFG.batch_size)
    total = steps_per_epoch * CFG.epochs
    optimizer = make_optimizer(param_groups(model))
    scheduler = linear_schedule_with_warmup(optimizer, int(CFG.warmup_ratio * total), total)
    gen = torch.Generator().manual_seed(CFG.seed)
    n_params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print(f"***** Running training *****\n  Num examples = {train_ids.shape[0]}\n  Num Epochs = {CFG.epochs}\n"
          f"  Total optimization steps = {total}\n  Number of trainable parameters = {n_params}")
    model.train()
    step, running, running_n, losses = 0, 0.0, 0, []
    for epoch in range(CFG.epochs):
        for batch in batches(train_ids, train_y, CFG.batch_size, shuffle=True, gen=gen):
            loss = classification_loss(model, batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), CFG.max_grad_norm)
            optimizer.step()
            scheduler.step()
            step += 1
            running += loss.item()
            running_n += 1
            losses.append(loss.item())
            if step % CFG.logging_steps == 0:
                print({"loss": round(running / running_n, 4), "grad_norm": round(grad_norm.item(), 4),
                       "learning_rate": scheduler.get_last_lr()[0], "epoch": round(step / steps_per_epoch, 2)})
                running, running_n = 0.0, 0
        eval_loss, eval_acc = evaluate(model, val_ids, val_y)
        print({"eval_loss": round(eval_loss, 4), "eval_accuracy": round(eval_acc, 4), "epoch": float(epoch + 1)})
    runtime = time.time() - t0
    print({"train_runtime": round(runtime, 2), "train_samples_per_second": round(train_ids.shape[0] * CFG.epochs / runtime, 2),
           "train_loss": round(sum(losses) / len(losses), 4), "epoch": float(CFG.epochs)})


if __name__ == "__main__":
    main()
