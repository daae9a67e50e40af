"""Review polarity classifier: word-level LSTM over packed, variable-length
reviews, AdamW with linear warmup/decay. Logs in the HF Trainer format."""
import math
import random
import time

import numpy as np
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_sequence

torch.set_num_threads(1)

SEED = 7
BATCH_SIZE = 32
EPOCHS = 8
LR = 3e-3
WEIGHT_DECAY = 0.01
WARMUP_RATIO = 0.1
LOG_EVERY = 40

POSITIVE = ["good", "great", "excellent", "tasty", "friendly", "fresh", "lovely", "amazing", "perfect", "fast"]
NEGATIVE = ["bad", "awful", "bland", "rude", "stale", "slow", "terrible", "cold", "greasy", "overpriced"]
NEGATORS = ["not", "never", "hardly"]
FILLER = ["the", "food", "was", "service", "staff", "and", "place", "really", "we", "ordered", "pizza",
          "pasta", "waiter", "table", "it", "is", "a", "bit", "very", "quite", "our", "dessert", "drinks",
          "music", "price", "portion", "i", "think", "overall", "also"]


# ----------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------
def generate_review(rng):
    """Returns (text, label). Polarity words count +-1, a negator up to two
    tokens before a polarity word flips it."""
    while True:
        n = rng.randint(6, 30)
        words, score, flip_until = [], 0, -1
        for i in range(n):
            r = rng.random()
            if r < 0.12:
                words.append(rng.choice(NEGATORS))
                flip_until = i + 2
            elif r < 0.30:
                pol = 1 if rng.random() < 0.5 else -1
                words.append(rng.choice(POSITIVE if pol > 0 else NEGATIVE))
                score += -pol if i <= flip_until else pol
            else:
                words.append(rng.choice(FILLER))
        if score != 0:
            return " ".join(words), int(score > 0)


def make_corpus(n, seed):
    rng = random.Random(seed)
    return [generate_review(rng) for _ in range(n)]


PAD, UNK = "<pad>", "<unk>"


def build_vocab(texts, min_freq=2):
    counts = {}
    for t in texts:
        for w in t.split():
            counts[w] = counts.get(w, 0) + 1
    itos = [PAD, UNK] + sorted(w for w, c in counts.items() if c >= min_freq)
    return {w: i for i, w in enumerate(itos)}


def encode(text, vocab):
    return torch.tensor([vocab.get(w, vocab[UNK]) for w in text.split()], dtype=torch.long)


def collate(examples, vocab):
    ids = [encode(t, vocab) for t, _ in examples]
    lengths = torch.tensor([len(x) for x in ids])
    tokens = pad_sequence(ids, batch_first=True, padding_value=vocab[PAD])
    labels = torch.tensor([y for _, y in examples], dtype=torch.float)
    return {"input_ids": tokens, "lengths": lengths, "labels": labels}


def batches(corpus, vocab, batch_size, shuffle, rng=None):
    order = list(range(len(corpus)))
    if shuffle:
        rng.shuffle(order)
    for i in range(0, len(order), batch_size):
        yield collate([corpus[j] for j in order[i:i + batch_size]], vocab)


def load_data():
    train = make_corpus(3000, SEED)
    val = make_corpus(600, SEED + 100)
    vocab = build_vocab([t for t, _ in train])
    return train, val, vocab


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class PolarityLSTM(nn.Module):
    def __init__(self, vocab_size, emb_dim=32, hidden=64, dropout=0.1):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, emb_dim, padding_idx=0)
        self.encoder = nn.LSTM(emb_dim, hidden, batch_first=True)
        self.norm = nn.LayerNorm(hidden)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(hidden, 1)

    def forward(self, input_ids, lengths):
        x = self.embed(input_ids)
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        _, (h_n, _) = self.encoder(packed)
        h = self.dropout(self.norm(h_n[-1]))
        return self.classifier(h).squeeze(-1)


def loss_fn(model, batch):
    logits = model(batch["input_ids"], batch["lengths"])
    return nn.functional.binary_cross_entropy_with_logits(logits, batch["labels"])


