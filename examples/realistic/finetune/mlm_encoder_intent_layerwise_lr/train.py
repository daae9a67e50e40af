"""Intent classification on support-ticket token streams.

A tiny BERT-style encoder is pretrained with masked-token prediction on
unlabeled tickets, then fine-tuned for 4-way intent classification:
  * epochs [0, head_warmup_epochs): encoder frozen, only the new head trains
  * afterwards: full fine-tuning with layer-wise LR decay (LLRD)
Linear warmup/decay schedule and label smoothing, logged Trainer-style.
"""
import math
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)

HERE = os.path.dirname(os.path.abspath(__file__))
CKPT_PATH = os.path.join(HERE, "mlm_encoder.pt")
SEED = 2024

PAD, CLS, MASK = 0, 1, 2
N_SPECIAL = 4
VOCAB = 96
MAX_LEN = 32
N_TOPICS = 8
N_INTENTS = 4  # intent = topic // 2 (billing, shipping, account, technical)

PRETRAIN_CFG = dict(n_seqs=6000, epochs=3, batch_size=64, lr=1e-3, mask_prob=0.15)
FINETUNE_CFG = dict(n_train_per_class=40, n_eval_per_class=150, epochs=8, batch_size=16,
                    lr=1e-3, layer_decay=0.6, head_warmup_epochs=2, warmup_ratio=0.1,
                    weight_decay=0.01, label_smoothing=0.1, logging_steps=5)


# ----------------------------------------------------------------------------
# synthetic corpus
# ----------------------------------------------------------------------------
class TicketCorpus:
    """Topic-biased bigram language over a small vocabulary."""

    def __init__(self, seed=SEED):
        rng = np.random.default_rng(seed)
        n_words = VOCAB - N_SPECIAL
        self.bigram = rng.dirichlet(np.full(n_words, 0.08), size=n_words)
        self.topic_words = rng.dirichlet(np.full(n_words, 0.05), size=N_TOPICS)
        self.n_words = n_words
        # inverse-CDF tables, rng.choice(p=...) per token is far too slow
        self._bigram_cdf = np.cumsum(self.bigram, axis=1)
        self._topic_cdf = np.cumsum(self.topic_words, axis=1)

    @staticmethod
    def _draw(cdf, u):
        return min(int(np.searchsorted(cdf, u * cdf[-1])), len(cdf) - 1)

    def sample(self, rng, topic):
        length = rng.integers(12, MAX_LEN)
        u = rng.random((length, 2))
        toks = [self._draw(self._topic_cdf[topic], u[0, 1])]
        for i in range(1, length):
            cdf = self._topic_cdf[topic] if u[i, 0] < 0.25 else self._bigram_cdf[toks[-1]]
            toks.append(self._draw(cdf, u[i, 1]))
        return [CLS] + [t + N_SPECIAL for t in toks]


def pad_batch(seqs):
    L = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), L), PAD, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s)
    return ids, (ids != PAD).long()


def make_unlabeled(corpus, n, seed):
    rng = np.random.default_rng(seed)
    return [corpus.sample(rng, rng.integers(N_TOPICS)) for _ in range(n)]


