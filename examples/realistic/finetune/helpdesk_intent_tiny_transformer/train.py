"""Masked-LM pretraining of a tiny transformer encoder on unlabelled helpdesk messages,
then fine-tuning it with a pooled classification head for intent routing."""
import math
import os
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

torch.set_num_threads(1)

SEED = 42
RUN_DIR = os.path.dirname(os.path.abspath(__file__))
CORPUS_CSV = os.path.join(RUN_DIR, "helpdesk_messages.csv")
ENCODER_CKPT = os.path.join(RUN_DIR, "mlm_encoder.pt")

PAD_ID, UNK_ID, MASK_ID = 0, 1, 2
MAX_LEN = 24

INTENTS = ["general_inquiry", "billing_issue", "password_reset", "cancel_subscription",
           "shipping_status", "bug_report", "upgrade_plan"]
KEYWORDS = {
    "general_inquiry": "hours open question information policy contact wondering location phone email ask curious offer".split(),
    "billing_issue": "charged twice invoice refund card payment billed amount statement overcharged fee receipt".split(),
    "password_reset": "password reset login locked forgot sign code verification access credentials username expired".split(),
    "cancel_subscription": "cancel subscription stop renewal unsubscribe terminate membership end quit close leaving auto".split(),
    "shipping_status": "package shipping delivery tracking arrived order courier shipped late address parcel dispatch".split(),
    "bug_report": "crash error bug broken freezes app screen loading glitch update fails blank".split(),
    "upgrade_plan": "upgrade plan premium tier pro features seats business annual pricing enterprise storage".split(),
}
FILLER = ("i my the a to and is it for on with this please can you help me we have not was "
          "hi hello thanks thank there any just need would like get how why when what still again "
          "since yesterday today week account team hey regards asap quick really").split()

CFG = {
    "n_corpus": 6000,
    "n_labelled": 2400,
    "val_size": 600,
    "d_model": 64,
    "n_layers": 2,
    "n_heads": 4,
    "mlm_steps": 300,
    "mlm_lr": 2e-3,
    "mlm_mask_prob": 0.15,
    "batch_size": 64,
    "epochs": 6,
    "lr_encoder": 1e-3,
    "lr_head": 3e-3,
    "weight_decay": 0.01,
    "warmup_ratio": 0.1,
    "eval_every": 50,
}


# ----------------------------------------------------------------------------- corpus
def _message(intent_id, rng):
    words = list(rng.choice(FILLER, size=rng.integers(3, 9)))
    words += list(rng.choice(KEYWORDS[INTENTS[intent_id]], size=rng.integers(2, 6)))
    if rng.random() < 0.35:
        other = INTENTS[rng.integers(len(INTENTS))]
        words.append(rng.choice(KEYWORDS[other]))
    rng.shuffle(words)
    return " ".join(words)


def write_corpus(path, cfg):
    rng = np.random.default_rng(SEED)
    n = cfg["n_corpus"]
    probs = np.array([0.3, 0.14, 0.12, 0.1, 0.12, 0.12, 0.1])
    intent = rng.choice(len(INTENTS), size=n, p=probs)
    text = [_message(int(k), rng) for k in intent]
    labelled = np.zeros(n, dtype=bool)
    labelled[rng.permutation(n)[: cfg["n_labelled"]]] = True
    df = pd.DataFrame({"ticket_id": np.arange(n), "text": text, "intent": [INTENTS[k] for k in intent],
                       "labelled": labelled})
    df.to_csv(path, index=False)


class Tokenizer:
    def __init__(self, texts):
        counts = pd.Series(" ".join(texts).split()).value_counts()
        self.itos = ["[PAD]", "[UNK]", "[MASK]"] + counts.index.tolist()
        self.stoi = {w: i for i, w in enumerate(self.itos)}

    def __len__(self):
        return len(self.itos)

    def encode(self, text):
        ids = [self.stoi.get(w, UNK_ID) for w in text.split()][:MAX_LEN]
        return ids + [PAD_ID] * (MAX_LEN - len(ids))


