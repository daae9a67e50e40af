"""Intent classifier for customer-support tickets.

Embedding -> single-layer GRU (packed sequences) -> linear head.
Micro-batches of 16 with 4-step gradient accumulation, bf16 autocast on CPU.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_sequence
from torch.utils.data import DataLoader, Dataset

SEED = 1337
VOCAB_SIZE = 600
PAD_ID = 0
NUM_CLASSES = 5
CLASS_NAMES = ["billing", "shipping", "account_access", "refund", "bug_report"]
N_TRAIN = 3000
N_VAL = 800
MIN_LEN, MAX_LEN = 8, 32

EMBED_DIM = 32
HIDDEN_DIM = 48
DROPOUT = 0.2

MICRO_BATCH_SIZE = 32
GRAD_ACCUM_STEPS = 2
EPOCHS = 5
LR = 3e-3
WEIGHT_DECAY = 0.01
WARMUP_STEPS = 20
GRAD_CLIP = 1.0
LOG_EVERY = 20  # optimizer steps

torch.set_num_threads(1)


# ----------------------------------------------------------------------------
# synthetic ticket corpus
# ----------------------------------------------------------------------------
def generate_tickets(n, rng):
    """Token-id sequences: Zipfian filler words plus a few intent keywords."""
    n_special = 4  # 0 pad, 1 bos, 2 eos, 3 unk
    n_keywords_per_class = 24
    kw_start = n_special
    kw_end = kw_start + NUM_CLASSES * n_keywords_per_class
    filler_ids = np.arange(kw_end, VOCAB_SIZE)
    ranks = np.arange(1, len(filler_ids) + 1)
    filler_p = 1.0 / ranks ** 1.05
    filler_p /= filler_p.sum()

    seqs, labels = [], []
    for _ in range(n):
        label = int(rng.integers(NUM_CLASSES))
        length = int(rng.integers(MIN_LEN, MAX_LEN + 1))
        toks = rng.choice(filler_ids, size=length, p=filler_p)
        # 2-4 keywords from the ticket's own intent
        n_kw = int(rng.integers(2, 5))
        own = kw_start + label * n_keywords_per_class + rng.integers(n_keywords_per_class, size=n_kw)
        pos = rng.choice(np.arange(1, length - 1), size=n_kw, replace=False)
        toks[pos] = own
        # sometimes a distractor keyword from another intent
        if rng.random() < 0.5:
            other = int((label + rng.integers(1, NUM_CLASSES)) % NUM_CLASSES)
            p = int(rng.integers(1, length - 1))
            if p not in pos:
                toks[p] = kw_start + other * n_keywords_per_class + rng.integers(n_keywords_per_class)
        toks[0], toks[-1] = 1, 2
        # a little annotation noise
        if rng.random() < 0.04:
            label = int(rng.integers(NUM_CLASSES))
        seqs.append(toks.astype(np.int64))
        labels.append(label)
    return seqs, np.array(labels, dtype=np.int64)


class TicketDataset(Dataset):
    def __init__(self, seqs, labels):
        self.seqs = seqs
        self.labels = labels

    def __len__(self):
        return len(self.seqs)

    def __getitem__(self, idx):
        return self.seqs[idx], int(self.labels[idx])


def collate_batch(batch):
    tokens = [torch.as_tensor(seq, dtype=torch.long) for seq, _ in batch]
    labels = torch.tensor([label for _, label in batch], dtype=torch.long)
    tokens.sort(key=len, reverse=True)
    lengths = torch.tensor([len(t) for t in tokens], dtype=torch.long)
    padded = pad_sequence(tokens, batch_first=True, padding_value=PAD_ID)
    return padded, lengths, labels


def build_dataloaders():
    rng = np.random.default_rng(SEED)
    seqs, labels = generate_tickets(N_TRAIN + N_VAL, rng)
    train_ds = TicketDataset(seqs[:N_TRAIN], labels[:N_TRAIN])
    val_ds = TicketDataset(seqs[N_TRAIN:], labels[N_TRAIN:])
    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(train_ds, batch_size=MICRO_BATCH_SIZE, shuffle=True,
                              collate_fn=collate_batch, drop_last=True, generator=g)
    val_loader = DataLoader(val_ds, batch_size=64, shuffle=False, collate_fn=collate_batch)
    return train_loader, val_loader


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class TicketGRU(nn.Module):
    def __init__(self, vocab_size, embed_dim, hidden_dim, num_classes, dropout):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, embed_dim, padding_idx=PAD_ID)
        self.gru = nn.GRU(embed_dim, hidden_dim, batch_first=True)
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(hidden_dim, num_classes)

    def forward(self, tokens, lengths):
        x = self.embed(tokens)
        packed = pack_padded_sequence(x, lengths, batch_first=True)
        _, h_n = self.gru(packed)
        return self.head(self.drop(h_n[-1]))


def build_model():
    torch.manual_seed(SEED)
    return TicketGRU(VOCAB_SIZE, EMBED_DIM, HIDDEN_DIM, NUM_CLASSES, DROPOUT)


def build_optimizer(params):
    return torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY, betas=(0.9, 0.98))


def lr_lambda_factory(total_steps):
    def lr_lambda(step):
        if step < WARMUP_STEPS:
            return (step + 1) / WARMUP_STEPS
        progress = (step - WARMUP_STEPS) / max(1, total_steps - WARMUP_STEPS)
        return 0.05 + 0.95 * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
    return lr_lambda


def compute_loss(model, batch):
    tokens, lengths, labels = batch
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(tokens, lengths)
    return F.cross_entropy(logits.float(), labels)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    total_loss, correct, count = 0.0, 0, 0
    for tokens, lengths, labels in loader:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(tokens, lengths)
        logits = logits.float()
        total_loss += F.cross_entropy(logits, labels, reduction="sum").item()
        correct += (logits.argmax(-1) == labels).sum().item()
        count += labels.numel()
    model.train()
    return total_loss / count, correct / count


def make_target():
    train_loader, val_loader = build_dataloaders()
    model = build_model()
    optimizer = build_optimizer(model.parameters())
    return {
        "model": model,
        "data": train_loader,
        "val_data": val_loader,
        "loss_fn": compute_loss,
        "optimizer": optimizer,
        "make_optimizer": build_optimizer,
        "num_classes": NUM_CLASSES,
        "task": "classification",
        "grad_accum_steps": GRAD_ACCUM_STEPS,
    }


def main():
    train_loader, val_loader = build_dataloaders()
    model = build_model()
    optimizer = build_optimizer(model.parameters())
    steps_per_epoch = len(train_loader) // GRAD_ACCUM_STEPS
    total_steps = steps_per_epoch * EPOCHS
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda_factory(total_steps))

    n_params = sum(p.numel() for p in model.parameters())
    print(f"train tickets: {len(train_loader.dataset)} | val tickets: {len(val_loader.dataset)} | classes: {CLASS_NAMES}")
    print(f"model params: {n_params / 1e3:.1f}K | micro_batch={MICRO_BATCH_SIZE} accum={GRAD_ACCUM_STEPS} "
          f"effective_batch={MICRO_BATCH_SIZE * GRAD_ACCUM_STEPS} | opt steps/epoch={steps_per_epoch}")

    val_loss, val_acc = evaluate(model, val_loader)
    print(f"epoch 0 | val_loss {val_loss:.4f} | val_acc {val_acc:.4f}")

    model.train()
    global_step = 0
    t0 = time.time()
    t_start = t0
    for epoch in range(1, EPOCHS + 1):
        optimizer.zero_grad(set_to_none=True)
        running_loss, running_n = 0.0, 0
        for micro_step, batch in enumerate(train_loader):
            loss = compute_loss(model, batch)
            (loss / GRAD_ACCUM_STEPS).backward()
            running_loss += loss.item()
            running_n += 1

            if (micro_step + 1) % GRAD_ACCUM_STEPS != 0:
                continue
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            global_step += 1

            if global_step % LOG_EVERY == 0:
                dt = time.time() - t0
                t0 = time.time()
                print(f"epoch {epoch} | step {global_step:4d}/{total_steps} | loss {running_loss / running_n:.4f} "
                      f"| grad_norm {grad_norm:.3f} | lr {scheduler.get_last_lr()[0]:.2e} | {dt * 1000 / LOG_EVERY:.0f}ms/step")
                running_loss, running_n = 0.0, 0

        val_loss, val_acc = evaluate(model, val_loader)
        print(f"epoch {epoch} | val_loss {val_loss:.4f} | val_acc {val_acc:.4f}")

    print(f"done in {time.time() - t_start:.1f}s | final val_loss {val_loss:.4f} | final val_acc {val_acc:.4f}")


if __name__ == "__main__":
    main()
