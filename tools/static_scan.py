"""Static scan: read training code with `ast` and flag the silent bugs practitioners grep for.

Each rule is one small function over a parsed file; RULES is the table of what each rule means
(failure mode, how sure a static rule can be, why it is wrong, the fix). The dataflow is
deliberately simple: within one function, a name stands for every value assigned to it there,
and calls to functions defined in the same file are followed when looking inside a training loop.
A rule fires only on a pattern that is wrong on its face; anything that needs runtime facts is
left to the probes.
"""

import ast
import re
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from pydantic import BaseModel, Field

from tools.errors import TriageError
from tools.failure_modes import FailureMode
from tools.report import Evidence, Finding, Report


@dataclass(frozen=True)
class Rule:
    id: str
    failure_mode: FailureMode
    confidence: float
    why: str
    fix: str
    avoid: str = ""  # the tempting wrong fix for this rule; empty: the failure mode's own


DISCARD_AVOID = ("Do not rewrite the layer or add more ops around it: the op is already written, only its result is "
                 "dropped; assign it (or use the in-place `_` variant).")

RULES: dict[str, Rule] = {r.id: r for r in [
    Rule("missing_zero_grad", "missing_zero_grad", 0.85,
         "this loop calls backward()/step() but never zeroes the gradients, so .grad accumulates across steps",
         "call optimizer.zero_grad(set_to_none=True) once per step (for gradient accumulation: after each optimizer.step())"),
    Rule("step_before_backward", "missing_zero_grad", 0.7,
         "optimizer.step() runs before loss.backward() in the loop, so each step applies the previous batch's gradients",
         "order each step as zero_grad() -> forward -> loss.backward() -> optimizer.step()"),
    # Labelled missing_zero_grad, not broken_graph: the graph is fine and backward() fills .grad; the
    # zero_grad call is in the wrong place, and moving it is the fix. (A runtime probe sees all-zero
    # grads at step time and may say broken_graph; this rule names the real cause.)
    Rule("zero_grad_between_backward_and_step", "missing_zero_grad", 0.8,
         "zero_grad() runs after backward() and before step(), so the optimizer always steps with zero gradients "
         "(Adam/AdamW with weight decay still shrinks the weights; nothing is learned)",
         "move zero_grad() before loss.backward() (the start of the step) or after optimizer.step()",
         "Do not conclude the graph is broken and hunt for .detach()/requires_grad: backward() works, the zeroing "
         "just erases its result; do not delete zero_grad() either (gradients would then accumulate)."),
    # The clip is there, so the loop reads as protected; it acts on gradients the step has already applied (and
    # the next backward adds to or replaces them), so no update is ever clipped.
    Rule("clip_after_step", "exploding_gradients", 0.75,
         "the gradient norm is clipped after optimizer.step(): the step has already applied the unclipped "
         "gradients, so no update is ever bounded and a spike moves the weights at full size",
         "clip between loss.backward() and optimizer.step(): backward -> clip_grad_norm_(...) -> step "
         "(after scaler.unscale_(optimizer) under AMP)",
         "Do not lower the learning rate or tighten the threshold: the clip never touches an update until it runs "
         "before the step."),
    Rule("unscaled_attention_scores", "exploding_gradients", 0.6,
         "the attention scores are not scaled by 1/sqrt(head_dim) before the softmax",
         "scale the scores before the softmax: att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1))), or use "
         "F.scaled_dot_product_attention(q, k, v, is_causal=...), which scales them itself",
         "Do not clip harder or lower the LR to calm the spikes: the softmax is saturated by unscaled scores; scale them."),
    Rule("inputs_and_targets_drawn_apart", "data_pipeline", 0.6,
         "inputs and targets are indexed by two separate random draws, so each target row belongs to another sample",
         "draw the indices once and index both with them: ix = torch.randint(len(data) - T, (B,)); "
         "x = stack([data[i:i+T] for i in ix]); y = stack([data[i+1:i+T+1] for i in ix])"),
    Rule("rows_moved_apart_from_labels", "data_pipeline", 0.6,
         "the features' rows are dropped or re-ordered (a filter, dropna, a sort, a join, a shuffle) and the labels' "
         "are not, yet the two are paired by position: each row trains on another row's label",
         "apply the same row operation to both (X, y = X[keep], y[keep]), or filter/sort the table that holds "
         "features and label, then split it into X and y",
         "Do not tune the model or the LR: the labels are noise to it. After the fix, check a few rows by hand"),
    Rule("label_changing_augmentation", "data_pipeline", 0.6,
         "a random flip or rotation of the training images keeps each image's label, but the class names are each "
         "other's image under that transform (left/right under a horizontal flip, up/down under a vertical one, "
         "h/v under a rotation): an augmentation must leave the label unchanged (Shorten & Khoshgoftaar 2019, "
         "the 'safety' of an augmentation; flipping a 6 gives a 9)",
         "drop that transform from the training pipeline, or map the label with the image (a horizontal flip turns "
         "left into right), and keep only transforms the classes are invariant to",
         "Do not tune the LR, the model or the augmentation strength: the model learns the classes the transform "
         "confuses at chance; judge the fix by those classes' accuracy on the un-augmented validation set"),
    Rule("kl_weight_grows_past_its_end", "loss_function", 0.6,
         "the KL weight is a linear ramp of the step with no cap: after the warm-up it keeps growing past its "
         "target, so the KL term swamps the reconstruction and the posterior is squeezed onto the prior "
         "(a warm-up holds beta at its end value once reached: Bowman et al. 2016; Fu et al. 2019 for cycles)",
         "cap the ramp's fraction at 1: beta = start + (end - start) * min(1.0, step / warmup_steps)",
         "Do not lower the LR or shrink the latent size: the loss rises because the KL weight keeps rising; cap it"),
    Rule("unbounded_decoder_variance", "nan_inf", 0.6,
         "a Gaussian likelihood whose variance the decoder predicts as a raw layer output: where a value is "
         "reconstructed exactly (a constant or quantised pixel) the likelihood grows without bound as that "
         "variance goes to 0, so the log-variance runs off to -inf and exp(-logvar) overflows (Mattei & Frellsen "
         "2018, the unbounded likelihood of Gaussian-decoder VAEs; Rybkin et al. 2021 bound or share it)",
         "bound the decoder's log-variance: logvar = min_logvar + F.softplus(raw - min_logvar) (or .clamp(min=-6)), "
         "or learn one shared variance, or fix it",
         "Do not lower the LR or clip the gradients: they only slow the variance down on its way to 0; bound it"),
    Rule("label_statistic_in_features", "data_leakage", 0.6,
         "a statistic fitted on every row's label (validation rows included) feeds the input features: each row's "
         "feature carries its own label, so validation scores look better than the model is (target leakage)",
         "fit label statistics (target encoding, per-group label means) on the training rows only (y[train_idx]), "
         "out of fold for the training rows themselves, and apply that table to validation and test rows"),
    Rule("softmax_into_cross_entropy", "loss_function", 0.85,
         "cross-entropy applies log-softmax itself; feeding it softmax probabilities softmaxes twice, squashing the gradients and putting a floor under the loss",
         "give CrossEntropyLoss / F.cross_entropy the raw logits; drop the Softmax from the model (apply it only for inference)"),
    Rule("softmax_into_nll_loss", "loss_function", 0.85,
         "nll_loss expects log-probabilities but gets softmax probabilities",
         "use F.log_softmax before nll_loss, or F.cross_entropy on the raw logits"),
    Rule("sigmoid_into_bce_with_logits", "loss_function", 0.85,
         "BCEWithLogitsLoss applies the sigmoid itself; feeding it sigmoid outputs applies it twice",
         "give BCEWithLogitsLoss / binary_cross_entropy_with_logits the raw logits"),
    # Below 0.5: BCELoss clamps its log at -100, so this does not NaN, and plenty of working code (the
    # DCGAN example) does it; the real cost is confidently wrong samples whose gradient is exactly 0.
    Rule("sigmoid_then_bce_loss", "loss_function", 0.45,
         "sigmoid followed by BCELoss is numerically weak: once the sigmoid saturates to exactly 0 or 1, BCELoss "
         "clamps log(0) at -100 and a confidently wrong sample gets zero gradient, so it is never corrected",
         "drop the sigmoid and use BCEWithLogitsLoss / F.binary_cross_entropy_with_logits on the logits"),
    Rule("negated_loss", "loss_function", 0.75,
         "the loss is negated, so minimising it maximises the error",
         "remove the minus sign (a loss such as cross_entropy / nll_loss / mse_loss is already the quantity to minimise)"),
    Rule("detach_in_forward", "broken_graph", 0.75,
         "the forward pass returns a value computed from a detached tensor (.detach() / .data / .item() / .numpy()), so everything before it gets no gradient",
         "keep the live tensor on the path to the output; detach only copies kept for logging"),
    Rule("loss_leaves_autograd", "broken_graph", 0.8,
         "the loss is built from a value taken out of autograd (.item() / .numpy() / .data / .detach() / torch.tensor(...)), so backward() cannot reach the parameters",
         "compute the loss from the model's output tensor directly; convert to Python numbers only for logging"),
    Rule("forward_under_no_grad", "broken_graph", 0.8,
         "the prediction the loss is computed from was produced under torch.no_grad() / inference_mode(), so it carries no graph",
         "run the forward pass used for the loss outside no_grad (keep no_grad for evaluation only)"),
    Rule("whole_model_requires_grad_false", "broken_graph", 0.6,
         "requires_grad is switched off for every parameter of the model that is being trained",
         "freeze only the submodule you mean to (model.backbone.parameters()), or remove the freeze"),
    Rule("log_of_probability", "nan_inf", 0.7,
         "log/sqrt of a softmax/sigmoid output with no clamp or epsilon: the probability underflows to exactly 0 and gives -inf, then NaN",
         "work in log space (F.log_softmax, F.logsigmoid, binary_cross_entropy_with_logits) or clamp: p.clamp(min=1e-8).log()"),
    Rule("divide_by_std_without_eps", "nan_inf", 0.7,
         "division by a standard deviation with no epsilon: a constant row has std 0 and gives 0/0 = NaN",
         "add an epsilon: / (std + 1e-5), or use nn.LayerNorm / F.layer_norm"),
    Rule("exp_without_max_subtraction", "nan_inf", 0.7,
         "exp() of unbounded values summed for a softmax/log-sum-exp: exp overflows to inf above ~88 in float32 and the result is NaN",
         "subtract the max first (z - z.max(dim, keepdim=True).values) or use torch.logsumexp / F.log_softmax"),
    Rule("eval_without_train", "train_eval_mode", 0.75,
         "the training loop puts the model in eval() mode and nothing switches it back with train(), so dropout/batch-norm train in the wrong mode",
         "call model.train() after evaluation (or at the top of every training step)"),
    # torch.optim.Optimizer docs: an optimizer updates only the parameters in its param_groups; parameters
    # unfrozen later need add_param_group (ULMFiT gradual unfreezing: Howard & Ruder 2018 unfreeze layer by layer)
    Rule("optimizer_built_before_unfreeze", "frozen_params", 0.6,
         "the optimizer is built from the parameters that have requires_grad=True at that moment, and the training "
         "loop unfreezes more parameters later: they get gradients but are in no param group, so optimizer.step() "
         "never updates them and the run stays a probe on the frozen part",
         "pass every parameter to the optimizer up front (a frozen one has grad None and is skipped until it is "
         "unfrozen), or call optimizer.add_param_group(...) with the newly unfrozen parameters at each unfreeze "
         "(and rebuild the scheduler over the new groups)",
         "Do not raise the LR or train longer: the unfrozen layers never move at any LR; check they are in the "
         "optimizer's param_groups."),
    # Vincent et al. 2008 (denoising autoencoders): the corrupted input goes in, the clean input is the target
    Rule("denoising_target_is_corrupted", "loss_function", 0.65,
         "the reconstruction is scored against the corrupted input, the same tensor the model reads: the identity "
         "map minimises that loss, so the model learns to copy its noise and removes none of it (the training loss "
         "falls, the error against the clean signal settles at the noise level)",
         "score the reconstruction against the clean input the corruption was applied to: loss(model(x_noisy), x)",
         "Do not read the falling training loss as progress, or add capacity or epochs: the target is wrong."),
    # torch.nn.Module.requires_grad_ docs: a Module has no requires_grad attribute; assigning one sets a plain
    # Python attribute and no parameter changes (Tensor.requires_grad is per tensor)
    Rule("requires_grad_set_on_module", "frozen_params", 0.7,
         "`requires_grad` is assigned on a module, not on its parameters: nn.Module has no such attribute, so this "
         "sets a plain Python attribute and every parameter keeps the flag it had (a frozen block stays frozen, or "
         "a block meant to be frozen keeps training)",
         "call module.requires_grad_(True/False), or set p.requires_grad on each of module.parameters()",
         "Do not raise the LR or add epochs for the layers that 'were unfrozen': their parameters never were."),
    # torch.nn.Module.eval docs: dropout and batch norm behave differently in evaluation; no_grad does not switch them
    # torch.nn.functional.dropout(input, p=0.5, training=True, inplace=False): the functional form does not see
    # the module's mode; nn.Dropout does
    Rule("functional_dropout_always_on", "train_eval_mode", 0.6,
         "F.dropout is called inside a module without training=self.training; its training argument defaults to "
         "True, so model.eval() does not switch it off and every evaluation (and prediction) runs with dropout on: "
         "validation is noisy and pessimistic",
         "pass training=self.training (or use an nn.Dropout module, which follows model.train()/eval())",
         "Do not lower the dropout rate or tune to the noisy validation curve; make evaluation deterministic first."),
    Rule("evaluation_in_train_mode", "train_eval_mode", 0.6,
         "evaluation runs under no_grad, but nothing in this file calls model.eval(): dropout stays on and BatchNorm "
         "normalises with each validation batch's own statistics (and updates its running ones with them), so the "
         "validation numbers are noisy and pessimistic",
         "call model.eval() before evaluating and model.train() after it (no_grad only stops the gradient)",
         "Do not tune dropout or the LR to the noisy validation curve; measure it in eval mode first."),
    Rule("optimizer_over_submodule", "frozen_params", 0.75,
         "the optimizer is built over one submodule's parameters, so the rest of the model gets gradients but never changes",
         "build the optimizer over model.parameters() (freeze parts deliberately with requires_grad_(False))"),
    Rule("optimizer_over_frozen_part", "frozen_params", 0.8,
         "the optimizer is built only over a submodule that is frozen (requires_grad=False), so it holds no trainable "
         "parameter: the parts that do get gradients never change",
         "build the optimizer over model.parameters() (keeping only p.requires_grad ones), so the new head is in it",
         "Do not unfreeze the backbone or raise the LR; put the trainable parameters into the optimizer."),
    Rule("zero_learning_rate", "frozen_params", 0.8,
         "a learning rate of 0 means those parameters never change",
         "give every trained parameter group a non-zero learning rate"),
    Rule("view_after_permute", "exception", 0.8,
         ".view() on a permuted/transposed tensor: the memory is no longer contiguous, so view raises (or, after .contiguous() elsewhere, silently mixes dimensions)",
         "use .reshape(...) or .contiguous().view(...)"),
    # low: a sync per step is everywhere in working code (nanoGPT's loss.item()) and costs little on a CPU
    Rule("host_sync_every_step", "slow_throughput", 0.15,
         ".item() / .cpu() / .numpy() / print(tensor) on every iteration forces a host-device sync each step",
         "log every k steps (inside `if step % k == 0`) or accumulate on the device and sync once"),
    # Off by one step of the schedule: for the usual decaying schedules each step runs at the LR of the next
    # one (too low by one step; PyTorch warns about it); small, so confidence stays low.
    Rule("scheduler_step_before_optimizer_step", "lr_too_low", 0.3,
         "scheduler.step() runs before optimizer.step(), so the first LR of the schedule is skipped and every step "
         "uses the next step's (for a decaying schedule, lower) learning rate; PyTorch warns about this order",
         "call optimizer.step() first, then scheduler.step()",
         "Do not retune the LR or the schedule over this; just swap the two calls (the effect is one schedule step)."),
    # A schedule sized in epochs but stepped per batch decays (or, for cosine, cycles) after that many batches.
    Rule("epoch_schedule_stepped_per_batch", "lr_too_low", 0.6,
         "the scheduler's period is given in epochs but scheduler.step() runs once per batch, so the schedule "
         "finishes after that many batches: the LR decays to its floor (cosine: cycles) long before training ends",
         "step this scheduler once per epoch (after the batch loop), or size it in optimizer steps "
         "(epochs * steps_per_epoch)",
         "Do not raise the base LR to make up for the decay; step the scheduler at the granularity it was sized in."),
    # PyTorch ReduceLROnPlateau docs: "In min mode, lr will be reduced when the quantity monitored has stopped
    # decreasing; in max mode ... stopped increasing" (mode defaults to "min"). Watching a loss in "max" mode (or
    # an accuracy in "min" mode) reads every improvement as a plateau, so the LR is cut every `patience` epochs.
    Rule("plateau_mode_against_metric", "lr_too_low", 0.65,
         "ReduceLROnPlateau watches its metric in the wrong direction: every epoch the run improves counts as "
         "an epoch without improvement, so the LR is cut by `factor` every `patience` epochs while the run is "
         "still learning, and it crawls to min_lr",
         "set mode='min' for a loss or an error, mode='max' for an accuracy or a score (the mode must match the "
         "value passed to scheduler.step)",
         "Do not raise the base LR or the patience to make up for it: the scheduler cuts the LR because the run "
         "improves; match its mode to the metric."),
    # torch.optim.swa_utils.AveragedModel averages parameters only and documents that batch-norm buffers need
    # update_bn (or use_buffers=True); timm's ModelEmaV2 averages the whole state_dict for this reason
    Rule("weight_average_skips_buffers", "train_eval_mode", 0.6,
         "the weight-averaged (EMA) copy of the model averages its parameters but never its buffers: batch-norm "
         "running mean and variance stay at the values it was copied with, so the averaged model evaluates with "
         "statistics that match no data it sees",
         "average the state_dict (parameters and buffers; copy integer buffers such as num_batches_tracked), or "
         "copy model.buffers() into the average after each update, or run torch.optim.swa_utils.update_bn before "
         "evaluating",
         "Do not tune the EMA decay or the LR: the averaged weights are fine, its normalisation statistics are not"),
    Rule("learning_rate_as_lambda_factor", "lr_too_low", 0.6,
         "LambdaLR multiplies the optimizer's LR by what lr_lambda returns, but this lr_lambda returns a learning "
         "rate (it is built from the same LR the optimizer was given): the LR actually used is that LR squared, "
         "e.g. 1e-3 -> 1e-6, and the run barely moves",
         "make lr_lambda return a factor (its value divided by the base LR, peaking at 1.0), or set the LR in "
         "optimizer.param_groups yourself each step instead of through LambdaLR",
         "Do not raise the base LR to make up for it: the product is LR squared at any LR; return a factor."),
    # lr_too_high, not exploding_gradients: the summed gradient is a fixed k times the mean, so the real
    # fault is an effective step k times too large (SGD moves k times further). A grad-norm probe sees the
    # k-times norm, but nothing grows step over step. Adam-family optimizers divide the scale out (left:
    # a k-times tighter clip threshold and a smaller eps), so their hits are less sure.
    Rule("accumulation_loss_not_divided", "lr_too_high", 0.7,
         "gradients are accumulated over k micro-batches (one optimizer.step() every k backward() calls) but the "
         "loss is not divided by k, so the accumulated gradient is k times the mean and each update k times too large",
         "divide the loss before backward: loss = loss / accum_steps (and multiply it back only for logging)",
         "Do not lower the learning rate by k to compensate; scale the loss so the gradient is the mean over the accumulated batch."),
    # The zero_grad is misplaced, as in zero_grad_between_backward_and_step: same label.
    Rule("zero_grad_inside_accumulation", "missing_zero_grad", 0.75,
         "gradients are zeroed on every micro-batch while optimizer.step() runs only every k micro-batches, so only "
         "the last micro-batch's gradient reaches the update and the other k-1 backward passes are wasted",
         "zero the gradients once per optimizer step: right after optimizer.step() (or before the first micro-batch)",
         "Do not remove zero_grad() altogether (gradients would then pile up across steps); move it next to the step."),
    # data_leakage: the answer is in the input. With a causal model each position sees its own target token,
    # so the loss falls toward 0 while the model learns to copy, and generation is garbage.
    Rule("targets_are_unshifted_inputs", "data_leakage", 0.8,
         "the language-model targets are the input tokens at the same positions (no shift by one anywhere), so "
         "each position is asked to predict the token it is given: the loss collapses toward 0 and nothing about "
         "next-token prediction is learned",
         "shift by one: x, y = data[i:i + T], data[i + 1:i + T + 1] (or logits[:, :-1] against tokens[:, 1:]); "
         "Hugging Face *ForCausalLM models shift labels=input_ids themselves, so pass labels= instead of your own loss",
         "Do not read the near-zero loss as a well-trained model or lower the LR; shift the targets by one token."),
    Rule("kl_against_mean_reconstruction", "loss_function", 0.6,
         "the reconstruction term is averaged over every element of the input (a loss with reduction='mean', the "
         "default) while the KL is summed over the latent dimensions: against the ELBO, whose log-likelihood is "
         "summed over the data dimensions (Kingma & Welling 2014; the PyTorch VAE example sums its BCE with "
         "reduction='sum'), the KL weighs as many times too much as each sample has elements, so the encoder's "
         "cheapest move is to match the prior: the KL collapses toward 0, the latents carry nothing and the "
         "reconstructions are the blurry average",
         "sum the reconstruction over each sample's elements and average over the batch, as the KL is: "
         "F.binary_cross_entropy_with_logits(logits, x, reduction='none').flatten(1).sum(1).mean() (or "
         "reduction='sum' / batch size); if a smaller KL weight is what you mean, write it as an explicit beta",
         "Do not add a KL warm-up, free bits or a smaller LR first: the reductions weight the KL by the input size"),
    Rule("kl_subtracted_from_loss", "loss_function", 0.7,
         "the KL term is subtracted from the loss: the VAE loss is -ELBO = reconstruction + KL, so minimising "
         "reconstruction - KL maximises the KL (mu and log-variance run off and the loss goes to -inf)",
         "add it: loss = recon + kld (with a weight if you mean one: recon + beta * kld)",
         "Do not clamp the log-variance or lower the LR to stop the blow-up; fix the sign of the KL term."),
    # missing_zero_grad in its plainest form: the gradients are not cleared between two optimizer steps.
    Rule("step_every_micro_batch", "missing_zero_grad", 0.75,
         "optimizer.step() runs on every micro-batch but zero_grad() only every k micro-batches, so each step "
         "re-applies the gradients of the earlier micro-batches in the window: the parameters move far further than "
         "intended (and any clipping inside the accumulation block is skipped by most steps)",
         "move optimizer.step() (with the clipping) into the accumulation block, next to zero_grad()",
         "Do not lower the learning rate to tame the blow-up; step once per accumulation window."),
    # The schedule runs k times too fast: for the usual warmup + decay the warmup is over after 1/k of its
    # steps and the LR reaches its floor 1/k of the way into training -> lr_too_low for most of the run.
    Rule("scheduler_stepped_per_micro_batch", "lr_too_low", 0.6,
         "scheduler.step() runs on every micro-batch while optimizer.step() runs once per k, so a schedule sized in "
         "optimizer steps advances k times too fast: warmup ends early and the LR decays to its floor a k-th of the "
         "way into training",
         "step the scheduler inside the accumulation block, right after optimizer.step()",
         "Do not stretch the schedule or raise the base LR to compensate; step it once per optimizer step."),
    # A discarded out-of-place op: the statement computes a new tensor and drops it, so the tensor the
    # code goes on using is the unchanged one. The failure mode is what that unchanged tensor causes:
    Rule("discarded_causal_mask", "data_leakage", 0.85,  # every position sees the future tokens
         "the masked attention scores are thrown away (masked_fill/where return a new tensor), so softmax runs "
         "on unmasked scores: each position attends to future tokens and the loss drops far below what the model can really do",
         "assign the result: att = att.masked_fill(mask, float('-inf')) (or use the in-place masked_fill_)",
         "Do not celebrate the low training loss or blame the tokenizer; the causal mask is simply not applied."),
    Rule("discarded_mask", "data_pipeline", 0.6,  # padding attended to, masked-out values kept
         "a masking op's result is thrown away (masked_fill/where/tril return a new tensor), so the values meant "
         "to be masked out (padding, invalid positions) flow on unchanged",
         "assign the result back (x = x.masked_fill(mask, value)) or use the in-place masked_fill_",
         DISCARD_AVOID),
    Rule("discarded_device_move", "exception", 0.6,  # "Expected all tensors to be on the same device"
         "tensor.to(device) / .cuda() returns a moved copy and leaves the original where it was (only nn.Module.to "
         "moves in place), so this tensor stays on the CPU and the first op with the model's weights raises a device mismatch",
         "assign it: x = x.to(device) (for a batch: inputs, targets = inputs.to(device), targets.to(device))",
         "Do not move the model back to the CPU or wrap the step in try/except; assign the moved tensor."),
    Rule("discarded_dtype_cast", "exception", 0.55,  # "expected scalar type Long/Float"
         "a dtype cast (.float() / .long() / .half() / .type(...)) on a tensor returns a new tensor; the original keeps "
         "its dtype, so the loss or matmul that needed the cast gets the wrong dtype (an error, or integer math)",
         "assign it: y = y.long() / x = x.float()",
         DISCARD_AVOID),
    Rule("discarded_reshape", "shape_mismatch", 0.6,  # the next op sees the old layout
         "a reshape/transpose/squeeze/contiguous is thrown away, so the next line gets the old shape or layout: a "
         "shape error, a .view() on non-contiguous memory, or a silent broadcast",
         "assign the result: x = x.transpose(1, 2) / x = x.contiguous()",
         DISCARD_AVOID),
    Rule("discarded_clamp", "nan_inf", 0.6,  # the epsilon guard never applies
         "a clamp with an epsilon bound is thrown away (clamp returns a new tensor), so the guard never applies and "
         "log/division of the exact zeros it was meant to stop gives -inf/NaN",
         "assign it: p = p.clamp(min=eps) (or use the in-place clamp_)",
         DISCARD_AVOID),
    Rule("discarded_weight_clip", "exploding_gradients", 0.6,  # a WGAN critic without its Lipschitz bound
         "weight clipping with p.data.clamp(...) / p.clamp(...) returns new tensors, so the weights are never "
         "clipped and the critic's weights and gradients grow without the bound",
         "use the in-place p.data.clamp_(-c, c) inside torch.no_grad()",
         DISCARD_AVOID),
    Rule("discarded_dropout", "overfitting", 0.5,  # no regularisation at all
         "F.dropout(x, ...) returns a new tensor and this result is thrown away, so the layer trains without dropout",
         "assign it: x = F.dropout(x, p, training=self.training), or use an nn.Dropout module",
         DISCARD_AVOID),
    Rule("discarded_transform", "data_pipeline", 0.5,  # the values flowing on are not the ones the code means
         "an out-of-place op's result is thrown away, so the tensor used afterwards is the untransformed one "
         "(un-normalized inputs, a missing activation or residual term)",
         "assign the result (x = F.normalize(x) / x = x.add(y)) or use the in-place `_` variant",
         DISCARD_AVOID),
    # torch.utils.data.distributed.DistributedSampler docs: "calling set_epoch() at the beginning of each epoch
    # before creating the DataLoader iterator is necessary to make shuffling work properly across multiple epochs"
    Rule("sampler_without_set_epoch", "data_pipeline", 0.7,
         "DistributedSampler shuffles with seed + epoch, and nothing here calls set_epoch(): every epoch sees the "
         "samples in the same order on every rank, as if shuffling were off after the first epoch",
         "call sampler.set_epoch(epoch) at the start of each epoch, before iterating the DataLoader",
         "Do not pass shuffle=True to the DataLoader as well (it refuses a sampler with shuffle) or reseed torch "
         "per epoch; the sampler's epoch is what varies the order."),
    # torch.nn.SyncBatchNorm docs: statistics over the whole mini-batch across processes; with DDP each rank's
    # BatchNorm otherwise normalises over its own per-rank batch only
    Rule("batchnorm_without_sync", "train_eval_mode", 0.5,
         "BatchNorm under DistributedDataParallel normalises each rank's own batch, and the per-rank batch here is "
         "tiny: the batch statistics are noisy and differ from the running statistics used in eval",
         "convert the model before wrapping it: model = nn.SyncBatchNorm.convert_sync_batchnorm(model) (or raise "
         "the per-rank batch, or use GroupNorm/LayerNorm)",
         "Do not switch BatchNorm to eval mode during training to hide the noise; synchronise the statistics."),
]}


