"""BiLSTM token tagger (BIO) for a toy news-style NER task.

Sentences are generated from templates: filler words, trigger words
("mr", "in", "at", ...) that usually precede an entity, and entity names
drawn from per-type gazetteers with some overlap between types.
Padding tags use ignore_index so they never contribute to the loss.
Class weights rebalance the loss because "O" dominates the tag distribution.
"""
import time

import numpy as np
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence

SEED = 7
TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]
TAG2ID = {t: i for i, t in enumerate(TAGS)}
PAD_TAG = -100
N_TRAIN, N_VAL = 2500, 500
BATCH_SIZE = 32
EMB_DIM, HIDDEN = 48, 64
EPOCHS = 6
LR = 3e-3


# ----------------------------------------------------------------------------
# synthetic corpus
# ----------------------------------------------------------------------------
def make_lexicon(rng):
    filler = [f"f{i}" for i in range(250)]
    names = {
        "PER": [f"p{i}" for i in range(60)],
        "LOC": [f"l{i}" for i in range(60)],
        "ORG": [f"o{i}" for i in range(60)],
    }
    # some surface forms are ambiguous between types (e.g. "Jordan", "Washington")
    shared = [f"x{i}" for i in range(20)]
    for k in names:
        names[k] = names[k] + shared
    triggers = {
        "PER": ["mr", "mrs", "dr", "said"],
        "LOC": ["in", "near", "from", "to"],
        "ORG": ["at", "joined", "by", "the"],
    }
    return filler, names, triggers


def generate_sentences(n, rng, lexicon):
    filler, names, triggers = lexicon
    types = list(names)
    sents, tags = [], []
    for _ in range(n):
        length = int(rng.integers(8, 30))
        toks = list(rng.choice(filler, size=length))
        labs = ["O"] * length
        n_ents = int(rng.integers(0, 3))
        for _ in range(n_ents):
            etype = types[int(rng.integers(3))]
            span = int(rng.integers(1, 4))
            start = int(rng.integers(1, max(2, length - span)))
            if any(l != "O" for l in labs[start - 1:start + span + 1]):
                continue
            # trigger word before the entity most of the time; otherwise a random
            # trigger (of any type) so context is only a soft cue
            if rng.random() < 0.75:
                toks[start - 1] = str(rng.choice(triggers[etype]))
            else:
                toks[start - 1] = str(rng.choice(sum(triggers.values(), [])))
            for j in range(span):
                if start + j >= length:
                    break
                toks[start + j] = str(rng.choice(names[etype]))
                labs[start + j] = ("B-" if j == 0 else "I-") + etype
        sents.append(toks)
        tags.append(labs)
    return sents, tags


def build_vocab(sents):
    itos = ["<pad>", "<unk>"] + sorted({w for s in sents for w in s})
    return {w: i for i, w in enumerate(itos)}


def encode(sents, tags, vocab):
    out = []
    for s, t in zip(sents, tags):
        x = torch.tensor([vocab.get(w, 1) for w in s], dtype=torch.long)
        y = torch.tensor([TAG2ID[l] for l in t], dtype=torch.long)
        out.append((x, y))
    return out


def batches(examples, batch_size, shuffle, rng=None):
    order = np.arange(len(examples))
    if shuffle:
        rng.shuffle(order)
    for i in range(0, len(order), batch_size):
        chunk = [examples[j] for j in order[i:i + batch_size]]
        xs, ys = zip(*chunk)
        lengths = torch.tensor([len(x) for x in xs])
        x = pad_sequence(xs, batch_first=True, padding_value=0)
        y = pad_sequence(ys, batch_first=True, padding_value=PAD_TAG)
        yield x, lengths, y


def load_data(seed=SEED):
    rng = np.random.default_rng(seed)
    lexicon = make_lexicon(rng)
    tr_s, tr_t = generate_sentences(N_TRAIN, rng, lexicon)
    va_s, va_t = generate_sentences(N_VAL, rng, lexicon)
    vocab = build_vocab(tr_s)
    return encode(tr_s, tr_t, vocab), encode(va_s, va_t, vocab), vocab