class TicketDataset(Dataset):
    def __init__(self, df, tok):
        self.ids = torch.tensor([tok.encode(t) for t in df["text"]], dtype=torch.long)
        self.labels = torch.tensor([INTENTS.index(s) for s in df["intent"]], dtype=torch.long)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.ids[i], self.labels[i]


def load_data(cfg):
    if not os.path.exists(CORPUS_CSV):
        write_corpus(CORPUS_CSV, cfg)
    df = pd.read_csv(CORPUS_CSV)
    tok = Tokenizer(df["text"].tolist())
    lab = df[df["labelled"]].sample(frac=1.0, random_state=SEED).reset_index(drop=True)
    val_df, train_df = lab.iloc[: cfg["val_size"]], lab.iloc[cfg["val_size"]:]
    return df, tok, train_df, val_df


# ----------------------------------------------------------------------------- model
class Encoder(nn.Module):
    def __init__(self, vocab, d, n_layers, n_heads):
        super().__init__()
        self.tok = nn.Embedding(vocab, d, padding_idx=PAD_ID)
        self.pos = nn.Embedding(MAX_LEN, d)
        layer = nn.TransformerEncoderLayer(d, n_heads, dim_feedforward=2 * d, dropout=0.1, batch_first=True,
                                           norm_first=True)
        self.layers = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)

    def forward(self, ids):
        pad = ids.eq(PAD_ID)
        h = self.tok(ids) + self.pos(torch.arange(ids.size(1)))
        return self.norm(self.layers(h, src_key_padding_mask=pad)), pad


class MaskedLM(nn.Module):
    def __init__(self, vocab, cfg):
        super().__init__()
        self.encoder = Encoder(vocab, cfg["d_model"], cfg["n_layers"], cfg["n_heads"])
        self.lm_head = nn.Linear(cfg["d_model"], vocab)

    def forward(self, ids):
        h, _ = self.encoder(ids)
        return self.lm_head(h)


class IntentClassifier(nn.Module):
    def __init__(self, vocab, cfg, n_labels):
        super().__init__()
        self.encoder = Encoder(vocab, cfg["d_model"], cfg["n_layers"], cfg["n_heads"])
        self.dropout = nn.Dropout(0.1)
        self.classifier = nn.Linear(cfg["d_model"], n_labels)

    def forward(self, ids):
        h, pad = self.encoder(ids)
        keep = (~pad).unsqueeze(-1).float()
        pooled = (h * keep).sum(1) / keep.sum(1).clamp(min=1.0)
        return self.classifier(self.dropout(pooled))


criterion = nn.CrossEntropyLoss(ignore_index=PAD_ID)


def mask_tokens(ids, p, gen):
    labels = ids.clone()
    maskable = ids.ne(PAD_ID)
    chosen = (torch.rand(ids.shape, generator=gen) < p) & maskable
    labels[~chosen] = PAD_ID
    inputs = ids.clone()
    inputs[chosen] = MASK_ID
    return inputs, labels