class ScanIssue(BaseModel):
    """One rule hit: where, which rule, and what to do about it."""

    file: str
    line: int
    rule: str
    failure_mode: FailureMode
    confidence: float
    why: str
    fix: str
    source: str = Field("", description="the source line, stripped")


class StaticScanReport(Report):
    files_scanned: int = 0
    issues: list[ScanIssue] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list,
                              description="files that could not be read or parsed (and rules that failed on a file), with the reason")
    skipped: list[str] = Field(default_factory=list,
                               description="entries of a scanned folder left unread: symlinks out of it, FIFOs, dangling links")

    def headline(self) -> str:
        s = f"static scan: {self.files_scanned} file(s), {len(self.issues)} issue(s)"
        if self.errors:
            s += f", {len(self.errors)} error(s): {'; '.join(self.errors[:3])}"
        if self.skipped:
            s += f", {len(self.skipped)} entr{'y' if len(self.skipped) == 1 else 'ies'} skipped (links out of the folder, non-regular files)"
        return s


# ---------------------------------------------------------------------------------------------
# vocabulary

OPTIMIZERS = {"SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam", "RAdam",
              "LBFGS", "SparseAdam", "ASGD", "Rprop", "Adafactor", "Lion", "Muon"}
LOSS_FUNCS = {"cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
              "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div", "soft_margin_loss",
              "CrossEntropyLoss", "NLLLoss", "MSELoss", "L1Loss", "SmoothL1Loss", "HuberLoss", "BCELoss",
              "BCEWithLogitsLoss", "KLDivLoss"}
CE = {"cross_entropy", "CrossEntropyLoss"}
NLL = {"nll_loss", "NLLLoss"}
BCE = {"binary_cross_entropy", "BCELoss"}
BCE_LOGITS = {"binary_cross_entropy_with_logits", "BCEWithLogitsLoss"}
PASSTHROUGH = {"view", "reshape", "squeeze", "unsqueeze", "flatten", "float", "double", "half", "to",
               "contiguous", "permute", "transpose", "clone", "gather", "index_select", "masked_select",
               "cuda", "type", "expand", "expand_as", "view_as", "reshape_as"}
LEAVES_AUTOGRAD = {"item", "numpy", "tolist"}
SYNC_METHODS = {"item", "cpu", "numpy", "tolist"}
NO_GRAD = {"no_grad", "inference_mode"}
GUARDS = {"clamp", "clamp_min", "clamp_", "clip", "maximum", "where", "nan_to_num"}


def _disables_grad(expr: ast.AST) -> bool:
    """torch.no_grad(), torch.inference_mode(), torch.set_grad_enabled(False): as a `with` or a decorator."""
    return _name(expr) in NO_GRAD or (_name(expr) == "set_grad_enabled" and "False" in _src(expr))


def _name(node: ast.AST) -> str:
    """The last name of a call target or expression: torch.nn.functional.softmax -> softmax."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def _method_call(node: ast.AST, *names: str) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in names


def _src(node: ast.AST) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # unparse can fail on odd nodes; a rule never needs the text that badly
        return ""


def _is_eps(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) or \
        "eps" in _src(node).lower() or "tiny" in _src(node).lower()


def _guarded(expr: ast.AST) -> bool:
    """Does the expression clamp or add an epsilon somewhere?"""
    for n in ast.walk(expr):
        if isinstance(n, ast.Call) and _name(n) in GUARDS:
            return True
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Add) and (_is_eps(n.left) or _is_eps(n.right)):
            return True
    return False


# ---------------------------------------------------------------------------------------------
# one parsed file with its scopes, assignments and training loops

SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)
NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
LOOPS = (ast.For, ast.While, ast.AsyncFor)


def _in_scope(root: ast.AST) -> Iterator[ast.AST]:
    """Every node under `root` without entering nested functions, classes or lambdas."""
    stack = list(ast.iter_child_nodes(root))
    while stack:
        n = stack.pop()
        yield n
        if not isinstance(n, NESTED):
            stack.extend(ast.iter_child_nodes(n))


class ParsedFile:
    def __init__(self, path: str, text: str, tree: ast.Module):
        self.path, self.text, self.lines, self.tree = path, text, text.splitlines(), tree
        self.nodes = list(ast.walk(tree))
        self.parent: dict[ast.AST, ast.AST] = {}
        for n in self.nodes:
            for c in ast.iter_child_nodes(n):
                self.parent[c] = n
        self.functions: dict[str, ast.AST] = {}
        self.scope_of: dict[ast.AST, ast.AST] = {}
        self.assigned: dict[ast.AST, dict[str, list[ast.AST]]] = {}
        for scope in [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
            if scope is not tree:
                self.functions.setdefault(scope.name, scope)
            table: dict[str, list[ast.AST]] = {}
            for n in _in_scope(scope):
                self.scope_of[n] = scope
                for key, value in self._bindings(n):
                    table.setdefault(key, []).append(value)
            self.assigned[scope] = table
        self.imported = {(a.asname or a.name).split(".")[0] for n in self.nodes if isinstance(n, (ast.Import, ast.ImportFrom))
                         for a in n.names}
        self.loop_tensors: dict[ast.AST, set[str]] = {}  # scope -> names unpacked from a loader (a cache)
        self.loss_objects = self._loss_objects()
        self.prob_models = self._probability_models()

    @staticmethod
    def _bindings(n: ast.AST) -> Iterator[tuple[str, ast.AST]]:
        if isinstance(n, ast.Assign):
            pairs = [(t, n.value) for t in n.targets]
        elif isinstance(n, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)) and n.value is not None:
            pairs = [(n.target, n.value)]
        elif isinstance(n, (ast.For, ast.AsyncFor)):
            pairs = [(n.target, n.iter)]
        elif isinstance(n, ast.withitem) and n.optional_vars is not None:
            pairs = [(n.optional_vars, n.context_expr)]
        else:
            return
        for target, value in pairs:
            if isinstance(target, (ast.Tuple, ast.List)):
                same = isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts)
                for i, t in enumerate(target.elts):
                    if isinstance(t, (ast.Name, ast.Attribute)):
                        yield _src(t), value.elts[i] if same else value
            elif isinstance(target, (ast.Name, ast.Attribute)):
                yield _src(target), value

    def seg(self, node: ast.AST) -> str:
        """The node's text as the user wrote it (-1e9 stays -1e9)."""
        try:
            return ast.get_source_segment(self.text, node) or _src(node)
        except Exception:  # noqa: BLE001 - odd positions; the unparsed form is still right
            return _src(node)

    def line(self, node_or_line) -> tuple[int, str]:
        ln = node_or_line if isinstance(node_or_line, int) else getattr(node_or_line, "lineno", 1)
        return ln, self.lines[ln - 1].strip() if 0 < ln <= len(self.lines) else ""

    def values_of(self, expr: ast.AST) -> list[ast.AST]:
        """The expressions assigned (in the same function) to the name or attribute `expr`."""
        if not isinstance(expr, (ast.Name, ast.Attribute)):
            return []
        scope = self.scope_of.get(expr, self.tree)
        return self.assigned.get(scope, {}).get(_src(expr), []) or \
            (self.assigned[self.tree].get(_src(expr), []) if scope is not self.tree else [])

    def closure(self, expr: ast.AST, limit: int = 60, indices: bool = True, model_inputs: bool = True) -> list[ast.AST]:
        """`expr` and, transitively, every value assigned to the names it reads. indices=False: not the
        names only used as an index (data[i:i + T]); model_inputs=False: not what a model call is fed
        (model(x): x is data, and detaching data cuts nothing)."""
        out, seen, todo = [], set(), [expr]
        while todo and len(out) < limit:
            e = todo.pop()
            out.append(e)
            for n in (ast.walk(e) if indices and model_inputs else _walk_values(e, model_inputs)):
                if isinstance(n, (ast.Name, ast.Attribute)) and isinstance(getattr(n, "ctx", None), ast.Load):
                    key = (self.scope_of.get(n), _src(n))
                    if key not in seen:
                        seen.add(key)
                        values = self.values_of(n)
                        if not indices:  # judging a cut: what was assigned before this use, when there is such
                            values = [v for v in values if v.lineno <= n.lineno] or values
                        todo.extend(values)
        return out

    def in_no_grad(self, node: ast.AST) -> bool:
        n = self.parent.get(node)
        while n is not None and not isinstance(n, SCOPES):
            if isinstance(n, ast.With) and any(_disables_grad(i.context_expr) for i in n.items):
                return True
            n = self.parent.get(n)
        return False

    def under_if(self, node: ast.AST, stop: ast.AST) -> bool:
        n = self.parent.get(node)
        while n is not None and n is not stop:
            if isinstance(n, (ast.If, ast.IfExp, ast.Try)):
                return True
            n = self.parent.get(n)
        return False

    # --- what the file defines

    def _loss_objects(self) -> dict[str, str]:
        """Names bound to loss modules: criterion = nn.CrossEntropyLoss() -> {"criterion": "CrossEntropyLoss"}."""
        out = {}
        for table in self.assigned.values():
            for key, values in table.items():
                for v in values:
                    if isinstance(v, ast.Call) and _name(v) in LOSS_FUNCS and _name(v)[0].isupper():
                        out[key] = _name(v)
        return out

    def _probability_models(self) -> dict[str, str]:
        """Models defined here whose output is already a probability: name -> "softmax" | "sigmoid"."""
        ends: dict[str, str] = {}  # class / factory / variable name -> kind
        last = {"Softmax": "softmax", "Sigmoid": "sigmoid"}
        for n in self.nodes:
            if isinstance(n, ast.Call) and _name(n) == "Sequential" and n.args and _name(n.args[-1]) in last:
                kind = last[_name(n.args[-1])]
                parent = self.parent.get(n)
                if isinstance(parent, ast.Assign):
                    for t in parent.targets:
                        ends[_src(t).removeprefix("self.")] = kind
                elif isinstance(parent, ast.Return) and self.scope_of.get(parent) in self.functions.values():
                    ends[self.scope_of[parent].name] = kind
        for _ in range(2):  # after every Sequential is known; twice, for a class built from another one
            for n in self.nodes:
                if isinstance(n, ast.ClassDef):
                    for f in n.body:
                        if isinstance(f, ast.FunctionDef) and f.name == "forward":
                            for r in _in_scope(f):
                                if isinstance(r, ast.Return) and r.value is not None:
                                    kind = self._prob_kind(r.value, ends)
                                    if kind:
                                        ends[n.name] = kind
        for table in self.assigned.values():  # model = build_model() / model = Net()
            for key, values in table.items():
                for v in values:
                    if isinstance(v, ast.Call) and _name(v) in ends:
                        ends[key.removeprefix("self.")] = ends[_name(v)]
        return ends

    def _prob_kind(self, expr: ast.AST, models: dict[str, str], depth: int = 0) -> str:
        """"softmax" / "log_softmax" / "sigmoid" if `expr` is (a reshaped view of) such an output."""
        if depth > 8:
            return ""
        if isinstance(expr, ast.Subscript):
            return self._prob_kind(expr.value, models, depth + 1)
        if isinstance(expr, (ast.Name, ast.Attribute)):
            kinds = {self._prob_kind(v, models, depth + 1) for v in self.values_of(expr)} - {""}
            return kinds.pop() if len(kinds) == 1 else ""
        if not isinstance(expr, ast.Call):
            return ""
        name = _name(expr)
        if name in ("softmax", "log_softmax", "sigmoid"):
            return name
        if isinstance(expr.func, ast.Attribute) and name in PASSTHROUGH:
            return self._prob_kind(expr.func.value, models, depth + 1)
        callee = _src(expr.func).removeprefix("self.")
        if callee == "self":  # x_hat = self(x) inside a (Lightning-style) module: that class's own output
            owner = self.parent.get(expr)
            while owner is not None and not isinstance(owner, ast.ClassDef):
                owner = self.parent.get(owner)
            callee = owner.name if owner is not None else callee
        if callee in models:
            return models[callee]
        if models and isinstance(expr.func, (ast.Name, ast.Attribute)) and any(
                w in callee.lower() for w in ("model", "net")):
            return next(iter(set(models.values()))) if len(set(models.values())) == 1 else ""
        return ""

    def loss_kind(self, call: ast.Call) -> str:
        """The loss a call computes: F.cross_entropy(...) -> "cross_entropy", criterion(...) -> "CrossEntropyLoss"."""
        name = _name(call)
        if name in LOSS_FUNCS and not name[0].isupper():
            return name
        if isinstance(call.func, ast.Call) and _name(call.func) in LOSS_FUNCS:  # nn.MSELoss()(a, b)
            return _name(call.func)
        return self.loss_objects.get(_src(call.func), "")

    def first_arg(self, call: ast.Call) -> ast.AST | None:
        if call.args:
            return call.args[0]
        for kw in call.keywords:
            if kw.arg in ("input", "logits", "y_pred"):
                return kw.value
        return None

    # --- training loops

    def expand(self, root: ast.AST) -> list[ast.AST]:
        """Nodes under `root`, plus the bodies of same-file functions it calls (transitively)."""
        out, seen, todo = [], set(), [root]
        while todo:
            r = todo.pop()
            for n in _in_scope(r):
                out.append(n)
                if isinstance(n, ast.Call):
                    target = n.func.id if isinstance(n.func, ast.Name) else (
                        n.func.attr if isinstance(n.func, ast.Attribute) and _src(n.func.value) == "self" else "")
                    f = self.functions.get(target)
                    if f is not None and f not in seen:
                        seen.add(f)
                        todo.append(f)
        return out

    @cached_property
    def _stepping_loops(self) -> list[tuple[ast.AST, list[ast.AST]]]:
        """Loops that (through same-file calls) run an optimizer step, with their expanded nodes."""
        loops = [(n, self.expand(n)) for n in self.nodes if isinstance(n, LOOPS)]
        return [(loop, nodes) for loop, nodes in loops if any(_is_optimizer_step(c) for c in nodes)]

    def training_loops(self) -> list[tuple[ast.AST, list[ast.AST]]]:
        """The innermost stepping loops: where one training step happens."""
        stepping = self._stepping_loops
        return [(loop, nodes) for loop, nodes in stepping
                if not any(other is not loop and other in nodes for other, _ in stepping)]

    def outer_training_loops(self) -> list[tuple[ast.AST, list[ast.AST]]]:
        """The outermost stepping loops: the whole run, epochs included."""
        stepping = self._stepping_loops
        return [(loop, nodes) for loop, nodes in stepping
                if not any(other is not loop and loop in other_nodes for other, other_nodes in stepping)]


def _is_optimizer_step(n: ast.AST) -> bool:
    if not _method_call(n, "step"):
        return False
    receiver = _src(n.func.value).lower()
    if "sched" in receiver or "env" in receiver:
        return False
    return "optim" in receiver or receiver.split(".")[-1].startswith("opt") or (receiver.endswith("scaler") and bool(n.args))


def _is_backward(n: ast.AST) -> bool:
    return _method_call(n, "backward") or (isinstance(n, ast.Call) and _src(n.func).endswith("autograd.backward"))


def _is_clip(n: ast.AST) -> bool:
    return isinstance(n, ast.Call) and _src(n.func).split(".")[-1] in ("clip_grad_norm_", "clip_grad_value_",
                                                                        "clip_grad_norm")


def _is_zeroing(n: ast.AST) -> bool:
    if _method_call(n, "zero_grad"):
        return True
    if _method_call(n, "zero_", "detach_") and isinstance(n.func.value, ast.Attribute) and n.func.value.attr == "grad":
        return True
    if isinstance(n, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == "grad" for t in n.targets):
        return True
    return False


def _backward_root(call: ast.Call) -> ast.AST | None:
    """loss.backward() -> loss; scaler.scale(loss).backward() -> loss; torch.autograd.backward(loss) -> loss."""
    if _method_call(call, "backward"):
        r = call.func.value
        if _method_call(r, "scale") and r.args:
            return r.args[0]
        return r
    return call.args[0] if call.args else None


# ---------------------------------------------------------------------------------------------
# the rules: each takes a parsed file and returns [(node or line, rule id)]

# (where, rule id) or (where, rule id, {"why": ..., "fix": ..., "confidence": ...}): a hit may say more
# than its table row (the lines involved, the exact rewrite) or be surer or less sure than the row.
Hit = tuple


def rule_missing_zero_grad(f: ParsedFile) -> list[Hit]:
    hits = []
    for loop, nodes in f.training_loops():
        # distributed autograd keeps gradients per context, not in .grad: nothing to zero
        backs = [n for n in nodes if _is_backward(n) and "dist_autograd" not in _src(n.func)]
        if backs and not any(_is_zeroing(n) for n in nodes):
            where = next((n for n in nodes if _is_backward(n)), loop)
            hits.append((where, "missing_zero_grad"))
    return hits


def _stepped_optimizer(step: ast.Call) -> str:
    """optimizer.step() -> "optimizer"; scaler.step(opt) -> "opt"."""
    if step.args and _src(step.func.value).lower().endswith("scaler"):
        return _src(step.args[0])
    return _src(step.func.value)


def _zeroes_for(zero: ast.Call, optimizer: str) -> bool:
    """Does this zero_grad() clear what `optimizer` steps with? model.zero_grad() clears everything;
    another optimizer's zero_grad() (a GAN's D vs G) does not."""
    owner = _src(zero.func.value)
    looks_like_optimizer = "opt" in owner.lower().split(".")[-1]
    return owner == optimizer or not looks_like_optimizer


def _block_of(f: ParsedFile, node: ast.AST) -> tuple[ast.AST, list[ast.stmt]] | None:
    """The statement list that holds the statement containing `node`, and that statement."""
    stmt = node
    while stmt is not None:
        parent = f.parent.get(stmt)
        if parent is None:
            return None
        for field in ("body", "orelse", "finalbody", "handlers"):
            block = getattr(parent, field, None)
            if isinstance(block, list) and stmt in block:
                return stmt, block
        stmt = parent
    return None


def _leaves_after(f: ParsedFile, node: ast.AST, stop: ast.AST) -> bool:
    """Does control leave (continue/break/return/raise) right after `node`, in some block up to `stop`?
    `if not torch.isfinite(loss): optimizer.zero_grad(); continue` skips the step: not a misplacement."""
    n = node
    while n is not None and n is not stop:
        found = _block_of(f, n)
        if found is None:
            return False
        stmt, block = found
        if any(isinstance(s, (ast.Continue, ast.Break, ast.Return, ast.Raise)) for s in block[block.index(stmt) + 1:]):
            return True
        n = f.parent.get(stmt)
    return False


def _exclusive(f: ParsedFile, a: ast.AST, b: ast.AST) -> bool:
    """Are a and b in different branches of the same if/else?"""
    def branches(n):
        out, child, p = {}, n, f.parent.get(n)
        while p is not None:
            if isinstance(p, ast.If):
                out[p] = "body" if child in p.body else "orelse" if child in p.orelse else "test"
            child, p = p, f.parent.get(p)
        return out
    ba, bb = branches(a), branches(b)
    return any(k in bb and bb[k] != side for k, side in ba.items())


