"""Pretrain a tiny GPT on a synthetic token stream, Megatron-style single-process loop.

bf16 autocast on CPU, gradient accumulation over micro-batches up to the global
batch size, global-norm gradient clipping, linear warmup + cosine decay.

    python train.py [--train-iters 150] [--micro-batch-size 8] [--global-batch-size 64]
"""
import argparse
import math
import os
import time
from datetime import datetime

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="tiny GPT pretraining")
    g = p.add_argument_group("model")
    g.add_argument("--num-layers", type=int, default=2)
    g.add_argument("--hidden-size", type=int, default=48)
    g.add_argument("--num-attention-heads", type=int, default=3)
    g.add_argument("--seq-length", type=int, default=32)
    g.add_argument("--max-position-embeddings", type=int, default=32)
    g.add_argument("--vocab-size", type=int, default=96)
    g.add_argument("--init-method-std", type=float, default=0.02)
    g = p.add_argument_group("training")
    g.add_argument("--micro-batch-size", type=int, default=8)
    g.add_argument("--global-batch-size", type=int, default=64)
    g.add_argument("--train-iters", type=int, default=150)
    g.add_argument("--optimizer", default="adam", choices=["adam", "sgd"])
    g.add_argument("--lr", type=float, default=1e-2)
    g.add_argument("--min-lr", type=float, default=1e-3)
    g.add_argument("--lr-decay-style", default="cosine", choices=["cosine", "constant"])
    g.add_argument("--lr-warmup-iters", type=int, default=15)
    g.add_argument("--weight-decay", type=float, default=0.1)
    g.add_argument("--adam-beta1", type=float, default=0.9)
    g.add_argument("--adam-beta2", type=float, default=0.95)
    g.add_argument("--adam-eps", type=float, default=1e-8)
    g.add_argument("--sgd-momentum", type=float, default=0.9)
    g.add_argument("--clip-grad", type=float, default=1.0)
    g.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=True)
    g.add_argument("--seed", type=int, default=2024)
    g = p.add_argument_group("logging")
    g.add_argument("--log-interval", type=int, default=10)
    g.add_argument("--eval-interval", type=int, default=50)
    g.add_argument("--eval-iters", type=int, default=4)
    g.add_argument("--save", default="out")
    g = p.add_argument_group("data")
    g.add_argument("--num-train-samples", type=int, default=4096)
    g.add_argument("--num-valid-samples", type=int, default=256)
    g.add_argument("--data-seed", type=int, default=7)
    args = p.parse_args(argv)
    args.data_parallel_size = 1
    assert args.global_batch_size % (args.micro_batch_size * args.data_parallel_size) == 0
    args.num_micro_batches = args.global_batch_size // (args.micro_batch_size * args.data_parallel_size)
    return args


def print_args(args):
    print("------------------------ arguments ------------------------", flush=True)
    for arg in sorted(vars(args)):
        dots = "." * (48 - len(arg))
        print("  {} {} {}".format(arg, dots, getattr(args, arg)), flush=True)
    print("-------------------- end of arguments ---------------------", flush=True)


# ---------------------------------------------------------------- data

class MarkovTokenDataset(Dataset):
    """Sequences sampled from a fixed sparse first-order Markov chain over the vocabulary."""

    def __init__(self, num_samples, seq_length, vocab_size, chain_seed, sample_seed):
        rng = np.random.default_rng(chain_seed)
        probs = rng.dirichlet(np.full(vocab_size, 0.05), size=vocab_size)
        cdf = np.cumsum(probs, axis=1)
        srng = np.random.default_rng(sample_seed)
        toks = np.empty((num_samples, seq_length + 1), dtype=np.int64)
        toks[:, 0] = srng.integers(0, vocab_size, num_samples)
        u = srng.random((num_samples, seq_length))
        for t in range(seq_length):
            nxt = (u[:, t, None] > cdf[toks[:, t]]).sum(axis=1)
            toks[:, t + 1] = np.minimum(nxt, vocab_size - 1)
        self.tokens = torch.from_numpy(toks)

    def __len__(self):
        return len(self.tokens)

    def __getitem__(self, idx):
        return {"text": self.tokens[idx]}


def build_train_valid_datasets(args):
    train = MarkovTokenDataset(args.num_train_samples, args.seq_length, args.vocab_size,
                               args.data_seed, args.seed)
    valid = MarkovTokenDataset(args.num_valid_samples, args.seq_length, args.vocab_size,
                               args.data_seed, args.seed + 1)
    return train, valid


def cyclic_iter(loader):
    while True:
        for batch in loader:
            yield batch


