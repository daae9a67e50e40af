"""Part-of-speech tagging of long documents with an LSTM, trained with SGD.

Each example is a document (5-30 sentences, ~40-300 words) of word ids with one
tag per word. The loss is summed over the words of a document and averaged over
the batch, as in most seq2seq code. Some words are ambiguous ("run", "watch", "light" ... are nouns after a
determiner and verbs after a subject), so the tagger needs context.
Batches are padded with pad_sequence and packed for the GRU.

    python train.py [--epochs 3] [--batch-size 32]
"""
import argparse
import random
import time

import numpy as np
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence
from torch.utils.data import DataLoader, Dataset

TAGS = ["<pad>", "DET", "ADJ", "NOUN", "VERB", "ADV", "PRON", "PREP", "CONJ", "PUNCT"]
TAG_PAD = 0
WORDS = {
    "DET": ["the", "a", "this", "that", "every", "my", "your", "his", "her", "our"],
    "ADJ": ["old", "red", "quiet", "big", "small", "happy", "cold", "strange", "bright", "tired",
            "young", "green", "heavy", "empty", "loud"],
    "NOUN": ["dog", "man", "city", "car", "house", "teacher", "river", "window", "child", "letter",
             "garden", "doctor", "train", "song", "table", "road", "bird", "friend", "door", "idea"],
    "VERB": ["sees", "likes", "opens", "finds", "takes", "loves", "builds", "wants", "sings", "leaves",
             "calls", "reads", "holds", "paints", "breaks"],
    "ADV": ["quickly", "slowly", "often", "never", "today", "again", "quietly", "suddenly"],
    "PRON": ["he", "she", "they", "we", "it", "someone"],
    "PREP": ["near", "in", "under", "with", "behind", "over", "through", "without"],
    "CONJ": ["and", "but", "because", "while"],
    "PUNCT": [".", "!", "?"],
}
# tagged NOUN after a determiner/adjective, VERB after a subject
AMBIGUOUS = ["run", "watch", "light", "play", "walk", "book", "fish", "sound", "ring", "drink"]


def build_vocab():
    words = ["<pad>", "<unk>"]
    for tag in TAGS[1:]:
        words += WORDS[tag]
    words += AMBIGUOUS
    return {w: i for i, w in enumerate(words)}


def noun_phrase(rng):
    out = [(rng.choice(WORDS["DET"]), "DET")]
    for _ in range(rng.choice([0, 0, 1, 1, 2])):
        out.append((rng.choice(WORDS["ADJ"]), "ADJ"))
    noun = rng.choice(AMBIGUOUS) if rng.random() < 0.3 else rng.choice(WORDS["NOUN"])
    out.append((noun, "NOUN"))
    return out


def clause(rng):
    out = [(rng.choice(WORDS["PRON"]), "PRON")] if rng.random() < 0.4 else noun_phrase(rng)
    verb = rng.choice(AMBIGUOUS) if rng.random() < 0.3 else rng.choice(WORDS["VERB"])
    out.append((verb, "VERB"))
    if rng.random() < 0.7:
        out += noun_phrase(rng)
    if rng.random() < 0.3:
        out.append((rng.choice(WORDS["ADV"]), "ADV"))
    if rng.random() < 0.4:
        out.append((rng.choice(WORDS["PREP"]), "PREP"))
        out += noun_phrase(rng)
    return out


def make_paragraphs(n, seed, min_sentences=5, max_sentences=30, label_noise=0.03):
    rng = random.Random(seed)
    data = []
    for _ in range(n):
        tokens = []
        for _ in range(rng.randint(min_sentences, max_sentences)):
            tokens += clause(rng)
            while rng.random() < 0.3:
                tokens.append((rng.choice(WORDS["CONJ"]), "CONJ"))
                tokens += clause(rng)
            tokens.append((rng.choice(WORDS["PUNCT"]), "PUNCT"))
        # a few annotator mistakes, like any real treebank
        tokens = [(w, rng.choice(TAGS[1:]) if rng.random() < label_noise else t) for w, t in tokens]
        data.append(tokens)
    return data


class TaggingDataset(Dataset):
    def __init__(self, paragraphs, vocab):
        tag_idx = {t: i for i, t in enumerate(TAGS)}
        self.words = [torch.tensor([vocab.get(w, 1) for w, _ in p]) for p in paragraphs]
        self.tags = [torch.tensor([tag_idx[t] for _, t in p]) for p in paragraphs]

    def __len__(self):
        return len(self.words)

    def __getitem__(self, i):
        return self.words[i], self.tags[i]