def rule_step_order(f: ParsedFile) -> list[Hit]:
    hits = []
    for loop, _ in f.training_loops():
        own = list(_in_scope(loop))
        by_line = lambda pred: sorted((n for n in own if pred(n)), key=lambda n: (n.lineno, n.col_offset))
        steps, backs = by_line(_is_optimizer_step), by_line(_is_backward)
        zeros = by_line(lambda n: _method_call(n, "zero_grad"))
        if not steps or not backs:
            continue
        if steps[0].lineno < backs[0].lineno:
            hits.append((steps[0], "step_before_backward"))
        for s in steps:
            before = [b for b in backs if b.lineno < s.lineno and not _exclusive(f, b, s)]
            if not before:
                continue
            b = before[-1]
            z = next((z for z in zeros if b.lineno < z.lineno < s.lineno and _zeroes_for(z, _stepped_optimizer(s))
                      and not _exclusive(f, z, s) and not _leaves_after(f, z, loop)), None)
            clips = [c for c in own if _is_clip(c) and not _exclusive(f, c, s)]
            if clips and not any(b.lineno < c.lineno < s.lineno for c in clips):
                # in the step's own block: a clip inside an accumulation boundary the step runs outside of is
                # step_every_micro_batch's shape, whose cause is the step, not the clip
                home = (_block_of(f, s) or (None, None))[1]
                late = next((c for c in sorted(clips, key=lambda c: c.lineno) if c.lineno > s.lineno
                             and not any(s.lineno < b2.lineno < c.lineno for b2 in backs)
                             and (_block_of(f, c) or (None, None))[1] is home), None)
                if late is not None:
                    why = (f"{_src(late)[:80]} at line {late.lineno} runs after {_src(s)} at line {s.lineno} (and "
                           f"before the next backward): the step applied the unclipped gradients of line {b.lineno}")
                    hits.append((late, "clip_after_step", {"why": why}))
            if z is not None:
                why = (f"{_src(z)} at line {z.lineno} runs after {_src(b)} at line {b.lineno} and before "
                       f"{_src(s)} at line {s.lineno}: the step sees zero gradients, so nothing is learned "
                       "(with weight decay the weights only shrink); move zero_grad before backward or after step")
                hits.append((z, "zero_grad_between_backward_and_step", {"why": why}))
    return hits


def rule_probabilities_into_loss(f: ParsedFile) -> list[Hit]:
    hits = []
    for call in (n for n in f.nodes if isinstance(n, ast.Call)):
        kind = f.loss_kind(call)
        arg = f.first_arg(call)
        if not kind or arg is None:
            continue
        prob = f._prob_kind(arg, f.prob_models)
        if kind in CE and prob == "softmax":
            hits.append((call, "softmax_into_cross_entropy"))
        elif kind in NLL and prob == "softmax":
            hits.append((call, "softmax_into_nll_loss"))
        elif kind in BCE_LOGITS and prob == "sigmoid":
            hits.append((call, "sigmoid_into_bce_with_logits"))
        elif kind in BCE and prob == "sigmoid":
            hits.append((call, "sigmoid_then_bce_loss"))
    return hits


def rule_negated_loss(f: ParsedFile) -> list[Hit]:
    hits = []
    for n in f.nodes:
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            operand = n.operand
            if isinstance(operand, ast.Call) and f.loss_kind(operand):
                hits.append((n, "negated_loss"))
            elif isinstance(operand, ast.Name) and operand.id == "loss" and (
                    _is_backward(f.parent.get(f.parent.get(n))) or _assigns_to(f, n, "loss")):
                hits.append((n, "negated_loss"))
    return hits


def _assigns_to(f: ParsedFile, node: ast.AST, name: str) -> bool:
    p = f.parent.get(node)
    return isinstance(p, ast.Assign) and any(_src(t) == name for t in p.targets)


def _opaque_call(n: ast.AST) -> bool:
    """model(x), self.head(h), student(x): a call into a network, as opposed to a tensor op."""
    if not isinstance(n, ast.Call) or not isinstance(n.func, (ast.Name, ast.Attribute)):
        return False
    callee, name = _src(n.func), _name(n)
    return not (callee.startswith(("torch.", "F.", "nn.")) or name in TENSOR_ONLY or name in TENSOR_IF_KNOWN or
                name in LEAVES_AUTOGRAD or name in PASSTHROUGH or name in LOSS_FUNCS or name in (
                    "detach", "sum", "mean", "max", "min", "amax", "logsumexp", "norm", "softmax", "log_softmax",
                    "sigmoid", "stack", "cat", "einsum", "gather", "chunk", "split", "unbind", "abs"))


def _walk_values(root: ast.AST, model_inputs: bool = True) -> Iterator[ast.AST]:
    """ast.walk without the index part of subscripts (in data[i:i + T] only `data` flows into the value)
    and, with model_inputs=False, without the arguments of model calls."""
    stack = [root]
    while stack:
        n = stack.pop()
        yield n
        if isinstance(n, ast.Subscript):
            stack.append(n.value)
        elif not model_inputs and _opaque_call(n):
            stack.append(n.func)
        else:
            stack.extend(ast.iter_child_nodes(n))


def _leaves_autograd(e: ast.AST, with_detach: bool, model_inputs: bool = True) -> ast.AST | None:
    for n in _walk_values(e, model_inputs):
        if _method_call(n, *LEAVES_AUTOGRAD) or (with_detach and _method_call(n, "detach")):
            return n
        if isinstance(n, ast.Attribute) and n.attr == "data" and isinstance(n.ctx, ast.Load):
            return n
        # building a tensor from data is how inputs are made; it cuts the graph only when someone rebuilds a
        # value that needs grad (torch.tensor(loss.item(), requires_grad=True); the .item() is found anyway)
        if isinstance(n, ast.Call) and _src(n.func) in ("torch.tensor", "torch.as_tensor", "torch.from_numpy") and \
                any(k.arg == "requires_grad" and _src(k.value) != "False" for k in n.keywords):
            return n
    return None


def _backward_roots(f: ParsedFile) -> list[ast.AST]:
    """What .backward() is called on."""
    return [r for n in f.nodes if isinstance(n, ast.Call) and _is_backward(n) for r in [_backward_root(n)] if r]


def _loss_function_returns(f: ParsedFile) -> list[ast.AST]:
    """What functions named like a loss (loss_fn, compute_loss) return."""
    return [r.value for fn in f.functions.values() if "loss" in fn.name.lower()
            for r in _in_scope(fn) if isinstance(r, ast.Return) and r.value is not None]


def _cut_prediction(f: ParsedFile, exprs: list[ast.AST]) -> ast.AST | None:
    """A detach-like op on the prediction (first argument) of a loss call; .detach() on a target is fine."""
    for e in exprs:
        for c in ast.walk(e):
            if isinstance(c, ast.Call) and f.loss_kind(c) and f.first_arg(c) is not None:
                for p in f.closure(f.first_arg(c), indices=False, model_inputs=False):
                    bad = _leaves_autograd(p, with_detach=True, model_inputs=False)
                    if bad is not None:
                        return bad
    return None


def rule_graph_cut(f: ParsedFile) -> list[Hit]:
    hits = []
    for fn in f.functions.values():  # forward(): a detach on the way to the output
        owner = f.parent.get(fn)
        custom_backward = isinstance(owner, ast.ClassDef) and any(
            isinstance(m, ast.FunctionDef) and m.name == "backward" for m in owner.body)
        if fn.name == "forward" and not custom_backward:
            buffers = {_src(c.args[0]).strip("'\"") for c in ast.walk(owner) if _method_call(c, "register_buffer") and c.args} \
                if isinstance(owner, ast.ClassDef) else set()
            for r in _in_scope(fn):
                if isinstance(r, ast.Return) and r.value is not None:
                    bad = next((b for e in f.closure(r.value, indices=False) for b in [_leaves_autograd(e, True)]
                                if b is not None and not _deliberate_detach(f, b, buffers)), None)
                    if bad is not None:
                        hits.append((bad, "detach_in_forward"))
    for root, backward in [(r, True) for r in _backward_roots(f)] + [(r, False) for r in _loss_function_returns(f)]:
        exprs = f.closure(root)
        # the value backward() runs on was itself rebuilt outside autograd: torch.tensor(loss.item()), x.data, ...
        values = f.values_of(root)
        before = [v for v in values if v.lineno <= root.lineno]  # `loss = loss.item()` after backward() is logging
        top = [root] + (before or values) if backward else []
        bad = next((t for t in top if _leaves_autograd_at_top(t)), None) or _cut_prediction(f, exprs)
        if bad is not None:
            hits.append((bad, "loss_leaves_autograd"))
        elif backward and _prediction_under_no_grad(f, root, exprs):
            hits.append((root, "forward_under_no_grad"))
    return hits


def _deliberate_detach(f: ParsedFile, cut: ast.AST, buffers: set[str]) -> bool:
    """A stop-gradient that leaves a live path or cuts nothing trainable: a straight-through estimator
    (x + (q - x).detach(), soft - soft.detach()), a detached weight (loss * w.detach()), a buffer
    (self.pos_table[:, :T].clone().detach()), or one switched by a flag (if self.detach_target:)."""
    receiver = cut.func.value if isinstance(cut, ast.Call) and isinstance(cut.func, ast.Attribute) else \
        cut.value if isinstance(cut, ast.Attribute) else None
    base = receiver
    while isinstance(base, (ast.Subscript, ast.Call, ast.Attribute)) and not (
            isinstance(base, ast.Attribute) and _src(base.value) == "self"):
        base = base.func.value if isinstance(base, ast.Call) and isinstance(base.func, ast.Attribute) else \
            base.value if isinstance(base, (ast.Subscript, ast.Attribute)) else None
        if base is None:
            break
    if isinstance(base, ast.Attribute) and _src(base.value) == "self" and base.attr in buffers:
        return True
    child, up = cut, f.parent.get(cut)
    while up is not None and not isinstance(up, ast.stmt):
        if isinstance(up, ast.BinOp) and isinstance(up.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
            other = up.right if child is up.left else up.left
            if not any(_leaves_autograd(n, True) is not None for n in [other]):
                return True  # another operand carries the gradient
        child, up = up, f.parent.get(up)
    carried = _src(receiver) + " ".join(_src(g.iter) for c in _ancestors(f, cut) if isinstance(
        c, (ast.ListComp, ast.GeneratorExp, ast.SetComp)) for g in c.generators)  # [m.detach() for m in mems]
    if any(w in carried.lower() for w in ("mem", "cache", "past", "kv", "state", "hidden")):
        return True  # carried memory / recurrent state: truncated backprop on purpose
    stmt = f.parent.get(cut)
    while stmt is not None and not isinstance(stmt, ast.stmt):
        stmt = f.parent.get(stmt)
    if isinstance(stmt, ast.Assign) and any(w in _src(t).lower() for t in stmt.targets for w in ("target", "teacher", "label")):
        return True  # a regression / distillation target built inside forward
    child, up = cut, f.parent.get(cut)
    while up is not None and not isinstance(up, SCOPES):
        if isinstance(up, ast.If) and any(w in _src(up.test).lower() for w in ("detach", "stop", "freeze", "frozen")):
            return True
        if isinstance(up, ast.Call) and f.loss_kind(up) and child is not f.first_arg(up) and child in [*up.args, *(
                k.value for k in up.keywords)]:
            return True  # the target of a loss
        child, up = up, f.parent.get(up)
    return False


def _leaves_autograd_at_top(e: ast.AST) -> bool:
    return _method_call(e, *LEAVES_AUTOGRAD, "detach") or (isinstance(e, ast.Attribute) and e.attr == "data") or (
        isinstance(e, ast.Call) and _src(e.func) in ("torch.tensor", "torch.as_tensor", "torch.from_numpy"))


def _prediction_under_no_grad(f: ParsedFile, root: ast.AST, exprs: list[ast.AST]) -> bool:
    if f.in_no_grad(root) and not isinstance(f.scope_of.get(root), ast.Module | type(None)):
        return any(_is_backward(n) and _backward_root(n) is root for n in [f.parent.get(f.parent.get(root))])
    for e in exprs:
        for c in ast.walk(e):
            if isinstance(c, ast.Call) and f.loss_kind(c) and f.first_arg(c) is not None:
                arg = f.first_arg(c)
                values = f.values_of(arg) if isinstance(arg, (ast.Name, ast.Attribute)) else []
                if values and all(f.in_no_grad(v) for v in values):
                    return True
    return False


def rule_requires_grad_false(f: ParsedFile) -> list[Hit]:
    hits = []
    if not any(isinstance(n, ast.Call) and _is_backward(n) for n in f.nodes):
        return hits
    if any(isinstance(n, ast.Assign) and any(_src(t).endswith(".requires_grad") for t in n.targets)
           and _src(n.value) == "True" or _method_call(n, "requires_grad_") and (not n.args or _src(n.args[0]) == "True")
           for n in f.nodes):
        return hits  # freeze everything, then unfreeze the head: deliberate
    if any(isinstance(n, ast.comprehension) and any(".requires_grad" in _src(c) for c in n.ifs) or
           isinstance(n, ast.Call) and _src(n.func) == "filter" and ".requires_grad" in _src(n) for n in f.nodes):
        return hits  # the parameters are filtered on requires_grad: what is frozen is frozen on purpose
    for n in f.nodes:
        if isinstance(n, (ast.For, ast.AsyncFor)) and _method_call(n.iter, "parameters") \
                and isinstance(n.iter.func.value, ast.Name) and isinstance(n.target, ast.Name) \
                and not _frozen_copy(f, n.iter.func.value) and not _head_replaced(f, n.iter.func.value.id, n):
            scope = f.scope_of.get(n)
            if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)) and re.search(r"freez|frozen", scope.name, re.I):
                continue  # def freeze(encoder): ... says what it means to do
            param = n.target.id  # `for p in model.parameters(): p.requires_grad = False`
            for s in _in_scope(n):
                if isinstance(s, ast.Assign) and any(_src(t) == f"{param}.requires_grad" for t in s.targets) \
                        and _src(s.value) == "False":
                    hits.append((s, "whole_model_requires_grad_false"))
                elif _method_call(s, "requires_grad_") and _src(s.func.value) == param and s.args \
                        and _src(s.args[0]) == "False":
                    hits.append((s, "whole_model_requires_grad_false"))
        if _method_call(n, "requires_grad_") and n.args and _src(n.args[0]) == "False" \
                and isinstance(n.func.value, ast.Name) and "model" in n.func.value.id.lower():
            hits.append((n, "whole_model_requires_grad_false"))
    return hits


def _head_replaced(f: ParsedFile, owner: str, freeze: ast.AST) -> bool:
    """Freeze a pretrained net, then give it a new head (resnet.fc = nn.Linear(...)): the head trains."""
    end = getattr(freeze, "end_lineno", freeze.lineno)
    return any(isinstance(n, ast.Assign) and n.lineno > end and isinstance(n.value, ast.Call)
               and _name(n.value)[:1].isupper() and any(_src(t).startswith(owner + ".") for t in n.targets)
               for n in f.nodes)


def _frozen_copy(f: ParsedFile, owner: ast.AST) -> bool:
    """A teacher / EMA / target network / frozen deepcopy: frozen on purpose, not the model being trained."""
    name = _src(owner).lower()
    return any(w in name for w in ("frozen", "teacher", "target", "ema", "ref", "old", "copy", "critic_targ")) or any(
        isinstance(v, ast.Call) and _src(v.func) in ("deepcopy", "copy.deepcopy") for v in f.values_of(owner))


def rule_numerics(f: ParsedFile) -> list[Hit]:
    hits = []
    for n in f.nodes:
        own_guarded_log = isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in f.functions and \
            _guarded(f.functions[n.func.id])  # def log(t, eps=1e-20): return t.clamp(min=eps).log()
        if isinstance(n, ast.Call) and _name(n) in ("log", "log2", "log10", "sqrt") and not _src(n.func).startswith("math.") \
                and not own_guarded_log:
            arg = n.args[0] if n.args else (n.func.value if isinstance(n.func, ast.Attribute) else None)
            if arg is not None and not _guarded(arg) and _has_probability(f, arg):
                hits.append((n, "log_of_probability"))
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div) and not _guarded(n.right) and _is_std(f, n.right):
            hits.append((n, "divide_by_std_without_eps"))
        if isinstance(n, ast.Call) and _name(n) == "exp" and not _src(n.func).startswith("math.") and _summed(f, n) \
                and not _max_subtracted(f, n.args[0] if n.args else n.func.value) \
                and not _non_positive(n.args[0] if n.args else n.func.value):
            hits.append((n, "exp_without_max_subtraction"))
    return hits


def _non_positive(e: ast.AST) -> bool:
    """-0.5 * (d / s) ** 2, -x.abs(), -(d ** 2).sum(): exp of it is at most 1 and cannot overflow."""
    text = _src(e).replace(" ", "")
    return text.startswith("-") and any(w in text for w in ("**2", ".pow(2)", ".square()", "abs(", ".abs()"))


def _has_probability(f: ParsedFile, expr: ast.AST, depth: int = 0) -> bool:
    """Is a softmax/sigmoid output an operand of `expr` (through 1 - p, p * y, indexing)?"""
    if depth > 6:
        return False
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Sub, ast.Mult, ast.Div)):
        return _has_probability(f, expr.left, depth + 1) or _has_probability(f, expr.right, depth + 1)
    if isinstance(expr, (ast.Name, ast.Attribute)):
        values = f.values_of(expr)
        return bool(values) and all(not _guarded(v) and _has_probability(f, v, depth + 1) for v in values)
    return f._prob_kind(expr, {}) in ("softmax", "sigmoid")


def _is_std(f: ParsedFile, expr: ast.AST, depth: int = 0) -> bool:
    if depth > 6:
        return False
    if isinstance(expr, (ast.Name, ast.Attribute)) and not isinstance(expr, ast.Call):
        values = f.values_of(expr)
        return bool(values) and all(not _guarded(v) and _is_std(f, v, depth + 1) for v in values)
    if isinstance(expr, ast.Call):
        name = _name(expr)
        if name == "std":
            # y.std() over a whole dataset is one number that is never 0 on real data; the zero comes from a
            # per-row / per-column std (dim=...) over a constant row or column
            function = _src(expr.func) in ("torch.std", "np.std", "numpy.std")
            return len(expr.args) > int(function) or any(k.arg in ("dim", "axis") for k in expr.keywords)
        if name == "sqrt":
            inner = expr.args[0] if expr.args else (expr.func.value if isinstance(expr.func, ast.Attribute) else None)
            return inner is not None and not _guarded(inner) and any(
                _name(c) == "var" for c in ast.walk(inner) if isinstance(c, ast.Call))
    return False


def _summed(f: ParsedFile, exp_call: ast.Call) -> bool:
    p = f.parent.get(exp_call)
    if isinstance(p, ast.Attribute) and p.attr == "sum" or (isinstance(p, ast.Call) and _name(p) == "sum"):
        return True
    if isinstance(p, ast.Assign):
        names = {_src(t) for t in p.targets}
        scope = f.scope_of.get(p)
        return any(isinstance(n, ast.Call) and _name(n) == "sum" and (
            _src(n.func.value) in names if isinstance(n.func, ast.Attribute) and _src(n.func) != "torch.sum"
            else any(_src(a) in names for a in n.args)) for n in _in_scope(scope))
    return False


def _max_subtracted(f: ParsedFile, expr: ast.AST) -> bool:
    shifted = lambda e: isinstance(e, ast.BinOp) and isinstance(e.op, ast.Sub) and any(
        w in _src(e.right) for w in ("max", "amax", "logsumexp"))
    if shifted(expr):
        return True
    return any(shifted(v) for v in f.values_of(expr))  # flow-insensitive: any shifted assignment counts


FUNCTIONAL_DROPOUTS = ("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout")


def rule_functional_dropout_always_on(f: ParsedFile) -> list[Hit]:
    """F.dropout(h, p=self.dropout) in a module's method: on at eval too (blind dev sensor_forecast_gru_packed:
    val_mse 0.141 against 0.121 fixed). training= given in any form, or the third positional, is the author's
    choice (MC dropout passes training=True on purpose)."""
    fnl = _functional_aliases(f) | {"F"}
    hits = []
    for n in f.nodes:
        if not (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in FUNCTIONAL_DROPOUTS
                and _src(n.func.value) in fnl):
            continue
        if any(kw.arg == "training" for kw in n.keywords) or len(n.args) >= 3:
            continue
        up = f.parent.get(n)
        while up is not None and not isinstance(up, ast.ClassDef):
            up = f.parent.get(up)
        if up is not None:  # in a class (a module's forward): a bare function may be called in training only
            hits.append((n, "functional_dropout_always_on"))
    return hits


def rule_eval_without_train(f: ParsedFile) -> list[Hit]:
    hits = []
    for loop, nodes in f.outer_training_loops():
        evals = [n for n in nodes if _method_call(n, "eval") or (
            _method_call(n, "train") and n.args and _src(n.args[0]) == "False")]
        trains = [n for n in nodes if _method_call(n, "train") and (not n.args or _src(n.args[0]) == "True")]
        if evals and not trains:
            hits.append((evals[0], "eval_without_train"))
    return hits


EVAL_WORDS = re.compile(r"(^|_|\b)(eval|evaluate|evaluation|val|valid|validate|validation|test|estimate_loss)"
                        r"($|_|\b|\d)", re.I)
MODE_LAYERS = re.compile(r"(Dropout[123]?d?|AlphaDropout|BatchNorm[123]d|SyncBatchNorm)$")


def _has_mode_layers(f: ParsedFile) -> bool:
    """Dropout or BatchNorm built in this file, F.dropout called, or a `dropout=` above zero passed."""
    for n in f.nodes:
        if isinstance(n, (ast.Attribute, ast.Name)) and MODE_LAYERS.search(n.attr if isinstance(n, ast.Attribute) else n.id):
            return True
        if isinstance(n, ast.Call) and _src(n.func).endswith("F.dropout"):
            return True
        if isinstance(n, ast.keyword) and n.arg in ("dropout", "p_drop", "drop_rate"):
            values = f.values_of(n.value) or [n.value]  # dropout=dropout, with `dropout = 0.0` set above
            if not all(isinstance(v, ast.Constant) and v.value == 0 for v in values):
                return True
    return False


def rule_evaluation_in_train_mode(f: ParsedFile) -> list[Hit]:
    if any(_method_call(n, "eval") or (_method_call(n, "train") and (
            any(_src(a) == "False" for a in n.args) or any(_src(k.value) == "False" for k in n.keywords)))
           for n in f.nodes) or not _has_mode_layers(f):
        return []
    for n in f.nodes:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(_disables_grad(d) for d in n.decorator_list) \
                and EVAL_WORDS.search(n.name):
            return [(n, "evaluation_in_train_mode")]
        if isinstance(n, ast.With) and any(_disables_grad(item.context_expr) for item in n.items):
            scope = f.scope_of.get(n)
            name = getattr(scope, "name", "")
            body = "\n".join(_src(b) for b in n.body)
            if EVAL_WORDS.search(name) or EVAL_WORDS.search(body):
                return [(n, "evaluation_in_train_mode")]
    return []


def _is_optimizer_ctor(call: ast.Call) -> bool:
    return _name(call) in OPTIMIZERS and ("optim" in _src(call.func) or isinstance(call.func, ast.Name))


def rule_optimizer_params(f: ParsedFile) -> list[Hit]:
    hits = []
    deliberate_freeze = "requires_grad_(False)" in "\n".join(f.lines) or any(
        isinstance(n, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == "requires_grad" for t in n.targets)
        for n in f.nodes)
    for n in f.nodes:
        if not (isinstance(n, ast.Call) and _is_optimizer_ctor(n)):
            continue
        params = n.args[0] if n.args else next((k.value for k in n.keywords if k.arg == "params"), None)
        owner = params.func.value if _method_call(params, "parameters") else None
        # model.head.parameters() is a part of a model; self.policy.parameters() is a trainer's whole model
        if isinstance(owner, ast.Attribute) and _src(owner.value) != "self" and not deliberate_freeze:
            name = owner.attr.lower()
            if "model" not in name and name not in ("net", "module", "network", "_orig_mod"):
                hits.append((n, "optimizer_over_submodule"))
        lrs = [k.value for k in n.keywords if k.arg == "lr"]
        for d in ast.walk(n):
            if isinstance(d, ast.Dict):
                lrs += [v for k, v in zip(d.keys, d.values) if isinstance(k, ast.Constant) and k.value == "lr"]
        if any(isinstance(v, ast.Constant) and v.value == 0 for v in lrs):
            hits.append((n, "zero_learning_rate"))
        sources = _param_sources(f, params) if params is not None else []
        frozen = _frozen_parts(f)
        if sources and all(isinstance(o, ast.Attribute) and o.attr in frozen for o in sources):
            o = sources[0]
            why = (f"the optimizer at line {n.lineno} gets only the parameters of `{_src(o)}`, and {o.attr} is frozen "
                   f"(requires_grad=False at line {frozen[o.attr]}): it holds nothing trainable, so the parts that do get "
                   "gradients (the new head) are never updated")
            hits.append((o, "optimizer_over_frozen_part", {"why": why}))  # where the wrong module is named
    return hits


