"""Synthetic recipe ingredient lists (shared by pretrain.py and train.py)."""
import numpy as np

PAD, CLS = 0, 1
N_CUISINES = 8
WORDS_PER_CUISINE = 24
N_PANTRY = 90
VOCAB = 2 + N_CUISINES * WORDS_PER_CUISINE + N_PANTRY
MAX_LEN = 28

# cuisine -> region used by the downstream task
CUISINE_REGION = [0, 0, 0, 1, 1, 1, 2, 2]   # asian / european / americas


def sample_recipes(n, seed, label_noise=0.0):
    rng = np.random.default_rng(seed)
    cuisine = rng.integers(0, N_CUISINES, size=n)
    ids = np.zeros((n, MAX_LEN), dtype=np.int64)
    lengths = rng.integers(8, MAX_LEN, size=n)
    pantry0 = 2 + N_CUISINES * WORDS_PER_CUISINE
    for i in range(n):
        L = lengths[i]
        toks = [CLS]
        base = 2 + cuisine[i] * WORDS_PER_CUISINE
        # neighbouring cuisines share part of their vocabulary
        sib = 2 + ((cuisine[i] + 1) % N_CUISINES) * WORDS_PER_CUISINE
        for _ in range(L - 1):
            r = rng.random()
            if r < 0.22:
                toks.append(base + rng.integers(0, WORDS_PER_CUISINE))
            elif r < 0.30:
                toks.append(sib + rng.integers(0, WORDS_PER_CUISINE))
            elif r < 0.36:
                toks.append(2 + rng.integers(0, N_CUISINES * WORDS_PER_CUISINE))
            else:
                toks.append(pantry0 + rng.integers(0, N_PANTRY))
        ids[i, :L] = toks
    region = np.array([CUISINE_REGION[c] for c in cuisine])
    if label_noise > 0:
        flip = rng.random(n) < label_noise
        region[flip] = rng.integers(0, 3, size=flip.sum())
    return ids, cuisine, region
