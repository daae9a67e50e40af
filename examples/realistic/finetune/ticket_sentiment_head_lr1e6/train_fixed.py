"""Fine-tune a small pretrained ticket encoder for customer sentiment.

backbone.pt is the 2-layer transformer encoder of the support team's routing
model (pretrained on ~20k historical tickets with queue + CSAT labels, see
pretrain.py). Here we keep the embeddings and the first block frozen, fine-tune
the top block and train a new classification head on 1.6k labeled tickets
(negative / positive), AdamW with linear warmup and decay.
"""
import math
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))

# ------------------------------------------------------------------ corpus ---
SPECIAL = ["[PAD]", "[CLS]", "[MASK]", "[UNK]"]
TOPICS = {
    "billing": "invoice charge refund payment card billed plan subscription receipt price".split(),
    "login": "password login account locked reset email verification code username session".split(),
    "shipping": "package delivery courier tracking shipped address parcel arrived box warehouse".split(),
    "app": "app crash update screen button android iphone version notification sync".split(),
    "network": "wifi router signal speed connection outage modem cable latency bandwidth".split(),
}
NEG = "broken terrible annoyed unacceptable useless frustrated worst failed angry disappointed awful slow".split()
POS = "thanks great quick helpful love perfect resolved appreciate excellent smooth happy awesome".split()
FILLER = ("the a my i it is was to and of on for with this that your we you not have has "
          "please can could would since today yesterday again still just now also but").split()
VOCAB = SPECIAL + sorted({w for ws in TOPICS.values() for w in ws}) + NEG + POS + FILLER
STOI = {w: i for i, w in enumerate(VOCAB)}
PAD, CLS, MASK = 0, 1, 2
SEQ_LEN = 24


def sample_ticket(rng):
    topic = rng.integers(len(TOPICS))
    words = list(TOPICS.values())[topic]
    label = int(rng.integers(2))  # 0 negative, 1 positive
    n = int(rng.integers(10, SEQ_LEN - 1))
    toks = []
    for _ in range(n):
        u = rng.random()
        if u < 0.35:
            toks.append(words[rng.integers(len(words))])
        elif u < 0.50:
            bank = (NEG, POS)[label] if rng.random() < 0.8 else (NEG, POS)[1 - label]
            toks.append(bank[rng.integers(len(bank))])
        else:
            toks.append(FILLER[rng.integers(len(FILLER))])
    ids = [CLS] + [STOI[t] for t in toks]
    ids = ids + [PAD] * (SEQ_LEN - len(ids))
    return ids, int(topic), label


def make_tickets(n, seed):
    rng = np.random.default_rng(seed)
    rows = [sample_ticket(rng) for _ in range(n)]
    ids = torch.tensor([r[0] for r in rows])
    topic = torch.tensor([r[1] for r in rows])
    sent = torch.tensor([r[2] for r in rows])
    return ids, topic, sent


# ------------------------------------------------------------------- model ---
class TicketEncoder(nn.Module):
    def __init__(self, vocab=len(VOCAB), d=48, heads=4, layers=2, ff=96, max_len=SEQ_LEN):
        super().__init__()
        self.tok = nn.Embedding(vocab, d, padding_idx=PAD)
        self.pos = nn.Embedding(max_len, d)
        self.blocks = nn.ModuleList([
            nn.TransformerEncoderLayer(d, heads, ff, dropout=0.1, batch_first=True, norm_first=True)
            for _ in range(layers)])
        self.norm = nn.LayerNorm(d)

    def forward(self, ids):
        pad = ids.eq(PAD)
        h = self.tok(ids) + self.pos(torch.arange(ids.shape[1]))
        for blk in self.blocks:
            h = blk(h, src_key_padding_mask=pad)
        return self.norm(h)


class TicketClassifier(nn.Module):
    def __init__(self, encoder, num_labels):
        super().__init__()
        self.encoder = encoder
        self.dropout = nn.Dropout(0.1)
        self.classifier = nn.Linear(encoder.tok.embedding_dim, num_labels)

    def forward(self, ids):
        h = self.encoder(ids)
        keep = ids.ne(PAD).unsqueeze(-1).float()
        pooled = (h * keep).sum(1) / keep.sum(1)
        return self.classifier(self.dropout(pooled))