def make_labeled(corpus, n_per_class, seed):
    rng = np.random.default_rng(seed)
    seqs, labels = [], []
    for _ in range(n_per_class * N_INTENTS):
        topic = rng.integers(N_TOPICS)
        seqs.append(corpus.sample(rng, topic))
        labels.append(topic // 2)
    return seqs, labels


def batches(seqs, labels, batch_size, rng=None):
    order = np.arange(len(seqs)) if rng is None else rng.permutation(len(seqs))
    for i in range(0, len(order), batch_size):
        idx = order[i:i + batch_size]
        ids, mask = pad_batch([seqs[j] for j in idx])
        yield {"input_ids": ids, "attention_mask": mask,
               "labels": torch.tensor([labels[j] for j in idx])}


def build_datasets(cfg=FINETUNE_CFG, seed=SEED):
    corpus = TicketCorpus(seed)
    train = make_labeled(corpus, cfg["n_train_per_class"], seed + 1)
    evals = make_labeled(corpus, cfg["n_eval_per_class"], seed + 2)
    return corpus, train, evals


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class Encoder(nn.Module):
    def __init__(self, d_model=64, n_layers=2, n_heads=4, d_ff=128, dropout=0.1):
        super().__init__()
        self.tok_emb = nn.Embedding(VOCAB, d_model, padding_idx=PAD)
        self.pos_emb = nn.Embedding(MAX_LEN + 1, d_model)
        self.emb_drop = nn.Dropout(dropout)
        self.layers = nn.ModuleList([
            nn.TransformerEncoderLayer(d_model, n_heads, d_ff, dropout, batch_first=True,
                                       norm_first=True, activation="gelu")
            for _ in range(n_layers)])
        self.norm = nn.LayerNorm(d_model)
        self.d_model = d_model

    def forward(self, ids, attention_mask):
        pos = torch.arange(ids.shape[1], device=ids.device)
        h = self.emb_drop(self.tok_emb(ids) + self.pos_emb(pos))
        pad = attention_mask == 0
        for layer in self.layers:
            h = layer(h, src_key_padding_mask=pad)
        return self.norm(h)


class MLMModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = Encoder()
        self.lm_head = nn.Linear(self.encoder.d_model, VOCAB)

    def forward(self, ids, attention_mask):
        return self.lm_head(self.encoder(ids, attention_mask))


class IntentClassifier(nn.Module):
    def __init__(self, n_labels=N_INTENTS):
        super().__init__()
        self.encoder = Encoder()
        self.dropout = nn.Dropout(0.1)
        self.classifier = nn.Linear(self.encoder.d_model, n_labels)

    def forward(self, input_ids, attention_mask):
        h = self.encoder(input_ids, attention_mask)
        m = attention_mask.unsqueeze(-1).float()
        pooled = (h * m).sum(1) / m.sum(1)
        return self.classifier(self.dropout(pooled))


# ----------------------------------------------------------------------------
# stage 1: masked-token pretraining
# ----------------------------------------------------------------------------
def mask_tokens(ids, gen, mask_prob):
    labels = ids.clone()
    can_mask = ids >= N_SPECIAL
    sel = (torch.rand(ids.shape, generator=gen) < mask_prob) & can_mask
    labels[~sel] = -100
    ids = ids.clone()
    r = torch.rand(ids.shape, generator=gen)
    ids[sel & (r < 0.8)] = MASK
    rand_tok = torch.randint(N_SPECIAL, VOCAB, ids.shape, generator=gen)
    swap = sel & (r >= 0.8) & (r < 0.9)
    ids[swap] = rand_tok[swap]
    return ids, labels


def pretrain(path=CKPT_PATH, cfg=PRETRAIN_CFG, seed=SEED):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    corpus = TicketCorpus(seed)
    seqs = make_unlabeled(corpus, cfg["n_seqs"], seed + 10)
    model = MLMModel()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=0.01)
    step = 0
    for epoch in range(cfg["epochs"]):
        model.train()
        for b in batches(seqs, [0] * len(seqs), cfg["batch_size"], rng):
            ids, labels = mask_tokens(b["input_ids"], gen, cfg["mask_prob"])
            logits = model(ids, b["attention_mask"])
            loss = F.cross_entropy(logits.view(-1, VOCAB), labels.view(-1), ignore_index=-100)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if step % 50 == 0:
                print({"mlm_loss": round(loss.item(), 4), "epoch": round(epoch + 1, 2), "step": step})
    torch.save(model.encoder.state_dict(), path)


# ----------------------------------------------------------------------------
# stage 2: fine-tuning
# ----------------------------------------------------------------------------
def set_encoder_trainable(model, flag):
    for p in model.encoder.parameters():
        p.requires_grad_(flag)


def build_model(seed=SEED, cfg=FINETUNE_CFG):
    torch.manual_seed(seed)
    model = IntentClassifier()
    model.encoder.load_state_dict(torch.load(CKPT_PATH, map_location="cpu"))
    set_encoder_trainable(model, cfg["head_warmup_epochs"] == 0)
    return model


def llrd_param_groups(model, params, cfg=FINETUNE_CFG):
    """Layer-wise LR decay: head gets lr, each layer below gets another factor of decay."""
    n_layers = len(model.encoder.layers)
    depth = {}
    for p in model.classifier.parameters():
        depth[id(p)] = 0
    for p in model.encoder.norm.parameters():
        depth[id(p)] = 0
    for i, layer in enumerate(model.encoder.layers):
        for p in layer.parameters():
            depth[id(p)] = n_layers - i
    for mod in (model.encoder.tok_emb, model.encoder.pos_emb):
        for p in mod.parameters():
            depth[id(p)] = n_layers + 1
    groups = {}
    for p in params:
        d = depth[id(p)]
        groups.setdefault(d, []).append(p)
    # deepest (embeddings) first, like HF's named_parameters order
    return [{"params": groups[d], "lr": cfg["lr"] * cfg["layer_decay"] ** d, "depth": d}
            for d in sorted(groups, reverse=True)]


