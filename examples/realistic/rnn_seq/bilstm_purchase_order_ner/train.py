"""BiLSTM tagger for purchase-order emails: extract QTY / PART / VENDOR / DATE spans.

Sentences are generated from procurement templates (fixed seed). Tags are BIO,
loss is token-level cross-entropy over real tokens, and evaluation reports token
accuracy plus exact-match span micro-F1 (seqeval style). Logging follows the
HF Trainer dict format.
"""
import math
import time
from collections import Counter

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence
from torch.utils.data import DataLoader

SEED = 3
N_TRAIN, N_VAL = 960, 400
BATCH_SIZE = 32
EPOCHS = 12
LR = 2e-3
WARMUP_RATIO = 0.1
WEIGHT_DECAY = 0.01
LOGGING_STEPS = 20
EMB, HIDDEN = 64, 64
PAD, UNK = "<pad>", "<unk>"
IGNORE = -100

torch.set_num_threads(1)

ENTITY_TYPES = ["QTY", "PART", "VENDOR", "DATE"]
TAGS = ["O"] + [f"{p}-{t}" for t in ENTITY_TYPES for p in ("B", "I")]
TAG2ID = {t: i for i, t in enumerate(TAGS)}

# ------------------------------------------------------------------ synthetic corpus
PART_NOUNS = ["filter", "bearing", "gasket", "valve", "coupling", "seal kit", "pressure switch",
              "drive belt", "impeller", "solenoid", "relay", "thermocouple", "flow meter", "hose clamp"]
PART_ADJ = ["hydraulic", "stainless", "replacement", "inline", "high temp", "3/4 inch", "m12", "oil"]
VENDORS = ["grainger", "fastenal", "mcmaster carr", "motion industries", "applied industrial",
           "rs components", "digikey", "wurth", "kaman", "msc industrial"]
DATES = ["friday", "monday", "tomorrow", "next week", "end of month", "march 3", "the 14th",
         "june 21", "eod thursday", "q3"]
GREETING = ["hi team ,", "hello ,", "quick one :", "fyi", "as discussed ,", "morning all ,", "", ""]
OUTRO = ["thanks", "cheers", "regards , ops", "ticket 4411 for reference", "see line 3 of the sheet",
         "plant 2 is waiting on this", "thanks , maintenance planning", "", ""]
CHATTER = [
    "the line was down again on the night shift and we lost about 2 hours",
    "maintenance flagged it during the weekly walkdown",
    "we had the same issue last quarter on press 4",
    "budget code is the usual one for the east building",
    "let me know if the account rep needs anything else from us",
    "the old stock in bay 7 is the wrong size so please ignore it",
    "we are trying to keep the shutdown window on friday if possible",
    "i cc'd the supervisor so she is aware",
    "last time the delivery went to the wrong dock so please mention dock 3",
    "no rush on the paperwork but the parts are urgent",
    "the meeting on monday will cover the rest of the list",
    "approval came through from finance this morning",
    "operators reported noise from the pump skid around 10 am",
    "the contractor will be on site next week to install",
    "please do not split the shipment",
    "see the attached photo of the nameplate",
]
TEMPLATES = [
    "please order {qty} {part} from {vendor} by {date}",
    "can we get {qty} x {part} ( {vendor} ) before {date}",
    "need {qty} {part} , {vendor} quoted it , required {date}",
    "{vendor} confirmed {qty} {part} will ship {date}",
    "reorder {part} qty {qty} , preferred supplier {vendor}",
    "{qty} units of {part} backordered at {vendor} until {date}",
    "raise po for {part} x{qty} with {vendor}",
    "stock check : {part} low , order {qty} by {date}",
]


def _part(rng):
    code = f"{rng.choice(['hf', 'bx', 'vk', 'ps', 'tc', 'sk'])}-{rng.integers(100, 9999)}"
    words = []
    if rng.random() < 0.6:
        words.append(str(rng.choice(PART_ADJ)))
    words.append(str(rng.choice(PART_NOUNS)))
    if rng.random() < 0.5:
        words.append(code)
    return " ".join(words)


def _qty(rng):
    return str(rng.choice([rng.integers(1, 12), rng.integers(10, 250), rng.choice([500, 1000])]))


def make_sentence(rng):
    tmpl = str(rng.choice(TEMPLATES))
    slots = {"qty": _qty(rng), "part": _part(rng), "vendor": str(rng.choice(VENDORS)),
             "date": str(rng.choice(DATES))}
    tokens, tags = [], []
    body = [str(rng.choice(GREETING))]
    body += [str(c) for c in rng.choice(CHATTER, size=rng.integers(1, 3), replace=False)]
    for w in " ".join(body).split():
        tokens.append(w)
        tags.append("O")
    for piece in tmpl.split():
        if piece.startswith("{") and piece.endswith("}"):
            key = piece[1:-1]
            ent = key.upper()
            for j, w in enumerate(slots[key].split()):
                tokens.append(w)
                tags.append(("B-" if j == 0 else "I-") + ent)
        elif piece.startswith("x{"):
            tokens.append("x" + slots["qty"])
            tags.append("B-QTY")
        else:
            tokens.append(piece)
            tags.append("O")
    for w in str(rng.choice(OUTRO)).split():
        tokens.append(w)
        tags.append("O")
    return tokens, tags


def build_vocab(sentences, min_freq=2):
    counts = Counter(w for toks, _ in sentences for w in toks)
    itos = [PAD, UNK] + sorted(w for w, c in counts.items() if c >= min_freq)
    return {w: i for i, w in enumerate(itos)}


def encode(sentences, vocab):
    out = []
    for toks, tags in sentences:
        ids = torch.tensor([vocab.get(w, vocab[UNK]) for w in toks])
        tag_ids = torch.tensor([TAG2ID[t] for t in tags])
        out.append((ids, tag_ids))
    return out


