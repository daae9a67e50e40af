"""sequence_check and schedule_check (issue #14) on real tiny models and real schedules, in-process and over stdio.

Each bug is written the way it shows up in real code (nanoGPT's attention and get_lr, a StepLR built for epochs
but stepped per batch) next to its correct twin, which must stay quiet.
"""

import textwrap
from pathlib import Path

import pytest

from conftest import EXAMPLES, run, stdio_client, text_of
from tools import loop_checks as L
from tools.errors import TriageError

COMPACT = 4000

GPT = '''
import math
import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.attn_dropout = nn.Dropout(0.1)
        self.n_head = n_head
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        MASK_LINE
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self, d, h, bs):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, h, bs)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d), nn.Dropout(0.1))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab=64, bs=32, d=32, h=4, layers=2):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(bs, d)
        self.h = nn.ModuleList([Block(d, h, bs) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)

    def forward(self, idx, targets=None):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1), IGNORE)
        return logits, loss


def make_target():
    torch.manual_seed(0)
    data = torch.randint(1, 64, (8, 33))
    if PADDED:
        for i in range(8):
            data[i, 33 - 3 * (i + 1):] = 0   # right padding with token 0
    x = TARGETS
    return {"model": GPT(), "batch": (x, y), "loss_fn": lambda model, batch: model(*batch)[1]}
'''

APPLIED = "att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))"
DISCARDED = "att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))"
SHIFTED = "data[:, :-1]; y = data[:, 1:]"
UNSHIFTED = "data[:, :-1]; y = data[:, :-1]"


def gpt(ws: Path, name: str, mask=APPLIED, targets=SHIFTED, padded=False, ignore="ignore_index=-100") -> str:
    src = (GPT.replace("MASK_LINE", mask).replace("TARGETS", targets).replace("PADDED", str(padded))
           .replace("IGNORE", ignore))
    (ws / name).write_text(src)
    return f"{ws / name}:make_target"


def seq(ws: Path, spec: str, **kw) -> L.SequenceCheckReport:
    async def body():
        return await L.sequence_check(ws, spec, **kw)
    rep = run(body)
    assert len(rep.model_dump_json()) <= COMPACT, rep.model_dump_json()
    return rep


def sched(ws: Path, **kw) -> L.ScheduleCheckReport:
    async def body():
        return await L.schedule_check(ws, **kw)
    rep = run(body)
    assert len(rep.model_dump_json()) <= COMPACT, rep.model_dump_json()
    assert len(rep.curve) <= 32
    return rep


def modes(rep):
    return [f.failure_mode for f in rep.findings]


# ------------------------------------------------------------------ causality

def test_nanogpt_attention_with_the_mask_applied_is_causal_and_quiet(workspace):
    rep = seq(workspace, gpt(workspace, "ok.py"))
    assert rep.sequence_model and rep.tokens_shape == [8, 32] and rep.logits_shape == [8, 32, 64]
    assert rep.causal is True and all(c.past_change == 0 and c.future_change > 0 for c in rep.causality)
    assert rep.objective == "next_token" and rep.targets_next_frac == 1.0
    assert rep.findings == [], rep.text()


def test_masked_fill_computed_but_discarded_is_leakage_named_at_the_attention_and_the_line(workspace):
    rep = seq(workspace, gpt(workspace, "leaky.py", mask=DISCARDED))
    assert rep.causal is False and all(c.leak for c in rep.causality)
    f = rep.findings[0]
    assert modes(rep) == ["data_leakage"] and f.confidence >= 0.9
    assert "sees the future" in f.summary and "h.0.attn" in f.summary
    assert rep.leak_module == "h.0.attn" and rep.leak_module_type == "CausalSelfAttention"
    mask_line = GPT.replace("MASK_LINE", DISCARDED).splitlines().index("        " + DISCARDED) + 1
    assert any(f"leaky.py:{mask_line}:" in h and "discards it" in h for h in rep.leak_hints), rep.leak_hints
    assert "leaky.py" in f.location and "CausalSelfAttention.forward" in f.location