def collate(batch):
    words, tags = zip(*batch)
    lengths = torch.tensor([len(w) for w in words])
    words = pad_sequence(words, batch_first=True, padding_value=0)
    tags = pad_sequence(tags, batch_first=True, padding_value=TAG_PAD)
    return words, lengths, tags


class LSTMTagger(nn.Module):
    def __init__(self, vocab_size, n_tags, emb_dim=32, hidden=64):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, emb_dim, padding_idx=0)
        self.lstm = nn.LSTM(emb_dim, hidden, batch_first=True)
        self.out = nn.Linear(hidden, n_tags)

    def forward(self, words, lengths):
        emb = self.embedding(words)
        packed = pack_padded_sequence(emb, lengths, batch_first=True, enforce_sorted=False)
        out, _ = self.lstm(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=words.size(1))
        return self.out(out)


criterion = nn.CrossEntropyLoss(ignore_index=TAG_PAD, reduction="sum")


def loss_fn(model, batch):
    """Summed over the words of each document, averaged over documents."""
    words, lengths, tags = batch
    logits = model(words, lengths)
    return criterion(logits.reshape(-1, logits.size(-1)), tags.reshape(-1)) / words.size(0)


def token_accuracy(logits, tags):
    mask = tags != TAG_PAD
    correct = ((logits.argmax(-1) == tags) & mask).sum().item()
    return correct, mask.sum().item()


def build(args):
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    vocab = build_vocab()
    train_ds = TaggingDataset(make_paragraphs(args.n_train, seed=args.seed), vocab)
    val_ds = TaggingDataset(make_paragraphs(args.n_val, seed=args.seed + 1), vocab)
    train_loader = DataLoader(train_ds, batch_size=args.batch_size, shuffle=True, collate_fn=collate)
    val_loader = DataLoader(val_ds, batch_size=128, collate_fn=collate)
    model = LSTMTagger(len(vocab), len(TAGS), args.emb_dim, args.hidden)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    return model, optimizer, train_loader, val_loader, vocab


def parse_args(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.3)
    p.add_argument("--emb-dim", type=int, default=32)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--n-train", type=int, default=600)
    p.add_argument("--n-val", type=int, default=150)
    p.add_argument("--log-every", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def make_target():
    args = parse_args([])
    model, optimizer, train_loader, _, _ = build(args)
    it = iter(train_loader)
    data = [next(it) for _ in range(4)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": optimizer,
            "make_optimizer": lambda params: torch.optim.SGD(params, lr=args.lr, momentum=0.9),
            "num_classes": len(TAGS), "task": "classification"}


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    total_loss, n_docs, correct, total = 0.0, 0, 0, 0
    for batch in loader:
        words, lengths, tags = batch
        logits = model(words, lengths)
        total_loss += criterion(logits.reshape(-1, logits.size(-1)), tags.reshape(-1)).item()
        n_docs += words.size(0)
        c, t = token_accuracy(logits, tags)
        correct, total = correct + c, total + t
    model.train()
    return total_loss / n_docs, correct / total


def main():
    args = parse_args()
    print(args)
    model, optimizer, train_loader, val_loader, vocab = build(args)
    n_tokens = sum(len(w) for w in train_loader.dataset.words)
    print(f"vocab {len(vocab)} | tags {len(TAGS)} | train {len(train_loader.dataset)} documents "
          f"({n_tokens} tokens) | val {len(val_loader.dataset)} | params {sum(p.numel() for p in model.parameters()):,}")
    for epoch in range(1, args.epochs + 1):
        t0 = time.time()
        run_loss, run_batches, run_correct, run_total = 0.0, 0, 0, 0
        for i, (words, lengths, tags) in enumerate(train_loader, 1):
            logits = model(words, lengths)
            loss = criterion(logits.reshape(-1, logits.size(-1)), tags.reshape(-1)) / words.size(0)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
            optimizer.step()
            run_loss += loss.item()
            run_batches += 1
            c, t = token_accuracy(logits, tags)
            run_correct, run_total = run_correct + c, run_total + t
            if i % args.log_every == 0 or i == len(train_loader):
                print(f"epoch {epoch} | batch {i}/{len(train_loader)} | loss {run_loss / run_batches:.4f} | acc {run_correct / run_total:.3f}")
                run_loss, run_batches, run_correct, run_total = 0.0, 0, 0, 0
        val_loss, val_acc = evaluate(model, val_loader)
        print(f"epoch {epoch} | val_loss {val_loss:.4f} | val_acc {val_acc:.3f} | {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