def get_batch(data_iterator):
    tokens_ = next(data_iterator)["text"]
    tokens = tokens_[:, :-1].contiguous()
    labels = tokens_[:, 1:].contiguous()
    return tokens, labels


# ---------------------------------------------------------------- model

class CausalSelfAttention(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.n_head = args.num_attention_heads
        self.qkv = nn.Linear(args.hidden_size, 3 * args.hidden_size)
        self.proj = nn.Linear(args.hidden_size, args.hidden_size)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(x).split(h, dim=-1)
        q, k, v = (t.view(b, s, self.n_head, h // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, s, h))


class TransformerLayer(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.ln1 = nn.LayerNorm(args.hidden_size)
        self.attn = CausalSelfAttention(args)
        self.ln2 = nn.LayerNorm(args.hidden_size)
        self.mlp = nn.Sequential(nn.Linear(args.hidden_size, 4 * args.hidden_size), nn.GELU(),
                                 nn.Linear(4 * args.hidden_size, args.hidden_size))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPTModel(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.word_embeddings = nn.Embedding(args.vocab_size, args.hidden_size)
        self.position_embeddings = nn.Embedding(args.max_position_embeddings, args.hidden_size)
        self.layers = nn.ModuleList(TransformerLayer(args) for _ in range(args.num_layers))
        self.final_layernorm = nn.LayerNorm(args.hidden_size)
        self.apply(lambda m: self._init(m, args.init_method_std))

    @staticmethod
    def _init(module, std):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=std)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, tokens, labels=None):
        pos = torch.arange(tokens.size(1), device=tokens.device)
        x = self.word_embeddings(tokens) + self.position_embeddings(pos)
        for layer in self.layers:
            x = layer(x)
        logits = self.final_layernorm(x) @ self.word_embeddings.weight.t()
        if labels is None:
            return logits
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), labels.reshape(-1))


def model_provider(args):
    print("building GPT model ...", flush=True)
    model = GPTModel(args)
    n = sum(p.numel() for p in model.parameters())
    print(" > number of parameters on (tensor, pipeline) model parallel rank (0, 0): {}".format(n), flush=True)
    return model


def forward_step(model, tokens, labels, args):
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
        return model(tokens, labels)


# ---------------------------------------------------------------- optimizer / schedule

def get_optimizer(params, args):
    params = list(params)
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": args.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    if args.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=args.lr, momentum=args.sgd_momentum)
    return torch.optim.AdamW(groups, lr=args.lr, betas=(args.adam_beta1, args.adam_beta2), eps=args.adam_eps)


class OptimizerParamScheduler:
    """Linear warmup then cosine decay from lr to min_lr over train_iters (in iterations)."""

    def __init__(self, optimizer, args):
        self.optimizer = optimizer
        self.max_lr, self.min_lr = args.lr, args.min_lr
        self.warmup_steps = args.lr_warmup_iters
        self.decay_steps = args.train_iters
        self.decay_style = args.lr_decay_style
        self.num_steps = 0
        self.step(0)

    def get_lr(self):
        if self.warmup_steps > 0 and self.num_steps <= self.warmup_steps:
            return self.max_lr * self.num_steps / self.warmup_steps
        if self.decay_style == "constant":
            return self.max_lr
        if self.num_steps > self.decay_steps:
            return self.min_lr
        ratio = (self.num_steps - self.warmup_steps) / (self.decay_steps - self.warmup_steps)
        coeff = 0.5 * (math.cos(math.pi * ratio) + 1.0)
        return self.min_lr + coeff * (self.max_lr - self.min_lr)

    def step(self, increment=1):
        self.num_steps += increment
        lr = self.get_lr()
        for group in self.optimizer.param_groups:
            group["lr"] = lr


# ---------------------------------------------------------------- train / eval

def train_step(data_iterator, model, optimizer, scheduler, args):
    optimizer.zero_grad(set_to_none=True)
    losses = []
    for _ in range(args.num_micro_batches):
        tokens, labels = get_batch(data_iterator)
        loss = forward_step(model, tokens, labels, args)
        (loss / args.num_micro_batches).backward()
        losses.append(loss.detach())
    # clip_grad <= 0 disables clipping but the norm is still reported
    max_norm = args.clip_grad if args.clip_grad > 0 else float("inf")
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    scheduler.step()
    return torch.stack(losses).mean().item(), grad_norm.item()


@torch.no_grad()
def evaluate(valid_iterator, model, args):
    model.eval()
    total = 0.0
    for _ in range(args.eval_iters):
        for _ in range(args.num_micro_batches):
            tokens, labels = get_batch(valid_iterator)
            total += forward_step(model, tokens, labels, args).item()
    model.train()
    return total / (args.eval_iters * args.num_micro_batches)


def evaluate_and_print_results(prefix, valid_iterator, model, args):
    loss = evaluate(valid_iterator, model, args)
    string = " validation loss at {} | ".format(prefix)
    string += "lm loss value: {:.6E} | ".format(loss)
    string += "lm loss PPL: {:.6E} | ".format(math.exp(min(20, loss)))
    length = len(string) + 1
    print("-" * length, flush=True)
    print(string, flush=True)
    print("-" * length, flush=True)


def training_log(iteration, consumed, elapsed_ms, lr, loss, grad_norm, skipped, nans, args):
    log_string = " iteration {:8d}/{:8d} |".format(iteration, args.train_iters)
    log_string += " consumed samples: {:12d} |".format(consumed)
    log_string += " elapsed time per iteration (ms): {:.1f} |".format(elapsed_ms)
    log_string += " learning rate: {:.6E} |".format(lr)
    log_string += " global batch size: {:5d} |".format(args.global_batch_size)
    log_string += " lm loss: {:.6E} |".format(loss)
    log_string += " loss scale: {:.1f} |".format(1.0)
    log_string += " grad norm: {:.3f} |".format(grad_norm)
    log_string += " number of skipped iterations: {:3d} |".format(skipped)
    log_string += " number of nan iterations: {:3d} |".format(nans)
    print(log_string, flush=True)


def build_data_iterators(args):
    train_ds, valid_ds = build_train_valid_datasets(args)
    # sequential like Megatron's pretraining sampler: the samples are already random draws
    train_loader = DataLoader(train_ds, batch_size=args.micro_batch_size, shuffle=False, drop_last=True)
    valid_loader = DataLoader(valid_ds, batch_size=args.micro_batch_size, shuffle=False, drop_last=True)
    return train_loader, valid_loader


def make_target():
    args = parse_args([])
    torch.manual_seed(args.seed)
    model = GPTModel(args)
    train_loader, _ = build_data_iterators(args)
    it = iter(cyclic_iter(train_loader))
    data = [get_batch(it) for _ in range(args.num_micro_batches)]

    def loss_fn(model, batch):
        tokens, labels = batch
        return forward_step(model, tokens, labels, args)

    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": get_optimizer(model.parameters(), args),
            "make_optimizer": lambda params: get_optimizer(params, args), "task": "lm"}


