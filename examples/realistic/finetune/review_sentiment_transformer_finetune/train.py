"""Product-review sentiment: fine-tune a small MLM-pretrained Transformer encoder.

Pretraining (masked language modelling on unlabeled reviews) runs once and is
cached to mlm_encoder.pt. Fine-tuning uses gradual unfreezing: the encoder is
frozen for the first `freeze_epochs` epochs (head only), then the whole model
is trained with a lower encoder learning rate.
"""
import json
import math
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import Dataset, DataLoader

RUN_DIR = os.path.dirname(os.path.abspath(__file__))
CKPT_PATH = os.path.join(RUN_DIR, "mlm_encoder.pt")

CFG = dict(
    seed=42,
    max_len=32,
    d_model=64,
    n_heads=4,
    n_layers=2,
    d_ff=128,
    dropout=0.1,
    n_unlabeled=4000,
    mlm_steps=300,
    mlm_lr=3e-3,
    n_train=1600,
    n_val=300,
    batch_size=32,
    epochs=10,
    freeze_epochs=3,
    head_lr=3e-3,
    encoder_lr=1e-3,
    weight_decay=0.01,
    logging_steps=20,
)

# ----------------------------------------------------------------------------
# vocabulary + synthetic reviews
# ----------------------------------------------------------------------------
SPECIALS = ["[PAD]", "[CLS]", "[MASK]", "[UNK]"]
POS = ["great", "excellent", "good", "amazing", "solid", "reliable", "comfortable", "sturdy", "fast", "perfect",
       "lovely", "impressive", "smooth", "handy", "pleasant", "decent", "superb", "quiet", "bright", "durable"]
NEG = ["bad", "terrible", "poor", "awful", "flimsy", "slow", "broken", "cheap", "noisy", "useless",
       "disappointing", "weak", "faulty", "clunky", "annoying", "dull", "fragile", "horrible", "mediocre", "leaky"]
NEGATORS = ["not", "never", "hardly"]
INTENS = ["very", "really", "so", "extremely"]
NOUNS = ["battery", "screen", "price", "delivery", "case", "sound", "charger", "strap", "lid", "handle",
         "motor", "blade", "cable", "app", "button", "fabric", "zipper", "lens", "speaker", "manual",
         "packaging", "seller", "support", "size", "color", "weight", "grip", "filter", "pump", "hinge"]
VERBS = ["is", "was", "seems", "felt", "looks"]
FILLER = ["the", "a", "my", "this", "honestly", "overall", "and", "also", "i", "think", "it", "after",
          "two", "weeks", "of", "use", "for", "kitchen", "daily", "gift", "to", "be", "fair", "still", "though"]
ENDING_WORDS = ["would", "buy", "again", "five", "stars", "highly", "recommend", "worth", "every", "penny",
                "love", "returned", "one", "star", "waste", "money", "do", "want", "refund"]
VOCAB = SPECIALS + POS + NEG + NEGATORS + INTENS + NOUNS + VERBS + FILLER + ENDING_WORDS + ["but", "."]
STOI = {w: i for i, w in enumerate(VOCAB)}
PAD, CLS, MASK = 0, 1, 2


POS_END = ["would buy again", "five stars", "highly recommend", "worth every penny", "love it"]
NEG_END = ["returned it", "one star", "waste of money", "do not buy", "want a refund"]


def gen_review(rng):
    """Returns (words, label). Most clauses agree with the overall verdict, some are
    concessions; negators flip the adjective that follows."""
    sent = int(rng.random() < 0.5)
    words = []
    for c in range(rng.integers(2, 4)):
        if c > 0 and rng.random() < 0.3:
            words.append("but")
        for _ in range(rng.integers(0, 2)):
            words.append(FILLER[rng.integers(len(FILLER))])
        words += ["the", NOUNS[rng.integers(len(NOUNS))], VERBS[rng.integers(len(VERBS))]]
        clause_pos = (rng.random() < 0.85) == bool(sent)
        negated = rng.random() < 0.3
        if negated:
            words.append(NEGATORS[rng.integers(len(NEGATORS))])
        if rng.random() < 0.3:
            words.append(INTENS[rng.integers(len(INTENS))])
        lex_pos = clause_pos != negated
        words.append(POS[rng.integers(len(POS))] if lex_pos else NEG[rng.integers(len(NEG))])
        words.append(".")
    if rng.random() < 0.4:
        words += (POS_END if sent else NEG_END)[rng.integers(5)].split() + ["."]
    return words, sent


def encode(words, max_len):
    ids = [CLS] + [STOI.get(w, 3) for w in words][: max_len - 1]
    return ids + [PAD] * (max_len - len(ids))