def _filters_on_requires_grad(e: ast.AST) -> bool:
    return any(isinstance(c, ast.comprehension) and any(".requires_grad" in _src(i) for i in c.ifs)
               or isinstance(c, ast.Call) and _src(c.func) == "filter" and "requires_grad" in _src(c)
               for c in ast.walk(e))


def _unfreezes(n: ast.AST) -> bool:
    """`p.requires_grad = True` (or = flag), `m.requires_grad_()`: anything but an explicit False."""
    if isinstance(n, ast.Assign) and any(_src(t).endswith(".requires_grad") for t in n.targets):
        return _src(n.value) != "False"
    return _method_call(n, "requires_grad_") and (not n.args or _src(n.args[0]) != "False")


def rule_optimizer_built_before_unfreeze(f: ParsedFile) -> list[Hit]:
    """Gradual unfreezing with an optimizer over `[p for p in params if p.requires_grad]` built before the loop
    (blind dev token_encoder_gradual_unfreeze: the encoder gets gradients from epoch 1 and never moves). Freezing,
    unfreezing the head, then building the optimizer is the common correct pattern: only an unfreeze inside a loop
    that steps the optimizer, with no add_param_group and no rebuild in that loop, counts."""
    if any(_method_call(n, "add_param_group") for n in f.nodes):
        return []
    built = []  # (where the filter is, the optimizer call, the function building it)
    for n in f.nodes:
        if isinstance(n, ast.Call) and _is_optimizer_ctor(n):
            params = n.args[0] if n.args else next((k.value for k in n.keywords if k.arg == "params"), None)
            filt = next((e for e in (f.closure(params, limit=20) if params is not None else [])
                         if _filters_on_requires_grad(e)), None)
            if filt is not None:
                scope = f.scope_of.get(n)
                built.append((filt, n, scope.name if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)) else None))
    if not built:
        return []
    unfreezers = {f.scope_of[n].name for n in f.nodes if _unfreezes(n)
                  and isinstance(f.scope_of.get(n), (ast.FunctionDef, ast.AsyncFunctionDef))}
    builders = {b for _, _, b in built if b}
    for loop in f.nodes:
        if not isinstance(loop, (ast.For, ast.AsyncFor, ast.While)):
            continue
        inside = list(_in_scope(loop))
        if not any(_is_optimizer_step(n) for n in inside):
            continue
        if any(isinstance(n, ast.Call) and (_is_optimizer_ctor(n) or _name(n) in builders) for n in inside):
            continue  # rebuilt at the unfreeze
        site = next((n for n in inside if _unfreezes(n) or isinstance(n, ast.Call) and _name(n) in unfreezers
                     and not any(_src(a) == "False" for a in [*n.args, *(k.value for k in n.keywords)])), None)
        if site is None:
            continue
        filt, ctor, _ = built[0]
        why = (f"line {ctor.lineno} builds the optimizer from the parameters with requires_grad=True only "
               f"(`{f.seg(filt).strip()[:80]}`); line {site.lineno} (`{f.seg(site).strip()[:60]}`) unfreezes more "
               "inside the training loop: they get gradients but are in no param group, so optimizer.step() never "
               "updates them")
        return [(filt, "optimizer_built_before_unfreeze", {"why": why})]
    return []


MODULE_NAMED = re.compile(r"model|encoder|decoder|backbone|block|layer|head|net|module|stem|trunk|body|features|"
                          r"embed|classifier|transformer|bert|resnet|conv|lstm|gru|rnn", re.I)


def rule_requires_grad_set_on_module(f: ParsedFile) -> list[Hit]:
    """`getattr(model.encoder, name).requires_grad = True` (blind dev imu_encoder_staged_thaw: the log prints
    "Unfreezing encoder.block3" and the encoder never trains). A parameter's flag is set through a name bound to
    a parameter (`for p in m.parameters()`) or a `.weight`/`.bias`; an attribute chain or getattr() naming a
    module is the bug."""
    hits = []
    for n in f.nodes:
        if not isinstance(n, ast.Assign):
            continue
        for t in n.targets:
            if not (isinstance(t, ast.Attribute) and t.attr == "requires_grad"):
                continue
            owner = t.value
            if isinstance(owner, ast.Name):
                continue  # `p.requires_grad = ...`: p is almost always a parameter (a loop variable)
            last = _name(owner) if not isinstance(owner, ast.Call) else ""
            if last in ("weight", "bias") or last.endswith(("_weight", "_bias")) or "param" in _src(owner).lower():
                continue
            if isinstance(owner, ast.Subscript):
                continue  # params[i].requires_grad: an indexed list of tensors
            named = _src(owner.args[0]) + " " + _src(owner.args[1]) if isinstance(owner, ast.Call) and \
                _name(owner) == "getattr" and len(owner.args) >= 2 else _src(owner)
            if MODULE_NAMED.search(named):
                hits.append((n, "requires_grad_set_on_module"))
    return hits


def _param_sources(f: ParsedFile, params: ast.AST) -> list[ast.AST]:
    """The modules whose .parameters()/.named_parameters() feed an optimizer's params argument, through
    [p for p in m.parameters() ...], [{"params": decay}, ...] and `for n, p in m.named_parameters(): decay.append(p)`."""
    out, seen, todo = [], set(), [params]
    while todo and len(seen) < 40:
        e = todo.pop()
        for c in ast.walk(e):
            if _method_call(c, "parameters", "named_parameters"):
                out.append(c.func.value)
            elif isinstance(c, ast.Name) and isinstance(c.ctx, ast.Load):
                scope = f.scope_of.get(c, f.tree)
                if (scope, c.id) in seen:
                    continue
                seen.add((scope, c.id))
                for n in _in_scope(scope):  # (no_decay if p.ndim == 1 else decay).append(p) in `for n, p in m.named_parameters()`
                    if _method_call(n, "append", "extend") and any(
                            isinstance(t, ast.Name) and t.id == c.id for t in ast.walk(n.func.value)):
                        loop = f.parent.get(n)
                        while loop is not None and not isinstance(loop, (ast.For, ast.AsyncFor)) and loop is not scope:
                            loop = f.parent.get(loop)
                        if isinstance(loop, (ast.For, ast.AsyncFor)) and _method_call(loop.iter, "parameters", "named_parameters"):
                            out.append(loop.iter.func.value)
                todo += [v for v in f.values_of(c) if not (isinstance(v, (ast.List, ast.Tuple)) and not v.elts)]
    return out


def _frozen_parts(f: ParsedFile) -> dict[str, int]:
    """Submodule attribute names frozen in this file (`for p in model.backbone.parameters(): p.requires_grad = False`,
    `model.backbone.requires_grad_(False)`) -> the line."""
    out = {}
    for n in f.nodes:
        if isinstance(n, (ast.For, ast.AsyncFor)) and _method_call(n.iter, "parameters") and \
                isinstance(n.iter.func.value, ast.Attribute) and isinstance(n.target, ast.Name):
            for s in _in_scope(n):
                if (isinstance(s, ast.Assign) and any(_src(t) == f"{n.target.id}.requires_grad" for t in s.targets)
                        and _src(s.value) == "False") or (_method_call(s, "requires_grad_") and s.args
                                                          and _src(s.args[0]) == "False" and _src(s.func.value) == n.target.id):
                    out.setdefault(n.iter.func.value.attr, s.lineno)
        if _method_call(n, "requires_grad_") and n.args and _src(n.args[0]) == "False" and isinstance(n.func.value, ast.Attribute):
            out.setdefault(n.func.value.attr, n.lineno)
    return out


def _view_merges(view: ast.Call, permuted: ast.AST) -> bool:
    """Does the view merge dimensions (what fails on permuted memory) rather than only split them?
    x.transpose(1, 2).view(B, C, H, W) splits the last dim and works; .permute(0, 2, 1).view(b, -1) merges."""
    args = view.args[0].elts if len(view.args) == 1 and isinstance(view.args[0], (ast.Tuple, ast.List)) else view.args
    if any(isinstance(a, ast.Starred) for a in args):
        return False  # view(B, C, *size): the count is unknown
    if _method_call(permuted, "permute"):
        dims = permuted.args[0].elts if len(permuted.args) == 1 and isinstance(permuted.args[0], (ast.Tuple, ast.List)) \
            else permuted.args
        return len(args) < len(dims)
    if isinstance(permuted, ast.Attribute):  # .T / .mT
        return len(args) < 2
    return len(args) <= 3  # transpose/swapaxes: rank unknown; (B, T, C) after moving heads back is the classic merge


def rule_view_after_permute(f: ParsedFile) -> list[Hit]:
    hits = []
    permuted = lambda e: _method_call(e, "permute", "transpose", "movedim", "swapaxes") or (
        isinstance(e, ast.Attribute) and e.attr in ("T", "mT"))
    for n in f.nodes:
        if _method_call(n, "view") and n.args:
            r = n.func.value
            sources = [r] if permuted(r) else (f.values_of(r) if isinstance(r, ast.Name) else [])
            if sources and all(permuted(v) for v in sources) and any(_view_merges(n, v) for v in sources):
                hits.append((n, "view_after_permute"))
    return hits


def rule_host_sync(f: ParsedFile) -> list[Hit]:
    hits = []
    for loop, _ in f.training_loops():
        losses = {_src(r) for n in _in_scope(loop) if isinstance(n, ast.Call) and _is_backward(n)
                  for r in [_backward_root(n)] if r is not None}
        for n in _in_scope(loop):
            sync = _method_call(n, *SYNC_METHODS) or (
                isinstance(n, ast.Call) and _name(n) == "print" and any(_src(a) in losses for a in n.args))
            if sync and not f.under_if(n, loop):
                hits.append((n, "host_sync_every_step"))
                break  # one finding per loop
    return hits


# --- out-of-place ops whose result is dropped --------------------------------------------------

# Tensor methods only tensors (and arrays/frames with the same out-of-place meaning) have.
TENSOR_ONLY = {"masked_fill", "masked_scatter", "index_fill", "index_add", "index_copy", "index_put",
               "scatter_add", "transpose", "permute", "contiguous", "unsqueeze", "squeeze", "view", "t", "flatten",
               "expand", "expand_as", "movedim", "swapaxes", "narrow", "view_as", "reshape", "reshape_as",
               "clamp", "clamp_min", "clamp_max", "nan_to_num", "long", "int", "bool", "type_as", "tril", "triu",
               "softmax", "log_softmax", "roll", "flip", "masked_select"}
# Names other objects carry too (set.add, logger.log, ax.scatter, nn.Module.to/float is in place): need a tensor in hand.
TENSOR_IF_KNOWN = {"scatter", "repeat", "to", "cuda", "cpu", "float", "half", "double", "bfloat16", "type",
                   "add", "sub", "mul", "div",
                   "pow", "exp", "log", "sqrt", "rsqrt", "abs", "neg", "relu", "sigmoid", "tanh", "where", "clip",
                   "matmul", "lerp", "maximum", "minimum", "sign", "round", "floor", "ceil", "gelu"}
TORCH_OUT_OF_PLACE = {"where", "clamp", "clip", "masked_fill", "transpose", "permute", "reshape", "squeeze",
                      "unsqueeze", "flatten", "cat", "stack", "add", "sub", "mul", "div", "matmul", "softmax",
                      "log_softmax", "sigmoid", "tanh", "relu", "exp", "log", "sqrt", "abs", "nan_to_num", "tril",
                      "triu", "dropout", "layer_norm", "roll", "flip", "movedim"}
TORCH_TENSOR_MAKERS = TORCH_OUT_OF_PLACE | {
    "tensor", "as_tensor", "from_numpy", "randn", "rand", "randint", "randperm", "zeros", "ones", "full", "empty",
    "arange", "linspace", "eye", "zeros_like", "ones_like", "randn_like", "full_like", "empty_like", "einsum",
    "bmm", "gather", "index_select", "masked_select", "bernoulli", "multinomial", "outer", "cumsum", "load"}
MASK_OPS = {"masked_fill", "where", "tril", "triu", "masked_scatter", "index_fill"}
DEVICE_OPS = {"to", "cuda", "cpu"}
CAST_OPS = {"float", "half", "double", "bfloat16", "long", "int", "bool", "type", "type_as"}
RESHAPE_OPS = {"transpose", "permute", "contiguous", "unsqueeze", "squeeze", "view", "t", "flatten", "expand",
               "expand_as", "repeat", "movedim", "swapaxes", "narrow", "view_as", "reshape", "reshape_as", "pad",
               "interpolate"}
CLAMP_OPS = {"clamp", "clamp_min", "clamp_max", "clip", "nan_to_num"}
DROPOUT_OPS = {"dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout"}
RETURNS_SELF = {"to", "cuda", "cpu", "float", "half", "double", "bfloat16", "train", "eval", "requires_grad_", "apply"}
# ops with an in-place `_` twin worth suggesting
HAS_INPLACE = {"masked_fill", "masked_scatter", "index_fill", "index_add", "index_copy", "scatter", "scatter_add",
               "clamp", "clamp_min", "clamp_max", "clip", "nan_to_num", "add", "sub", "mul", "div", "pow", "exp",
               "log", "sqrt", "abs", "neg", "relu", "sigmoid", "tanh", "tril", "triu"}
MODULE_WORDS = ("model", "net", "module", "encoder", "decoder", "layer", "head", "backbone", "criterion", "critic",
                "generator", "discriminator", "policy", "teacher", "student", "block", "embed", "optimizer",
                "scaler", "scheduler", "tokenizer", "accelerator", "trainer", "writer", "logger")
ATTENTION_WORDS = ("att", "score", "wei", "logit", "sim", "energy", "qk", "dots")
CAUSAL_WORDS = ("tril", "triu", "causal", "bias", "future", "look_ahead", "lookahead", "subsequent", "tri")
PADDING_WORDS = ("pad", "attention_mask", "attn_mask", "key_mask", "src_mask", "valid", "lengths")
LOADER_WORDS = ("loader", "batches", "dataset", "data", "zip(", "batch")


def _functional_aliases(f: ParsedFile) -> set[str]:
    """Names torch.nn.functional is reachable under in this file: F, nnf, torch.nn.functional, ..."""
    out = {"torch.nn.functional", "nn.functional"}
    for n in f.nodes:
        if isinstance(n, ast.Import):
            out |= {a.asname for a in n.names if a.name == "torch.nn.functional" and a.asname}
        elif isinstance(n, ast.ImportFrom) and n.module in ("torch.nn", "torch.nn.functional"):
            out |= {a.asname or a.name for a in n.names if a.name == "functional"}
    return out


def _module_like(f: ParsedFile, expr: ast.AST, depth: int = 0) -> bool:
    """Is this (probably) an nn.Module or another stateful object whose .to()/.float() acts in place?"""
    text = _src(expr).lower()
    last = text.split(".")[-1]
    if text == "self" or any(w in last for w in MODULE_WORDS):
        return True
    if depth < 3 and isinstance(expr, (ast.Name, ast.Attribute)):
        for v in f.values_of(expr):
            if isinstance(v, ast.Call):
                callee = _src(v.func)
                if _name(v)[:1].isupper() or "from_pretrained" in callee or callee in ("torch.compile", "copy.deepcopy"):
                    return True
                if _name(v) in RETURNS_SELF and isinstance(v.func, ast.Attribute) and _module_like(f, v.func.value, depth + 1):
                    return True  # model = model.to(device) is still the model
    return False


def _loop_tensors(f: ParsedFile, scope: ast.AST) -> set[str]:
    """Names unpacked from a batch iterator: `for x, y in loader`, `for i, (xb, yb) in enumerate(train_dl)`.
    A lone `for batch in loader` is not counted: that may be a dict or an HF BatchEncoding, whose .to() is in place."""
    if scope in f.loop_tensors:
        return f.loop_tensors[scope]
    out = f.loop_tensors[scope] = set()
    for n in _in_scope(scope):
        if isinstance(n, (ast.For, ast.AsyncFor)) and isinstance(n.target, ast.Tuple) and any(
                w in _src(n.iter).lower() for w in LOADER_WORDS):
            elts = n.target.elts
            if _name(n.iter) == "enumerate":  # for step, batch in enumerate(loader): `batch` is the whole batch
                elts = [e for e in elts[1:] if isinstance(e, ast.Tuple)]
            out |= {t.id for e in elts for t in ast.walk(e) if isinstance(t, ast.Name) and "batch" not in t.id
                    and t.id not in ("i", "step", "epoch", "idx", "it", "_")}
    return out


def _tensor_evidence(f: ParsedFile, expr: ast.AST, fnl: set[str], depth: int = 0, seen: set | None = None) -> bool:
    """Is there positive evidence that `expr` is a tensor (not a module, set, logger, BatchEncoding)?"""
    seen = set() if seen is None else seen
    if depth > 5 or _module_like(f, expr):
        return False
    if isinstance(expr, ast.BinOp):
        return isinstance(expr.op, ast.MatMult) or _tensor_evidence(f, expr.left, fnl, depth + 1, seen) or \
            _tensor_evidence(f, expr.right, fnl, depth + 1, seen)
    if isinstance(expr, ast.Subscript):
        key = expr.slice
        if isinstance(key, ast.Constant) and key.value in ("input_ids", "pixel_values", "labels", "attention_mask", "token_type_ids"):
            return True
        return _tensor_evidence(f, expr.value, fnl, depth + 1, seen)
    if isinstance(expr, ast.Call):
        callee = _src(expr.func)
        if callee.startswith("torch.") and _name(expr) in TORCH_TENSOR_MAKERS or callee.rsplit(".", 1)[0] in fnl:
            return True
        if isinstance(expr.func, ast.Attribute) and (_name(expr) in TENSOR_ONLY or _name(expr) in TENSOR_IF_KNOWN):
            return _tensor_evidence(f, expr.func.value, fnl, depth + 1, seen) or _name(expr) in TENSOR_ONLY
        return False
    if isinstance(expr, ast.Attribute) and expr.attr in ("data", "grad", "logits", "last_hidden_state", "weight"):
        return True
    if isinstance(expr, ast.Name):
        scope = f.scope_of.get(expr, f.tree)
        if (scope, expr.id) in seen:
            return False
        seen.add((scope, expr.id))
        if expr.id in _loop_tensors(f, scope):
            return True
        values = f.values_of(expr)
        if not values and isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)) and scope.name == "forward":
            return expr.id in {a.arg for a in scope.args.args[1:]}  # forward(self, x, ...): x is a tensor
        return any(_tensor_evidence(f, v, fnl, depth + 1, seen) for v in values if v is not None)
    return False


def _out_of_place(f: ParsedFile, call: ast.Call, fnl: set[str]) -> tuple[str, ast.AST] | None:
    """(op name, the tensor it was applied to) if `call` returns a new tensor and changes nothing in place."""
    name, callee = _name(call), _src(call.func)
    if name.endswith("_") or any(k.arg == "inplace" and _src(k.value) == "True" for k in call.keywords):
        return None
    if isinstance(call.func, ast.Attribute) and callee.rsplit(".", 1)[0] in fnl:  # F.dropout(x, p)
        return (name, call.args[0]) if call.args and name[:1].islower() else None
    if callee.startswith("torch.") and callee.count(".") == 1 and name in TORCH_OUT_OF_PLACE:
        arg = call.args[1] if name == "where" and len(call.args) > 1 else (call.args[0] if call.args else None)
        return (name, arg) if arg is not None else None
    if not isinstance(call.func, ast.Attribute):
        return None
    receiver = call.func.value
    if isinstance(receiver, ast.Name) and (receiver.id in ("torch", "np", "numpy", "math", "F", "nn", "re", "os", "random")
                                          or receiver.id in f.imported):
        return None  # plt.scatter(x, y), np.where(...): a module's function, not a tensor method
    if name in TENSOR_ONLY and not _module_like(f, receiver):
        return name, receiver
    if name in TENSOR_IF_KNOWN and _tensor_evidence(f, receiver, fnl):
        return name, receiver
    return None


def _large_negative(call: ast.Call) -> bool:
    """Is the fill value -inf, finfo.min or a big negative number (what masks attention scores)?"""
    text = _src(call).lower()
    return "-inf" in text or "finfo" in text or any(
        isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub) and isinstance(n.operand, ast.Constant)
        and isinstance(n.operand.value, (int, float)) and n.operand.value >= 1e4 for n in ast.walk(call))


def _discard_rule(f: ParsedFile, call: ast.Call, op: str, tensor: ast.AST) -> tuple[str, float | None]:
    text = _src(call).lower()
    if op in MASK_OPS:
        mask_words = _src(call.args[0] if call.args else call).lower()
        if any(w in text for w in PADDING_WORDS) and not any(w in mask_words for w in CAUSAL_WORDS):
            return "discarded_mask", None
        on_scores = any(w in _src(tensor).lower() for w in ATTENTION_WORDS)
        if on_scores and (any(w in text for w in CAUSAL_WORDS) or _large_negative(call)):
            return "discarded_causal_mask", None
        return "discarded_mask", None
    if op in DEVICE_OPS:  # .to(orig_dtype) / .to(torch.float16) is a cast
        dtype_like = any("dtype" in _src(a).lower() or _src(a).startswith("torch.") and _src(a)[6:] in (
            "float", "float16", "float32", "float64", "half", "bfloat16", "long", "int64", "int32", "bool", "double")
            for a in [*call.args, *(k.value for k in call.keywords if k.arg == "dtype")])
        return ("discarded_dtype_cast" if dtype_like else "discarded_device_move"), None
    if op in CAST_OPS:
        return "discarded_dtype_cast", None
    if op in RESHAPE_OPS:
        return "discarded_reshape", None
    if op in CLAMP_OPS:
        t, up = _src(tensor).removesuffix(".data"), f.parent.get(call)
        while up is not None and not (isinstance(up, (ast.For, ast.AsyncFor)) and _src(up.target) == t):
            up = f.parent.get(up)
        if up is not None and "parameters" in _src(up.iter):  # for p in critic.parameters(): p.data.clamp(-c, c)
            return "discarded_weight_clip", None
        return ("discarded_clamp", None) if any(_is_eps(a) and "e-" in _src(a) or "eps" in _src(a).lower()
                                               for a in [*call.args, *(k.value for k in call.keywords)]) \
            else ("discarded_transform", 0.55)
    if op in DROPOUT_OPS:
        return "discarded_dropout", None
    return "discarded_transform", None


def _read_after(f: ParsedFile, name: str, scope: ast.AST, line: int) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) and n.lineno > line
               for n in (ast.walk(scope) if scope is f.tree else _in_scope(scope)))


def _never_read(f: ParsedFile, name: str, scope: ast.AST) -> bool:
    where = f.nodes if scope is f.tree else list(ast.walk(scope))  # closures read their parent's names
    return not any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) for n in where)


