"""BiLSTM BIO tagger for entity extraction from support-ticket text.

Sentences are token-id sequences (synthetic here) with BIO tags for three
entity types. Batches are padded per batch; padded label positions are set to
-100 and ignored by the loss. Logging mimics the HF Trainer dict lines.
"""
import math
import random
import time

import numpy as np
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence
from torch.utils.data import DataLoader, Dataset

SEED = 2024
PAD_ID = 0
IGNORE = -100
TAGS = ["O", "B-PER", "I-PER", "B-PROD", "I-PROD", "B-LOC", "I-LOC"]
TAG2ID = {t: i for i, t in enumerate(TAGS)}
ENT_TYPES = ["PER", "PROD", "LOC"]

VOCAB_SIZE = 400
# id ranges of the synthetic lexicon
TRIGGERS = {"PER": [1, 2, 3], "PROD": [4, 5, 6], "LOC": [7, 8, 9]}
ENT_POOLS = {"PER": range(10, 70), "PROD": range(55, 120), "LOC": range(105, 160)}  # overlapping pools
FILLER = range(160, VOCAB_SIZE)

EMBED_DIM = 48
HIDDEN_DIM = 48
DROPOUT = 0.4
BATCH_SIZE = 32
EPOCHS = 6
LR = 3e-3
WARMUP_STEPS = 30
LOG_STEPS = 40

torch.set_num_threads(1)


def set_seed(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


# ----------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------
def generate_sentences(n, seed):
    rng = np.random.default_rng(seed)
    sents, tags = [], []
    for _ in range(n):
        toks, labs = [], []
        n_chunks = int(rng.integers(2, 7))
        for _ in range(n_chunks):
            # filler run
            k = int(rng.integers(1, 6))
            toks += list(rng.choice(FILLER, size=k))
            labs += [TAG2ID["O"]] * k
            if rng.random() < 0.45:
                etype = ENT_TYPES[int(rng.integers(3))]
                # the trigger word is usually, but not always, present
                if rng.random() < 0.8:
                    toks.append(int(rng.choice(TRIGGERS[etype])))
                    labs.append(TAG2ID["O"])
                span = int(rng.integers(1, 4))
                toks += list(rng.choice(ENT_POOLS[etype], size=span))
                labs += [TAG2ID[f"B-{etype}"]] + [TAG2ID[f"I-{etype}"]] * (span - 1)
        sents.append(np.asarray(toks, dtype=np.int64))
        tags.append(np.asarray(labs, dtype=np.int64))
    return sents, tags


class TaggingDataset(Dataset):
    def __init__(self, sents, tags):
        self.sents, self.tags = sents, tags

    def __len__(self):
        return len(self.sents)

    def __getitem__(self, i):
        return torch.from_numpy(self.sents[i]), torch.from_numpy(self.tags[i])


def collate_tagging(items):
    toks, labs = zip(*items)
    return {
        "input_ids": pad_sequence(toks, batch_first=True, padding_value=PAD_ID),
        "labels": pad_sequence(labs, batch_first=True, padding_value=IGNORE),
        "lengths": torch.tensor([len(t) for t in toks], dtype=torch.long),
    }


def build_loaders():
    tr = generate_sentences(2000, SEED)
    va = generate_sentences(500, SEED + 1)
    g = torch.Generator().manual_seed(SEED)
    train_dl = DataLoader(TaggingDataset(*tr), batch_size=BATCH_SIZE, shuffle=True,
                          collate_fn=collate_tagging, generator=g)
    val_dl = DataLoader(TaggingDataset(*va), batch_size=250, shuffle=False, collate_fn=collate_tagging)
    return train_dl, val_dl


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class BiLSTMTagger(nn.Module):
    def __init__(self, vocab_size, embed_dim, hidden_dim, num_tags, dropout):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=PAD_ID)
        self.emb_dropout = nn.Dropout(dropout)
        self.lstm = nn.LSTM(embed_dim, hidden_dim, batch_first=True, bidirectional=True)
        self.out_dropout = nn.Dropout(dropout)
        self.proj = nn.Linear(2 * hidden_dim, num_tags)

    def forward(self, input_ids, lengths):
        emb = self.emb_dropout(self.embedding(input_ids))
        packed = pack_padded_sequence(emb, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, _ = self.lstm(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=input_ids.size(1))
        return self.proj(self.out_dropout(out))  # (B, T, num_tags)


loss_fct = nn.CrossEntropyLoss(ignore_index=IGNORE)


def compute_loss(model, batch):
    logits = model(batch["input_ids"], batch["lengths"])
    return loss_fct(logits.reshape(-1, logits.size(-1)), batch["labels"].reshape(-1))


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=LR, weight_decay=0.01)