def pretrain_mlm(corpus_ids, vocab, cfg):
    gen = torch.Generator().manual_seed(SEED)
    model = MaskedLM(vocab, cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["mlm_lr"], weight_decay=0.01)
    model.train()
    t0 = time.time()
    for step in range(1, cfg["mlm_steps"] + 1):
        idx = torch.randint(0, len(corpus_ids), (cfg["batch_size"],), generator=gen)
        inputs, labels = mask_tokens(corpus_ids[idx], cfg["mlm_mask_prob"], gen)
        logits = model(inputs)
        loss = criterion(logits.view(-1, vocab), labels.view(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 0:
            print(f"mlm step {step}/{cfg['mlm_steps']} | loss {loss.item():.4f} | {(time.time() - t0) * 1000 / step:.1f} ms/step")
    torch.save(model.encoder.state_dict(), ENCODER_CKPT)


def build_classifier(vocab, cfg):
    model = IntentClassifier(vocab, cfg, len(INTENTS))
    if os.path.exists(ENCODER_CKPT):
        model.encoder.load_state_dict(torch.load(ENCODER_CKPT))
    model.encoder.tok.weight.requires_grad_(False)
    return model


def build_optimizer(model, cfg):
    enc = [p for p in model.encoder.parameters() if p.requires_grad]
    return torch.optim.AdamW([
        {"params": enc, "lr": cfg["lr_encoder"]},
        {"params": model.classifier.parameters(), "lr": cfg["lr_head"]},
    ], weight_decay=cfg["weight_decay"])


def loss_fn(model, batch):
    ids, labels = batch
    return criterion(model(ids), labels)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    losses, preds, gold = [], [], []
    for ids, labels in loader:
        logits = model(ids)
        losses.append(criterion(logits, labels).item())
        preds.append(logits.argmax(-1))
        gold.append(labels)
    preds, gold = torch.cat(preds), torch.cat(gold)
    acc = (preds == gold).float().mean().item()
    f1s = []
    for c in range(len(INTENTS)):
        tp = ((preds == c) & (gold == c)).sum().item()
        fp = ((preds == c) & (gold != c)).sum().item()
        fn = ((preds != c) & (gold == c)).sum().item()
        f1s.append(2 * tp / max(1, 2 * tp + fp + fn))
    model.train()
    return float(np.mean(losses)), acc, float(np.mean(f1s))


def make_loaders(tok, train_df, val_df, cfg):
    train_dl = DataLoader(TicketDataset(train_df, tok), batch_size=cfg["batch_size"], shuffle=True,
                          generator=torch.Generator().manual_seed(SEED), drop_last=True)
    val_dl = DataLoader(TicketDataset(val_df, tok), batch_size=256)
    return train_dl, val_dl


def make_target():
    torch.manual_seed(SEED)
    _, tok, train_df, val_df = load_data(CFG)
    train_dl, val_dl = make_loaders(tok, train_df, val_df, CFG)
    model = build_classifier(len(tok), CFG)
    return {
        "model": model,
        "data": train_dl,
        "val_data": val_dl,
        "loss_fn": loss_fn,
        "optimizer": build_optimizer(model, CFG),
        "num_classes": len(INTENTS),
        "task": "classification",
    }


def main():
    torch.manual_seed(SEED)
    t_start = time.time()
    df, tok, train_df, val_df = load_data(CFG)
    print(f"corpus: {len(df)} messages, vocab {len(tok)}, labelled train {len(train_df)}, val {len(val_df)}")
    corpus_ids = torch.tensor([tok.encode(t) for t in df["text"]], dtype=torch.long)
    pretrain_mlm(corpus_ids, len(tok), CFG)

    train_dl, val_dl = make_loaders(tok, train_df, val_df, CFG)
    model = build_classifier(len(tok), CFG)
    opt = build_optimizer(model, CFG)
    total = CFG["epochs"] * len(train_dl)
    warmup = int(CFG["warmup_ratio"] * total)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / warmup if s < warmup else max(0.0, (total - s) / (total - warmup)))
    print(f"fine-tuning for {total} steps ({CFG['epochs']} epochs), warmup {warmup}")
    model.train()
    step, t0 = 0, time.time()
    for epoch in range(CFG["epochs"]):
        for batch in train_dl:
            loss = loss_fn(model, batch)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            step += 1
            if step % 10 == 0:
                print(f"step {step:4d}/{total} | loss {loss.item():.4f} | lr {sched.get_last_lr()[1]:.2e} | "
                      f"{(time.time() - t0) * 1000 / step:.1f} ms/step")
            if step % CFG["eval_every"] == 0 or step == total:
                vl, va, vf = evaluate(model, val_dl)
                print(f"[eval] epoch {epoch + 1} step {step} | val_loss {vl:.4f} | val_acc {va:.4f} | macro_f1 {vf:.4f}")
    print(f"finished in {time.time() - t_start:.1f}s")


if __name__ == "__main__":
    main()