def rule_discarded_result(f: ParsedFile) -> list[Hit]:
    """`att.masked_fill(mask, -inf)` as a statement, or `masked = att.masked_fill(...)` with `masked`
    never read while `att` is used on: the op returned a new tensor and the code kept the old one."""
    hits, fnl = [], _functional_aliases(f)
    kept_ops = MASK_OPS | DEVICE_OPS | CLAMP_OPS | DROPOUT_OPS | {"normalize", "layer_norm", "contiguous"}
    for n in f.nodes:
        dropped, assigned_to = None, None
        if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call):
            dropped = n.value
        elif isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) \
                and isinstance(n.value, ast.Call) and not n.targets[0].id.startswith("_"):
            dropped, assigned_to = n.value, n.targets[0].id
        if dropped is None:
            continue
        found = _out_of_place(f, dropped, fnl)
        if found is None:
            continue
        op, tensor = found
        scope = f.scope_of.get(n, f.tree)
        if assigned_to is not None:
            base = tensor
            while isinstance(base, (ast.Attribute, ast.Subscript)):
                base = base.value
            if op not in kept_ops or not isinstance(base, ast.Name) or base.id == assigned_to \
                    or not _never_read(f, assigned_to, scope) or not _read_after(f, base.id, scope, n.lineno):
                continue
        rule_id, confidence = _discard_rule(f, dropped, op, tensor)
        t, text = f.seg(tensor), f.seg(dropped)
        if assigned_to is None:
            why = f"`{text}` returns a new tensor and its result is discarded; `{t}` itself is unchanged. " + RULES[rule_id].why
        else:
            why = f"`{assigned_to} = {text}` is never read, while `{t}` is used on unchanged. " + RULES[rule_id].why
        said = {"why": why}
        if isinstance(tensor, (ast.Name, ast.Attribute)) and rule_id != "discarded_weight_clip":
            said["fix"] = f"assign the result: {t} = {text}" + (
                f" (or the in-place {t}.{op}_(...))" if isinstance(dropped.func, ast.Attribute) and op in HAS_INPLACE else "")
        if confidence is not None:
            said["confidence"] = confidence
        hits.append((n, rule_id, said))
    return hits


# --- learning-rate schedulers ----------------------------------------------------------------

SCHEDULERS = {"StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR", "CosineAnnealingWarmRestarts",
              "OneCycleLR", "CyclicLR", "LambdaLR", "MultiplicativeLR", "LinearLR", "ConstantLR", "PolynomialLR",
              "SequentialLR", "ChainedScheduler", "ReduceLROnPlateau"}
# constructor argument that sets the schedule's length, for the schedules people size in epochs
EPOCH_SIZED = {"StepLR": "step_size", "CosineAnnealingLR": "T_max", "MultiStepLR": "milestones",
               "CosineAnnealingWarmRestarts": "T_0"}


def _scheduler_ctor(f: ParsedFile, receiver: ast.AST) -> ast.Call | None:
    """The call that built this scheduler, looked up in its function, then anywhere in the file."""
    values = f.values_of(receiver) or [v for table in f.assigned.values() for v in table.get(_src(receiver), [])]
    for v in values:
        if not isinstance(v, ast.Call):
            continue
        fn = f.functions.get(v.func.id) if isinstance(v.func, ast.Name) else None
        # sched = make_scheduler(opt), a helper of this file that returns the constructor
        for c in [v] + [r.value for r in (_in_scope(fn) if fn is not None else []) if isinstance(r, ast.Return)]:
            if isinstance(c, ast.Call) and (_name(c) in SCHEDULERS or "lr_scheduler" in _src(c.func)
                                            or (_name(c).startswith("get_") and "schedule" in _name(c))):
                return c
    return None


def _is_scheduler_step(f: ParsedFile, n: ast.AST) -> bool:
    # step(metric) is ReduceLROnPlateau (or a deprecated epoch argument): its order does not shift anything
    if not _method_call(n, "step") or n.args or n.keywords:
        return False
    ctor = _scheduler_ctor(f, n.func.value)
    return (ctor is not None and _name(ctor) != "ReduceLROnPlateau") or (
        ctor is None and "sched" in _src(n.func.value).lower())


def _steps_optimizer(f: ParsedFile, n: ast.AST) -> bool:
    """An optimizer step here or inside a same-file function called here."""
    if _is_optimizer_step(n):
        return True
    if isinstance(n, ast.Call):
        target = n.func.id if isinstance(n.func, ast.Name) else (
            n.func.attr if isinstance(n.func, ast.Attribute) and _src(n.func.value) == "self" else "")
        fn = f.functions.get(target)
        return fn is not None and any(_is_optimizer_step(c) for c in f.expand(fn))
    return False


def _guarded_first_pass(f: ParsedFile, node: ast.AST, loop: ast.AST) -> bool:
    """`if epoch > 0: scheduler.step()` at the top of the loop is the previous epoch's step, done late."""
    up = f.parent.get(node)
    while up is not None and up is not loop:
        if isinstance(up, ast.If) and isinstance(loop, (ast.For, ast.AsyncFor)) and \
                any(isinstance(v, ast.Name) and v.id in _src(up.test) for v in ast.walk(loop.target)):
            return True
        up = f.parent.get(up)
    return False


def _range_bound(loop: ast.AST) -> ast.AST | None:
    it = getattr(loop, "iter", None)
    if isinstance(it, ast.Call) and _name(it) == "range" and it.args:
        return it.args[-1] if len(it.args) <= 2 else it.args[1]
    return None


def _is_epoch_loop(loop: ast.AST) -> bool:
    target = _src(getattr(loop, "target", "")).lower()
    return isinstance(loop, (ast.For, ast.AsyncFor)) and ("epoch" in target or target in ("ep", "e") or
                                                          "epoch" in _src(loop.iter).lower())


def _number(f: ParsedFile, e: ast.AST | None, depth: int = 0) -> float | None:
    """The value of a constant expression of this file: 4, EPOCHS, CONFIG["epochs"] + 1 (a module-level dict
    literal or dict(...) call), cfg.epochs is unknown."""
    if e is None or depth > 4:
        return None
    if isinstance(e, ast.Constant) and isinstance(e.value, (int, float)) and not isinstance(e.value, bool):
        return float(e.value)
    if isinstance(e, ast.Name):
        values = f.assigned[f.tree].get(e.id, [])
        return _number(f, values[0], depth + 1) if len(values) == 1 else None
    if isinstance(e, ast.Subscript) and isinstance(e.value, ast.Name) and isinstance(e.slice, ast.Constant):
        tables = f.assigned[f.tree].get(e.value.id, [])
        if len(tables) != 1:
            return None
        t = tables[0]
        if isinstance(t, ast.Dict):
            pairs = zip(t.keys, t.values)
        elif isinstance(t, ast.Call) and _name(t) == "dict":
            pairs = ((ast.Constant(k.arg), k.value) for k in t.keywords)
        else:
            return None
        return next((_number(f, v, depth + 1) for k, v in pairs
                     if isinstance(k, ast.Constant) and k.value == e.slice.value), None)
    if isinstance(e, ast.BinOp) and isinstance(e.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv)):
        a, b = _number(f, e.left, depth + 1), _number(f, e.right, depth + 1)
        if a is None or b is None:
            return None
        if isinstance(e.op, ast.FloorDiv):
            return a // b if b else None
        return a + b if isinstance(e.op, ast.Add) else a - b if isinstance(e.op, ast.Sub) else a * b
    return None


def _epoch_sized(f: ParsedFile, ctor: ast.Call, epoch_loop: ast.AST) -> bool:
    """Is the scheduler's length given in epochs: `T_max=args.epochs`, or constants within the epoch count?"""
    if _name(ctor) == "ExponentialLR":  # a per-batch gamma of 0.99 or less is 100x down within ~460 batches
        gamma = next((k.value for k in ctor.keywords if k.arg == "gamma"), ctor.args[1] if len(ctor.args) > 1 else None)
        return isinstance(gamma, ast.Constant) and isinstance(gamma.value, float) and gamma.value <= 0.99
    if _name(ctor) in ("LambdaLR", "MultiplicativeLR"):  # lr_lambda=lambda epoch: 0.95 ** epoch
        return any(isinstance(n, ast.Lambda) and any("epoch" in a.arg for a in n.args.args) for n in ast.walk(ctor))
    key = EPOCH_SIZED.get(_name(ctor))
    if key is None:
        return False
    size = next((k.value for k in ctor.keywords if k.arg == key), ctor.args[1] if len(ctor.args) > 1 else None)
    if size is None:
        return False
    text = _src(size).lower()
    if "epoch" in text and "per_epoch" not in text and not any(w in text for w in ("len(", "*")):
        return True  # LR_STEP_EPOCHS, decay_epochs: the name says what it counts
    n, epochs = _number(f, size), _number(f, _range_bound(epoch_loop))
    if n is not None and epochs is not None and not isinstance(size, ast.Constant):
        return 0 < n <= epochs  # step_size=CONFIG["lr_step_size"] (4) within CONFIG["epochs"] (12) epochs
    if any(w in text for w in ("len(", "*", "step", "iter", "batch")):
        return False
    bound = _range_bound(epoch_loop)
    if bound is not None and _src(bound) == _src(size):
        return True
    if "epoch" in text:
        return True
    numbers = [c.value for c in ast.walk(size) if isinstance(c, ast.Constant) and isinstance(c.value, (int, float))]
    if isinstance(bound, ast.Constant) and isinstance(bound.value, int) and numbers:
        return all(0 < x <= bound.value for x in numbers)
    return False


def _lr_names(f: ParsedFile) -> set[str]:
    """Names the optimizers of this file take their LR from (`lr=learning_rate`), skipping an LR of exactly 1.0
    (then a lambda that returns a learning rate is right)."""
    names = set()
    for n in f.nodes:
        if isinstance(n, ast.Call) and _is_optimizer_ctor(n):
            for kw in n.keywords:
                if kw.arg == "lr" and isinstance(kw.value, ast.Name) and _number(f, kw.value) != 1.0:
                    names.add(kw.value.id)
                elif kw.arg == "lr" and isinstance(kw.value, (ast.Attribute, ast.Subscript)):
                    names.add(_src(kw.value))  # cfg.lr, args.lr, config["lr"] (blind dev signal_cnn1d_adamw_...)
    return names


def _numerator_names(e: ast.AST) -> set[str]:
    """Names an expression grows with: every Name (and attribute chain or subscript, as written) except those
    under a division's denominator."""
    if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Div):
        return _numerator_names(e.left)
    if isinstance(e, ast.Name):
        return {e.id}
    if isinstance(e, (ast.Attribute, ast.Subscript)):
        return {_src(e)} | _numerator_names(e.value)
    return set().union(*[_numerator_names(c) for c in ast.iter_child_nodes(e)]) if list(ast.iter_child_nodes(e)) \
        else set()


def rule_learning_rate_as_lambda_factor(f: ParsedFile) -> list[Hit]:
    """LambdaLR(opt, lr_lambda=get_lr) where get_lr returns `learning_rate * ...`, the optimizer's own LR:
    a nanoGPT-style get_lr (absolute LRs) handed to a scheduler that wants factors (blind dev
    pantry_notes_char_gpt: peak 1e-3 became 1e-6). Source: the PyTorch LambdaLR docs ("a function which computes
    a multiplicative factor")."""
    lrs = _lr_names(f)
    hits = []
    for n in f.nodes:
        if not (isinstance(n, ast.Call) and _name(n) in ("LambdaLR", "MultiplicativeLR") and lrs):
            continue
        fn = next((kw.value for kw in n.keywords if kw.arg == "lr_lambda"), n.args[1] if len(n.args) > 1 else None)
        if isinstance(fn, ast.Name) and fn.id in f.functions:
            returns = [r.value for r in ast.walk(f.functions[fn.id]) if isinstance(r, ast.Return) and r.value]
        elif isinstance(fn, ast.Lambda):
            returns = [fn.body]
        else:
            continue
        if any(_numerator_names(r) & lrs for r in returns):
            hits.append((n, "learning_rate_as_lambda_factor"))
    return hits


LOSS_LIKE = re.compile(r"loss|err|mse|mae|nll|ppl|perplex|bpc|bpd|cost|dist", re.I)
SCORE_LIKE = re.compile(r"acc|f1|auc|score|prec|recall|map\b|iou|dice|r2|bleu|rouge|reward|corr", re.I)


def rule_plateau_mode_against_metric(f: ParsedFile) -> list[Hit]:
    """ReduceLROnPlateau(mode="max") stepped with a loss, or mode "min" (the default) with an accuracy. The mode
    is read from the constructor; the metric from the name of what `<scheduler>.step(x)` is given. A file that
    builds plateau schedulers in both modes is left alone (which step belongs to which is not read)."""
    modes = set()
    for n in f.nodes:
        if isinstance(n, ast.Call) and _name(n) == "ReduceLROnPlateau":
            arg = next((kw.value for kw in n.keywords if kw.arg == "mode"), n.args[1] if len(n.args) > 1 else None)
            modes.add(arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else
                      "min" if arg is None else None)
    if len(modes) != 1 or None in modes:
        return []
    mode = modes.pop()
    hits = []
    for n in f.nodes:
        if not (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "step"
                and re.search(r"sched|plateau|lr", _src(n.func.value), re.I)):
            continue
        metric = next((kw.value for kw in n.keywords if kw.arg == "metrics"), n.args[0] if n.args else None)
        text = _src(metric) if metric is not None else ""
        loss, score = bool(LOSS_LIKE.search(text)), bool(SCORE_LIKE.search(text))
        if loss == score:  # neither, or both (a "loss_or_acc" name): the direction is not read from a name
            continue
        wrong = (mode == "max" and loss) or (mode == "min" and score)
        if wrong:
            why = (f"ReduceLROnPlateau is built in mode '{mode}' but stepped with `{text[:60]}`, "
                   f"{'a loss, which improves by falling' if loss else 'a score, which improves by rising'}: every "
                   "epoch the run improves counts as an epoch without improvement, so the LR is cut by `factor` "
                   "every `patience` epochs while the run is still learning")
            hits.append((n, "plateau_mode_against_metric", {"why": why}))
    return hits


BUFFER_WORDS = ("buffers", "named_buffers", "state_dict", "load_state_dict", "update_bn", "use_buffers")


def rule_weight_average_skips_buffers(f: ParsedFile) -> list[Hit]:
    """`for a, b in zip(ema.parameters(), model.parameters()): a.mul_(d).add_(...)` in a class or function that
    never touches buffers/state_dict, in a file whose model has batch norm (blind dev har_accel_conv1d_mixup)."""
    if not re.search(r"BatchNorm\d?d|SyncBatchNorm", f.text):
        return []
    hits = []
    for loop in f.nodes:
        if not (isinstance(loop, ast.For) and isinstance(loop.iter, ast.Call) and _name(loop.iter) == "zip"
                and sum(isinstance(a, ast.Call) and _name(a) in ("parameters", "named_parameters")
                        for a in loop.iter.args) >= 2):
            continue
        averages = any(isinstance(n, ast.Call) and _name(n) in ("mul_", "add_", "lerp_", "copy_", "sub_")
                       for n in ast.walk(loop))
        scope = f.scope_of.get(loop)
        owner = next((c for c in f.nodes if isinstance(c, ast.ClassDef) and scope is not None
                      and any(scope is m for m in ast.walk(c))), scope)
        text = _src(owner) if owner is not None else f.text
        if averages and not any(w in text for w in BUFFER_WORDS):
            hits.append((loop, "weight_average_skips_buffers"))
    return hits


def rule_scheduler_order(f: ParsedFile) -> list[Hit]:
    hits = []
    loops = [n for n in f.nodes if isinstance(n, LOOPS)]
    for loop in loops:
        own = list(_in_scope(loop))
        sched = sorted((n for n in own if _is_scheduler_step(f, n)), key=lambda n: n.lineno)
        steps = sorted((n for n in own if _steps_optimizer(f, n)), key=lambda n: n.lineno)
        if not sched or not steps:
            continue
        s, o = sched[0], steps[0]
        per_micro_batch = all(_mod_guard(f, st, loop) is not None for st in steps if _is_optimizer_step(st)) and \
            _mod_guard(f, s, loop) is None  # said better by scheduler_stepped_per_micro_batch
        if s.lineno < o.lineno and not _exclusive(f, s, o) and not _guarded_first_pass(f, s, loop) and not per_micro_batch:
            why = (f"{_src(s)} at line {s.lineno} runs before {_src(o)} at line {o.lineno} in this loop, so the "
                   "schedule is one step ahead: each update uses the next step's learning rate (PyTorch warns: "
                   "'Detected call of lr_scheduler.step() before optimizer.step()')")
            hits.append((s, "scheduler_step_before_optimizer_step", {"why": why}))
    for loop, nodes in f.training_loops():
        for s in (n for n in _in_scope(loop) if _is_scheduler_step(f, n)):
            ctor = _scheduler_ctor(f, s.func.value)
            outer = [o for o, o_nodes in f._stepping_loops if o is not loop and loop in o_nodes and _is_epoch_loop(o)]
            if ctor is None or not outer or f.under_if(s, loop):
                continue
            if _epoch_sized(f, ctor, outer[0]):
                counts = {"ExponentialLR": "its gamma is applied every batch", "LambdaLR": "its lambda's epoch counts batches",
                          "MultiplicativeLR": "its lambda's epoch counts batches"}.get(_name(ctor)) or \
                    f"its {EPOCH_SIZED[_name(ctor)]} counts batches"
                why = (f"{_name(ctor)} is sized in epochs ({f.seg(ctor)} at line {ctor.lineno}) but {_src(s)} at "
                       f"line {s.lineno} runs once per batch inside the epoch loop at line {outer[0].lineno}, so "
                       f"{counts}: " + ("the LR cycles every few batches instead of annealing once"
                                        if "Cosine" in _name(ctor) else "the LR falls to almost nothing within the first epochs"))
                hits.append((s, "epoch_schedule_stepped_per_batch", {"why": why}))
    return hits


# --- gradient accumulation -------------------------------------------------------------------

ADAPTIVE = {"Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam", "RAdam", "SparseAdam",
            "Adafactor", "Lion", "LBFGS"}
ACCUM_WORDS = ("accum", "micro", "grad_acc", "gradient_acc")


def _has_mod(test: ast.AST) -> bool:
    return any(isinstance(b, ast.BinOp) and isinstance(b.op, ast.Mod) for b in ast.walk(test))


def _mod_guard(f: ParsedFile, node: ast.AST, stop: ast.AST) -> ast.If | None:
    """The `if step % k == 0:` that `node` sits under (inside `stop`), or an earlier
    `if step % k != 0: continue` in an enclosing block that lets it run only every k-th pass."""
    up = f.parent.get(node)
    while up is not None and up is not stop:
        if isinstance(up, ast.If) and _has_mod(up.test):
            return up
        up = f.parent.get(up)
    n = node
    while n is not None and n is not stop:
        found = _block_of(f, n)
        if found is None:
            break
        stmt, block = found
        for prev in block[:block.index(stmt)]:
            if isinstance(prev, ast.If) and _has_mod(prev.test) and not prev.orelse and prev.body \
                    and isinstance(prev.body[-1], ast.Continue):
                return prev
        n = f.parent.get(stmt)
    return None


def _mod_count(guard: ast.If) -> str:
    mod = next(b for b in ast.walk(guard.test) if isinstance(b, ast.BinOp) and isinstance(b.op, ast.Mod))
    return _src(mod.right)


def _scaled(f: ParsedFile, e: ast.AST, depth: int = 0, seen: set | None = None) -> bool:
    """Is the loss divided (or multiplied by a factor) on its way to backward()?"""
    seen = set() if seen is None else seen
    if depth > 8 or e is None:
        return False
    if isinstance(e, ast.BinOp):
        if isinstance(e.op, ast.Div):
            return True
        if isinstance(e.op, ast.Mult):
            return True  # loss * (1 / k), 0.25 * loss, loss * weight: a factor is there; not ours to judge
        return _scaled(f, e.left, depth + 1, seen) or _scaled(f, e.right, depth + 1, seen)
    if isinstance(e, ast.Call):
        if _method_call(e, "div", "mul", "true_divide", "divide"):
            return True
        if _method_call(e, "scale") and e.args:  # scaler.scale(loss / k)
            return _scaled(f, e.args[0], depth + 1, seen)
        if isinstance(e.func, ast.Attribute) and _name(e) in ("mean", "float", "to", "squeeze", "sum", "double"):
            return _scaled(f, e.func.value, depth + 1, seen)
        helper = f.functions.get(e.func.id) if isinstance(e.func, ast.Name) else None
        return helper is not None and any(  # loss = compute_loss(model, batch, accum) that divides inside
            isinstance(r, ast.Return) and _scaled(f, r.value, depth + 1, seen) for r in _in_scope(helper))
    if isinstance(e, (ast.Name, ast.Attribute)):
        scope = f.scope_of.get(e, f.tree)
        if (scope, _src(e)) in seen:  # loss = loss + aux: each name is looked up once
            return False
        seen.add((scope, _src(e)))
        if any(isinstance(n, ast.AugAssign) and isinstance(n.op, (ast.Div, ast.Mult)) and _src(n.target) == _src(e)
               for n in _in_scope(scope)):
            return True
        return any(_scaled(f, v, depth + 1, seen) for v in f.values_of(e) if v is not e)
    return False


def _grads_rescaled(nodes: list[ast.AST]) -> bool:
    """`p.grad /= n` / `p.grad.div_(n)`: the gradient is normalised after backward instead of the loss before."""
    for n in nodes:
        if isinstance(n, ast.AugAssign) and isinstance(n.op, (ast.Div, ast.Mult)) and _src(n.target).endswith("grad"):
            return True
        if _method_call(n, "div_", "mul_") and ".grad" in _src(n.func.value):
            return True
    return False


def _optimizer_kind(f: ParsedFile) -> str:
    names = {_name(n) for n in f.nodes if isinstance(n, ast.Call) and _is_optimizer_ctor(n)}
    if names and names <= {"SGD", "ASGD"}:
        return "sgd"
    return "adaptive" if names & ADAPTIVE else "unknown"


def _accumulating_backward_loops(f: ParsedFile):
    """(training loop, backward call, optimizer step, how many micro-batches) for each accumulation pattern:
    flat (`backward()` every iteration, `if (i + 1) % k == 0: optimizer.step()`) or nested (a
    `for micro in range(accum)` loop of backward() calls, then one step)."""
    for loop, _ in f.training_loops():
        own = list(_in_scope(loop))
        if "accumulate(" in _src(loop) or any(_method_call(n, "backward") and n.args and
                                               not _method_call(n.func.value, "scale") for n in own):
            continue  # accelerator.accumulate / accelerator.backward / engine.backward divide by k themselves
        steps = sorted((n for n in own if _is_optimizer_step(n)), key=lambda n: n.lineno)
        backs = sorted((n for n in own if _is_backward(n)), key=lambda n: n.lineno)
        if not steps or not backs:
            continue
        guard = _mod_guard(f, steps[0], loop)
        # every step behind `% k`: accumulation. A WGAN's generator stepped every n_critic batches next to a
        # critic stepped every batch is not.
        if guard is not None and all(_mod_guard(f, st, loop) is not None for st in steps):
            free = [b for b in backs if _mod_guard(f, b, loop) is None]
            if free:
                yield loop, free[0], steps[0], _mod_count(guard), None, True
                continue
        micro_loops = [m for m in own if isinstance(m, LOOPS) and any(_is_backward(b) for b in _in_scope(m))
                       and not any(_is_optimizer_step(c) for c in _in_scope(m))]
        for m in micro_loops:
            bound = _range_bound(m)
            words = (_src(bound) if bound is not None else "") + " " + _src(getattr(m, "target", ""))
            inner = [b for b in backs if b in set(_in_scope(m))]
            named = any(w in words.lower() for w in ACCUM_WORDS)
            # a micro loop of any name that zeroes the grads is wrong on its face; judging the loss scale
            # needs to know the loop accumulates (for micro_step in range(grad_accum_steps))
            if inner and all(b in inner for b in backs) and steps[0].lineno > m.lineno and \
                    (named or any(_is_zeroing(z) for z in _in_scope(m))):
                yield loop, inner[0], steps[0], _src(bound) if bound is not None else "k", m, named
                break


