"""The fixed failure-mode vocabulary (DESIGN.md). A new failure mode is a row here, nothing more.

`avoid` is the anti-pattern a hasty agent reaches for instead of the real fix
(skills/training-anti-patterns); every finding carries it.
"""

import re
from typing import Literal

FailureMode = Literal[
    "exception", "shape_mismatch", "nan_inf", "exploding_gradients", "vanishing_gradients",
    "broken_graph", "frozen_params", "missing_zero_grad", "lr_too_high", "lr_too_low",
    "bad_init", "data_leakage", "data_pipeline", "loss_function", "train_eval_mode",
    "dead_units", "overfitting", "oom", "hang", "slow_throughput", "healthy",
]

# id -> (meaning, what not to do)
FAILURE_MODES: dict[str, tuple[str, str]] = {
    "exception": ("the run crashed; the traceback says why",
                  "Do not wrap the training step in try/except to keep it going; fix the line the traceback names."),
    "shape_mismatch": ("tensor shape / broadcasting error or silent broadcast",
                       "Do not reshape or .view() until the error goes away; assert the shapes you expect and fix the producer."),
    "nan_inf": ("a loss, activation or gradient became NaN/Inf",
                "Do not just lower the LR or add gradient clipping; find the op that produced the first non-finite value."),
    "exploding_gradients": ("gradient norm large / growing (>10 global, or spikes)",
                            "Do not hide it behind clip_grad_norm_ without logging the pre-clip norm; find what makes it grow."),
    "vanishing_gradients": ("gradients shrink toward zero through depth",
                            "Do not raise the LR to compensate; fix the activation, init or add skip connections / normalisation."),
    "broken_graph": ("parameters get no gradient or exactly zero",
                     "Do not add .detach() or .item() to silence autograd errors; keep the loss connected to every trainable parameter."),
    "frozen_params": ("parameters have gradients but never change",
                      "Do not switch optimizers; pass every trainable parameter to the optimizer with a non-zero lr."),
    "missing_zero_grad": ("gradients accumulate across steps",
                          "Do not lower the LR to tame the growing steps; call optimizer.zero_grad() once per step."),
    "lr_too_high": ("divergence, oscillation, hockey stick",
                    "Do not add an LR scheduler or switch optimizers first: verify correctness, then lower the LR."),
    "lr_too_low": ("slow burn; update/weight ratio far below 1e-3",
                   "Do not train longer or make the model bigger; raise the LR until the update/weight ratio is near 1e-3."),
    "bad_init": ("initial loss far above the expected chance value",
                 "Do not tune the LR to push through a bad start; fix the init or the output scale."),
    "data_leakage": ("initial loss far below chance; labels leak into inputs",
                     "Do not celebrate the low loss; find the feature that carries the label and remove it."),
    "data_pipeline": ("inputs destroyed, labels misaligned/shuffled, wrong normalisation",
                      "Do not 'normalise the data' or tune hyperparameters blindly; look at a batch and check labels match inputs."),
    "loss_function": ("wrong loss for the output (double softmax, logits vs probs, wrong sign)",
                      "Do not switch optimizers or tune the LR; give the loss the raw logits it expects with the right sign."),
    "train_eval_mode": ("dropout/batchnorm in the wrong mode",
                        "Do not remove dropout/batch-norm; call model.train() before training steps and model.eval() only for evaluation."),
    "dead_units": ("dead ReLUs / saturated activations / constant output",
                   "Do not make the model bigger; fix the init, lower the LR or use a leaky activation."),
    "overfitting": ("train good, validation bad",
                    "Do not keep training for a better validation number; add data, regularisation or stop early."),
    "oom": ("out of GPU/CPU memory",
            "Do not cast to lower precision blindly or catch the OOM; reduce batch size, accumulate gradients or checkpoint activations."),
    "hang": ("process alive, no progress",
             "Do not kill and restart blindly; take a stack dump first to see where it waits."),
    "slow_throughput": ("GPU idle, host-device sync points, data-bound",
                        "Do not buy a bigger GPU or raise the batch size first; remove .item()/print(tensor) syncs and profile the step."),
    "healthy": ("no failure found",
                "Do not start changing hyperparameters because a check passed; look at the next symptom."),
}


def avoid_for(mode: str) -> str:
    return FAILURE_MODES[mode][1]


# What torch says when tensor shapes do not fit; one classifier for every place that reads a crash message.
_SHAPE_WORDS = re.compile(r"size of tensor|shape|mat1 and mat2|must match|broadcast|Expected input batch_size|"
                          r"dimension|view size|size mismatch|target size|input size|expected input.*to have", re.I)


# Messages that print sizes but are not about operands whose shapes disagree: a view over non-contiguous
# memory (a layout/stride error: .reshape or .contiguous fixes it) and BatchNorm given a batch of one (a
# data-loader edge: drop_last fixes it). Engineers call these crashes, not shape mismatches.
_NOT_SHAPE = re.compile(r"view size is not compatible with input tensor's size and stride|"
                        r"Expected more than 1 value per channel", re.I)


def crash_mode(message: str) -> str:
    """oom for memory, shape_mismatch for the messages torch raises about shapes, exception otherwise."""
    if re.search(r"out of memory|outofmemory|DefaultCPUAllocator: can't allocate", message, re.I):
        return "oom"
    if _NOT_SHAPE.search(message):
        return "exception"
    return "shape_mismatch" if _SHAPE_WORDS.search(message) else "exception"


_KNOWN_CRASH_FIXES = [
    (re.compile(r"Expected more than 1 value per channel", re.I),
     "A batch of one row reached BatchNorm in training mode (usually the loader's last, partial batch): pass "
     "drop_last=True to the training DataLoader, or make the dataset size not leave a remainder of 1"),
    (re.compile(r"view size is not compatible with input tensor's size and stride", re.I),
     "The tensor is not contiguous after a transpose/permute: use .reshape(...) or .contiguous().view(...) at the "
     "line the traceback names"),
]


def crash_fix(message: str) -> str | None:
    """A specific fix for a crash whose message alone says what to do, else None."""
    return next((fix for pattern, fix in _KNOWN_CRASH_FIXES if pattern.search(message)), None)