def make_optimizer_for(model, params, cfg=FINETUNE_CFG):
    return torch.optim.AdamW(llrd_param_groups(model, params, cfg), weight_decay=cfg["weight_decay"])


def linear_schedule_with_warmup(opt, warmup_steps, total_steps):
    def f(step):
        if step < warmup_steps:
            return step / max(1, warmup_steps)
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))
    return torch.optim.lr_scheduler.LambdaLR(opt, f)


def loss_fn(model, batch, cfg=FINETUNE_CFG):
    logits = model(batch["input_ids"], batch["attention_mask"])
    return F.cross_entropy(logits, batch["labels"], label_smoothing=cfg["label_smoothing"])


@torch.no_grad()
def evaluate(model, seqs, labels):
    model.eval()
    tot, correct, n = 0.0, 0, 0
    for b in batches(seqs, labels, 128):
        logits = model(b["input_ids"], b["attention_mask"])
        tot += F.cross_entropy(logits, b["labels"], reduction="sum").item()
        correct += (logits.argmax(-1) == b["labels"]).sum().item()
        n += len(b["labels"])
    return tot / n, correct / n


def finetune(cfg=FINETUNE_CFG, seed=SEED):
    _, (tr_x, tr_y), (ev_x, ev_y) = build_datasets(cfg, seed)
    model = build_model(seed, cfg)
    opt = make_optimizer_for(model, model.parameters(), cfg)
    steps_per_epoch = math.ceil(len(tr_x) / cfg["batch_size"])
    total = steps_per_epoch * cfg["epochs"]
    sched = linear_schedule_with_warmup(opt, int(cfg["warmup_ratio"] * total), total)
    rng = np.random.default_rng(seed)
    print(f"***** Running training *****\n  Num examples = {len(tr_x)}\n  Num Epochs = {cfg['epochs']}\n"
          f"  Batch size = {cfg['batch_size']}\n  Total optimization steps = {total}\n"
          f"  Head-only warmup epochs = {cfg['head_warmup_epochs']}")
    step, t0, run_loss, run_n, all_loss = 0, time.time(), 0.0, 0, []
    for epoch in range(cfg["epochs"]):
        if epoch == cfg["head_warmup_epochs"] and epoch > 0:
            set_encoder_trainable(model, True)
            n_tr = sum(p.numel() for p in model.parameters() if p.requires_grad)
            print(f"Unfreezing encoder at epoch {epoch} ({n_tr:,} trainable parameters)")
        model.train()
        for batch in batches(tr_x, tr_y, cfg["batch_size"], rng):
            loss = loss_fn(model, batch, cfg)
            opt.zero_grad()
            loss.backward()
            gn = torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
            opt.step()
            sched.step()
            step += 1
            run_loss += loss.item()
            run_n += 1
            all_loss.append(loss.item())
            if step % cfg["logging_steps"] == 0:
                print({"loss": round(run_loss / run_n, 4), "grad_norm": round(gn.item(), 4),
                       "learning_rate": float(f"{sched.get_last_lr()[0]:.3e}"),
                       "epoch": round(step / steps_per_epoch, 2)})
                run_loss, run_n = 0.0, 0
        ev_loss, ev_acc = evaluate(model, ev_x, ev_y)
        print({"eval_loss": round(ev_loss, 4), "eval_accuracy": round(ev_acc, 4),
               "epoch": float(epoch + 1)})
    rt = time.time() - t0
    print({"train_runtime": round(rt, 2), "train_steps_per_second": round(step / rt, 2),
           "train_loss": round(float(np.mean(all_loss)), 4), "epoch": float(cfg["epochs"])})
    return model


def make_target():
    _, (tr_x, tr_y), _ = build_datasets()
    model = build_model()
    rng = np.random.default_rng(SEED)
    data = [b for _, b in zip(range(5), batches(tr_x, tr_y, FINETUNE_CFG["batch_size"], rng))]
    return {
        "model": model,
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": lambda params: make_optimizer_for(model, params),
        "num_classes": N_INTENTS,
        "task": "classification",
    }


if __name__ == "__main__":
    t_start = time.time()
    if not os.path.exists(CKPT_PATH):
        pretrain()
    finetune()
    print(f"total wall time {time.time() - t_start:.1f}s")