def rule_gradient_accumulation(f: ParsedFile) -> list[Hit]:
    hits = []
    kind = _optimizer_kind(f)
    for loop, back, step, k, micro, named in _accumulating_backward_loops(f):
        root = _backward_root(back)
        where = "the micro-batch loop" if micro is not None else f"`{_src(_mod_guard(f, step, loop).test)}`"
        # zero_grad on every micro-batch: inside the micro loop, or unconditional in a flat loop
        zeros = [z for z in _in_scope(micro if micro is not None else loop) if _is_zeroing(z)
                 and (micro is not None or (not f.under_if(z, loop) and _mod_guard(f, z, loop) is None))]
        zeros = [z for z in zeros if not _method_call(z, "zero_grad") or _zeroes_for(z, _stepped_optimizer(step))]
        if zeros:
            z = min(zeros, key=lambda n: n.lineno)
            why = (f"{_src(z)} at line {z.lineno} runs on every micro-batch, but {_src(step)} at line {step.lineno} "
                   f"runs only once per {k} micro-batches ({where}): each step sees only the last micro-batch's "
                   "gradient; zero the gradients right after the step instead")
            hits.append((z, "zero_grad_inside_accumulation", {"why": why}))
            continue  # the loss scale is moot while only one micro-batch counts
        if not named or root is None or _scaled(f, root) or _grads_rescaled(list(_in_scope(loop))):
            continue
        why = (f"{_src(back)} at line {back.lineno} runs on every micro-batch and {_src(step)} at line {step.lineno} "
               f"once per {k} ({where}), but `{_src(root)}` is not divided by {k}: the accumulated gradient is "
               f"{k} times the mean, so every update is {k} times too large")
        said = {"why": why, "fix": f"divide before backward: {_src(root)} = {_src(root)} / {k} "
                                   "(multiply back by it only for logging)"}
        if kind == "adaptive":
            said["confidence"] = 0.35
            said["why"] += (" (with Adam-family optimizers the scale mostly cancels out; what remains is a "
                            f"{k}-times tighter gradient-clipping threshold and a relatively smaller eps)")
        elif kind == "unknown":
            said["confidence"] = 0.45
        hits.append((back, "accumulation_loss_not_divided", said))
    return hits


def rule_accumulation_step_placement(f: ParsedFile) -> list[Hit]:
    """Steps that belong inside the `% k` accumulation block but run on every micro-batch."""
    hits = []
    for loop, _ in f.training_loops():
        own = list(_in_scope(loop))
        if "accumulate(" in _src(loop) or "accelerator." in _src(loop):
            continue  # accelerate skips the optimizer and scheduler steps between sync points itself
        steps = sorted((n for n in own if _is_optimizer_step(n)), key=lambda n: n.lineno)
        backs = [n for n in own if _is_backward(n) and _mod_guard(f, n, loop) is None]
        if not steps or not backs:
            continue
        misplaced = False
        for st in (st for st in steps if _mod_guard(f, st, loop) is None and not f.under_if(st, loop)):
            zeros = [z for z in own if _method_call(z, "zero_grad") and _zeroes_for(z, _stepped_optimizer(st))]
            guards = [_mod_guard(f, z, loop) for z in zeros]
            if zeros and all(g is not None for g in guards):  # this optimizer steps every pass, is zeroed every k-th
                g = guards[0]
                why = (f"{_src(st)} at line {st.lineno} runs on every micro-batch, but {_src(zeros[0])} at line "
                       f"{zeros[0].lineno} only once per {_mod_count(g)} (`{_src(g.test)}`): between two zero_grad() "
                       f"calls the optimizer steps {_mod_count(g)} times on ever larger sums of the same gradients")
                hits.append((st, "step_every_micro_batch", {"why": why}))
                misplaced = True
        if misplaced:
            continue
        if not all(_mod_guard(f, st, loop) is not None for st in steps):
            continue
        guard = _mod_guard(f, steps[0], loop)
        k = _mod_count(guard)
        for sch in (n for n in own if _is_scheduler_step(f, n) and _mod_guard(f, n, loop) is None
                    and not f.under_if(n, loop)):
            ctor = _scheduler_ctor(f, sch.func.value) or next(
                (v for table in f.assigned.values() for v in table.get(_src(sch.func.value), []) if isinstance(v, ast.Call)), None)
            args = [*ctor.args, *(kw.value for kw in ctor.keywords)] if ctor is not None else []
            names = {n.id for a in args for n in ast.walk(a) if isinstance(n, ast.Name)}  # and one level of their values
            low = " ".join([_src(a) for a in args] + [_src(v) for table in f.assigned.values()
                                                     for name in names for v in table.get(name, [])]).lower()
            if any(w in low for w in ACCUM_WORDS) and "//" not in low and "/" not in low or \
                    "len(" in low and not any(w in low for w in ACCUM_WORDS):
                continue  # sized in micro-batches (len(loader) * epochs, steps * accum): stepping per micro-batch is right
            sized_in_updates = any(w in low for w in ACCUM_WORDS) or any(w in low for w in ("iters", "updates", "optimizer_steps"))
            why = (f"{_src(sch)} at line {sch.lineno} runs on every micro-batch, but {_src(steps[0])} at line "
                   f"{steps[0].lineno} only once per {k} (`{_src(guard.test)}`): the schedule advances {k} times per "
                   "optimizer step, so warmup ends early and the LR decays to its floor long before training ends")
            hits.append((sch, "scheduler_stepped_per_micro_batch", {"why": why, **({} if sized_in_updates else {"confidence": 0.5})}))
    return hits


# --- language-model targets ------------------------------------------------------------------

INPUT_NAMES = {"x", "xb", "xs", "inp", "inputs", "input", "input_ids", "idx", "tokens", "src", "x_batch", "context",
               "seq", "ids", "token_ids", "batch_x"}
TARGET_NAMES = {"y", "yb", "ys", "targets", "target", "labels", "label", "tgt", "y_batch", "batch_y", "next_tokens"}
LM_WORDS = ("vocab", "block_size", "seq_len", "context_length", "tokenizer", "causallm", "n_ctx", "max_seq",
            "embedding", "tril", "causal", "lm_head", "next token", "next-token")
ALIAS_METHODS = {"clone", "detach", "to", "long", "cuda", "contiguous", "view", "reshape", "flatten", "copy"}


def _shift_slice(n: ast.AST) -> bool:
    """x[:, :-1] / x[1:] / x[..., 1:, :]: a slice that drops the first or last position."""
    if not isinstance(n, ast.Subscript):
        return False
    parts = n.slice.elts if isinstance(n.slice, ast.Tuple) else [n.slice]
    for sl in parts:
        if isinstance(sl, ast.Slice):
            lo, up = sl.lower, sl.upper
            if isinstance(lo, ast.Constant) and lo.value == 1 or isinstance(lo, ast.BinOp) and "+ 1" in _src(lo):
                return True
            if isinstance(up, ast.UnaryOp) and isinstance(up.op, ast.USub) or isinstance(up, ast.BinOp) and "- 1" in _src(up):
                return True
    return False


def _shifted(f: ParsedFile, exprs: list[ast.AST]) -> bool:
    for e in exprs:
        for n in ast.walk(e):
            if _shift_slice(n) or (isinstance(n, ast.Call) and _name(n) == "roll"):
                return True
            if isinstance(n, (ast.Name, ast.Attribute)) and any(w in _src(n).lower() for w in ("shift", "next_")):
                return True
    return False


def _alias_of(e: ast.AST) -> str | None:
    """input_ids.clone() / x.detach().to(device) / x -> the name it copies."""
    while _method_call(e, *ALIAS_METHODS):
        e = e.func.value
    return e.id if isinstance(e, ast.Name) else None


def _ce_calls(f: ParsedFile) -> list[ast.Call]:
    return [c for c in f.nodes if isinstance(c, ast.Call) and f.loss_kind(c) in CE | NLL]


def _ce_target(call: ast.Call) -> ast.AST | None:
    if len(call.args) > 1:
        return call.args[1]
    return next((k.value for k in call.keywords if k.arg in ("target", "targets", "labels")), None)


def _model_inputs(call: ast.Call) -> list[str]:
    """The names a model call takes as its input (first positional, input_ids=/idx=/x=), not its labels."""
    out = [call.args[0]] if call.args else []
    out += [k.value for k in call.keywords if k.arg in INPUT_NAMES]
    return [a.id for a in out if isinstance(a, ast.Name)]


def _mlm_like(f: ParsedFile, names: set[str]) -> bool:
    """Masked-LM / denoising: labels equal to the inputs are right when the inputs are then corrupted."""
    text = f.text.lower()
    if any(w in text for w in ("mask_token", "mlm", "[mask]", "denois", "noise")):
        return True
    for n in f.nodes:
        targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, ast.AugAssign) else []
        for t in targets:
            base = t
            while isinstance(base, (ast.Subscript, ast.Attribute)):
                base = base.value
            if isinstance(t, ast.Subscript) and isinstance(base, ast.Name) and base.id in names:
                return True
    return False


def _pairs(f: ParsedFile) -> dict[ast.AST, dict[str, list[tuple[ast.AST, ast.AST]]]]:
    """scope -> name -> [(value, assignment)], element-wise for `a, b = c, d` (not `a, b = batch`)."""
    out: dict = {}
    for n in f.nodes:
        if not isinstance(n, ast.Assign) or len(n.targets) != 1:
            continue
        t, v = n.targets[0], n.value
        if isinstance(t, ast.Tuple) and isinstance(v, ast.Tuple) and len(t.elts) == len(v.elts):
            items = list(zip(t.elts, v.elts))
        elif isinstance(t, ast.Name):
            items = [(t, v)]
        else:
            continue
        table = out.setdefault(f.scope_of.get(n, f.tree), {})
        for name, value in items:
            if isinstance(name, ast.Name):
                table.setdefault(name.id, []).append((value, n))
    return out


def rule_unshifted_lm_targets(f: ParsedFile) -> list[Hit]:
    hits = []
    ces = _ce_calls(f)
    if not ces or not any(w in f.text.lower() for w in LM_WORDS):
        return hits
    # the loss itself: F.cross_entropy(model(input_ids).logits..., input_ids...) with no slice on either side
    for c in ces:
        first, target = f.first_arg(c), _ce_target(c)
        if first is None or target is None or _shifted(f, f.closure(first) + f.closure(target)):
            continue
        name = _alias_of(target)
        fed = {n for e in f.closure(first) for m in ast.walk(e) if isinstance(m, ast.Call) for n in _model_inputs(m)}
        if name is not None and name in fed and not _mlm_like(f, {name}):
            why = (f"`{f.seg(c)}` scores the logits of a model fed `{name}` against `{name}` itself at the same "
                   "positions: each position is asked for the token it was given, so the loss collapses toward 0")
            hits.append((c, "targets_are_unshifted_inputs", {"why": why}))
    if hits or any(_shifted(f, f.closure(f.first_arg(c)) + f.closure(_ce_target(c)))
                   for c in ces if f.first_arg(c) is not None and _ce_target(c) is not None):
        return hits
    # the batch: x, y = data[i:i+T], data[i:i+T] / y = x / targets = input_ids.clone()
    handed_to_hf = {k.value.id for c in f.nodes if isinstance(c, ast.Call) for k in c.keywords
                    if k.arg == "labels" and isinstance(k.value, ast.Name)}
    for scope, table in _pairs(f).items():
        for y in TARGET_NAMES & table.keys():
            for x in INPUT_NAMES & table.keys() - {y}:
                same = next(((vy, ny) for vy, ny in table[y] for vx, _ in table[x]
                             if (_src(vy) == _src(vx) and any(isinstance(s, ast.Slice) for s in ast.walk(vy)))
                             or _alias_of(vy) == x), None)
                if same is None or y in handed_to_hf or _mlm_like(f, {x, y}):
                    continue
                vy, ny = same
                why = (f"`{f.seg(ny)}` makes the targets the same tokens as `{x}` at the same positions, and the "
                       "cross-entropy in this file never shifts them: each position is asked for the token it was "
                       "given, so the loss collapses toward 0 while nothing is learned")
                hits.append((ny, "targets_are_unshifted_inputs", {"why": why}))
    return hits


RANDOM_DRAWS = ("randint", "randperm", "choice", "integers", "sample", "permutation", "shuffle")


def _own_draws(e: ast.AST) -> list[ast.Call]:
    """The random index draws written inside the expression itself (not read through a shared name)."""
    return [n for n in ast.walk(e) if isinstance(n, ast.Call) and _name(n) in RANDOM_DRAWS]


def rule_inputs_and_targets_drawn_apart(f: ParsedFile) -> list[Hit]:
    """x = stack([data[i:i+T] for i in randint(...)]); y = stack([data[i+1:...] for i in randint(...)]): two draws."""
    hits = []
    for table in _pairs(f).values():
        for y in TARGET_NAMES & table.keys():
            for x in INPUT_NAMES & table.keys() - {y}:
                for vx, nx in table[x]:
                    for vy, ny in table[y]:
                        dx, dy = _own_draws(vx), _own_draws(vy)
                        if dx and dy and ny.lineno > nx.lineno:
                            why = (f"`{x}` and `{y}` each index the data with their own random draw (`{f.seg(dx[0])}` "
                                   f"and `{f.seg(dy[0])}`): row {y}[b] belongs to another sample than {x}[b], so the "
                                   "targets carry nothing the inputs could predict")
                            hits.append((ny, "inputs_and_targets_drawn_apart", {"why": why}))
    return hits


# --- target leakage -----------------------------------------------------------------------------

FEATURE_WORDS = ("x", "feat", "input")
# calls that move the labels without fitting anything on them
LABEL_PLUMBING = {"len", "print", "from_numpy", "tensor", "as_tensor", "asarray", "array", "float", "int", "astype",
                  "TensorDataset", "zip", "DataLoader", "isnan", "isfinite", "unique", "bincount", "shape", "to"}


def _feature_name(name: str) -> bool:
    low = name.lower()
    return low in INPUT_NAMES or any(low.startswith(w) or low.endswith("_" + w) for w in FEATURE_WORDS)


def rule_label_statistic_in_features(f: ParsedFile) -> list[Hit]:
    """table = fit_rate(df["agent"], y); rate = apply(table); X = featurize(df, rate), in a function that splits
    its rows into train and validation: every row's label, validation rows included, shaped its own feature."""
    hits = []
    for scope in [f.tree, *f.functions.values()]:  # a script's top level splits and fits too
        body = [n for n in ast.walk(scope) if f.scope_of.get(n) is scope]
        calls = [n for n in body if isinstance(n, ast.Call)]
        if not any("split" in _name(c).lower() for c in calls):
            continue
        labels = {t.id for n in body if isinstance(n, ast.Assign) for t in n.targets
                  if isinstance(t, ast.Name) and t.id in TARGET_NAMES}
        assigns = sorted((n for n in body if isinstance(n, ast.Assign)), key=lambda n: n.lineno)
        for n in assigns:
            fit = n.value if isinstance(n.value, ast.Call) else None
            if fit is None or "split" in _name(fit).lower() or _name(fit) in LABEL_PLUMBING or not any(
                    isinstance(a, ast.Name) and a.id in labels for a in list(fit.args) + [k.value for k in fit.keywords]):
                continue
            tainted = {x.id for t in n.targets for x in ast.walk(t) if isinstance(x, ast.Name)}
            reached = None
            for later in assigns:
                if later.lineno <= n.lineno:
                    continue
                if any(isinstance(x, ast.Name) and x.id in tainted for x in ast.walk(later.value)):
                    names = {x.id for t in later.targets for x in ast.walk(t) if isinstance(x, ast.Name)}
                    tainted |= names
                    reached = reached or next((m for m in sorted(names) if _feature_name(m)), None)
            if reached:
                label = next(a.id for a in list(fit.args) + [k.value for k in fit.keywords]
                             if isinstance(a, ast.Name) and a.id in labels)
                why = (f"`{f.seg(fit)}` is fitted on all of `{label}` (every row's label, validation rows included) "
                       f"and reaches the features `{reached}`: " + RULES["label_statistic_in_features"].why)
                hits.append((n, "label_statistic_in_features", {"why": why}))
    return hits


# --- rows of the features moved apart from their labels -------------------------------------------

# methods that drop, re-order or regroup the rows of a table / array
ROW_METHODS = {"dropna", "query", "sort_values", "sort_index", "sample", "merge", "join", "drop_duplicates", "groupby",
               "pivot", "pivot_table", "explode", "nlargest", "nsmallest"}
COLUMN_WORDS = ("col", "feat", "field", "name", "key", "attr", "var")
QUIET_CALLS = {"len", "print", "info", "debug", "warning", "format", "shape", "size", "numel"}


def _label_name(name: str) -> bool:
    low = name.lower()
    return low in TARGET_NAMES or low.startswith("y_") or low.endswith("_y") or "label" in low or "target" in low


def _row_index(index: ast.AST) -> bool:
    """X[keep] / X[order] / X[mask, :] / X[k:] pick or re-order rows; X[:, cols], X[:n], X[0], X[FEATURES] do not."""
    if isinstance(index, ast.Tuple):
        return bool(index.elts) and _row_index(index.elts[0])
    if isinstance(index, ast.Slice):  # a slice from the start keeps rows aligned; one from k shifts them
        return index.lower is not None and not (isinstance(index.lower, ast.Constant) and index.lower.value in (0, None))
    if isinstance(index, (ast.Constant, ast.List)):  # a row, or a list of column names
        return False
    if isinstance(index, ast.Name) and (index.id.isupper() or any(w in index.id.lower() for w in COLUMN_WORDS)):
        return False
    return True


def _root_name(e: ast.AST) -> str:
    while isinstance(e, (ast.Call, ast.Attribute, ast.Subscript)):
        e = e.func if isinstance(e, ast.Call) else e.value
    return e.id if isinstance(e, ast.Name) else ""


def _row_change(f: ParsedFile, e: ast.AST, name: str) -> bool:
    """Is `e` the rows of `name` dropped, filtered or re-ordered: name[keep], name.loc[mask], name.dropna(),
    name.merge(...), sorted(name, key=len), or a function of this file that returns one of those of its first
    argument?"""
    if isinstance(e, ast.Call) and _name(e) == "sorted" and isinstance(e.func, ast.Name) and e.args \
            and isinstance(e.args[0], ast.Name) and e.args[0].id == name:
        return True
    if _picked_in_order(e, name):
        return True
    if _root_name(e) != name:
        return False
    for n in ast.walk(e):
        if isinstance(n, ast.Subscript) and _root_name(n.value) == name and _row_index(n.slice) and (
                isinstance(n.value, ast.Name) or _name(n.value) in ("loc", "iloc")):
            return True
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ROW_METHODS \
                and _root_name(n.func.value) == name:
            return True
    return False


def _picked_in_order(e: ast.AST, name: str) -> bool:
    """[seqs[i] for i in order]: the rows of `name` taken in another order (not range(...), which keeps it)."""
    if not (isinstance(e, ast.ListComp) and len(e.generators) == 1):
        return False
    gen = e.generators[0]
    return (isinstance(gen.target, ast.Name) and isinstance(e.elt, ast.Subscript)
            and isinstance(e.elt.value, ast.Name) and e.elt.value.id == name
            and isinstance(e.elt.slice, ast.Name) and e.elt.slice.id == gen.target.id
            and not (isinstance(gen.iter, ast.Call) and _name(gen.iter) in ("range", "enumerate")))


# a conversion of a name into itself: labels = torch.tensor(labels) keeps its rows where they were
CONVERSIONS = {"tensor", "as_tensor", "asarray", "array", "from_numpy", "list", "tuple", "LongTensor", "FloatTensor",
               "stack", "long", "float", "int", "to", "numpy", "values", "to_numpy", "astype"}


def _converts(value: ast.AST, name: str) -> bool:
    if not (isinstance(value, ast.Call) and _name(value) in CONVERSIONS):
        return False
    if isinstance(value.func, ast.Attribute) and isinstance(value.func.value, ast.Name) and value.func.value.id == name:
        return True
    return bool(value.args) and isinstance(value.args[0], ast.Name) and value.args[0].id == name


def _returns_row_change(f: ParsedFile, call: ast.Call) -> str:
    """The argument name whose rows a call of a function of this file drops or re-orders (drop_incomplete(X))."""
    fn = f.functions.get(_name(call)) if isinstance(call.func, ast.Name) else None
    if fn is None or not call.args or not isinstance(call.args[0], ast.Name) or not fn.args.args:
        return ""
    param = fn.args.args[0].arg
    changed = {param}
    for n in sorted((n for n in _in_scope(fn) if isinstance(n, ast.Assign)), key=lambda n: n.lineno):
        if len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) and _row_change(f, n.value, param):
            changed.add(n.targets[0].id)
    for r in _in_scope(fn):
        if isinstance(r, ast.Return) and r.value is not None and (
                _row_change(f, r.value, param) or (isinstance(r.value, ast.Name) and r.value.id in changed - {param})):
            return call.args[0].id
    return ""


def _row_changes(f: ParsedFile, body: list[ast.AST]) -> list[tuple[str, ast.stmt]]:
    """(name, statement) for every statement of a scope that drops or re-orders the rows of a name in place of it."""
    out = []
    for n in body:
        if isinstance(n, ast.Assign):
            for t in n.targets:
                pairs = (zip(t.elts, n.value.elts) if isinstance(t, ast.Tuple) and isinstance(n.value, ast.Tuple)
                         and len(t.elts) == len(n.value.elts) else [(t, n.value)])
                for tgt, val in pairs:
                    if not isinstance(tgt, ast.Name):
                        continue
                    if _row_change(f, val, tgt.id) or (isinstance(val, ast.Call) and
                                                        _returns_row_change(f, val) == tgt.id):
                        out.append((tgt.id, n))
        elif isinstance(n, ast.Expr) and isinstance(n.value, ast.Call) and _name(n.value) == "shuffle" \
                and n.value.args and isinstance(n.value.args[0], ast.Name):
            out.append((n.value.args[0].id, n))  # np.random.shuffle(X): in place
    return out


def _header(stmt: ast.AST) -> list[ast.AST]:
    """What a statement itself evaluates: a loop's or a branch's header, not the body (its own statements)."""
    if isinstance(stmt, (ast.For, ast.AsyncFor)):
        return [stmt.target, stmt.iter]
    if isinstance(stmt, (ast.If, ast.While)):
        return [stmt.test]
    if isinstance(stmt, (ast.With, ast.AsyncWith)):
        return list(stmt.items)
    if isinstance(stmt, (ast.Try, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return []
    return [stmt]


def _loads(stmt: ast.AST, name: str) -> list[ast.Name]:
    """Reads of `name` in a statement, outside len()/print()/logging calls."""
    out = []
    for n in (x for h in _header(stmt) for x in ast.walk(h)):
        if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load):
            out.append(n)
    quiet = {id(x) for h in _header(stmt) for c in ast.walk(h) if isinstance(c, ast.Call) and _name(c) in QUIET_CALLS
             for x in ast.walk(c)}
    return [n for n in out if id(n) not in quiet]


def _rebound(body: list[ast.stmt], name: str, unpacked: bool) -> bool:
    """Is `name` assigned again, or sorted / shuffled in place, in these statements (after it was unpacked, or at
    all when it is a parameter)?"""
    seen = 0
    for s in body:
        if isinstance(s, ast.Assign) and _converts(s.value, name):
            continue
        for n in ast.walk(s):
            if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store):
                seen += 1
            elif isinstance(n, ast.Call) and _name(n) in ("sort", "shuffle") and (
                    (isinstance(n.func, ast.Attribute) and _root_name(n.func.value) == name)
                    or (n.args and isinstance(n.args[0], ast.Name) and n.args[0].id == name)):
                return True
    return seen > (1 if unpacked else 0)  # the unpacking that paired it is one binding


def _together(stmts: list[ast.stmt], a: str, b: str, moved_by: set[str]) -> ast.stmt | None:
    """The first statement reading both names (split(X, y), zip(X, y), return X[tr], y[tr]), or the second of two
    that index both with the same index (x_tr = X[:cut]; y_tr = y[:cut]). A statement that indexes `b` with the
    index that moved `a` (TensorDataset(X, y[order])) re-aligns them there: not a pairing of moved rows."""
    indexed: dict[str, dict[str, ast.stmt]] = {a: {}, b: {}}
    made_from_a = {a}  # padded = pad_sequence(seqs): what is built from the moved rows carries their order
    for s in stmts:
        subs = [(n.value.id, _src(n.slice)) for h in _header(s) for n in ast.walk(h)
                if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id in (a, b)]
        if any(name == b and key in moved_by for name, key in subs):
            return None
        if any(_loads(s, x) for x in made_from_a) and _loads(s, b):
            return s
        if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name) \
                and not _label_name(s.targets[0].id) and _built_from(s.value, made_from_a):
            made_from_a.add(s.targets[0].id)
        for name, key in subs:
            indexed[name].setdefault(key, s)
            other = indexed[b if name == a else a].get(key)
            if other is not None and other is not s:
                return s
    return None