def collate(batch):
    ids, tags = zip(*batch)
    lengths = torch.tensor([len(x) for x in ids])
    return (pad_sequence(ids, batch_first=True, padding_value=0),
            pad_sequence(tags, batch_first=True, padding_value=IGNORE), lengths)


def make_data():
    rng = np.random.default_rng(SEED)
    train = [make_sentence(rng) for _ in range(N_TRAIN)]
    val = [make_sentence(rng) for _ in range(N_VAL)]
    vocab = build_vocab(train)
    return encode(train, vocab), encode(val, vocab), vocab


# ------------------------------------------------------------------ model
class BiLSTMTagger(nn.Module):
    def __init__(self, vocab_size, n_tags=len(TAGS)):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, EMB, padding_idx=0)
        self.drop = nn.Dropout(0.25)
        self.lstm = nn.LSTM(EMB, HIDDEN, batch_first=True, bidirectional=True)
        self.out = nn.Linear(2 * HIDDEN, n_tags)

    def forward(self, ids, lengths):
        x = self.drop(self.emb(ids))
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        h, _ = self.lstm(packed)
        h, _ = pad_packed_sequence(h, batch_first=True, total_length=ids.size(1))
        return self.out(self.drop(h))


def loss_fn(model, batch):
    ids, tags, lengths = batch
    logits = model(ids, lengths)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), tags.reshape(-1), ignore_index=IGNORE)


def make_optimizer(model):
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (no_decay if n.endswith("bias") or n.startswith("emb") else decay).append(p)
    return torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                              {"params": no_decay, "weight_decay": 0.0}], lr=LR)


def linear_schedule(optimizer, num_warmup, num_total):
    def f(step):
        if step < num_warmup:
            return step / max(1, num_warmup)
        return max(0.0, (num_total - step) / max(1, num_total - num_warmup))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, f)


def make_target():
    torch.manual_seed(SEED)
    train, val, vocab = make_data()
    model = BiLSTMTagger(len(vocab))
    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(train, batch_size=BATCH_SIZE, shuffle=True, collate_fn=collate, generator=g)
    val_loader = DataLoader(val, batch_size=128, collate_fn=collate)
    return {"model": model, "data": train_loader, "val_data": val_loader, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model), "num_classes": len(TAGS), "task": "sequence_tagging"}


# ------------------------------------------------------------------ metrics
def spans(tag_seq):
    out, start, typ = set(), None, None
    for i, t in enumerate(list(tag_seq) + ["O"]):
        if t.startswith("B-") or t == "O" or (t.startswith("I-") and t[2:] != typ):
            if typ is not None:
                out.add((typ, start, i))
            start, typ = (i, t[2:]) if t != "O" else (None, None)
    return out


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    tot_loss, n_tok, correct, tp, n_pred, n_gold = 0.0, 0, 0, 0, 0, 0
    for ids, tags, lengths in loader:
        logits = model(ids, lengths)
        tot_loss += F.cross_entropy(logits.reshape(-1, logits.size(-1)), tags.reshape(-1),
                                    ignore_index=IGNORE, reduction="sum").item()
        pred = logits.argmax(-1)
        for p, g, L in zip(pred, tags, lengths):
            p, g = p[:L].tolist(), g[:L].tolist()
            correct += sum(a == b for a, b in zip(p, g))
            n_tok += L.item()
            ps, gs = spans([TAGS[i] for i in p]), spans([TAGS[i] for i in g])
            tp += len(ps & gs)
            n_pred += len(ps)
            n_gold += len(gs)
    model.train()
    prec = tp / n_pred if n_pred else 0.0
    rec = tp / n_gold if n_gold else 0.0
    f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
    return {"eval_loss": tot_loss / n_tok, "eval_accuracy": correct / n_tok,
            "eval_precision": prec, "eval_recall": rec, "eval_f1": f1}


def main():
    t = make_target()
    model, optimizer = t["model"], t["optimizer"]
    train_loader, val_loader = t["data"], t["val_data"]
    steps_per_epoch = len(train_loader)
    total = steps_per_epoch * EPOCHS
    scheduler = linear_schedule(optimizer, math.ceil(WARMUP_RATIO * total), total)
    print("***** Running training *****")
    print(f"  Num examples = {len(train_loader.dataset)}")
    print(f"  Num Epochs = {EPOCHS}")
    print(f"  Instantaneous batch size = {BATCH_SIZE}")
    print(f"  Total optimization steps = {total}")
    print(f"  Number of trainable parameters = {sum(p.numel() for p in model.parameters())}")
    step, running, t_start = 0, 0.0, time.time()
    for epoch in range(EPOCHS):
        for batch in train_loader:
            loss = loss_fn(model, batch)
            optimizer.zero_grad()
            loss.backward()
            grad_norm = nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            step += 1
            running += loss.item()
            if step % LOGGING_STEPS == 0:
                print({"loss": round(running / LOGGING_STEPS, 4), "grad_norm": round(grad_norm.item(), 4),
                       "learning_rate": scheduler.get_last_lr()[0], "epoch": round(step / steps_per_epoch, 2)})
                running = 0.0
        metrics = {k: round(v, 4) for k, v in evaluate(model, val_loader).items()}
        metrics["epoch"] = float(epoch + 1)
        print(metrics)
    runtime = time.time() - t_start
    print({"train_runtime": round(runtime, 2), "train_samples_per_second": round(len(train_loader.dataset) * EPOCHS / runtime, 1),
           "train_steps_per_second": round(total / runtime, 2), "epoch": float(EPOCHS)})


if __name__ == "__main__":
    main()
