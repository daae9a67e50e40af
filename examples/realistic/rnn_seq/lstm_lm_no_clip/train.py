# Word-level LSTM language model on a generated "ship's log" corpus.
# Structure follows pytorch/examples word_language_model: batchify the token
# stream into columns, truncated BPTT over long windows, plain SGD.
import argparse
import math
import random
import time

import torch
import torch.nn as nn

SUBJECTS = ["the captain", "the mate", "the cook", "the lookout", "the engineer", "a gull", "the pilot"]
VERBS = ["sighted", "logged", "repaired", "reported", "ignored", "checked", "secured", "spotted"]
OBJECTS = ["the mainsail", "a whale", "the hatch", "the compass", "land", "a squall", "the anchor", "fog"]
PLACES = ["off the bow", "to port", "to starboard", "at dawn", "at dusk", "near the reef", "below deck"]
WEATHER = ["wind", "sea", "swell", "sky"]
STATES = ["calm", "rising", "heavy", "clear", "grey", "falling"]


def make_corpus(n_entries, seed):
    rng = random.Random(seed)
    words = []
    day = 1
    for i in range(n_entries):
        if i % 9 == 0:
            words += ["day", str(day % 40), "<eos>"]
            day += 1
        s = [*rng.choice(SUBJECTS).split(), rng.choice(VERBS), *rng.choice(OBJECTS).split()]
        if rng.random() < 0.6:
            s += rng.choice(PLACES).split()
        if rng.random() < 0.4:
            w = rng.choice(WEATHER)
            s += [",", w, rng.choice(STATES)]
        words += s + ["<eos>"]
    return words


class Corpus:
    def __init__(self, seed=0):
        self.train_words = make_corpus(6000, seed)
        self.valid_words = make_corpus(800, seed + 1)
        vocab = sorted(set(self.train_words) | set(self.valid_words))
        self.word2idx = {w: i for i, w in enumerate(vocab)}
        self.train = torch.tensor([self.word2idx[w] for w in self.train_words])
        self.valid = torch.tensor([self.word2idx[w] for w in self.valid_words])


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    return data[:nbatch * bsz].view(bsz, -1).t().contiguous()


def get_batch(source, i, bptt):
    seq_len = min(bptt, len(source) - 1 - i)
    return source[i:i + seq_len], source[i + 1:i + 1 + seq_len].reshape(-1)


class RNNModel(nn.Module):
    def __init__(self, ntoken, ninp=64, nhid=128, nlayers=2, dropout=0.1):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        self.nhid, self.nlayers = nhid, nlayers
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def forward(self, inp, hidden):
        emb = self.drop(self.encoder(inp))
        output, hidden = self.rnn(emb, hidden)
        return self.decoder(self.drop(output)).view(-1, self.decoder.out_features), hidden

    def init_hidden(self, bsz):
        w = next(self.parameters())
        return (w.new_zeros(self.nlayers, bsz, self.nhid), w.new_zeros(self.nlayers, bsz, self.nhid))


def repackage_hidden(h):
    return tuple(v.detach() for v in h)


def grad_norm(parameters):
    return torch.norm(torch.stack([p.grad.detach().norm() for p in parameters if p.grad is not None])).item()


criterion = nn.CrossEntropyLoss()


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="PyTorch ship's-log LSTM language model")
    p.add_argument("--lr", type=float, default=10.0)
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--bptt", type=int, default=200)
    p.add_argument("--log-interval", type=int, default=4)
    p.add_argument("--seed", type=int, default=1111)
    return p.parse_args(argv)


def make_target():
    args = parse_args([])
    torch.manual_seed(args.seed)
    corpus = Corpus()
    train_data = batchify(corpus.train, args.batch_size)
    model = RNNModel(len(corpus.word2idx))
    data = [get_batch(train_data, i, args.bptt) for i in range(0, 4 * args.bptt, args.bptt)]

    def loss_fn(model, batch):
        x, y = batch
        output, _ = model(x, model.init_hidden(x.size(1)))
        return criterion(output, y)

    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": torch.optim.SGD(model.parameters(), lr=args.lr),
            "make_optimizer": lambda params: torch.optim.SGD(params, lr=args.lr), "task": "lm"}


def evaluate(model, source, bptt, bsz):
    model.eval()
    total, hidden = 0.0, model.init_hidden(bsz)
    with torch.no_grad():
        for i in range(0, source.size(0) - 1, bptt):
            x, y = get_batch(source, i, bptt)
            out, hidden = model(x, hidden)
            total += len(x) * criterion(out, y).item()
    return total / (len(source) - 1)


def main():
    torch.set_num_threads(1)  # LSTM steps are tiny; threading only adds sync overhead
    args = parse_args()
    torch.manual_seed(args.seed)
    corpus = Corpus()
    ntokens = len(corpus.word2idx)
    train_data = batchify(corpus.train, args.batch_size)
    val_data = batchify(corpus.valid, 10)
    print(f"vocab {ntokens} | train tokens {len(corpus.train)} | valid tokens {len(corpus.valid)} | bptt {args.bptt}")
    model = RNNModel(ntokens)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    nbatches = (len(train_data) - 1) // args.bptt
    for epoch in range(1, args.epochs + 1):
        epoch_start = time.time()
        model.train()
        total_loss, start_time = 0.0, time.time()
        hidden = model.init_hidden(args.batch_size)
        for batch, i in enumerate(range(0, train_data.size(0) - 1, args.bptt)):
            data, targets = get_batch(train_data, i, args.bptt)
            hidden = repackage_hidden(hidden)
            optimizer.zero_grad()
            output, hidden = model(data, hidden)
            loss = criterion(output, targets)
            loss.backward()
            gnorm = grad_norm(model.parameters())
            optimizer.step()
            total_loss += loss.item()
            if batch % args.log_interval == 0 and batch > 0:
                cur_loss = total_loss / args.log_interval
                elapsed = time.time() - start_time
                print(f"| epoch {epoch:3d} | {batch:5d}/{nbatches:5d} batches | lr {args.lr:02.2f} | "
                      f"ms/batch {elapsed * 1000 / args.log_interval:5.2f} | loss {cur_loss:5.2f} | "
                      f"ppl {math.exp(min(cur_loss, 700)):8.2f} | grad norm {gnorm:8.2f}", flush=True)
                total_loss, start_time = 0.0, time.time()
        val_loss = evaluate(model, val_data, args.bptt, 10)
        print("-" * 89)
        print(f"| end of epoch {epoch:3d} | time: {time.time() - epoch_start:5.2f}s | valid loss {val_loss:5.2f} | "
              f"valid ppl {math.exp(min(val_loss, 700)):8.2f}")
        print("-" * 89, flush=True)


if __name__ == "__main__":
    main()
