"""Delayed-recall probe: can the encoder carry a marker across a long, noisy gap?

Every sequence starts with a marker token (one of N_KEYS), followed by a
variable-length stretch of distractor tokens and an end-of-query token. The
target is the marker seen at t=0. Sequences are right-padded and packed with
pack_padded_sequence, so the final hidden state is taken at each sequence's
true end. Logging imitates the HF Trainer dict lines.
"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_sequence

PAD, QUERY = 0, 1
N_KEYS = 4
KEY_OFFSET = 2                  # marker ids 2..5
DISTRACTOR_OFFSET = KEY_OFFSET + N_KEYS


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--n_distractors", type=int, default=16)
    p.add_argument("--min_gap", type=int, default=8)
    p.add_argument("--max_gap", type=int, default=20)
    p.add_argument("--train_size", type=int, default=2048)
    p.add_argument("--eval_size", type=int, default=512)
    p.add_argument("--per_device_train_batch_size", type=int, default=64)
    p.add_argument("--num_train_epochs", type=int, default=8)
    p.add_argument("--learning_rate", type=float, default=3e-3)
    p.add_argument("--warmup_ratio", type=float, default=0.05)
    p.add_argument("--max_grad_norm", type=float, default=1.0)
    p.add_argument("--logging_steps", type=int, default=16)
    p.add_argument("--hidden_size", type=int, default=64)
    p.add_argument("--embed_dim", type=int, default=16)
    p.add_argument("--seed", type=int, default=42)
    return p.parse_known_args()[0]


def vocab_size(args):
    return DISTRACTOR_OFFSET + args.n_distractors


def make_split(n, args, g):
    keys = torch.randint(0, N_KEYS, (n,), generator=g)
    gaps = torch.randint(args.min_gap, args.max_gap + 1, (n,), generator=g)
    seqs = []
    for k, gap in zip(keys.tolist(), gaps.tolist()):
        noise = torch.randint(DISTRACTOR_OFFSET, vocab_size(args), (gap,), generator=g)
        seqs.append(torch.cat([torch.tensor([KEY_OFFSET + k]), noise, torch.tensor([QUERY])]))
    return seqs, keys


def batches(seqs, labels, batch_size, shuffle, g=None):
    idx = torch.randperm(len(seqs), generator=g) if shuffle else torch.arange(len(seqs))
    for s in range(0, len(seqs), batch_size):
        b = idx[s:s + batch_size].tolist()
        chunk = [seqs[i] for i in b]
        lengths = torch.tensor([len(x) for x in chunk])
        yield {
            "input_ids": pad_sequence(chunk, batch_first=True, padding_value=PAD),
            "lengths": lengths,
            "labels": labels[b],
        }


class RecallGRU(nn.Module):
    def __init__(self, vocab, embed_dim, hidden, n_out):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed_dim, padding_idx=PAD)
        self.rnn = nn.GRU(embed_dim, hidden, batch_first=True)
        self.head = nn.Linear(hidden, n_out)

    def forward(self, input_ids, lengths):
        x = self.embed(input_ids)
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        _, h_n = self.rnn(packed)          # h_n is un-sorted back to batch order
        return self.head(h_n[-1])


def loss_fn(model, batch):
    logits = model(batch["input_ids"], batch["lengths"])
    return F.cross_entropy(logits, batch["labels"])


def build(args):
    torch.manual_seed(args.seed)
    g = torch.Generator().manual_seed(args.seed)
    train = make_split(args.train_size, args, g)
    evals = make_split(args.eval_size, args, g)
    model = RecallGRU(vocab_size(args), args.embed_dim, args.hidden_size, N_KEYS)
    return model, train, evals


def make_optimizer(params, lr=None):
    args = parse_args()
    return torch.optim.AdamW(params, lr=lr or args.learning_rate, weight_decay=0.0)


def make_target():
    args = parse_args()
    model, (xs, ys), _ = build(args)
    g = torch.Generator().manual_seed(args.seed)
    data = []
    for b in batches(xs, ys, args.per_device_train_batch_size, True, g):
        data.append(b)
        if len(data) == 4:
            break
    return {
        "model": model,
        "batch": data[0],
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "num_classes": N_KEYS,
        "task": "classification",
    }


@torch.no_grad()
def evaluate(model, seqs, labels, bs=256):
    model.eval()
    n, correct, loss = 0, 0, 0.0
    for b in batches(seqs, labels, bs, False):
        logits = model(b["input_ids"], b["lengths"])
        loss += F.cross_entropy(logits, b["labels"], reduction="sum").item()
        correct += (logits.argmax(-1) == b["labels"]).sum().item()
        n += len(b["labels"])
    model.train()
    return {"eval_loss": round(loss / n, 4), "eval_accuracy": round(correct / n, 4)}


def main():
    args = parse_args()
    model, (xs, ys), (ex, ey) = build(args)
    opt = make_optimizer(model.parameters())
    steps_per_epoch = math.ceil(len(xs) / args.per_device_train_batch_size)
    total = steps_per_epoch * args.num_train_epochs
    warmup = int(args.warmup_ratio * total)

    def lr_lambda(step):
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total - step) / max(1, total - warmup))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda)
    g = torch.Generator().manual_seed(args.seed)
    print("***** Running training *****")
    print(f"  Num examples = {len(xs)}")
    print(f"  Num Epochs = {args.num_train_epochs}")
    print(f"  Instantaneous batch size per device = {args.per_device_train_batch_size}")
    print(f"  Total optimization steps = {total}")
    print(f"  Number of trainable parameters = {sum(p.numel() for p in model.parameters())}")

    step, t_start = 0, time.time()
    running, running_n = 0.0, 0
    for epoch in range(args.num_train_epochs):
        for batch in batches(xs, ys, args.per_device_train_batch_size, True, g):
            loss = loss_fn(model, batch)
            loss.backward()
            gn = nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
            opt.step()
            sched.step()
            opt.zero_grad()
            step += 1
            running += loss.item()
            running_n += 1
            if step % args.logging_steps == 0:
                print({"loss": round(running / running_n, 4), "grad_norm": round(float(gn), 4),
                       "learning_rate": float(f"{sched.get_last_lr()[0]:.3e}"),
                       "epoch": round(step / steps_per_epoch, 2)})
                running, running_n = 0.0, 0
        metrics = evaluate(model, ex, ey)
        metrics["epoch"] = float(epoch + 1)
        print(metrics)
    runtime = time.time() - t_start
    print({"train_runtime": round(runtime, 2), "train_samples_per_second": round(len(xs) * args.num_train_epochs / runtime, 2),
           "train_steps_per_second": round(total / runtime, 3), "epoch": float(args.num_train_epochs)})


if __name__ == "__main__":
    main()