def main():
    args = parse_args()
    print("using world size: 1, data-parallel size: 1, tensor-model-parallel size: 1, "
          "pipeline-model-parallel size: 1", flush=True)
    print("using torch.float32 for parameters ...", flush=True)
    print_args(args)
    print("> setting random seeds to {} ...".format(args.seed), flush=True)
    torch.manual_seed(args.seed)
    model = model_provider(args)
    optimizer = get_optimizer(model.parameters(), args)
    scheduler = OptimizerParamScheduler(optimizer, args)
    print("> building train, validation, and test datasets ...", flush=True)
    train_loader, valid_loader = build_data_iterators(args)
    print(" > datasets target sizes (minimum size):", flush=True)
    print("    train:      {}".format(args.train_iters * args.global_batch_size), flush=True)
    print("    validation: {}".format(args.num_valid_samples), flush=True)
    train_iterator, valid_iterator = cyclic_iter(train_loader), cyclic_iter(valid_loader)
    print("[after dataloaders are built] datetime: {} ".format(datetime.now().strftime("%Y-%m-%d %H:%M:%S")), flush=True)
    print("training ...", flush=True)

    consumed, skipped, nans = 0, 0, 0
    loss_sum, count, t0 = 0.0, 0, time.time()
    for iteration in range(1, args.train_iters + 1):
        loss, grad_norm = train_step(train_iterator, model, optimizer, scheduler, args)
        consumed += args.global_batch_size
        if not math.isfinite(loss) or not math.isfinite(grad_norm):
            nans += 1
        loss_sum += loss
        count += 1
        if iteration % args.log_interval == 0:
            elapsed_ms = (time.time() - t0) * 1000.0 / count
            training_log(iteration, consumed, elapsed_ms, optimizer.param_groups[0]["lr"],
                         loss_sum / count, grad_norm, skipped, nans, args)
            loss_sum, count, t0 = 0.0, 0, time.time()
        if iteration % args.eval_interval == 0:
            evaluate_and_print_results("iteration {}".format(iteration), valid_iterator, model, args)

    save_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), args.save)
    os.makedirs(save_dir, exist_ok=True)
    torch.save({"iteration": args.train_iters, "model": model.state_dict()},
               os.path.join(save_dir, "model_optim_rng.pt"))
    print("saving checkpoint at iteration {:7d} to {}".format(args.train_iters, args.save), flush=True)


if __name__ == "__main__":
    main()