def build_model():
    return BiLSTMTagger(VOCAB_SIZE, EMBED_DIM, HIDDEN_DIM, len(TAGS), DROPOUT)


def extract_spans(tag_ids):
    spans, start, etype = set(), None, None
    for i, t in enumerate(list(tag_ids) + [TAG2ID["O"]]):
        name = TAGS[t]
        if start is not None and not (name.startswith("I-") and name[2:] == etype):
            spans.add((start, i, etype))
            start, etype = None, None
        if name.startswith("B-") or (name.startswith("I-") and start is None):
            start, etype = i, name[2:]
    return spans


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    tot_loss, n_batches, correct, n_tok = 0.0, 0, 0, 0
    tp = fp = fn = 0
    for batch in loader:
        logits = model(batch["input_ids"], batch["lengths"])
        tot_loss += loss_fct(logits.reshape(-1, logits.size(-1)), batch["labels"].reshape(-1)).item()
        n_batches += 1
        pred = logits.argmax(-1)
        mask = batch["labels"] != IGNORE
        correct += (pred[mask] == batch["labels"][mask]).sum().item()
        n_tok += mask.sum().item()
        for p, g, L in zip(pred, batch["labels"], batch["lengths"]):
            ps, gs = extract_spans(p[:L].tolist()), extract_spans(g[:L].tolist())
            tp += len(ps & gs)
            fp += len(ps - gs)
            fn += len(gs - ps)
    model.train()
    prec = tp / max(tp + fp, 1)
    rec = tp / max(tp + fn, 1)
    f1 = 2 * prec * rec / max(prec + rec, 1e-8)
    return {"eval_loss": tot_loss / n_batches, "eval_token_accuracy": correct / n_tok,
            "eval_precision": prec, "eval_recall": rec, "eval_f1": f1}


def make_target():
    set_seed(SEED)
    train_dl, _ = build_loaders()
    it = iter(train_dl)
    data = [next(it) for _ in range(5)]
    return {
        "model": build_model(),
        "data": data,
        "loss_fn": compute_loss,
        "make_optimizer": make_optimizer,
        "num_classes": len(TAGS),
        "task": "classification",
    }


def main():
    set_seed(SEED)
    train_dl, val_dl = build_loaders()
    model = build_model()
    optimizer = make_optimizer(model.parameters())
    total_steps = EPOCHS * len(train_dl)
    # linear warmup then linear decay, stepped once per optimizer step
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda s: min((s + 1) / WARMUP_STEPS, max(0.0, (total_steps - s) / (total_steps - WARMUP_STEPS))),
    )
    print("***** Running training *****")
    print(f"  Num examples = {len(train_dl.dataset)}")
    print(f"  Num Epochs = {EPOCHS}")
    print(f"  Instantaneous batch size = {BATCH_SIZE}")
    print(f"  Total optimization steps = {total_steps}")
    print(f"  Number of trainable parameters = {sum(p.numel() for p in model.parameters())}")

    step, running, n_run = 0, 0.0, 0
    t_start = time.time()
    for epoch in range(EPOCHS):
        model.train()
        for batch in train_dl:
            loss = compute_loss(model, batch)
            optimizer.zero_grad()
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            step += 1
            running += loss.item()
            n_run += 1
            if step % LOG_STEPS == 0:
                print({"loss": round(running / n_run, 4), "grad_norm": round(grad_norm.item(), 4),
                       "learning_rate": scheduler.get_last_lr()[0],
                       "epoch": round(step / len(train_dl), 2)})
                running, n_run = 0.0, 0
        metrics = {k: round(v, 4) for k, v in evaluate(model, val_dl).items()}
        metrics["epoch"] = float(epoch + 1)
        print(metrics)
    runtime = time.time() - t_start
    print({"train_runtime": round(runtime, 2), "train_steps_per_second": round(step / runtime, 3),
           "epoch": float(EPOCHS)})


if __name__ == "__main__":
    main()