MASKED_LM = '''
import torch
import torch.nn as nn
import torch.nn.functional as F

T = 16


class SDPA(nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.qkv, self.n = nn.Linear(d, 3 * d), 4
        self.register_buffer("m", MASK)

    def forward(self, x):
        B, T_, C = x.shape
        q, k, v = (t.view(B, T_, self.n, C // self.n).transpose(1, 2) for t in self.qkv(x).split(C, 2))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=self.m[:T_, :T_])
        return y.transpose(1, 2).reshape(B, T_, C)


class LM(nn.Module):
    def __init__(self, vocab=40, d=32):
        super().__init__()
        self.emb, self.pos = nn.Embedding(vocab, d), nn.Embedding(T, d)
        self.body = BODY
        self.head = nn.Linear(d, vocab)
        self.register_buffer("m", MASK)

    def forward(self, idx):
        x = self.emb(idx) + self.pos(torch.arange(idx.shape[1]))
        x = CALL
        return self.head(x)


def make_target():
    torch.manual_seed(0)
    data = torch.randint(0, 40, (8, T + 1))
    return {"model": LM(), "batch": (data[:, :-1], data[:, 1:]),
            "loss_fn": lambda m, b: F.cross_entropy(m(b[0]).transpose(1, 2), b[1])}
'''
ENCODER = ("nn.TransformerEncoder(nn.TransformerEncoderLayer(d, 4, 64, 0.0, batch_first=True, bias=False), 1)",
           "self.body(x, mask=self.m)")
MASKS = {"bool_upper": "torch.ones(T, T, dtype=torch.bool).triu(1)",      # True = blocked (nn.MultiheadAttention)
         "bool_lower": "torch.ones(T, T, dtype=torch.bool).tril()",       # True = may attend (sdpa)
         "float_tril": "torch.tril(torch.ones(T, T))",                    # nanoGPT's 0/1 buffer
         "float_inf": "nn.Transformer.generate_square_subsequent_mask(T)"}


def masked_lm(ws: Path, name: str, mask: str, body=("SDPA()", "self.body(x)")) -> str:
    (ws / name).write_text(MASKED_LM.replace("MASK", MASKS[mask]).replace("BODY", body[0]).replace("CALL", body[1]))
    return f"{ws / name}:make_target"


def test_a_mask_of_the_wrong_kind_for_its_attention_api_is_named_with_what_it_leaves_open(workspace):
    """Dev runs dispatch_gpt_sdpa_mask_inverted (a True-means-blocked bool mask handed to scaled_dot_product_attention,
    where True means 'may attend') and weather_gpt_float_tril_mask (nanoGPT's 0/1 float tril buffer handed to
    nn.TransformerEncoder, which adds a float mask to the scores): the leak is localised to the attention, not to the
    LayerNorm after it, and the hint says what the mask leaves open and what that API expects."""
    rep = seq(workspace, masked_lm(workspace, "inverted.py", "bool_upper"))
    assert modes(rep) == ["data_leakage"] and rep.leak_module == "body", rep.text()
    assert "True at 100% of the future positions" in rep.leak_hints[0] and "inverted.py:" in rep.leak_hints[0]
    assert "is_causal=True" in rep.findings[0].fix
    rep = seq(workspace, masked_lm(workspace, "float01.py", "float_tril", ENCODER))
    assert modes(rep) == ["data_leakage"] and rep.leak_module.startswith("body.layers.0"), rep.text()
    assert "only -inf blocks" in rep.leak_hints[0] and "0..0 above the diagonal" in rep.leak_hints[0]
    # the same APIs with the mask they expect: causal, quiet
    for name, mask, body in (("sdpa_ok.py", "bool_lower", ("SDPA()", "self.body(x)")),
                             ("encoder_ok.py", "float_inf", ENCODER), ("encoder_bool.py", "bool_upper", ENCODER)):
        rep = seq(workspace, masked_lm(workspace, name, mask, body))
        assert rep.causal is True and rep.findings == [], (name, rep.text())


