"""Token-level nesting-depth tagger for code-like expressions.

Each token of an expression such as  f ( x , g ( y ) )  is tagged with the
bracket depth it sits at (clipped to MAX_DEPTH). Expressions have variable
length; batches are padded and padded positions are ignored in the loss.
"""
import random
import time

import numpy as np
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence
from torch.utils.data import DataLoader, Dataset

SEED = 7
MAX_DEPTH = 9
N_TRAIN, N_VAL = 1000, 400
MIN_TOKENS, MAX_TOKENS = 24, 72
BATCH_SIZE = 32
EPOCHS = 18
LR = 1e-3
IGNORE_INDEX = -100

IDENTIFIERS = [chr(c) for c in range(ord("a"), ord("z") + 1)] + ["x1", "x2", "tmp", "idx", "val"]
SPECIALS = ["<pad>", "<unk>"]
PUNCT = ["(", ")", ",", "+", "*", "-"]
ITOS = SPECIALS + PUNCT + IDENTIFIERS
STOI = {t: i for i, t in enumerate(ITOS)}
PAD_IDX = STOI["<pad>"]


def set_seed(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


# ---------------------------------------------------------------- data
def random_expression(rng, target_len):
    """Random bracketed expression, returned as a token list and per-token depth."""
    tokens, depths = [], []
    depth = 0
    while len(tokens) < target_len:
        r = rng.random()
        if r < 0.26 and depth < 12:
            tokens.append(rng.choice(IDENTIFIERS)); depths.append(depth)
            tokens.append("("); depths.append(depth)
            depth += 1
        elif r < 0.42 and depth > 0:
            tokens.append(")"); depth -= 1; depths.append(depth)
        elif r < 0.55:
            tokens.append(rng.choice([",", "+", "*", "-"])); depths.append(depth)
        else:
            tokens.append(rng.choice(IDENTIFIERS)); depths.append(depth)
    while depth > 0:
        tokens.append(")"); depth -= 1; depths.append(depth)
    return tokens, [min(d, MAX_DEPTH) for d in depths]


def build_corpus(n, seed):
    rng = random.Random(seed)
    return [random_expression(rng, rng.randint(MIN_TOKENS, MAX_TOKENS)) for _ in range(n)]


class DepthDataset(Dataset):
    def __init__(self, corpus):
        self.items = [
            (torch.tensor([STOI.get(t, STOI["<unk>"]) for t in toks]), torch.tensor(tags))
            for toks, tags in corpus
        ]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def collate(batch):
    toks, tags = zip(*batch)
    lengths = torch.tensor([len(t) for t in toks])
    toks = pad_sequence(toks, batch_first=True, padding_value=PAD_IDX)
    tags = pad_sequence(tags, batch_first=True, padding_value=IGNORE_INDEX)
    return toks, lengths, tags


def make_loaders():
    train_ds = DepthDataset(build_corpus(N_TRAIN, SEED))
    val_ds = DepthDataset(build_corpus(N_VAL, SEED + 100))
    g = torch.Generator().manual_seed(SEED)
    train_dl = DataLoader(train_ds, batch_size=BATCH_SIZE, shuffle=True, collate_fn=collate, generator=g)
    val_dl = DataLoader(val_ds, batch_size=128, shuffle=False, collate_fn=collate)
    return train_dl, val_dl


# ---------------------------------------------------------------- model
class DepthTagger(nn.Module):
    def __init__(self, vocab_size=len(ITOS), emb_dim=24, hidden=64, num_tags=MAX_DEPTH + 1):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, emb_dim, padding_idx=PAD_IDX)
        self.lstm = nn.LSTM(emb_dim, hidden, batch_first=True)
        self.proj = nn.Linear(hidden, num_tags)

    def forward(self, toks, lengths):
        x = self.embed(toks)
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, _ = self.lstm(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=toks.size(1))
        return self.proj(out)                                  # (B, T, num_tags)


criterion = nn.CrossEntropyLoss(ignore_index=IGNORE_INDEX)


def loss_fn(model, batch):
    toks, lengths, tags = batch
    logits = model(toks, lengths)
    return criterion(logits.reshape(-1, logits.size(-1)), tags.reshape(-1))


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR)


def make_scheduler(optimizer):
    return torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="max", factor=0.5, patience=2)


@torch.no_grad()
def evaluate(model, dl):
    model.eval()
    loss_sum, correct, n = 0.0, 0, 0
    for toks, lengths, tags in dl:
        logits = model(toks, lengths)
        valid = tags != IGNORE_INDEX
        loss_sum += nn.functional.cross_entropy(
            logits[valid], tags[valid], reduction="sum").item()
        correct += (logits.argmax(-1)[valid] == tags[valid]).sum().item()
        n += valid.sum().item()
    model.train()
    return loss_sum / n, correct / n


def train():
    torch.set_num_threads(1)
    set_seed(SEED)
    train_dl, val_dl = make_loaders()
    model = DepthTagger()
    optimizer = make_optimizer(model.parameters())
    scheduler = make_scheduler(optimizer)
    print(f"vocab={len(ITOS)} tags={MAX_DEPTH + 1} train={len(train_dl.dataset)} val={len(val_dl.dataset)} "
          f"params={sum(p.numel() for p in model.parameters())}")
    step = 0
    best_acc = 0.0
    for epoch in range(EPOCHS):
        t0 = time.time()
        for batch in train_dl:
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model, batch)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()
            step += 1
            if step % 20 == 0:
                print(f"step {step:5d} | loss {loss.item():.4f} | lr {optimizer.param_groups[0]['lr']:.2e}")
        val_loss, val_acc = evaluate(model, val_dl)
        scheduler.step(val_acc)
        best_acc = max(best_acc, val_acc)
        print(f"epoch {epoch:2d} | val_loss {val_loss:.4f} | val_tag_acc {val_acc:.4f} | "
              f"best {best_acc:.4f} | {time.time() - t0:.1f}s")
    return model


def make_target():
    set_seed(SEED)
    train_dl, _ = make_loaders()
    it = iter(train_dl)
    return {
        "model": DepthTagger(),
        "data": [next(it) for _ in range(5)],
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "num_classes": MAX_DEPTH + 1,
        "task": "classification",
    }


if __name__ == "__main__":
    t = time.time()
    train()
    print(f"finished in {time.time() - t:.1f}s")
