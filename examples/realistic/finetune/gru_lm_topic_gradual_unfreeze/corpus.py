"""Synthetic "documents": token streams from topic-specific Markov chains over a shared vocabulary."""
import numpy as np

VOCAB_SIZE = 60
N_TOPICS = 3
SEQ_LEN = 48
_LANG_SEED = 2024


def _chains():
    rng = np.random.default_rng(_LANG_SEED)
    # shared "grammar" plus a topic-specific perturbation
    base = rng.gamma(0.3, size=(VOCAB_SIZE, VOCAB_SIZE))
    chains = []
    for _ in range(N_TOPICS):
        t = base + 1.5 * rng.gamma(0.3, size=(VOCAB_SIZE, VOCAB_SIZE))
        chains.append(t / t.sum(1, keepdims=True))
    return np.stack(chains)


def make_docs(n, seed):
    """Returns tokens [n, SEQ_LEN] int64 and topic ids [n] int64."""
    chains = _chains()
    rng = np.random.default_rng(seed)
    topics = rng.integers(0, N_TOPICS, size=n)
    toks = np.zeros((n, SEQ_LEN), dtype=np.int64)
    toks[:, 0] = rng.integers(0, VOCAB_SIZE, size=n)
    u = rng.random((n, SEQ_LEN))
    for t in range(1, SEQ_LEN):
        cdf = np.cumsum(chains[topics, toks[:, t - 1]], axis=1)
        toks[:, t] = np.minimum((u[:, t:t + 1] > cdf).sum(1), VOCAB_SIZE - 1)
    return toks, topics