FORECASTER = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(3, 16, batch_first=True, bidirectional=BIDI)
        self.head = nn.Linear(32 if BIDI else 16, 1)

    def forward(self, x):
        return self.head(self.rnn(x)[0]).squeeze(-1)


def make_target():
    torch.manual_seed(0)
    series = torch.randn(8, 25, 3).cumsum(1)
    x, y = series[:, :-1], series[:, 1:, 0]   # TARGETS
    return {"model": Net(), "batch": (x, y), "loss_fn": lambda m, b: F.mse_loss(m(b[0]), b[1])}
'''


def test_a_bidirectional_rnn_asked_for_the_next_step_of_its_own_input_is_leakage(workspace):
    """Dev run bigru_load_next_hour: y[:, t] is input channel 0 at t+1 and the GRU is bidirectional, so its
    backward direction has read the answer. A one-directional GRU, or a bidirectional one whose targets are not
    the series' own next step (a tagger), is quiet."""
    def check(name, bidi, targets="series[:, 1:, 0]"):
        (workspace / name).write_text(FORECASTER.replace("BIDI", str(bidi)).replace("series[:, 1:, 0]", targets))
        return seq(workspace, f"{workspace / name}:make_target")

    rep = check("bidi.py", True)
    assert rep.forecast_channel == 0 and rep.causal is False and modes(rep) == ["data_leakage"], rep.text()
    assert "reads the value it is asked to predict" in rep.findings[0].summary and rep.findings[0].location == "rnn"
    assert "forecaster of input channel 0, sees later inputs" in rep.headline()
    rep = check("causal.py", False)
    assert rep.forecast_channel == 0 and rep.causal is True and rep.findings == [], rep.text()
    rep = check("tagger.py", True, "(series[:, 1:, 0] > 0).float()")
    assert rep.forecast_channel is None and rep.findings == [] and "not a sequence model" in rep.headline()


# ------------------------------------------------------------------ targets

def test_unshifted_targets_are_leakage_even_with_a_causal_model(workspace):
    rep = seq(workspace, gpt(workspace, "unshifted.py", targets=UNSHIFTED))
    assert rep.causal is True
    assert rep.objective == "same_position" and rep.targets_same_frac == 1.0 and rep.labels_same_frac == 1.0
    assert modes(rep) == ["data_leakage"] and "copy its input" in rep.findings[0].summary


def test_targets_cut_from_other_offsets_than_the_inputs_are_a_data_pipeline_bug(workspace):
    # nanoGPT's get_batch drawing a second torch.randint for y: y is text, but not the text after x
    other = seq(workspace, gpt(workspace, "offsets.py", targets="data[:, :-1]; y = data.roll(3, 0)[:, 1:]"))
    assert other.causal is True and other.objective == "other" and other.scored_frac == 1.0
    assert other.targets_input_tv < 0.2 and other.targets_best_shift_frac < 0.3
    assert modes(other) == ["data_pipeline"], other.text()
    assert "other places in the text" in other.findings[0].summary and "same i" in other.findings[0].fix
    same = seq(workspace, gpt(workspace, "one_offset.py"))
    assert same.objective == "next_token" and same.targets_best_shift_frac == 1.0 and same.findings == []


SEQ_FIRST_LM = """
import torch, torch.nn as nn, torch.nn.functional as F

class RNNModel(nn.Module):   # torch's word_language_model: (T, B) tokens, batch_first=False
    def __init__(self, V=40, E=32, H=48):
        super().__init__()
        self.encoder, self.rnn, self.decoder = nn.Embedding(V, E), nn.LSTM(E, H), nn.Linear(H, V)

    def forward(self, src):
        out, _ = self.rnn(self.encoder(src))
        return self.decoder(out)

def make_target():
    torch.manual_seed(0)
    text = torch.randint(0, 40, (16, 25))
    chunk = text.t().contiguous()            # (T + 1, B)
    data, target = chunk[:-1], TARGET
    return {"model": RNNModel(), "batch": (data, target), "num_classes": 40, "task": "lm",
            "loss_fn": lambda m, b: F.cross_entropy(m(b[0]).view(-1, 40), b[1].reshape(-1))}
"""


def test_a_time_first_rnn_lm_is_read_along_time_not_along_the_batch(workspace):
    """Blind dev lstm_periodic_lm_seqfirst feeds (T, B) tokens to an LSTM with batch_first=False. Read as (B, T),
    its correctly shifted targets matched the inputs "at no offset" and sequence_check called them cut from other
    places in the text (data_pipeline 0.85), and the generated test failed on the right fix. Read along time they
    are the next tokens; targets really drawn from elsewhere are still caught in that layout."""
    (workspace / "ok.py").write_text(SEQ_FIRST_LM.replace("TARGET", "chunk[1:]"))
    rep = seq(workspace, f"{workspace / 'ok.py'}:make_target")
    assert rep.tokens_shape == [16, 24] and rep.objective == "next_token" and rep.findings == [], rep.text()
    (workspace / "off.py").write_text(SEQ_FIRST_LM.replace("TARGET", "chunk.roll(5, 1)[1:]"))
    rep = seq(workspace, f"{workspace / 'off.py'}:make_target")
    assert rep.objective == "other" and modes(rep) == ["data_pipeline"], rep.text()


def test_hugging_face_labels_equal_to_input_ids_shifted_inside_the_model_are_fine(workspace):
    # labels == input_ids is the Hugging Face convention: the model shifts them; -100 marks the padding
    (workspace / "hf.py").write_text(textwrap.dedent('''
        import torch, torch.nn as nn, torch.nn.functional as F
        from types import SimpleNamespace

        class LM(nn.Module):
            def __init__(self, V=50, d=32):
                super().__init__()
                self.emb = nn.Embedding(V, d, padding_idx=0)
                self.pos = nn.Embedding(64, d)
                layer = nn.TransformerEncoderLayer(d, 4, 64, dropout=0.1, batch_first=True)
                self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
                self.head = nn.Linear(d, V)

            def forward(self, input_ids, attention_mask=None, labels=None):
                T = input_ids.shape[1]
                h = self.emb(input_ids) + self.pos(torch.arange(T))
                h = self.enc(h, mask=nn.Transformer.generate_square_subsequent_mask(T), is_causal=True)
                logits = self.head(h)
                loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1))
                return SimpleNamespace(logits=logits, loss=loss)

        def make_target():
            torch.manual_seed(0)
            ids = torch.randint(1, 50, (6, 20))
            for i in range(6):
                ids[i, 20 - 2 * (i + 1):] = 0
            labels = ids.clone()
            labels[ids == 0] = LABEL_AT_PAD
            return {"model": LM(), "batch": {"input_ids": ids, "attention_mask": (ids != 0).long(), "labels": labels}}
    '''))
    src = (workspace / "hf.py").read_text()
    (workspace / "hf.py").write_text(src.replace("LABEL_AT_PAD", "-100"))
    (workspace / "hf_pad.py").write_text(src.replace("LABEL_AT_PAD", "0"))
    ok = seq(workspace, f"{workspace / 'hf.py'}:make_target")
    assert ok.causal is True and ok.objective == "next_token" and ok.labels_same_frac == 1.0
    assert ok.pad_id == 0 and ok.pad_from == "embedding padding_idx" and ok.pad_counted_frac == 0
    assert ok.findings == [], ok.text()
    bad = seq(workspace, f"{workspace / 'hf_pad.py'}:make_target")
    assert modes(bad) == ["loss_function"] and bad.pad_counted_frac > 0.3
    assert "hf_pad.py" in bad.findings[0].location


# ------------------------------------------------------------------ padding

def test_padding_counted_in_the_loss_is_loss_function_and_ignore_index_is_quiet(workspace):
    counted = seq(workspace, gpt(workspace, "pad_counted.py", padded=True))
    assert counted.pad_id == 0 and "fills the edge" in counted.pad_from and counted.pad_frac > 0.3
    assert modes(counted) == ["loss_function"]
    f = counted.findings[0]
    assert "ignore_index=0" in f.fix and counted.pad_counted_frac > 0.3
    assert counted.ce_with_pad == pytest.approx(counted.loss, rel=1e-3) != counted.ce_without_pad
    ignored = seq(workspace, gpt(workspace, "pad_ignored.py", padded=True, ignore="ignore_index=0"))
    assert ignored.pad_id == 0 and ignored.pad_counted_frac == 0 and ignored.scored_frac < 0.7
    assert ignored.findings == [], ignored.text()


PADDED_TAGGER = """
import torch, torch.nn as nn, torch.nn.functional as F

class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 16, padding_idx=0)
        self.rnn = nn.LSTM(16, 16, batch_first=True, bidirectional=True)
        self.out = nn.Linear(32, 5)

    def forward(self, x):
        return self.out(self.rnn(self.emb(x))[0])

def make_target():
    torch.manual_seed(0)
    lengths = torch.randint(4, 13, (16,))
    x = torch.randint(1, 50, (16, 12))
    y = torch.where(torch.rand(16, 12) < 0.7, 0, torch.randint(1, 5, (16, 12)))   # tag 0 is "O", most tokens
    pad = torch.arange(12)[None, :] >= lengths[:, None]
    x[pad] = 0
    y[pad] = PAD_TAG
    return {"model": Tagger(), "batch": (x, y),
            "loss_fn": lambda m, b: F.cross_entropy(m(b[0]).transpose(1, 2), b[1], ignore_index=-100)}
"""


def test_a_taggers_tag_zero_is_not_the_pad_token_zero(workspace):
    """Blind dev lstm_slot_tagger_steplr: pad token 0, tag 0 = "O", pad positions tagged -100 and ignored. Its
    "O" targets were read as pad targets (loss_function 0.8, "64% of the positions it counts" are padding). For a
    tagger a position is padding when its input is: ignored pads are quiet, counted pads are still caught."""
    (workspace / "ignored.py").write_text(PADDED_TAGGER.replace("PAD_TAG", "-100"))
    rep = seq(workspace, f"{workspace / 'ignored.py'}:make_target")
    assert rep.objective == "other" and rep.pad_id == 0 and rep.pad_counted_frac == 0, rep.text()
    assert rep.findings == [], rep.text()
    (workspace / "counted.py").write_text(PADDED_TAGGER.replace("PAD_TAG", "0"))
    rep = seq(workspace, f"{workspace / 'counted.py'}:make_target")
    assert rep.pad_counted_frac > 0.1 and modes(rep) == ["loss_function"], rep.text()


# ------------------------------------------------------------------ what is not a causal LM

def test_a_bidirectional_tagger_sees_later_tokens_but_is_not_called_a_leak(workspace):
    (workspace / "tagger.py").write_text(textwrap.dedent('''
        import torch, torch.nn as nn, torch.nn.functional as F

        class Tagger(nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = nn.Embedding(50, 16)
                self.rnn = nn.LSTM(16, 16, batch_first=True, bidirectional=True)
                self.out = nn.Linear(32, 7)

            def forward(self, x):
                return self.out(self.rnn(self.emb(x))[0])

        def make_target():
            torch.manual_seed(0)
            x, y = torch.randint(0, 50, (4, 12)), torch.randint(0, 7, (4, 12))
            return {"model": Tagger(), "batch": (x, y),
                    "loss_fn": lambda m, b: F.cross_entropy(m(b[0]).transpose(1, 2), b[1])}
    '''))
    rep = seq(workspace, f"{workspace / 'tagger.py'}:make_target")
    assert rep.causal is False and rep.objective == "other"
    assert rep.findings == [], rep.text()


def test_a_classifier_is_not_a_sequence_model(workspace):
    rep = seq(workspace, f"{EXAMPLES / 'healthy_mlp' / 'train.py'}:make_target")
    assert rep.sequence_model is False and "no (B, T) integer token tensor" in rep.note
    assert rep.findings == [] and "not a sequence model" in rep.text()


# ------------------------------------------------------------------ schedules: functions

NANOGPT_TRAIN = '''
"""nanoGPT's train.py layout: configuration and training at module level."""
import os
import math
import torch

learning_rate = 6e-4 # max learning rate
max_iters = MAX_ITERS # total number of training iterations
decay_lr = True # whether to decay the learning rate
warmup_iters = 2000 # how many steps to warm up for
lr_decay_iters = 600000 # should be ~= max_iters per Chinchilla
min_lr = 6e-5 # minimum learning rate, should be ~= learning_rate/10 per Chinchilla
config_keys = [k for k,v in globals().items() if not k.startswith('_') and isinstance(v, (int, float, bool, str))]
exec(open('configurator.py').read()) # overrides from command line or config file
data = open(os.path.join('data', 'train.bin'), 'rb').read()   # importing this file would start training

# learning rate decay scheduler (cosine with warmup)
def get_lr(it):
    # 1) linear warmup for warmup_iters steps
    if it < WARMUP_BOUND:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    # 2) if it > lr_decay_iters, return min learning rate
    if it > lr_decay_iters:
        return min_lr
    # 3) in between, use cosine decay down to min learning rate
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    assert 0 <= decay_ratio <= 1
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio)) # coeff ranges 0..1
    return min_lr + coeff * (learning_rate - min_lr)