def param_groups(named_params, weight_decay):
    # weight decay on matrices only; biases and norm weights are left alone
    named_params = list(named_params)
    decay = [p for n, p in named_params if n.endswith(".weight") and "norm" not in n]
    no_decay = [p for n, p in named_params if n.endswith(".bias") or "norm" in n]
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def make_optimizer(named_params):
    return torch.optim.AdamW(param_groups(named_params, WEIGHT_DECAY), lr=LR, betas=(0.9, 0.999))


def linear_warmup_decay(optimizer, warmup_steps, total_steps):
    def lr_lambda(step):
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)


def make_target():
    torch.manual_seed(SEED)
    train, _, vocab = load_data()
    rng = random.Random(SEED)
    data = []
    for i, b in enumerate(batches(train, vocab, BATCH_SIZE, shuffle=True, rng=rng)):
        data.append(b)
        if i == 5:
            break
    model = PolarityLSTM(len(vocab))
    return {
        "model": model,
        "data": data,
        "loss_fn": loss_fn,
        # the training loop passes model.named_parameters(); accept a plain
        # iterable of tensors as well
        "make_optimizer": lambda params: make_optimizer(_name_params(model, params)),
        "num_classes": 2,
        "task": "classification",
    }


def _name_params(model, params):
    params = list(params)
    if params and isinstance(params[0], tuple):
        return params
    by_id = {id(p): n for n, p in model.named_parameters()}
    return [(by_id.get(id(p), f"param{i}.weight"), p) for i, p in enumerate(params)]


@torch.no_grad()
def evaluate(model, corpus, vocab):
    model.eval()
    loss_sum, correct, n = 0.0, 0, 0
    for b in batches(corpus, vocab, 200, shuffle=False):
        logits = model(b["input_ids"], b["lengths"])
        loss_sum += nn.functional.binary_cross_entropy_with_logits(logits, b["labels"], reduction="sum").item()
        correct += ((logits > 0).float() == b["labels"]).sum().item()
        n += len(b["labels"])
    model.train()
    return loss_sum / n, correct / n


def main():
    random.seed(SEED)
    np.random.seed(SEED)
    torch.manual_seed(SEED)

    train, val, vocab = load_data()
    model = PolarityLSTM(len(vocab))
    optimizer = make_optimizer(model.named_parameters())
    steps_per_epoch = math.ceil(len(train) / BATCH_SIZE)
    total_steps = EPOCHS * steps_per_epoch
    scheduler = linear_warmup_decay(optimizer, int(WARMUP_RATIO * total_steps), total_steps)

    print("***** Running training *****")
    print(f"  Num examples = {len(train)}")
    print(f"  Num Epochs = {EPOCHS}")
    print(f"  Vocab size = {len(vocab)}")
    print(f"  Instantaneous batch size = {BATCH_SIZE}")
    print(f"  Total optimization steps = {total_steps}")
    print(f"  Number of trainable parameters = {sum(p.numel() for p in model.parameters() if p.requires_grad):,}")

    rng = random.Random(SEED)
    step, t_start = 0, time.time()
    window = []
    model.train()
    for epoch in range(EPOCHS):
        for b in batches(train, vocab, BATCH_SIZE, shuffle=True, rng=rng):
            loss = loss_fn(model, b)
            loss.backward()
            grad_norm = nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            step += 1
            window.append(loss.item())
            if step % LOG_EVERY == 0:
                print({"loss": round(float(np.mean(window)), 4), "grad_norm": round(grad_norm.item(), 4),
                       "learning_rate": float(f"{scheduler.get_last_lr()[0]:.4e}"),
                       "epoch": round(step / steps_per_epoch, 2)})
                window = []
        val_loss, val_acc = evaluate(model, val, vocab)
        print({"eval_loss": round(val_loss, 4), "eval_accuracy": round(val_acc, 4), "epoch": float(epoch + 1)})
    runtime = time.time() - t_start
    print({"train_runtime": round(runtime, 2), "train_steps_per_second": round(step / runtime, 3),
           "epoch": float(EPOCHS)})


if __name__ == "__main__":
    main()