def make_corpus(rng, n, max_len):
    X, y = [], []
    while len(X) < n:
        words, label = gen_review(rng)
        X.append(encode(words, max_len))
        y.append(label)
    return torch.tensor(X), torch.tensor(y)


class ReviewDataset(Dataset):
    def __init__(self, ids, labels):
        self.ids, self.labels = ids, labels

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        ids = self.ids[i]
        return {"input_ids": ids, "attention_mask": (ids != PAD).long(), "labels": self.labels[i]}


def build_data(cfg):
    rng = np.random.default_rng(cfg["seed"])
    X, y = make_corpus(rng, cfg["n_train"] + cfg["n_val"], cfg["max_len"])
    train_ds = ReviewDataset(X[: cfg["n_train"]], y[: cfg["n_train"]])
    val_ds = ReviewDataset(X[cfg["n_train"]:], y[cfg["n_train"]:])
    g = torch.Generator().manual_seed(cfg["seed"])
    train_loader = DataLoader(train_ds, batch_size=cfg["batch_size"], shuffle=True, generator=g)
    val_loader = DataLoader(val_ds, batch_size=128)
    return train_loader, val_loader


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class Encoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.tok = nn.Embedding(len(VOCAB), cfg["d_model"], padding_idx=PAD)
        self.pos = nn.Embedding(cfg["max_len"], cfg["d_model"])
        layer = nn.TransformerEncoderLayer(cfg["d_model"], cfg["n_heads"], cfg["d_ff"], cfg["dropout"],
                                           batch_first=True, norm_first=True, activation="gelu")
        self.layers = nn.TransformerEncoder(layer, cfg["n_layers"], enable_nested_tensor=False)
        self.norm = nn.LayerNorm(cfg["d_model"])
        self.drop = nn.Dropout(cfg["dropout"])

    def forward(self, input_ids, attention_mask):
        pos = torch.arange(input_ids.shape[1], device=input_ids.device)
        h = self.drop(self.tok(input_ids) + self.pos(pos)[None])
        h = self.layers(h, src_key_padding_mask=attention_mask == 0)
        return self.norm(h)


class MLMModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.encoder = Encoder(cfg)
        self.lm_head = nn.Linear(cfg["d_model"], len(VOCAB))

    def forward(self, input_ids, attention_mask):
        return self.lm_head(self.encoder(input_ids, attention_mask))


class SentimentClassifier(nn.Module):
    def __init__(self, encoder, d_model, n_labels=2, dropout=0.1):
        super().__init__()
        self.encoder = encoder
        self.head = nn.Sequential(nn.Linear(d_model, d_model), nn.Tanh(), nn.Dropout(dropout),
                                  nn.Linear(d_model, n_labels))
        self.encoder_frozen = False

    def freeze_encoder(self, frozen=True):
        self.encoder_frozen = frozen
        for p in self.encoder.parameters():
            p.requires_grad = not frozen

    def train(self, mode=True):
        super().train(mode)
        if self.encoder_frozen:
            self.encoder.eval()
        return self

    def forward(self, input_ids, attention_mask):
        h = self.encoder(input_ids, attention_mask)
        m = attention_mask.unsqueeze(-1).float()
        pooled = (h * m).sum(1) / m.sum(1).clamp(min=1.0)
        return self.head(pooled)


def pretrain_mlm(cfg):
    print(f"***** Running MLM pretraining (no cache at {CKPT_PATH}) *****")
    t0 = time.time()
    rng = np.random.default_rng(cfg["seed"] + 1)
    X, _ = make_corpus(rng, cfg["n_unlabeled"], cfg["max_len"])
    torch.manual_seed(cfg["seed"] + 1)
    model = MLMModel(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["mlm_lr"], weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 30) * 0.5 * (1 + math.cos(math.pi * s / cfg["mlm_steps"])))
    model.train()
    for step in range(1, cfg["mlm_steps"] + 1):
        ids = X[torch.randint(0, len(X), (64,))]
        attn = (ids != PAD).long()
        cand = (ids > CLS) & (torch.rand(ids.shape) < 0.15)
        labels = torch.where(cand, ids, torch.full_like(ids, -100))
        inp = ids.clone()
        r = torch.rand(ids.shape)
        inp[cand & (r < 0.8)] = MASK
        rand_tok = torch.randint(len(SPECIALS), len(VOCAB), ids.shape)
        swap = cand & (r >= 0.8) & (r < 0.9)
        inp[swap] = rand_tok[swap]
        logits = model(inp, attn)
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 50 == 0:
            print({"mlm_loss": round(loss.item(), 4), "step": step})
    torch.save(model.encoder.state_dict(), CKPT_PATH)
    print(f"saved pretrained encoder to {CKPT_PATH} ({time.time() - t0:.1f}s)")