while True:
    raise SystemExit("training")
'''


def nanogpt(ws: Path, name: str, bound: str, max_iters: int = 600000) -> str:
    (ws / name).write_text(NANOGPT_TRAIN.replace("WARMUP_BOUND", bound).replace("MAX_ITERS", str(max_iters)))
    return f"{name}:get_lr"


def test_nanogpt_get_lr_is_evaluated_over_max_iters_without_running_train_py_and_is_quiet(workspace):
    rep = sched(workspace, lr_schedule=nanogpt(workspace, "train.py", "warmup_iters"))
    assert rep.horizon == 600000 and rep.horizon_from == "max_iters" and rep.steps_evaluated == 600001
    assert rep.base_lr == 6e-4 and rep.warmup == 2000 and rep.peak_step == 2000 and rep.final_lr == 6e-5
    assert rep.config["lr_decay_iters"] == 600000
    assert all(p.lr == float(f"{p.lr:.4g}") for p in rep.curve) and rep.curve[-1].step == 600000
    assert any("exec" in n for n in rep.notes)  # nanoGPT's configurator overrides are not seen; it says so
    assert rep.findings == [], rep.text()


def test_nanogpt_warmup_bound_on_lr_decay_iters_is_lr_too_high_at_the_warmup_return_line(workspace):
    rep = sched(workspace, lr_schedule=nanogpt(workspace, "train.py", "lr_decay_iters"))
    f = rep.findings[0]
    assert modes(rep) == ["lr_too_high"] and f.confidence >= 0.8
    assert rep.peak_lr > 100 * rep.base_lr and "step 2001" in f.summary and "warmup ends at step 2000" in f.summary
    warm_line = NANOGPT_TRAIN.splitlines().index("        return learning_rate * (it + 1) / (warmup_iters + 1)") + 1
    assert f.location == f"train.py:{warm_line}"
    assert any("return learning_rate * (it + 1)" in str(e.value) for e in f.evidence)


def test_upper_case_config_constants_are_the_same_settings(workspace):
    """Dev run dispatch_gpt_sdpa_mask_inverted: lr_at(it) reads TRAIN_ITERS / WARMUP_ITERS / LR / MIN_LR; the check
    said 'no horizon' (an error step in triage's reply) because it knew the names only in lower case."""
    src = NANOGPT_TRAIN.replace("WARMUP_BOUND", "warmup_iters").replace("MAX_ITERS", "5000")
    for name in ("learning_rate", "max_iters", "warmup_iters", "lr_decay_iters", "min_lr", "decay_lr"):
        src = src.replace(name, name.upper())
    src = src.replace("MAX_ITERS", "TRAIN_ITERS")
    (workspace / "upper.py").write_text(src)
    rep = sched(workspace, lr_schedule="upper.py:get_lr")
    assert rep.horizon == 5000 and rep.horizon_from == "train_iters" and rep.base_lr == 6e-4 and rep.warmup == 2000
    assert modes(rep) == ["lr_too_high"] and "never decays" in rep.findings[0].summary  # LR_DECAY_ITERS 600000


def test_triage_checks_schedule_functions_of_the_step_not_scheduler_factories(tmp_path):
    from tools.triage import schedule_functions
    (tmp_path / "train.py").write_text("def get_lr(it): return 1.0\ndef lr_at(step): return 1.0\n"
                                       "def make_scheduler(optimizer): return None\ndef build_lr(opt): return None\n")
    assert schedule_functions([tmp_path / "train.py"], tmp_path, limit=4) == ["train.py:get_lr", "train.py:lr_at"]


def test_a_decay_span_longer_than_the_run_never_decays(workspace):
    rep = sched(workspace, lr_schedule=nanogpt(workspace, "train.py", "warmup_iters", max_iters=5000))
    assert rep.horizon == 5000 and modes(rep) == ["lr_too_high"]
    assert "never decays" in rep.findings[0].summary and rep.findings[0].confidence < 0.5


# ------------------------------------------------------------------ schedules: schedulers from a target

SCHEDULERS = '''
import torch