def _built_from(value: ast.AST, names: set[str]) -> bool:
    """pad_sequence(seqs, ...), torch.stack(xs), xs.float(): a call that takes the rows themselves, not their
    count or shape."""
    if not isinstance(value, ast.Call) or _name(value) in QUIET_CALLS:
        return False
    if isinstance(value.func, ast.Attribute) and isinstance(value.func.value, ast.Name) and value.func.value.id in names:
        return True
    return bool(value.args) and isinstance(value.args[0], ast.Name) and value.args[0].id in names


def rule_rows_moved_apart_from_labels(f: ParsedFile) -> list[Hit]:
    """X, y = load(); X = drop_incomplete(X); split(X, y): the features' rows were dropped or re-ordered and the
    labels' were not, so from the first moved row on every row carries another row's label. Only features moved
    alone count: labels re-ordered alone usually follow features moved in a way this cannot see (a comprehension
    over the order, a sampler)."""
    hits = []
    for scope in [f.tree, *f.functions.values()]:
        body = sorted((n for n in _in_scope(scope) if isinstance(n, ast.stmt) and f.scope_of.get(n) is scope),
                      key=lambda n: n.lineno)
        # names that enter the scope together: unpacked from one call, or parameters of the function
        groups = [([t.id for t in n.targets[0].elts if isinstance(t, ast.Name)], True) for n in body
                  if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Tuple)]
        if not isinstance(scope, ast.Module):
            groups.append(([a.arg for a in scope.args.args], False))
        changes = _row_changes(f, body)
        moved_names = {name for name, _ in changes}
        for feats, stmt in changes:
            if _label_name(feats):
                continue
            labels = [(y, unpacked) for group, unpacked in groups if feats in group for y in group
                      if _label_name(y) and y not in moved_names and not _rebound([stmt], y, False)
                      and not _rebound(body, y, unpacked)]
            moved_by = {_src(n.slice) for n in ast.walk(stmt) if isinstance(n, ast.Subscript)}
            after = [s for s in body if s.lineno > stmt.end_lineno]
            for label, _ in labels:
                joint = _together(after, feats, label, moved_by)
                if joint is not None:
                    why = (f"`{f.seg(stmt).strip()}` moves the rows of `{feats}`, not of `{label}`; line "
                           f"{joint.lineno} pairs them by position, so each row gets another row's label")
                    hits.append((stmt, "rows_moved_apart_from_labels", {"why": why}))
                    break
        hits += _siblings_moved_apart(f, body)
        hits += _joined_apart(f, body)
        hits += _shuffled_apart(f, body, changes, groups)
    return hits


RESEED = {"seed", "manual_seed", "set_state", "default_rng", "RandomState", "Generator", "set_rng_state"}


def _random_move(stmt: ast.stmt) -> ast.Call | None:
    """The random draw a row move makes on its own: rng.shuffle(X), X = X[rng.permutation(len(X))]."""
    return next((n for n in ast.walk(stmt) if isinstance(n, ast.Call) and _name(n) in RANDOM_DRAWS), None)


def _shuffled_apart(f: ParsedFile, body: list[ast.stmt], changes, groups) -> list[Hit]:
    """rng.shuffle(X); rng.shuffle(y): both moved, each by its own draw, so the two orders differ (unless the
    generator is re-seeded in between, the trick that keeps them equal)."""
    hits = []
    for feats, s1 in changes:
        d1 = _random_move(s1)
        if d1 is None or _label_name(feats):
            continue
        for label, s2 in changes:
            d2 = _random_move(s2)
            if d2 is None or s2 is s1 or not _label_name(label) or not any(
                    feats in g and label in g for g, _ in groups):
                continue
            lo, hi = sorted((s1, s2), key=lambda n: n.lineno)
            between = [n for s in body if lo.lineno <= s.lineno <= hi.lineno for n in ast.walk(s)]
            if any(isinstance(n, ast.Call) and _name(n) in RESEED for n in between):
                continue
            why = (f"`{f.seg(s1).strip()}` and `{f.seg(s2).strip()}` re-order `{feats}` and `{label}` with two "
                   "random draws (the generator moved on in between): two orders, so each row gets another row's label")
            hits.append((hi, "rows_moved_apart_from_labels", {"why": why}))
            break
    return hits


def _siblings_moved_apart(f: ParsedFile, body: list[ast.stmt]) -> list[Hit]:
    """X = df[FEATURES].dropna(); y = df["label"]; fit(X, y): two columns of one table, rows dropped from one."""
    taken: dict[str, list[tuple[str, ast.stmt, bool]]] = {}  # table -> (name, statement, rows moved)
    for n in body:
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            table = _root_name(n.value)
            scope = f.scope_of.get(n)
            params = {a.arg for a in scope.args.args} if isinstance(scope, ast.FunctionDef) else set()
            if table and table not in f.imported | {"self"} and table != n.targets[0].id and (
                    table in f.assigned.get(scope, {}) or table in params):
                taken.setdefault(table, []).append((n.targets[0].id, n, _row_change(f, n.value, table)))
    hits = []
    for table, cols in taken.items():
        for feats, stmt, moved in cols:
            if not moved or _label_name(feats):
                continue
            for label, lstmt, lmoved in cols:
                if lmoved or not _label_name(label) or _rebound(body, label, True) or _rebound(body, feats, True):
                    continue
                after = [s for s in body if s.lineno > max(stmt.end_lineno, lstmt.end_lineno)]
                joint = _together(after, feats, label, set())
                if joint is not None:
                    why = (f"`{f.seg(stmt).strip()}` drops or moves rows of `{table}` that `{f.seg(lstmt).strip()}` "
                           f"keeps; line {joint.lineno} pairs the two by position, so each row gets another row's label")
                    hits.append((stmt, "rows_moved_apart_from_labels", {"why": why}))
                    break
    return hits


JOINS = re.compile(r"join|merge", re.I)


def _joined_from(n: ast.AST) -> str:
    """T for `T2 = pd.merge(T, other, ...)`, `T2 = T.merge(...)`, `T2 = inner_join(T, other)`: a join re-orders
    (and an inner one drops) the rows of T."""
    if not (isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)):
        return ""
    call = n.value
    while isinstance(call, (ast.Call, ast.Attribute)) and not (
            isinstance(call, ast.Call) and JOINS.search(_name(call))):
        call = call.func if isinstance(call, ast.Call) else call.value
    if not isinstance(call, ast.Call):
        return ""
    if isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name) and call.func.value.id not in (
            "pd", "pandas"):
        return call.func.value.id  # T.merge(other)
    first = call.args[0] if call.args else None
    return first.id if isinstance(first, ast.Name) else ""


def _joined_apart(f: ParsedFile, body: list[ast.stmt]) -> list[Hit]:
    """y = sensors.pop("failed"); table = inner_join(sensors, maintenance, on="id"); X = features(table);
    return X, y: the labels keep the left table's rows, the features get the join's."""
    hits = []
    for i, label_stmt in enumerate(body):
        if not (isinstance(label_stmt, ast.Assign) and len(label_stmt.targets) == 1
                and isinstance(label_stmt.targets[0], ast.Name) and _label_name(label_stmt.targets[0].id)):
            continue
        label, table = label_stmt.targets[0].id, _root_name(label_stmt.value)
        if not table or table == label:
            continue
        for j, join in enumerate(body[i + 1:], i + 1):
            if _joined_from(join) != table or _rebound(body[i + 1:], label, False):
                continue
            joined = join.targets[0].id
            feats = [s.targets[0].id for s in body[j + 1:] if isinstance(s, ast.Assign) and len(s.targets) == 1
                     and isinstance(s.targets[0], ast.Name) and _loads(s, joined) and not _label_name(s.targets[0].id)]
            for x in feats:
                joint = _together(body[j + 1:], x, label, set())
                if joint is not None:
                    why = (f"`{f.seg(join).strip()}` re-orders the rows of `{table}` (an inner join drops some too), "
                           f"but `{label}` was taken from `{table}` before it; line {joint.lineno} pairs `{x}` with "
                           f"`{label}` by position, so rows get other rows' labels")
                    hits.append((join, "rows_moved_apart_from_labels", {"why": why}))
                    break
    return hits


# --- a geometric augmentation that turns one class into another ------------------------------------

# class-name words that a mirror or a rotation maps onto each other
MIRROR_H = [("left", "right"), ("east", "west"), ("cw", "ccw"), ("clockwise", "counterclockwise"),
            ("clockwise", "anticlockwise")]
MIRROR_V = [("up", "down"), ("top", "bottom"), ("north", "south"), ("above", "below"), ("cw", "ccw"),
            ("clockwise", "counterclockwise"), ("clockwise", "anticlockwise")]
ROTATE = MIRROR_H + MIRROR_V + [("h", "v"), ("horizontal", "vertical"), ("row", "col"), ("rows", "cols"),
                                ("portrait", "landscape"), ("up", "left"), ("up", "right"), ("down", "left"),
                                ("down", "right")]
AUG_CALLS = {"fliplr": "h", "hflip": "h", "RandomHorizontalFlip": "h", "flipud": "v", "vflip": "v",
             "RandomVerticalFlip": "v", "rot90": "r", "RandomRotation": "r", "rotate": "r"}
AUG_WORDS = ("aug", "transform", "random", "flip", "jitter", "getitem")
RANDOM_CALLS = set(RANDOM_DRAWS) | {"rand", "random", "uniform", "bernoulli", "randn", "rand_like"}


# character classes a mirror or a rotation maps onto each other (in most fonts; a seven-segment 2 and 5 too)
GLYPH_H = [("b", "d"), ("p", "q"), ("2", "5"), ("3", "E"), ("(", ")"), ("<", ">"), ("/", "\\")]
GLYPH_V = [("b", "p"), ("d", "q"), ("M", "W"), ("n", "u"), ("6", "9"), ("A", "V")]
GLYPH_R = [("6", "9"), ("b", "q"), ("d", "p"), ("n", "u"), ("M", "W"), ("N", "Z")]


def _glyph_classes(f: ParsedFile) -> set[str]:
    """CLASSES = ("0", "1", ..., "A", "b"): classes that are characters (at least 4, each one character long).
    Text is not flip-invariant: a mirrored character is another one or none (Shorten & Khoshgoftaar 2019: flips
    are not label-preserving on text recognition such as MNIST or SVHN)."""
    for n in f.nodes:
        if isinstance(n, ast.Assign) and isinstance(n.value, (ast.List, ast.Tuple)) and len(n.value.elts) >= 4 and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) and len(e.value) == 1 for e in n.value.elts) \
                and any(w in _src(t).lower() for t in n.targets for w in ("class", "label", "categor", "names",
                                                                         "char", "vocab", "alphabet", "digit")):
            return {e.value for e in n.value.elts}
    return set()


def _class_names(f: ParsedFile) -> set[str]:
    """Words of the class names: CLASSES = ["scratch_h", "scratch_v", ...] -> {"scratch", "h", "v", ...}. A list
    named otherwise (ARROWS = ["left", "right", "straight", ...]) counts when it has 3 or more names and itself
    names both sides of a mirror or a rotation: a set of options is rarely that."""
    words = set()
    for n in f.nodes:
        if isinstance(n, ast.Assign) and isinstance(n.value, (ast.List, ast.Tuple)) and len(n.value.elts) >= 2 and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in n.value.elts):
            names = [_src(t).lower() for t in n.targets]
            own = set()
            for e in n.value.elts:
                own |= set(re.split(r"[^a-z]+", re.sub(r"([a-z])([A-Z])", r"\1_\2", e.value).lower())) - {""}
            if any(w in name for name in names for w in ("class", "label", "categor", "names")) or (
                    len(n.value.elts) >= 3 and all(re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", e.value) for e in n.value.elts)
                    and any(a in own and b in own for a, b in ROTATE)):
                words |= own
    return words


def _int_literal(e: ast.AST | None) -> int | None:
    """2 or -1 as written; None for anything computed."""
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
        inner = _int_literal(e.operand)
        return -inner if inner is not None else None
    return e.value if isinstance(e, ast.Constant) and isinstance(e.value, int) else None


def _flip_axes(call: ast.Call, f_modules: set[str]) -> str:
    """"h" (mirror left-right), "v" (top-bottom), "hv" (a flip whose dim cannot be told), "r" (rotate/transpose)."""
    name = _name(call)
    if name in AUG_CALLS:
        return AUG_CALLS[name]
    if name == "flip":
        dims = next((k.value for k in call.keywords if k.arg in ("dims", "axis")), None)
        if dims is None:  # torch.flip(x, [2]) / flip(x, 1) name the tensor first; x.flip(-1) does not
            function = not isinstance(call.func, ast.Attribute) or _name(call.func.value) in f_modules
            rest = call.args[1:] if function else call.args
            dims = rest[0] if rest else None
        values = dims.elts if isinstance(dims, (ast.List, ast.Tuple)) else [dims]
        ints = [v for v in map(_int_literal, values) if v is not None]
        if -1 in ints:
            return "h"
        if -2 in ints:
            return "v"
        return "hv" if ints else ""
    if name == "transpose" and len(call.args) == 2:
        return "r" if {_int_literal(a) for a in call.args} in ({-1, -2}, {2, 3}, {1, 2}) else ""
    return ""


def _randomly_applied(f: ParsedFile, call: ast.Call) -> bool:
    """An augmentation, not data synthesis: under an `if` on a random draw, on rows picked by a random mask, a
    torchvision transform, or inside a function/class named like an augmentation."""
    if _name(call) in ("RandomHorizontalFlip", "RandomVerticalFlip", "RandomRotation"):
        return True
    node = call
    while node in f.parent:
        node = f.parent[node]
        if isinstance(node, ast.If) and any(isinstance(c, ast.Call) and _name(c) in RANDOM_CALLS
                                            for c in ast.walk(node.test)):
            return _threshold(f, node.test) != 0
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and any(w in node.name.lower() for w in AUG_WORDS):
            return True
    return False


def _threshold(f: ParsedFile, test: ast.AST) -> float | None:
    """p in `random() < p` as written: a literal, or `self.p` set in __init__ from a parameter whose default is a
    literal and that no instantiation of the class passes (RandomCropFlip(flip_p=0.0) never flips); None if unknown."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Lt, ast.LtE))):
        return None
    p = test.comparators[0]
    if isinstance(p, ast.Constant) and isinstance(p.value, (int, float)):
        return float(p.value)
    cls = next((c for c in _ancestors(f, test) if isinstance(c, ast.ClassDef)), None)
    if cls is None or not (isinstance(p, ast.Attribute) and _src(p.value) == "self"):
        return None
    init = next((m for m in cls.body if isinstance(m, ast.FunctionDef) and m.name == "__init__"), None)
    source = next((n.value.id for n in ast.walk(init) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Name)
                   and any(_src(t) == _src(p) for t in n.targets)), None) if init else None
    names = [a.arg for a in init.args.args[1:]] if init else []
    defaults = dict(zip(names[len(names) - len(init.args.defaults):], init.args.defaults)) if init else {}
    default = defaults.get(source)
    passed = any(isinstance(c, ast.Call) and _name(c) == cls.name and (
        any(k.arg in (source, None) for k in c.keywords) or len(c.args) > names.index(source))
        for c in f.nodes) if default is not None else True
    return float(default.value) if not passed and isinstance(default, ast.Constant) and isinstance(
        default.value, (int, float)) else None


def _ancestors(f: ParsedFile, node: ast.AST) -> Iterator[ast.AST]:
    while node in f.parent:
        node = f.parent[node]
        yield node


def _label_reassigned(f: ParsedFile, call: ast.Call) -> bool:
    """The function that flips rewrites the label after it (y = MIRROR[y]): the augmentation keeps the pair right."""
    scope = f.scope_of.get(call)
    return scope is not None and any(
        isinstance(n, (ast.Assign, ast.AugAssign)) and n.lineno > call.lineno and any(
            isinstance(t, ast.Name) and _label_name(t.id) for tgt in (n.targets if isinstance(n, ast.Assign)
                                                                     else [n.target]) for t in ast.walk(tgt))
        for n in _in_scope(scope))


def _definition_of(f: ParsedFile, node: ast.AST) -> ast.AST | None:
    """The outermost class or function a node is written in (None at module level)."""
    owner = None
    while node in f.parent:
        node = f.parent[node]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            owner = node
    return owner


def rule_label_changing_augmentation(f: ParsedFile) -> list[Hit]:
    """x = torch.flip(x, dims=[2]) at random in training, with CLASSES = ["up", "right", "down", "left"]: the flip
    turns a "left" image into a "right" one and keeps the label "left"."""
    words, glyphs = _class_names(f), _glyph_classes(f)
    if not words and not glyphs:
        return []
    hits, seen = [], set()
    referenced = {n.id for n in f.nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} | {
        n.attr for n in f.nodes if isinstance(n, ast.Attribute)}
    for call in (n for n in f.nodes if isinstance(n, ast.Call)):
        axes = _flip_axes(call, f.imported)
        if not axes or not _randomly_applied(f, call) or _label_reassigned(f, call):
            continue
        owner = _definition_of(f, call)
        if owner is not None and (owner.name not in referenced or owner.name in AUG_CALLS):
            continue  # a transform nobody applies, or one reported where it is applied (RandomHorizontalFlip(0.5))
        pairs = {"h": MIRROR_H, "v": MIRROR_V, "hv": MIRROR_H + MIRROR_V, "r": ROTATE}[axes]
        pair = next(((a, b) for a, b in pairs if a in words and b in words), None)
        if pair is None and glyphs:
            mapped = {"h": GLYPH_H, "v": GLYPH_V, "hv": GLYPH_H + GLYPH_V, "r": GLYPH_R}[axes]
            pair = next(((a, b) for a, b in mapped if a in glyphs and b in glyphs), ("", ""))
        if pair is None or call.lineno in seen:
            continue
        seen.add(call.lineno)
        kind = {"h": "mirrors left-right", "v": "mirrors top-bottom", "hv": "mirrors", "r": "rotates"}[axes]
        why = (f"`{f.seg(call)}` {kind} training images at random and keeps their label, while the classes "
               + (f"name \"{pair[0]}\" and \"{pair[1]}\": the transform turns one into the other" if pair[0] else
                  "are characters: a transformed character is another one or none")
               + ", so those images train on the wrong label")
        hits.append((call, "label_changing_augmentation", {"why": why}))
    return hits


# --- VAE objective ---------------------------------------------------------------------------


def _positive_kl(e: ast.AST) -> bool:
    """-0.5 * sum(1 + logvar - mu ** 2 - logvar.exp()) or F.kl_div / kl_divergence: the KL itself (>= 0)."""
    text = _src(e).replace(" ", "").lower()
    if any(_name(c) in ("kl_div", "kl_divergence") for c in ast.walk(e) if isinstance(c, ast.Call)):
        return True
    return text.startswith("-0.5*") and ("logvar" in text or "log_var" in text or "sigma" in text) and "exp" in text


def rule_kl_sign(f: ParsedFile) -> list[Hit]:
    defs: dict[str, list[ast.AST]] = {}
    for table in f.assigned.values():
        for key, values in table.items():
            if "kl" in key.lower():
                defs.setdefault(key, []).extend(values)
    # names whose every element-wise definition is the non-negative KL (a call returning it counts as unknown)
    positive = {k for k, vs in defs.items() if any(_positive_kl(v) for v in vs)
                and all(_positive_kl(v) or isinstance(v, ast.Call) and not _positive_kl(v) and _name(v) not in LOSS_FUNCS
                        for v in vs)}
    hits = []
    for n in f.nodes:
        if isinstance(n, ast.Assign) and any("loss" in _src(t).lower() for t in n.targets) and \
                isinstance(n.value, ast.BinOp) and isinstance(n.value.op, ast.Sub):
            right = n.value.right
            kl = right.right if isinstance(right, ast.BinOp) and isinstance(right.op, ast.Mult) else right  # beta * kld
            if isinstance(kl, ast.BinOp) and isinstance(kl.op, ast.Mult):
                kl = kl.left if "kl" in _src(kl.left).lower() else kl.right
            if _src(kl) in positive:
                hits.append((n, "kl_subtracted_from_loss"))
    return hits


RECON_LOSSES = {"binary_cross_entropy", "binary_cross_entropy_with_logits", "mse_loss", "l1_loss", "smooth_l1_loss",
                "huber_loss", "BCELoss", "BCEWithLogitsLoss", "MSELoss", "L1Loss", "SmoothL1Loss", "HuberLoss"}


def _reduces_by_mean(call: ast.Call) -> bool:
    kw = next((k.value for k in call.keywords if k.arg == "reduction"), None)
    return kw is None or isinstance(kw, ast.Constant) and kw.value == "mean"


def _mean_reconstruction(f: ParsedFile, n: ast.AST) -> bool:
    """F.mse_loss(x_hat, x) or criterion(x_hat, x) with criterion = nn.BCELoss(): a loss averaged over elements."""
    if not isinstance(n, ast.Call):
        return False
    if _name(n) in RECON_LOSSES and _name(n)[0].islower():
        return _reduces_by_mean(n)
    if _src(n.func) in f.loss_objects and f.loss_objects[_src(n.func)] in RECON_LOSSES:
        ctors = [v for t in f.assigned.values() for v in t.get(_src(n.func), []) if isinstance(v, ast.Call)]
        return bool(ctors) and all(_reduces_by_mean(c) for c in ctors)
    return False


CORRUPTIONS = re.compile(r"corrupt|nois|mask|perturb|jitter|augment|drop", re.I)


def _corruption_of(f: ParsedFile, name: ast.Name) -> str | None:
    """The clean tensor `name` was made from by corrupting it: `x_noisy = corrupt(x)`, `x + 0.3 * torch.randn_like(x)`."""
    for v in f.values_of(name):
        if isinstance(v, ast.Call) and CORRUPTIONS.search(_name(v)) and v.args and isinstance(v.args[0], ast.Name):
            return v.args[0].id
        if isinstance(v, ast.BinOp) and any(isinstance(c, ast.Call) and _name(c) in ("randn_like", "randn", "rand_like",
                                                                                       "rand", "normal", "normal_")
                                             for c in ast.walk(v)):
            clean = next((c.id for c in ast.walk(v) if isinstance(c, ast.Name) and c.id != name.id
                          and c.id not in f.imported), None)
            if clean:
                return clean
    return None


def rule_denoising_target_is_corrupted(f: ParsedFile) -> list[Hit]:
    """recon = model(x_noisy); loss(recon, x_noisy) (blind dev conv1d_denoising_ae_vibration: train loss 0.0015,
    denoising error exactly the noise variance). A plain autoencoder's loss(model(x), x) has no corruption."""
    hits = []
    for n in f.nodes:
        if not (isinstance(n, ast.Call) and _mean_reconstruction(f, n) and len(n.args) >= 2):
            continue
        pred, tgt = n.args[0], n.args[1]
        if not (isinstance(tgt, ast.Name) and isinstance(pred, ast.Name)):
            continue
        fed = [v for v in f.values_of(pred) if isinstance(v, ast.Call) and len(v.args) == 1
               and isinstance(v.args[0], ast.Name) and v.args[0].id == tgt.id]
        clean = _corruption_of(f, tgt) if fed else None
        if clean:
            why = (f"`{f.seg(n).strip()}` scores the reconstruction against `{tgt.id}`, the corrupted copy of `{clean}` "
                   f"that the model itself reads: the identity map minimises it, so nothing is denoised")
            hits.append((n, "denoising_target_is_corrupted", {"why": why}))
    return hits


def _summed_kl(e: ast.AST) -> bool:
    """The Gaussian KL to N(0, I) written out (mu ** 2, logvar.exp()) and summed (over latent dims or all)."""
    text = _src(e).replace(" ", "").lower()
    gaussian = ("logvar" in text or "log_var" in text) and "exp" in text and \
        any(m in text for m in ("mu.pow(2)", "mu**2", "mu*mu", "mu.square()", "torch.square(mu)"))
    return gaussian and any(_name(c) == "sum" for c in ast.walk(e) if isinstance(c, ast.Call))


def _returns_summed_kl(f: ParsedFile, e: ast.AST) -> bool:
    """kl_to_prior(mu, logvar).mean(), where kl_to_prior returns the summed KL (one call deep)."""
    for c in ast.walk(e):
        fn = f.functions.get(_name(c)) if isinstance(c, ast.Call) else None
        if fn is not None and any(isinstance(r, ast.Return) and r.value is not None and _summed_kl(r.value)
                                  for r in _in_scope(fn)):
            return True
    return False


def _summed_error(n: ast.AST) -> bool:
    """((x_hat - x) ** 2).sum(dim=...) or (x_hat - x).pow(2).sum(...): an error summed over a sample's elements."""
    if not (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "sum"):
        return False
    inner = n.func.value
    squared = (isinstance(inner, ast.BinOp) and isinstance(inner.op, ast.Pow) and isinstance(inner.left, ast.BinOp)
               and isinstance(inner.left.op, ast.Sub)) or (
        isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) and inner.func.attr in ("pow", "square")
        and isinstance(inner.func.value, ast.BinOp) and isinstance(inner.func.value.op, ast.Sub))
    return squared and bool(n.args or n.keywords)