def build_model(cfg):
    if not os.path.exists(CKPT_PATH):
        pretrain_mlm(cfg)
    encoder = Encoder(cfg)
    encoder.load_state_dict(torch.load(CKPT_PATH, map_location="cpu"))
    torch.manual_seed(cfg["seed"])
    model = SentimentClassifier(encoder, cfg["d_model"], dropout=cfg["dropout"])
    model.freeze_encoder(True)
    return model


def make_optimizer_fn(cfg):
    def make_optimizer(params):
        return torch.optim.AdamW(params, lr=cfg["head_lr"], weight_decay=cfg["weight_decay"])
    return make_optimizer


def compute_loss(model, batch):
    logits = model(batch["input_ids"], batch["attention_mask"])
    return F.cross_entropy(logits, batch["labels"])


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    tot, correct, n = 0.0, 0, 0
    t0 = time.time()
    for b in loader:
        logits = model(b["input_ids"], b["attention_mask"])
        tot += F.cross_entropy(logits, b["labels"], reduction="sum").item()
        correct += (logits.argmax(-1) == b["labels"]).sum().item()
        n += len(b["labels"])
    return {"eval_loss": round(tot / n, 4), "eval_accuracy": round(correct / n, 4),
            "eval_runtime": round(time.time() - t0, 3)}


def make_target():
    torch.set_num_threads(1)
    cfg = dict(CFG)
    torch.manual_seed(cfg["seed"])
    train_loader, _ = build_data(cfg)
    model = build_model(cfg)
    data = []
    for i, b in enumerate(train_loader):
        data.append(b)
        if i == 3:
            break
    return dict(model=model, data=data, loss_fn=compute_loss, make_optimizer=make_optimizer_fn(cfg),
                task="classification", num_classes=2)


def main():
    torch.set_num_threads(1)
    cfg = dict(CFG)
    torch.manual_seed(cfg["seed"])
    np.random.seed(cfg["seed"])
    t_start = time.time()
    train_loader, val_loader = build_data(cfg)
    model = build_model(cfg)

    steps_per_epoch = len(train_loader)
    total_steps = steps_per_epoch * cfg["epochs"]
    head_params = list(model.head.parameters())
    optimizer = make_optimizer_fn(cfg)(head_params)
    # linear decay over the whole run, applied per param group
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: max(0.0, 1 - s / total_steps))

    print("***** Running training *****")
    print(f"  Num examples = {len(train_loader.dataset)}")
    print(f"  Num Epochs = {cfg['epochs']} (encoder frozen for first {cfg['freeze_epochs']})")
    print(f"  Total optimization steps = {total_steps}")
    print(f"  Trainable parameters = {sum(p.numel() for p in model.parameters() if p.requires_grad)}")

    step, running, running_n, all_losses = 0, 0.0, 0, []
    model.train()
    for epoch in range(cfg["epochs"]):
        if epoch == cfg["freeze_epochs"]:
            model.freeze_encoder(False)
            model.train()
            optimizer.add_param_group({"params": list(model.encoder.parameters()), "lr": cfg["encoder_lr"],
                                       "initial_lr": cfg["encoder_lr"]})
            scheduler.base_lrs.append(cfg["encoder_lr"])
            scheduler.lr_lambdas.append(scheduler.lr_lambdas[0])
            for g, base, lam in zip(optimizer.param_groups, scheduler.base_lrs, scheduler.lr_lambdas):
                g["lr"] = base * lam(step)
            n_tr = sum(p.numel() for p in model.parameters() if p.requires_grad)
            print(f"[epoch {epoch}] unfreezing encoder -> trainable parameters = {n_tr}")
        for batch in train_loader:
            loss = compute_loss(model, batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            gn = torch.nn.utils.clip_grad_norm_([p for g in optimizer.param_groups for p in g["params"]], 1.0)
            optimizer.step()
            scheduler.step()
            step += 1
            running += loss.item()
            running_n += 1
            all_losses.append(loss.item())
            if step % cfg["logging_steps"] == 0:
                print({"loss": round(running / running_n, 4), "grad_norm": round(float(gn), 4),
                       "learning_rate": float(f"{optimizer.param_groups[0]['lr']:.3e}"),
                       "epoch": round(step / steps_per_epoch, 2)})
                running, running_n = 0.0, 0
        metrics = evaluate(model, val_loader)
        metrics["epoch"] = float(epoch + 1)
        print(metrics)
        model.train()
    print({"train_runtime": round(time.time() - t_start, 2), "train_loss": round(float(np.mean(all_losses)), 4),
           "epoch": float(cfg["epochs"])})


if __name__ == "__main__":
    main()