# ----------------------------------------------------------------- finetune ---
args = dict(
    output_dir="out/ticket-sentiment",
    learning_rate=5e-4,
    per_device_train_batch_size=32,
    num_train_epochs=6,
    warmup_ratio=0.1,
    weight_decay=0.01,
    max_grad_norm=1.0,
    logging_steps=25,
    seed=17,
)
NUM_LABELS = 2


def build_model():
    torch.manual_seed(args["seed"])
    enc = TicketEncoder()
    enc.load_state_dict(torch.load(os.path.join(HERE, "backbone.pt")))
    for p in enc.tok.parameters():
        p.requires_grad_(False)
    for p in enc.pos.parameters():
        p.requires_grad_(False)
    for p in enc.blocks[0].parameters():
        p.requires_grad_(False)
    return TicketClassifier(enc, NUM_LABELS)


def compute_loss(model, batch):
    ids, labels = batch
    return F.cross_entropy(model(ids), labels)


def make_optimizer(params):
    params = [p for p in params if p.requires_grad]
    return torch.optim.AdamW(params, lr=args["learning_rate"], weight_decay=args["weight_decay"])


def linear_schedule(optimizer, warmup, total):
    def f(step):
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total - step) / max(1, total - warmup))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, f)


def load_splits():
    ids, _, y = make_tickets(2000, seed=5)
    return (ids[:1600], y[:1600]), (ids[1600:], y[1600:])


def iterate(ids, y, bs, gen):
    perm = torch.randperm(len(ids), generator=gen)
    for i in range(0, len(ids), bs):
        j = perm[i:i + bs]
        yield ids[j], y[j]


@torch.no_grad()
def evaluate(model, ids, y):
    t = time.time()
    model.eval()
    logits = model(ids)
    loss = F.cross_entropy(logits, y).item()
    acc = (logits.argmax(-1) == y).float().mean().item()
    model.train()
    return loss, acc, time.time() - t


def make_target():
    (tr_ids, tr_y), _ = load_splits()
    model = build_model()
    gen = torch.Generator().manual_seed(args["seed"])
    it = iterate(tr_ids, tr_y, args["per_device_train_batch_size"], gen)
    data = [next(it) for _ in range(3)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": compute_loss,
            "optimizer": make_optimizer(model.parameters()), "make_optimizer": make_optimizer,
            "num_classes": NUM_LABELS, "task": "classification"}


def main():
    (tr_ids, tr_y), (va_ids, va_y) = load_splits()
    model = build_model()
    opt = make_optimizer(model.parameters())
    bs = args["per_device_train_batch_size"]
    steps_per_epoch = math.ceil(len(tr_ids) / bs)
    total = steps_per_epoch * args["num_train_epochs"]
    sched = linear_schedule(opt, int(args["warmup_ratio"] * total), total)
    gen = torch.Generator().manual_seed(args["seed"])
    n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print("***** Running training *****")
    print(f"  Num examples = {len(tr_ids)}")
    print(f"  Num Epochs = {args['num_train_epochs']}")
    print(f"  Instantaneous batch size per device = {bs}")
    print(f"  Total optimization steps = {total}")
    print(f"  Number of trainable parameters = {n_train}")
    step, t0, run_loss, run_n, all_loss = 0, time.time(), 0.0, 0, 0.0
    model.train()
    for epoch in range(args["num_train_epochs"]):
        for batch in iterate(tr_ids, tr_y, bs, gen):
            loss = compute_loss(model, batch)
            loss.backward()
            gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), args["max_grad_norm"])
            opt.step()
            sched.step()
            opt.zero_grad()
            step += 1
            run_loss += loss.item()
            run_n += 1
            all_loss += loss.item()
            if step % args["logging_steps"] == 0:
                print({"loss": round(run_loss / run_n, 4), "grad_norm": round(gnorm.item(), 4),
                       "learning_rate": float(f"{sched.get_last_lr()[0]:.4e}"),
                       "epoch": round(step / steps_per_epoch, 2)})
                run_loss, run_n = 0.0, 0
        vl, va, vt = evaluate(model, va_ids, va_y)
        print({"eval_loss": round(vl, 4), "eval_accuracy": round(va, 4),
               "eval_runtime": round(vt, 4), "epoch": float(epoch + 1)})
    rt = time.time() - t0
    print({"train_runtime": round(rt, 2), "train_samples_per_second": round(len(tr_ids) * args["num_train_epochs"] / rt, 1),
           "train_steps_per_second": round(total / rt, 2), "train_loss": round(all_loss / step, 4),
           "epoch": float(args["num_train_epochs"])})


if __name__ == "__main__":
    main()