def tag_class_weights(train_examples, num_tags):
    counts = torch.zeros(num_tags)
    for _, y in train_examples:
        counts += torch.bincount(y, minlength=num_tags).float()
    weights = counts.sum() / counts.clamp(min=1)
    return weights * num_tags / weights.sum()


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class BiLSTMTagger(nn.Module):
    def __init__(self, vocab_size, num_tags):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, EMB_DIM, padding_idx=0)
        self.lstm = nn.LSTM(EMB_DIM, HIDDEN, batch_first=True, bidirectional=True)
        self.dropout = nn.Dropout(0.25)
        self.proj = nn.Linear(2 * HIDDEN, num_tags)

    def forward(self, x, lengths):
        emb = self.dropout(self.embedding(x))
        packed = pack_padded_sequence(emb, lengths, batch_first=True, enforce_sorted=False)
        out, _ = self.lstm(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=x.size(1))
        return self.proj(self.dropout(out))


def make_criterion(train_examples):
    weights = tag_class_weights(train_examples, len(TAGS))
    return nn.CrossEntropyLoss(weight=weights, ignore_index=PAD_TAG)


def compute_loss(model, batch, criterion):
    x, lengths, y = batch
    logits = model(x, lengths)
    return criterion(logits.reshape(-1, logits.size(-1)), y.reshape(-1))


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR)


@torch.no_grad()
def evaluate(model, examples, criterion):
    """Token loss plus micro-averaged entity-token precision/recall/F1 (non-O tags)."""
    model.eval()
    loss_sum, n_batches = 0.0, 0
    tp = fp = fn = 0
    correct = total = 0
    for x, lengths, y in batches(examples, 128, shuffle=False):
        logits = model(x, lengths)
        loss_sum += criterion(logits.reshape(-1, logits.size(-1)), y.reshape(-1)).item()
        n_batches += 1
        pred = logits.argmax(-1)
        mask = y != PAD_TAG
        p, g = pred[mask], y[mask]
        correct += (p == g).sum().item()
        total += g.numel()
        tp += ((p == g) & (g != 0)).sum().item()
        fp += ((p != g) & (p != 0)).sum().item()
        fn += ((p != g) & (g != 0)).sum().item()
    model.train()
    prec = tp / max(tp + fp, 1)
    rec = tp / max(tp + fn, 1)
    f1 = 2 * prec * rec / max(prec + rec, 1e-8)
    return loss_sum / n_batches, correct / total, prec, rec, f1


def make_target():
    torch.manual_seed(SEED)
    train_ex, val_ex, vocab = load_data()
    criterion = make_criterion(train_ex)
    rng = np.random.default_rng(SEED)
    data = []
    for i, b in enumerate(batches(train_ex, BATCH_SIZE, shuffle=True, rng=rng)):
        data.append(b)
        if i == 4:
            break
    model = BiLSTMTagger(len(vocab), len(TAGS))
    return {
        "model": model,
        "data": data,
        "loss_fn": lambda m, b: compute_loss(m, b, criterion),
        "make_optimizer": make_optimizer,
        "num_classes": len(TAGS),
        "task": "classification",
    }


def main():
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    train_ex, val_ex, vocab = load_data()
    criterion = make_criterion(train_ex)
    print(f"[data] train={len(train_ex)} val={len(val_ex)} vocab={len(vocab)} tags={TAGS}")
    model = BiLSTMTagger(len(vocab), len(TAGS))
    optimizer = make_optimizer(model.parameters())
    rng = np.random.default_rng(SEED)

    global_step = 0
    t0 = time.time()
    for epoch in range(EPOCHS):
        model.train()
        ep_loss, nb = 0.0, 0
        for batch in batches(train_ex, BATCH_SIZE, shuffle=True, rng=rng):
            optimizer.zero_grad()
            loss = compute_loss(model, batch, criterion)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()
            ep_loss += loss.item()
            nb += 1
            global_step += 1
            if global_step % 25 == 0:
                print(f"[train] epoch {epoch} step {global_step} loss {loss.item():.4f} "
                      f"lr {optimizer.param_groups[0]['lr']:.1e}")
        vl, vacc, vp, vr, vf1 = evaluate(model, val_ex, criterion)
        print(f"[eval] epoch {epoch} train_loss {ep_loss/nb:.4f} val_loss {vl:.4f} "
              f"token_acc {vacc:.4f} ent_prec {vp:.4f} ent_rec {vr:.4f} ent_f1 {vf1:.4f} "
              f"({time.time()-t0:.1f}s)")


if __name__ == "__main__":
    main()