def rule_kl_against_mean_reconstruction(f: ParsedFile) -> list[Hit]:
    """recon = F.binary_cross_entropy_with_logits(logits, x); kl = -0.5 * (...).sum(dim=1).mean(): both terms of
    one objective, in one function, each kept (a name returned or added), not a metric read with .item()."""
    hits = []
    for fn in f.functions.values():
        body = list(_in_scope(fn))
        used = {_src(x) for r in body if isinstance(r, ast.Return) and r.value is not None for x in ast.walk(r.value)
                if isinstance(x, ast.Name)} | {_src(x) for b in body if isinstance(b, ast.BinOp)
                                               and isinstance(b.op, ast.Add) for x in (b.left, b.right)}

        def kept(node: ast.AST) -> bool:
            up = f.parent.get(node)
            while up is not None and not isinstance(up, ast.stmt):
                if isinstance(up, ast.Attribute) and up.attr in LEAVES_AUTOGRAD or \
                        isinstance(up, ast.BinOp) and isinstance(up.op, (ast.Mult, ast.Div)):
                    return False  # a metric, or a reconstruction the user rescaled on purpose
                up = f.parent.get(up)
            if isinstance(up, ast.Return):
                return True
            return isinstance(up, ast.Assign) and any(_src(t) in used for t in up.targets)

        recon = next((n for n in body if _mean_reconstruction(f, n) and kept(n)), None)
        if recon is not None and any(_summed_error(n) for n in body):
            # a squared error summed per sample beside it is the objective; the averaged one is returned as a metric
            # (blind dev ecg_beat_conv1d_vae_kl_warmup: `return recon.mean(), kl.mean(), F.mse_loss(xhat, x)`)
            continue
        kl = next((n for n in body if isinstance(n, ast.expr) and not isinstance(f.parent.get(n), ast.expr)
                   and (_summed_kl(n) or _returns_summed_kl(f, n)) and kept(n)), None)
        if recon is not None and kl is not None:
            why = (f"`{f.seg(recon)}` averages the reconstruction over every element while `{f.seg(kl)}` sums the "
                   "KL over the latent dimensions: the KL weighs as many times too much as a sample has elements")
            hits.append((recon, "kl_against_mean_reconstruction", {"why": why}))
    return hits


# --- attention ------------------------------------------------------------------------------

SCALE_WORDS = ("sqrt", "scale", "temperature", "temp", "0.5", "norm_factor")


def _scores_product(e: ast.AST) -> bool:
    """q @ k.transpose(-2, -1), torch.matmul(q, k.mT), torch.einsum(...): query-key scores."""
    for n in ast.walk(e):
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.MatMult) or \
                isinstance(n, ast.Call) and _name(n) in ("matmul", "bmm"):
            if any(isinstance(m, ast.Attribute) and m.attr in ("transpose", "mT", "permute", "swapaxes")
                   for m in ast.walk(n)) \
                    and not any(_name(c) == "transpose" and _src(c).replace(" ", "").endswith("(0,1)")
                                for c in ast.walk(n) if isinstance(c, ast.Call)):
                return True
        if isinstance(n, ast.Call) and _name(n) == "einsum" and len(n.args) == 3:
            return True
    return False


def _rescaled(e: ast.AST) -> bool:
    return any(isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Mult, ast.Div, ast.Pow)) or
               isinstance(n, ast.Call) and _name(n) in ("mul", "div", "mul_", "div_", "true_divide")
               for n in ast.walk(e)) or any(w in _src(e).lower() for w in SCALE_WORDS)


TENSOR_MODULES = ("F", "torch", "nn.functional", "torch.nn.functional")


def rule_unscaled_attention(f: ParsedFile) -> list[Hit]:
    """softmax(q @ k^T) with no 1/sqrt(d) anywhere between the product and the softmax (nor folded into q or k)."""
    hits = []
    for call in (n for n in f.nodes if isinstance(n, ast.Call) and _name(n) == "softmax"):
        method = isinstance(call.func, ast.Attribute) and _src(call.func.value) not in TENSOR_MODULES  # att.softmax(-1)
        arg = call.func.value if method else (call.args[0] if call.args else None)
        if arg is None:
            continue
        chain = f.closure(arg)  # the scores and every value given to the names they are made of
        names = {_src(n) for e in chain for n in ast.walk(e) if isinstance(n, (ast.Name, ast.Attribute))}
        scaled_in_place = any(isinstance(n, ast.AugAssign) and isinstance(n.op, (ast.Mult, ast.Div))
                              and _src(n.target) in names for n in f.nodes)  # att /= self.norm
        product = next((e for e in chain if _scores_product(e)), None)
        if product is not None and not scaled_in_place and not any(_rescaled(e) for e in chain):
            why = (f"`{f.seg(call)}` normalises query-key scores `{f.seg(product)}` that are never divided by "
                   "sqrt(head_dim): their spread grows with the head size and with training, the softmax saturates "
                   "to one-hot attention and the gradient norm spikes while the loss stalls (Vaswani et al. 2017, "
                   "section 3.2.1; attention entropy collapse, Zhai et al. 2023)")
            hits.append((product if hasattr(product, "lineno") else call, "unscaled_attention_scores", {"why": why}))
    return hits


def rule_distributed_data(f: ParsedFile) -> list[Hit]:
    """DDP code: a DistributedSampler that never gets set_epoch, BatchNorm over a tiny per-rank batch unsynchronised."""
    calls = [n for n in f.nodes if isinstance(n, ast.Call)]
    names = {_name(c) for c in calls}
    hits: list[Hit] = []
    sampler = next((c for c in calls if _name(c) == "DistributedSampler"), None)
    if sampler is not None and "set_epoch" not in names and not any(
            k.arg == "shuffle" and _src(k.value) == "False" for k in sampler.keywords):
        hits.append((sampler, "sampler_without_set_epoch"))
    ddp = "DistributedDataParallel" in names or "DDP" in names
    bn = next((c for c in calls if re.fullmatch(r"BatchNorm[123]d", _name(c))), None)
    if ddp and bn is not None and not names & {"SyncBatchNorm", "convert_sync_batchnorm"}:
        sizes = [k.value.value for c in calls for k in c.keywords if k.arg == "batch_size"
                 and isinstance(k.value, ast.Constant) and isinstance(k.value.value, int)]
        sizes += [n.value.value for n in f.nodes if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
                  and isinstance(n.value.value, int) and any(re.search(r"batch", _src(t), re.I) for t in n.targets)]
        if sizes and min(sizes) <= SMALL_RANK_BATCH:
            hits.append((bn, "batchnorm_without_sync", {"why": RULES["batchnorm_without_sync"].why
                                                         + f" (batch_size {min(sizes)} per rank)"}))
    return hits


SMALL_RANK_BATCH = 16  # BatchNorm's statistics get noisy well below this (SyncBatchNorm's motivating case)


# --- a KL weight ramped without a cap ------------------------------------------------------------------

KL_WEIGHT = re.compile(r"beta|kl|kld|anneal", re.I)
STEP_NAME = re.compile(r"^(global_)?(step|steps|it|iter|iters|iteration|epoch|epochs|t|i|n_iter|num_updates|updates)$"
                       r"|_(step|iter|epoch)$", re.I)
CAPS = {"min", "max", "clamp", "clip", "clamp_", "clip_", "minimum", "maximum"}


def _enclosing_names(f: ParsedFile, n: ast.AST) -> str:
    """'__call__ LinearBetaSchedule' for a node in a method: its function's name and its class's, if any."""
    scope = f.scope_of.get(n)
    owner = f.parent.get(scope) if scope is not None else None
    return " ".join([getattr(scope, "name", ""), getattr(owner, "name", "") if isinstance(owner, ast.ClassDef) else ""])


def _ramp_divisions(f: ParsedFile, e: ast.AST, depth: int = 2) -> list[ast.BinOp]:
    """The divisions `step / n` a value is a linear function of (through names assigned in its function), or []
    when it is not built from them by +, -, * alone (min(1.0, step / n) is a call: capped)."""
    if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Div):
        return [e]
    if isinstance(e, ast.BinOp) and isinstance(e.op, (ast.Add, ast.Sub, ast.Mult)):
        return _ramp_divisions(f, e.left, depth) + _ramp_divisions(f, e.right, depth)
    if isinstance(e, ast.Name) and depth > 0:
        values = f.values_of(e)
        found = [_ramp_divisions(f, v, depth - 1) for v in values]
        return [d for ds in found for d in ds] if values and all(found) else []
    return []


def _ramp_ends(scope: ast.AST, names: set[str]) -> bool:
    """A comparison of the ramp's step anywhere in its function (if step < warmup: ..., return 1.0 past it), or
    a cap call: the ramp ends."""
    for n in ast.walk(scope):
        if isinstance(n, ast.Compare) and names & {_src(x) for x in ast.walk(n)}:
            return True
        if isinstance(n, ast.Call) and _name(n) in CAPS:
            return True
    return False


def rule_kl_weight_grows_past_its_end(f: ParsedFile) -> list[Hit]:
    """beta = beta_start + (beta_end - beta_start) * step / anneal_steps, with nothing that stops it at 1: after
    the warm-up the KL weight keeps growing (20x its end value by the last epoch of a 20-epoch run)."""
    hits = []
    for n in f.nodes:
        if isinstance(n, ast.Return) and n.value is not None:
            scope, named = f.scope_of.get(n), _enclosing_names(f, n)
        elif isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], (ast.Name, ast.Attribute)):
            scope, named = f.scope_of.get(n), _src(n.targets[0])
        else:
            continue
        if scope is None or not KL_WEIGHT.search(named) or re.search(r"lr|learning", named, re.I):
            continue
        divs = _ramp_divisions(f, n.value)
        # a ramp divides the step (or epoch) count by the warm-up length; a KL divided by the batch size is no ramp
        steps = {_src(x) for d in divs for x in ast.walk(d.left) if isinstance(x, (ast.Name, ast.Attribute))
                 and STEP_NAME.search(_src(x).rsplit(".", 1)[-1])}
        # a step taken modulo the cycle length is a cyclical schedule (Fu et al. 2019): bounded by construction
        if not divs or not steps or any(isinstance(x, ast.Call) or isinstance(getattr(x, "op", None), ast.Mod)
                                        for d in divs for x in ast.walk(d)):
            continue
        if _ramp_ends(scope, steps):
            continue
        why = (f"`{f.seg(n).strip()}` ramps the KL weight linearly with `{_src(divs[0].left)}` and nothing caps it: "
               "past the warm-up it keeps growing, so the KL term swamps the reconstruction")
        hits.append((n, "kl_weight_grows_past_its_end", {"why": why}))
    return hits


# --- a Gaussian decoder whose variance is an unbounded layer output ------------------------------------

LOG_VARIANCE = re.compile(r"log_?var|log_?sigma|log_?std|log_?scale", re.I)
BOUNDS = {"clamp", "clip", "clamp_", "softplus", "sigmoid", "tanh", "hardtanh", "relu", "elu", "exp", "min", "max"}


def _squared_residual(e: ast.AST) -> bool:
    """(x - mean) ** 2, (x - mean).pow(2), (x - mean).square()."""
    for n in ast.walk(e):
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Pow) and isinstance(n.left, ast.BinOp) \
                and isinstance(n.left.op, ast.Sub):
            return True
        if _method_call(n, "pow", "square") and isinstance(n.func, ast.Attribute) \
                and isinstance(n.func.value, ast.BinOp) and isinstance(n.func.value.op, ast.Sub):
            return True
    return False


def _scaled_by_variance(e: ast.AST) -> bool:
    """residual * exp(-logvar), residual / exp(logvar), residual / logvar.exp(): a Gaussian NLL's data term."""
    for n in ast.walk(e):
        if isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Mult, ast.Div)):
            for side, other in ((n.left, n.right), (n.right, n.left)):
                if _squared_residual(side) and any(isinstance(c, ast.Call) and _name(c) == "exp" and
                                                   LOG_VARIANCE.search(_src(c)) for c in ast.walk(other)):
                    return True
    return False


def rule_unbounded_decoder_variance(f: ParsedFile) -> list[Hit]:
    """logvar = self.dec_logvar(h) in decode(), and nll = 0.5 * (logvar + (x - mean) ** 2 * torch.exp(-logvar)):
    the decoder's log-variance is a raw Linear output, so nothing stops it at a floor."""
    if not any(_scaled_by_variance(n) for n in f.nodes if isinstance(n, ast.Assign | ast.Return | ast.AugAssign)):
        return []
    hits = []
    for n in f.nodes:
        if not (isinstance(n, ast.Assign) and len(n.targets) == 1
                and isinstance(n.targets[0], (ast.Name, ast.Attribute)) and LOG_VARIANCE.search(_src(n.targets[0]))):
            continue
        where = _enclosing_names(f, n)
        layer = n.value
        # a decoder's own head: in decode()/a Decoder class, or a layer named for the decoder; the encoder's
        # log-variance sits in the KL, which penalises a collapse, and in the reparameterisation
        raw = (isinstance(layer, ast.Call) and isinstance(layer.func, ast.Attribute)
               and _src(layer.func).startswith("self.")
               and not any(isinstance(c, ast.Call) and _name(c) in BOUNDS for c in ast.walk(layer)))
        if raw and ("dec" in where.lower() or "dec" in _src(layer.func).lower()):
            why = (f"`{f.seg(n).strip()}` is the decoder's log-variance straight from a layer, and the likelihood "
                   "scales the squared residual by exp(-it): on values it reconstructs exactly it runs off to -inf "
                   "until exp overflows")
            hits.append((n, "unbounded_decoder_variance", {"why": why}))
    return hits


RULE_FUNCTIONS = [rule_missing_zero_grad, rule_step_order, rule_probabilities_into_loss, rule_negated_loss,
                  rule_graph_cut, rule_requires_grad_false, rule_numerics, rule_eval_without_train,
                  rule_evaluation_in_train_mode, rule_functional_dropout_always_on,
                  rule_optimizer_params, rule_optimizer_built_before_unfreeze, rule_requires_grad_set_on_module, rule_view_after_permute, rule_host_sync, rule_discarded_result,
                  rule_scheduler_order, rule_plateau_mode_against_metric, rule_weight_average_skips_buffers, rule_learning_rate_as_lambda_factor, rule_gradient_accumulation, rule_unshifted_lm_targets,
                  rule_kl_sign, rule_kl_against_mean_reconstruction, rule_denoising_target_is_corrupted, rule_accumulation_step_placement,
                  rule_distributed_data, rule_unscaled_attention,
                  rule_inputs_and_targets_drawn_apart, rule_label_statistic_in_features,
                  rule_rows_moved_apart_from_labels, rule_label_changing_augmentation,
                  rule_kl_weight_grows_past_its_end, rule_unbounded_decoder_variance]


# ---------------------------------------------------------------------------------------------

SKIP_DIRS = {".venv", "venv", "site-packages", "node_modules", "__pycache__", "build", "dist", ".git"}


def _python_files(paths: list[Path], skipped: list[str] | None = None) -> list[Path]:
    """The .py files to scan. A directory is walked without following symlinks, and a symlinked file
    whose target lies outside the scanned directory is left unread: scanning a folder must never read
    what a link inside it points at elsewhere (a file named explicitly was already confined by the caller)."""
    files = []
    for p in map(Path, paths):
        if not p.exists():
            raise TriageError(f"{p} does not exist", "pass files or directories that exist (relative to the workspace)")
        if p.is_file():
            files.append(p)
            continue
        root = p.resolve()
        for here, dirs, names in os.walk(p, followlinks=False):
            here_path = Path(here)
            dirs.sort()  # a stable order, walked top-down
            for d in list(dirs):
                if d in SKIP_DIRS or d.startswith("."):
                    dirs.remove(d)
                elif (here_path / d).is_symlink():  # os.walk lists it but does not enter it
                    if skipped is not None and not _inside(here_path / d, root):
                        skipped.append(f"{here_path / d}: symlink to a folder outside {p}, not followed")
            for name in sorted(names):
                f = here_path / name
                if not name.endswith(".py"):
                    continue
                if f.is_symlink() and not _inside(f, root):
                    if skipped is not None:
                        skipped.append(f"{f}: symlink to a file outside {p}, not read")
                    continue
                try:
                    regular = stat.S_ISREG(f.stat().st_mode)  # a FIFO named x.py would block the read forever
                except OSError:  # a dangling link or a loop
                    regular = False
                if not regular:
                    if skipped is not None:
                        skipped.append(f"{f}: not a regular file, not read")
                    continue
                files.append(f)
    unique: dict[Path, Path] = {}
    for f in files:  # a link to a file that is scanned anyway is read once
        unique.setdefault(f.resolve(), f)
    return list(unique.values())


def _inside(link: Path, root: Path) -> bool:
    try:
        target = link.resolve()
    except (OSError, RuntimeError):  # a link loop
        return False
    return target == root or target.is_relative_to(root)


def scan_source(text: str, path: str = "<string>", errors: list[str] | None = None) -> list[ScanIssue]:
    """All rule hits in one file's source text (raises SyntaxError if it does not parse).

    A rule that fails on odd code is skipped and noted in `errors`, never allowed to sink the scan."""
    f = ParsedFile(path, text, ast.parse(text, filename=path))
    issues, seen = [], set()
    for rule_fn in RULE_FUNCTIONS:
        try:
            hits = rule_fn(f)
        except Exception as e:  # noqa: BLE001 - a scan of someone's code must not crash on it
            if errors is not None:
                errors.append(f"{path}: {rule_fn.__name__} failed: {type(e).__name__}: {e}")
            continue
        for where, rule_id, *more in hits:
            line, source = f.line(where)
            if (line, rule_id) in seen:
                continue
            seen.add((line, rule_id))
            r, said = RULES[rule_id], (more[0] if more else {})
            issues.append(ScanIssue(file=path, line=line, rule=rule_id, failure_mode=r.failure_mode,
                                    confidence=said.get("confidence", r.confidence), why=said.get("why", r.why),
                                    fix=said.get("fix", r.fix), source=source))
    return sorted(issues, key=lambda i: i.line)


def static_scan(paths: list[Path]) -> StaticScanReport:
    """Scan Python files (or directories, recursively) for silent training bugs; one finding per rule hit."""
    report = StaticScanReport()
    for path in _python_files(paths, report.skipped):
        report.files_scanned += 1
        try:
            report.issues += scan_source(path.read_text(encoding="utf-8"), str(path), report.errors)
        except SyntaxError as e:
            report.errors.append(f"{path}: SyntaxError at line {e.lineno}: {e.msg}")
        except (UnicodeDecodeError, OSError, RecursionError, ValueError) as e:
            report.errors.append(f"{path}: {type(e).__name__}: {e}")
    report.findings = [
        Finding(failure_mode=i.failure_mode, confidence=i.confidence, summary=f"{i.rule}: {i.why}",
                evidence=[Evidence(what="code", value=i.source, source=f"{i.file}:{i.line}"),
                          Evidence(what="rule", value=i.rule, source="static_scan")],
                fix=i.fix, avoid=RULES[i.rule].avoid, location=f"{i.file}:{i.line}")
        for i in report.issues]
    return report


LAYOUT_MOVES = {"transpose", "permute", "swapaxes", "moveaxis", "movedim", "swapdims", "T", "mT"}


def _module_nodes(tree: ast.AST) -> set[int]:
    """ids of every node inside a class that subclasses nn.Module: what the model does, not the data preparation."""
    inside = set()
    for cls in ast.walk(tree):
        if isinstance(cls, ast.ClassDef) and any(re.search(r"Module$|^Module", _src(b)) for b in cls.bases):
            inside |= {id(n) for n in ast.walk(cls)}
    return inside


def layout_reshapes(source: str, ndim: int) -> list[tuple[int, str]]:
    """(line, code) of each reshape/view to `ndim` axes outside an nn.Module's methods whose result is not then moved
    (.transpose/.permute/...): where a channels-last array becomes channels-first by reshape alone (data_check's
    interleaved-channels finding names the line when exactly one such site exists)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    in_module = _module_nodes(tree)
    moved = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr in LAYOUT_MOVES}
    moved |= {id(a) for n in ast.walk(tree) if isinstance(n, ast.Call) and _name(n) in LAYOUT_MOVES for a in n.args[:1]}
    sites = []
    for n in ast.walk(tree):
        if not (isinstance(n, ast.Call) and _name(n) in ("reshape", "view")) or id(n) in in_module or id(n) in moved:
            continue
        # x.reshape(a, b, c), x.reshape((a, b, c)), np.reshape(x, (a, b, c)), torch.reshape(x, (a, b, c))
        method = isinstance(n.func, ast.Attribute) and _src(n.func.value) not in ("np", "numpy", "torch")
        args = n.args if method else n.args[1:]
        dims = args[0].elts if len(args) == 1 and isinstance(args[0], (ast.Tuple, ast.List)) else args
        if len(dims) == ndim and not any(isinstance(d, ast.Starred) for d in dims):
            sites.append((n.lineno, ast.get_source_segment(source, n) or _src(n)))
    return sorted(sites)


SPREAD_CALLS = {"std", "var", "nanstd", "nanvar", "std_mean", "var_mean"}


def _loop_function(fn: ast.AST) -> bool:
    """A function that trains or evaluates (backward, no_grad, eval(), an optimizer step): its std/var is a metric."""
    for n in ast.walk(fn):
        if isinstance(n, ast.Call) and (_is_backward(n) or _is_optimizer_step(n) or _name(n) in ("no_grad", "eval",
                                                                                                  "inference_mode")):
            return True
    return False


def scaler_fits(source: str) -> list[tuple[int, str]]:
    """(line, code) of each std/var taken outside an nn.Module and outside the functions that train or evaluate:
    where a standardisation's statistics are fitted (data_check's scaler findings see the scaled tensor, not the
    line; a reduction over the wrong axes or over the padding is fitted here). Calls with a tuple of axes first."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    skip = _module_nodes(tree)
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and _loop_function(fn):
            skip |= {id(n) for n in ast.walk(fn)}
    sites = []
    for n in ast.walk(tree):
        if not (isinstance(n, ast.Call) and _name(n) in SPREAD_CALLS) or id(n) in skip:
            continue
        axes = [k.value for k in n.keywords if k.arg in ("axis", "dim")] + n.args[1 if _src(n.func).split(".")[0]
                                                                                 in ("np", "numpy", "torch") else 0:][:1]
        many = any(isinstance(a, (ast.Tuple, ast.List)) for a in axes)
        sites.append((not many, n.lineno, ast.get_source_segment(source, n) or _src(n)))
    return [(line, code) for _, line, code in sorted(sites)]