def _opt(lr=0.1):
    return torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=lr, momentum=0.9)

def steplr_per_batch():    # built for 90 epochs, stepped after every one of 390 batches
    return {"scheduler": torch.optim.lr_scheduler.StepLR(_opt(), step_size=30, gamma=0.1), "max_steps": 90 * 390}

def steplr_per_epoch():
    return {"scheduler": torch.optim.lr_scheduler.StepLR(_opt(), step_size=30, gamma=0.1), "max_steps": 90}

def onecycle():
    return {"scheduler": torch.optim.lr_scheduler.OneCycleLR(_opt(), max_lr=0.5, total_steps=2000)}

def warmup_cosine():
    opt = _opt(3e-4)
    warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1e-3, total_iters=100)
    cos = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=900)
    return {"scheduler": torch.optim.lr_scheduler.SequentialLR(opt, [warm, cos], milestones=[100]), "max_steps": 1000}

def warm_restarts():
    return {"scheduler": torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(_opt(), T_0=100), "max_steps": 1000}

def cosine_past_t_max():
    return {"scheduler": torch.optim.lr_scheduler.CosineAnnealingLR(_opt(), T_max=100), "max_steps": 5000}

def no_scheduler():
    return {"optimizer": _opt()}
'''


@pytest.fixture
def schedulers(workspace):
    (workspace / "sched.py").write_text(SCHEDULERS)
    return workspace


def test_steplr_built_per_epoch_but_stepped_per_batch_is_lr_too_low_and_per_epoch_is_quiet(schedulers):
    bad = sched(schedulers, target=f"{schedulers / 'sched.py'}:steplr_per_batch")
    assert bad.source == "scheduler" and bad.schedule.startswith("StepLR(step_size=30")
    assert bad.horizon == 35100 and modes(bad) == ["lr_too_low"]
    f = bad.findings[0]
    assert "by step 90" in f.summary and "epochs" in f.fix
    ok = sched(schedulers, target=f"{schedulers / 'sched.py'}:steplr_per_epoch")
    assert ok.findings == [] and ok.final_lr == pytest.approx(1e-4)


@pytest.mark.parametrize("name", ["onecycle", "warmup_cosine", "warm_restarts"])
def test_standard_schedules_are_quiet(schedulers, name):
    rep = sched(schedulers, target=f"{schedulers / 'sched.py'}:{name}")
    assert rep.findings == [], rep.text()


def test_cosine_stepped_past_t_max_climbs_back_and_is_flagged(schedulers):
    rep = sched(schedulers, target=f"{schedulers / 'sched.py'}:cosine_past_t_max")
    assert modes(rep) == ["lr_too_high"] and "climbs back" in rep.findings[0].summary


def test_bad_schedule_inputs_say_what_to_pass(schedulers):
    with pytest.raises(TriageError, match="no 'scheduler'"):
        sched(schedulers, target=f"{schedulers / 'sched.py'}:no_scheduler")
    with pytest.raises(TriageError, match="exactly one"):
        sched(schedulers)
    (schedulers / "cond.py").write_text("model = build_model_and_load_data()\nif True:\n    total = 1000\n\n"
                                        "def get_lr(step):\n    model = 1e-3\n    return model * step / total\n")
    with pytest.raises(TriageError, match="name 'total' is not defined.*top-level constant"):
        sched(schedulers, lr_schedule="cond.py:get_lr", horizon=10)


# ------------------------------------------------------------------ over a real MCP stdio client

def test_sequence_and_schedule_tools_over_stdio(workspace, no_stray_processes):
    gpt(workspace, "leaky.py", mask=DISCARDED)
    nanogpt(workspace, "train.py", "lr_decay_iters")
    (workspace / "raises.py").write_text("def make_target():\n    raise ValueError('tokenizer.json not found')\n")
    outside = workspace.parent / "outside.py"
    outside.write_text("def get_lr(it):\n    return 1e-3\n")

    async def body():
        async with stdio_client(workspace) as c:
            listed = {t.name: t for t in (await c.list_tools()).tools}
            assert {"sequence_check", "schedule_check"} <= set(listed)
            assert all(listed[n].output_schema for n in ("sequence_check", "schedule_check"))

            r = await c.call_tool("sequence_check", {"target": "leaky.py:make_target"})
            assert not r.is_error, text_of(r)
            s = r.structured_content
            assert s["findings"][0]["failure_mode"] == "data_leakage" and s["leak_module"] == "h.0.attn"
            assert "sees the future" in text_of(r)

            r = await c.call_tool("schedule_check", {"lr_schedule": "train.py:get_lr", "horizon": 10000})
            assert not r.is_error, text_of(r)
            s = r.structured_content
            assert s["horizon"] == 10000 and s["findings"][0]["failure_mode"] == "lr_too_high"
            assert len(s["curve"]) <= 32 and s["lines"] == {}

            r = await c.call_tool("sequence_check", {"target": "raises.py:make_target"})
            assert not r.is_error
            s = r.structured_content
            assert s["error"]["phase"] == "make_target" and s["findings"][0]["failure_mode"] == "exception"
            assert "tokenizer.json" in s["error"]["message"]

            r = await c.call_tool("schedule_check", {"target": "raises.py:make_target"})
            assert not r.is_error and r.structured_content["findings"][0]["failure_mode"] == "exception"

            for tool, args in (("schedule_check", {"lr_schedule": f"{outside}:get_lr"}),
                               ("schedule_check", {"lr_schedule": "../outside.py:get_lr"}),
                               ("sequence_check", {"target": "../outside.py:get_lr"})):
                r = await c.call_tool(tool, args)
                assert r.is_error and "outside" in text_of(r), (tool, args, text_of(r))

            r = await c.call_tool("schedule_check", {"lr_schedule": "train.py:get_lr", "target": "raises.py:make_target"})
            assert r.is_error and "exactly one" in text_of(r)

    run(body)
