"""static_scan reads training code with `ast`: each rule catches its bug, and it stays quiet on correct code."""

import json
import os
import textwrap
from pathlib import Path

import pytest

from tools.errors import TriageError
from tools.failure_modes import FAILURE_MODES
from tools.static_scan import RULES, StaticScanReport, scan_source, static_scan

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
FIXTURES = Path(__file__).parent / "fixtures" / "static_scan"
REALISTIC = EXAMPLES / "realistic"
META = {d.name: json.loads((d / "example.json").read_text()) for d in sorted(EXAMPLES.iterdir())
        if (d / "example.json").exists()}


def static_scan_code(code: str) -> StaticScanReport:
    """The full report (findings included) for a snippet, through the same path a file takes."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "train.py").write_text(code)
        return static_scan([Path(d) / "train.py"])


def rules_in(path: Path) -> set[str]:
    return {i.rule for i in static_scan([path]).issues}


def scan(code: str) -> list[str]:
    return [i.rule for i in scan_source(textwrap.dedent(code))]


def flagged_example(name: str, rule: str):
    report = static_scan([EXAMPLES / name / "train.py"])
    hits = [i for i in report.issues if i.rule == rule]
    assert hits, report.text()
    assert hits[0].failure_mode == RULES[rule].failure_mode
    assert abs(hits[0].line - META[name]["bug_line"]) <= 12  # at the bug or the call that consumes it
    assert hits[0].source and hits[0].why and hits[0].fix
    assert static_scan([EXAMPLES / name / "train_fixed.py"]).issues == []
    return hits[0]


# --- each rule on the gallery's broken runs (and silence on their fixed twins) ----------------


def test_static_scan_flags_missing_zero_grad_in_the_loop():
    flagged_example("missing_zero_grad", "missing_zero_grad")


def test_static_scan_flags_softmax_model_fed_to_cross_entropy():
    hit = flagged_example("double_softmax", "softmax_into_cross_entropy")
    assert hit.failure_mode == "loss_function"


def test_static_scan_flags_the_detach_in_forward_that_cuts_the_encoder_off():
    assert flagged_example("detached_graph", "detach_in_forward").line == META["detached_graph"]["bug_line"] - 1


def test_static_scan_flags_optimizer_built_over_the_head_only():
    assert flagged_example("frozen_params", "optimizer_over_submodule").line == META["frozen_params"]["bug_line"]


def test_static_scan_flags_eval_left_on_by_the_evaluate_helper():
    assert flagged_example("eval_mode", "eval_without_train").line == META["eval_mode"]["bug_line"]


def test_static_scan_flags_log_of_sigmoid_output():
    flagged_example("nan_log_zero", "log_of_probability")


def test_static_scan_flags_division_by_std_without_epsilon():
    assert flagged_example("nan_div_zero", "divide_by_std_without_eps").line == META["nan_div_zero"]["bug_line"]


def test_static_scan_flags_exp_without_max_subtraction_in_hand_written_log_softmax():
    assert flagged_example("exp_overflow", "exp_without_max_subtraction").line == META["exp_overflow"]["bug_line"]


def test_static_scan_flags_negated_nll_loss():
    assert flagged_example("wrong_sign_loss", "negated_loss").line == META["wrong_sign_loss"]["bug_line"]


def test_static_scan_flags_view_after_permute():
    assert flagged_example("view_after_permute", "view_after_permute").line == META["view_after_permute"]["bug_line"]


def test_every_example_that_claims_static_scan_is_flagged_and_no_other_is():
    for name, meta in META.items():
        issues = static_scan([EXAMPLES / name / "train.py"]).issues
        if "static_scan" in meta["detected_by"]:
            assert {i.failure_mode for i in issues} <= {meta["failure_mode"], "loss_function"} and issues, name
        else:
            assert issues == [], (name, issues)


# --- rules the gallery does not exercise, on small snippets ----------------------------------

LOOP = """
import torch, torch.nn as nn, torch.nn.functional as F
model = nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
{body}
"""


def loop(body: str) -> str:
    return LOOP.format(body=textwrap.indent(textwrap.dedent(body), "    "))


def test_static_scan_flags_step_before_backward():
    assert "step_before_backward" in scan(loop("""
        optimizer.zero_grad()
        optimizer.step()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
    """))


def test_static_scan_flags_zero_grad_between_backward_and_step():
    assert "zero_grad_between_backward_and_step" in scan(loop("""
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.zero_grad()
        optimizer.step()
    """))


def test_static_scan_flags_a_clip_after_the_step_and_not_one_before_it():
    """Blind dev syslog_char_lstm_lm (SGD at lr 20 with clip 0.25): clip_grad_norm_ one line after step() bounds
    nothing. Before the step it is right; inside an accumulation boundary the step runs outside of, the step is
    the cause (step_every_micro_batch's shape, dev sgd_mlp_step_every_microbatch), not the clip."""
    after = scan(loop("""
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
    """))
    assert "clip_after_step" in after
    before = scan(loop("""
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        optimizer.step()
        total = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf"))  # a norm logged after: harmless
    """))
    assert "clip_after_step" not in before
    boundary = scan(loop("""
        loss = F.cross_entropy(model(x), y)
        (loss / 4).backward()
        optimizer.step()
        if i % 4 == 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.zero_grad()
    """))
    assert "clip_after_step" not in boundary
    run = EXAMPLES / "realistic" / "rnn_seq" / "syslog_char_lstm_lm"
    assert "clip_after_step" in rules_in(run / "train.py")
    assert "clip_after_step" not in rules_in(run / "train_fixed.py")


def test_static_scan_flags_zero_grad_only_once_per_epoch():
    code = """
    import torch
    for epoch in range(10):
        optimizer.zero_grad()
        for x, y in loader:
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
    """
    assert "missing_zero_grad" in scan(code)


def test_static_scan_accepts_p_grad_none_and_accumulation_as_zeroing():
    assert scan(loop("""
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        for p in model.parameters():
            p.grad = None
    """)) == []
    assert scan(loop("""
        loss = F.mse_loss(model(x), y) / 4
        loss.backward()
        if step % 4 == 0:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    """)) == []


def test_static_scan_follows_zero_grad_into_a_helper_function():
    code = """
    def train_step(model, optimizer, x, y):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    for x, y in loader:
        train_step(model, optimizer, x, y)
    """
    assert scan(code) == []
    assert "missing_zero_grad" in scan(code.replace("optimizer.zero_grad()", "pass"))


def test_static_scan_flags_softmax_variable_into_functional_cross_entropy_and_nll():
    assert "softmax_into_cross_entropy" in scan(loop("""
        optimizer.zero_grad()
        probs = F.softmax(model(x), dim=-1)
        loss = F.cross_entropy(probs, y)
        loss.backward()
        optimizer.step()
    """))
    assert "softmax_into_nll_loss" in scan(loop("""
        optimizer.zero_grad()
        probs = model(x).softmax(-1)
        loss = F.nll_loss(probs, y)
        loss.backward()
        optimizer.step()
    """))


def test_static_scan_flags_sigmoid_with_bce_loss_and_with_bce_with_logits():
    code = """
    import torch, torch.nn as nn
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 1)
        def forward(self, x):
            return torch.sigmoid(self.fc(x))
    model = Net()
    criterion = nn.{loss}()
    optimizer = torch.optim.Adam(model.parameters())
    for x, y in loader:
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
    """
    assert scan(code.format(loss="BCELoss")) == ["sigmoid_then_bce_loss"]
    assert scan(code.format(loss="BCEWithLogitsLoss")) == ["sigmoid_into_bce_with_logits"]


def test_static_scan_flags_loss_rebuilt_from_item_and_prediction_under_no_grad():
    assert "loss_leaves_autograd" in scan(loop("""
        optimizer.zero_grad()
        pred = model(x)
        loss = torch.tensor(F.mse_loss(pred, y).item(), requires_grad=True)
        loss.backward()
        optimizer.step()
    """))
    assert "loss_leaves_autograd" in scan(loop("""
        optimizer.zero_grad()
        loss = F.mse_loss(model(x).detach(), y)
        loss.backward()
        optimizer.step()
    """))
    assert "forward_under_no_grad" in scan(loop("""
        optimizer.zero_grad()
        with torch.no_grad():
            pred = model(x)
        loss = F.mse_loss(pred, y)
        loss.backward()
        optimizer.step()
    """))


def test_static_scan_flags_requires_grad_false_on_the_whole_model_and_zero_lr():
    code = loop("""
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
    """)
    frozen = code.replace("for x, y in loader:", "for p in model.parameters():\n    p.requires_grad = False\nfor x, y in loader:")
    assert "whole_model_requires_grad_false" in scan(frozen)
    assert "zero_learning_rate" in scan(code.replace("lr=0.1", "lr=0.0"))
    assert "zero_learning_rate" in scan(code.replace(
        "torch.optim.SGD(model.parameters(), lr=0.1)",
        "torch.optim.SGD([{'params': model.weight, 'lr': 0}, {'params': model.bias}], lr=0.1)"))


def test_per_row_std_without_eps_is_flagged_but_a_whole_dataset_std_is_not():
    assert scan("z = (x - x.mean(dim=1, keepdim=True)) / x.std(dim=1, keepdim=True)\n") == ["divide_by_std_without_eps"]
    assert scan("z = (x - x.mean(0)) / torch.std(x, 0)\n") == ["divide_by_std_without_eps"]
    assert scan("y = (y - y.mean()) / y.std()\n") == []  # one number over the whole target: never 0 on real data


def test_static_scan_flags_log_of_softmax_without_clamp_but_not_with_it():
    bad = """
    probs = torch.softmax(logits, dim=-1)
    entropy = -(probs * torch.log(probs)).sum(-1)
    """
    assert scan(bad) == ["log_of_probability"]
    assert scan(bad.replace("torch.log(probs)", "torch.log(probs + 1e-8)")) == []
    assert scan(bad.replace("torch.log(probs)", "probs.clamp(min=1e-8).log()")) == []


def test_static_scan_flags_one_host_sync_per_loop_at_low_confidence():
    issues = scan_source(textwrap.dedent(loop("""
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        running += loss.item()
        print(loss)
        history.append(loss.cpu())
    """)))
    syncs = [i for i in issues if i.rule == "host_sync_every_step"]
    assert len(syncs) == 1 and syncs[0].failure_mode == "slow_throughput" and syncs[0].confidence <= 0.4


def test_static_scan_flags_view_after_transpose_through_a_variable():
    assert scan("h = x.transpose(1, 2)\nflat = h.view(b, -1)\n") == ["view_after_permute"]
    assert scan("flat = x.transpose(1, 2).contiguous().view(b, -1)\n") == []


# --- bugs in the user's own loop (issue #14), injected as one edit into realistic correct scripts ---


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def inject(code: str, old: str, new: str) -> str:
    assert code.count(old) == 1, old
    return code.replace(old, new)


def hits_of(code: str, rule: str) -> list:
    return [i for i in scan_source(code) if i.rule == rule]


def line_of(code: str, text: str, nth: int = 0) -> int:
    return [n for n, line in enumerate(code.splitlines(), 1) if text in line][nth]


ZERO_BETWEEN = "zero_grad_between_backward_and_step"


def test_zero_grad_moved_between_backward_and_step_in_nanogpt_loop_is_a_misplaced_zero_grad():
    code = inject(fixture("correct_nanogpt_style.py"), "    if grad_clip != 0.0:\n",
                  "    optimizer.zero_grad(set_to_none=True)\n    if grad_clip != 0.0:\n")
    code = inject(code, "    scaler.update()\n    optimizer.zero_grad(set_to_none=True)\n", "    scaler.update()\n")
    (hit,) = hits_of(code, ZERO_BETWEEN)
    assert hit.failure_mode == "missing_zero_grad" and hit.confidence >= 0.7
    assert hit.line == line_of(code, "optimizer.zero_grad(set_to_none=True)")
    backward, step = line_of(code, "scaler.scale(loss).backward()"), line_of(code, "scaler.step(optimizer)")
    assert f"at line {hit.line} runs after scaler.scale(loss).backward() at line {backward}" in hit.why
    assert f"before scaler.step(optimizer) at line {step}" in hit.why and "zero gradients" in hit.why
    finding = next(f for f in static_scan_code(code).findings if f.location.endswith(f":{hit.line}"))
    assert "broken" in finding.avoid and finding.failure_mode == "missing_zero_grad"


def test_zero_grad_before_step_inside_the_accumulation_branch_of_an_hf_loop():
    code = inject(fixture("correct_hf_style.py"),
                  "            optimizer.step()\n            lr_scheduler.step()\n            optimizer.zero_grad()\n",
                  "            optimizer.zero_grad()\n            optimizer.step()\n            lr_scheduler.step()\n")
    (hit,) = hits_of(code, ZERO_BETWEEN)
    assert hit.line == line_of(code, "optimizer.zero_grad()") and hit.failure_mode == "missing_zero_grad"
    assert f"before optimizer.step() at line {line_of(code, 'optimizer.step()')}" in hit.why


def test_zero_grad_of_the_other_gan_optimizer_or_before_a_skipped_step_is_not_misplaced():
    assert ZERO_BETWEEN not in scan("""
    for real in loader:
        fake = generator(torch.randn(64, 100))
        d_loss = F.binary_cross_entropy_with_logits(discriminator(real), ones) + \\
            F.binary_cross_entropy_with_logits(discriminator(fake.detach()), zeros)
        opt_d.zero_grad()
        d_loss.backward()
        opt_g.zero_grad()
        opt_d.step()
        g_loss = F.binary_cross_entropy_with_logits(discriminator(fake), ones)
        g_loss.backward()
        opt_g.step()
    """)
    assert scan(loop("""
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        if not torch.isfinite(loss):
            optimizer.zero_grad()
            continue
        optimizer.step()
    """)) == []


def test_discarded_masked_fill_in_nanogpt_attention_is_a_causal_mask_leak():
    code = inject(fixture("correct_nanogpt_style.py"), "        att = att.masked_fill(", "        att.masked_fill(")
    (hit,) = hits_of(code, "discarded_causal_mask")
    assert hit.failure_mode == "data_leakage" and hit.confidence >= 0.8
    assert hit.line == line_of(code, "att.masked_fill(self.bias")
    assert "att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float(\"-inf\"))" in hit.fix
    assert "future" in hit.why
    finding = next(f for f in static_scan_code(code).findings if f.failure_mode == "data_leakage")
    assert "causal mask" in finding.avoid and finding.location.endswith(f":{hit.line}")


def test_masked_scores_bound_to_a_name_that_is_never_read_leak_the_future_too():
    code = inject(fixture("correct_nanogpt_style.py"), "        att = att.masked_fill(", "        masked = att.masked_fill(")
    (hit,) = hits_of(code, "discarded_causal_mask")
    assert "`masked = att.masked_fill(" in hit.why and hit.fix.startswith("assign the result: att = att.masked_fill(")


def test_batch_moved_to_the_device_without_assigning_it_in_an_accumulation_loop():
    code = inject(fixture("correct_grad_accumulation.py"),
                  "        inputs, targets = inputs.to(device, non_blocking=True), targets.to(device, non_blocking=True)\n",
                  "        inputs.to(device, non_blocking=True)\n        targets.to(device, non_blocking=True)\n")
    hits = hits_of(code, "discarded_device_move")
    assert [h.line for h in hits] == [line_of(code, "inputs.to(device, non_blocking"), line_of(code, "targets.to(device, non_blocking")]
    assert {h.failure_mode for h in hits} == {"exception"}
    assert hits[0].fix == "assign the result: inputs = inputs.to(device, non_blocking=True)"


def test_hf_batch_values_moved_in_a_for_loop_without_assignment():
    code = inject(fixture("correct_hf_style.py"), "        batch = {k: v.to(device) for k, v in batch.items()}\n",
                  "        for k, v in batch.items():\n            v.to(device)\n")
    (hit,) = hits_of(code, "discarded_device_move")
    assert hit.line == line_of(code, "            v.to(device)")


def test_functional_dropout_whose_result_is_dropped_trains_without_dropout():
    code = inject(fixture("correct_grad_accumulation.py"), "        x = F.dropout(x, p=0.3, training=self.training)",
                  "        F.dropout(x, p=0.3, training=self.training)")
    (hit,) = hits_of(code, "discarded_dropout")
    assert hit.failure_mode == "overfitting" and hit.line == line_of(code, "F.dropout(x, p=0.3")


def test_discarded_clamp_guard_before_a_log_and_discarded_wgan_weight_clip():
    code = loop("""
        optimizer.zero_grad()
        p = torch.sigmoid(model(x))
        p.clamp(min=1e-7, max=1 - 1e-7)
        loss = -(y * torch.log(p) + (1 - y) * torch.log(1 - p)).mean()
        loss.backward()
        optimizer.step()
        for w in critic.parameters():
            w.data.clamp(-0.01, 0.01)
    """)
    rules = {i.rule: i for i in scan_source(code)}
    assert rules["discarded_clamp"].failure_mode == "nan_inf"
    assert rules["discarded_weight_clip"].failure_mode == "exploding_gradients"
    assert "clamp_" in rules["discarded_weight_clip"].fix


def test_in_place_module_moves_sets_loggers_and_batch_encodings_are_not_discarded_results():
    assert scan("""
    import logging, torch, torch.nn.functional as F
    from transformers import AutoModel, AutoTokenizer
    model = AutoModel.from_pretrained("bert-base-uncased")
    model.to(device)
    model.half()
    ema = copy.deepcopy(model)
    ema.cuda()
    seen = set()
    for batch in loader:
        batch.to(device)
        enc = tokenizer(batch["text"], return_tensors="pt")
        enc.to(device)
        seen.add(batch["id"])
        logging.getLogger().log(logging.INFO, "step")
        out = model(**enc)
        F.relu(out.last_hidden_state, inplace=True)
        out.last_hidden_state.clamp_(-5, 5)
        torch.manual_seed(0)
    """) == []


SCHED_FIRST, PER_BATCH = "scheduler_step_before_optimizer_step", "epoch_schedule_stepped_per_batch"


def test_epoch_sized_cosine_schedule_stepped_inside_the_batch_loop_is_lr_too_low():
    code = inject(fixture("correct_epoch_loop.py"), "        optimizer.step()\n",
                  "        optimizer.step()\n        scheduler.step()\n")
    code = inject(code, "            print(f\"epoch {epoch} batch {i} | loss {loss.item():.4f} | grad_norm {grad_norm.item():.3f}\")\n    scheduler.step()\n",
                  "            print(f\"epoch {epoch} batch {i} | loss {loss.item():.4f} | grad_norm {grad_norm.item():.3f}\")\n")
    (hit,) = hits_of(code, PER_BATCH)
    assert hit.failure_mode == "lr_too_low" and 0.5 <= hit.confidence <= 0.7
    assert hit.line == line_of(code, "        scheduler.step()") and "T_max=10" in hit.why
    assert hits_of(code, SCHED_FIRST) == []


def test_step_lr_sized_in_epochs_from_args_stepped_per_batch_but_not_one_sized_in_steps():
    code = """
    import torch
    scheduler = torch.optim.lr_scheduler.{ctor}
    for epoch in range(args.epochs):
        for images, labels in train_loader:
            optimizer.zero_grad()
            loss = criterion(model(images), labels)
            loss.backward()
            optimizer.step()
            scheduler.step()
    """
    assert PER_BATCH in scan(code.replace("{ctor}", "StepLR(optimizer, step_size=args.epochs // 3, gamma=0.1)"))
    assert PER_BATCH in scan(code.replace("{ctor}", "MultiStepLR(optimizer, milestones=[30, 60], gamma=0.1)")
                             .replace("range(args.epochs)", "range(90)"))
    assert scan(code.replace("{ctor}", "CosineAnnealingLR(optimizer, T_max=args.epochs * len(train_loader))")) == []
    assert scan(code.replace("{ctor}", "OneCycleLR(optimizer, max_lr=0.1, epochs=args.epochs, steps_per_epoch=len(train_loader))")) == []


def test_a_scheduler_built_by_a_helper_and_sized_by_an_epoch_constant_stepped_per_batch():
    """Blind dev house_price_embedding_mlp: `sched = make_scheduler(opt)` returns StepLR(step_size=LR_STEP_EPOCHS),
    stepped inside the batch loop: the LR halves every 20 batches. A size named per epoch counts batches."""
    code = """
    import torch
    EPOCHS, LR_STEP_EPOCHS = 60, 20

    def make_scheduler(opt):
        return torch.optim.lr_scheduler.StepLR(opt, step_size=SIZE, gamma=0.5)

    def main():
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        sched = make_scheduler(opt)
        for epoch in range(1, EPOCHS + 1):
            for batch in iterate_batches(train_data):
                loss = loss_fn(model, batch)
                opt.zero_grad()
                loss.backward()
                opt.step()
                sched.step()
    """
    (hit,) = hits_of(textwrap.dedent(code.replace("SIZE", "LR_STEP_EPOCHS")), PER_BATCH)
    assert "StepLR" in hit.why and "LR_STEP_EPOCHS" in hit.why
    assert PER_BATCH not in scan(code.replace("SIZE", "steps_per_epoch"))
    # blind dev lstm_slot_tagger_steplr: the size and the epochs read from one config dict
    config = code.replace("EPOCHS, LR_STEP_EPOCHS = 60, 20", "CONFIG = dict(epochs=12, lr_step_size=NUM)").replace(
        "step_size=SIZE", 'step_size=CONFIG["lr_step_size"]').replace("range(1, EPOCHS + 1)", 'range(1, CONFIG["epochs"] + 1)')
    assert PER_BATCH in scan(config.replace("NUM", "4"))
    assert PER_BATCH not in scan(config.replace("NUM", "500"))  # sized in batches: 500 > 12 epochs
    for script, flagged in (("train.py", True), ("train_fixed.py", False)):
        report = static_scan([EXAMPLES / "realistic" / "tabular" / "house_price_embedding_mlp" / script])
        assert any(i.rule == PER_BATCH for i in report.issues) == flagged, script


def test_per_epoch_exponential_decay_stepped_in_a_timm_style_train_one_epoch_helper():
    code = """
    import torch

    def train_one_epoch(epoch, model, loader, optimizer, scheduler, log_interval):
        model.train()
        for batch_idx, (x, y) in enumerate(loader):
            loss = loss_fn(model, (x, y))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            if batch_idx % log_interval == 0:
                print(f"Train: {epoch} [{batch_idx}] Loss: {loss.item():.4f}")

    def main():
        model, (train_loader, val_loader) = build_model(), build_data(64)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.{ctor}
        for epoch in range(args.epochs):
            train_one_epoch(epoch, model, train_loader, optimizer, scheduler, args.log_interval)
            validate(model, val_loader)
    """
    (hit,) = hits_of(textwrap.dedent(code.replace("{ctor}", "ExponentialLR(optimizer, gamma=0.95)")), PER_BATCH)
    assert hit.line == 11 and "gamma is applied every batch" in hit.why and hit.failure_mode == "lr_too_low"
    assert PER_BATCH in scan(code.replace("{ctor}", "LambdaLR(optimizer, lr_lambda=lambda epoch: 0.9 ** epoch)"))
    assert PER_BATCH not in scan(code.replace("{ctor}", "ExponentialLR(optimizer, gamma=0.9999)"))


def test_scheduler_stepped_at_the_top_of_each_epoch_is_off_by_one_at_low_confidence():
    code = inject(fixture("correct_epoch_loop.py"), "for epoch in range(10):\n    model.train()\n",
                  "for epoch in range(10):\n    scheduler.step()\n    model.train()\n")
    code = inject(code, "\n    scheduler.step()\n\n", "\n\n")
    (hit,) = hits_of(code, SCHED_FIRST)
    assert hit.failure_mode == "lr_too_low" and hit.confidence < 0.5
    assert hit.line == line_of(code, "scheduler.step()") and f"before optimizer.step() at line {line_of(code, 'optimizer.step()')}" in hit.why
    guarded = inject(code, "    scheduler.step()\n    model.train()", "    if epoch > 0:\n        scheduler.step()\n    model.train()")
    assert hits_of(guarded, SCHED_FIRST) == []


def test_warmup_scheduler_stepped_before_the_optimizer_in_hf_and_accumulation_loops():
    hf = inject(fixture("correct_hf_style.py"), "            optimizer.step()\n            lr_scheduler.step()\n",
                "            lr_scheduler.step()\n            optimizer.step()\n")
    (hit,) = hits_of(hf, SCHED_FIRST)
    assert hit.line == line_of(hf, "lr_scheduler.step()") and hit.confidence < 0.5
    acc = inject(fixture("correct_grad_accumulation.py"), "            scaler.step(optimizer)\n            scaler.update()\n            scheduler.step()\n",
                 "            scheduler.step()\n            scaler.step(optimizer)\n            scaler.update()\n")
    assert [h.line for h in hits_of(acc, SCHED_FIRST)] == [line_of(acc, "            scheduler.step()")]
    assert hits_of(acc, PER_BATCH) == []  # OneCycleLR is sized in steps


def test_plateau_scheduler_stepped_on_the_validation_loss_is_not_an_order_bug():
    assert scan("""
    import torch
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=3)
    for epoch in range(50):
        for x, y in loader:
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
        scheduler.step(evaluate(model))
    """) == []


NOT_DIVIDED, ZERO_IN_ACCUM = "accumulation_loss_not_divided", "zero_grad_inside_accumulation"


def test_flat_accumulation_with_sgd_and_an_undivided_loss_steps_k_times_too_far():
    code = inject(fixture("correct_grad_accumulation.py"), "loss = criterion(outputs, targets) / accum_steps",
                  "loss = criterion(outputs, targets)")
    (hit,) = hits_of(code, NOT_DIVIDED)
    assert hit.failure_mode == "lr_too_high" and hit.confidence >= 0.6  # SGD: the step really is k times larger
    assert hit.line == line_of(code, "scaler.scale(loss).backward()")
    assert "`(i + 1) % accum_steps == 0`" in hit.why and "loss = loss / accum_steps" in hit.fix
    finding = next(f for f in static_scan_code(code).findings if f.failure_mode == "lr_too_high")
    assert "Do not lower the learning rate" in finding.avoid


def test_nanogpt_micro_step_loop_without_dividing_the_loss_is_flagged_below_half_with_adamw():
    code = inject(fixture("correct_nanogpt_style.py"), "        loss = loss / gradient_accumulation_steps\n", "")
    (hit,) = hits_of(code, NOT_DIVIDED)
    assert hit.confidence < 0.5 and "Adam" in hit.why  # AdamW divides most of the scale back out
    assert hit.line == line_of(code, "scaler.scale(loss).backward()")


def test_hf_loop_that_forgot_to_divide_by_gradient_accumulation_steps():
    code = inject(fixture("correct_hf_style.py"), "        loss = loss / gradient_accumulation_steps\n", "")
    (hit,) = hits_of(code, NOT_DIVIDED)
    assert hit.line == line_of(code, "loss.backward()") and "gradient_accumulation_steps" in hit.why


def test_zero_grad_on_every_micro_batch_keeps_only_the_last_one():
    flat = inject(fixture("correct_grad_accumulation.py"), "        inputs, targets = inputs.to(device, non_blocking",
                  "        optimizer.zero_grad(set_to_none=True)\n        inputs, targets = inputs.to(device, non_blocking")
    (hit,) = hits_of(flat, ZERO_IN_ACCUM)
    assert hit.failure_mode == "missing_zero_grad" and hit.line == line_of(flat, "optimizer.zero_grad", 1)
    assert f"scaler.step(optimizer) at line {line_of(flat, 'scaler.step(optimizer)')}" in hit.why
    nested = inject(fixture("correct_nanogpt_style.py"), "    for micro_step in range(gradient_accumulation_steps):\n",
                    "    for micro_step in range(gradient_accumulation_steps):\n        optimizer.zero_grad(set_to_none=True)\n")
    (hit,) = hits_of(nested, ZERO_IN_ACCUM)
    assert hit.line == line_of(nested, "optimizer.zero_grad(set_to_none=True)") and "the micro-batch loop" in hit.why


def test_accumulation_that_divides_in_a_helper_rescales_grads_or_uses_accelerate_is_quiet():
    assert scan("""
    def compute_loss(model, batch, accum):
        logits = model(batch["x"])
        return F.cross_entropy(logits, batch["y"]) / accum

    for step, batch in enumerate(loader):
        loss = compute_loss(model, batch, accum_steps)
        loss.backward()
        if (step + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
    """) == []
    assert scan("""
    for step, (x, y) in enumerate(loader):
        loss = F.cross_entropy(model(x), y, reduction="sum")
        loss.backward()
        n_seen += y.numel()
        if (step + 1) % accum == 0:
            for p in model.parameters():
                p.grad /= n_seen
            optimizer.step()
            optimizer.zero_grad()
            n_seen = 0
    """) == []
    assert scan("""
    for i, (imgs, _) in enumerate(dataloader):
        optimizer_D.zero_grad()
        d_loss = -torch.mean(discriminator(imgs)) + torch.mean(discriminator(generator(z).detach()))
        d_loss.backward()
        optimizer_D.step()
        optimizer_G.zero_grad()
        if i % n_critic == 0:
            g_loss = -torch.mean(discriminator(generator(z)))
            g_loss.backward()
            optimizer_G.step()
    """) == []
    assert scan("""
    for i, (imgs, _) in enumerate(dataloader):
        if i % n_critic == 0:
            optimizer_G.zero_grad()
            g_loss = -torch.mean(discriminator(generator(z)))
            g_loss.backward()
            optimizer_G.step()
        optimizer_D.zero_grad()
        d_loss = -torch.mean(discriminator(imgs)) + torch.mean(discriminator(generator(z).detach()))
        d_loss.backward()
        optimizer_D.step()
    """) == []
    assert scan("""
    for batch in loader:
        with accelerator.accumulate(model):
            loss = model(**batch).loss
            accelerator.backward(loss)
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()
    """) == []


UNSHIFTED = "targets_are_unshifted_inputs"


def test_nanogpt_get_batch_whose_targets_are_not_shifted_leaks_the_answer():
    code = inject(fixture("correct_nanogpt_style.py"), "data[i + 1:i + 1 + block_size]", "data[i:i + block_size]")
    (hit,) = hits_of(code, UNSHIFTED)
    assert hit.failure_mode == "data_leakage" and hit.confidence >= 0.7
    assert hit.line == line_of(code, "    y = torch.stack(") and "shift" in hit.fix
    aliased = inject(fixture("correct_nanogpt_style.py"), "    y = torch.stack([data[i + 1:i + 1 + block_size] for i in ix])\n",
                     "    y = x\n")
    assert [h.line for h in hits_of(aliased, UNSHIFTED)] == [line_of(aliased, "    y = x")]


def test_windows_sliced_twice_from_the_same_offset_in_a_hand_written_loop():
    code = """
    import torch, torch.nn.functional as F
    vocab_size, T = 65, 64
    data = torch.tensor(encode(open("input.txt").read()))
    for it in range(5000):
        i = torch.randint(len(data) - T - 1, (1,)).item()
        x, y = data[i:i + T][None], data[i:i + T][None]
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, vocab_size), y.view(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    """
    assert UNSHIFTED in scan(code) and "loss_leaves_autograd" not in scan(code)  # an .item() index cuts nothing
    assert UNSHIFTED not in scan(code.replace("data[i:i + T][None], data[i:i + T][None]",
                                              "data[i:i + T][None], data[i + 1:i + T + 1][None]"))


def test_own_cross_entropy_on_hf_logits_against_the_input_ids_is_unshifted():
    code = inject(fixture("correct_hf_style.py"),
                  "        outputs = model(input_ids=input_ids, attention_mask=attention_mask, labels=input_ids)\n        loss = outputs.loss\n",
                  "        outputs = model(input_ids=input_ids, attention_mask=attention_mask)\n"
                  "        loss = torch.nn.functional.cross_entropy(outputs.logits.view(-1, outputs.logits.size(-1)), input_ids.view(-1))\n")
    (hit,) = hits_of(code, UNSHIFTED)
    assert hit.line == line_of(code, "loss = torch.nn.functional.cross_entropy(") and "`input_ids`" in hit.why
    shifted = inject(fixture("correct_hf_style.py"),
                     "        outputs = model(input_ids=input_ids, attention_mask=attention_mask, labels=input_ids)\n        loss = outputs.loss\n",
                     "        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1]\n"
                     "        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), input_ids[:, 1:].reshape(-1))\n")
    assert hits_of(shifted, UNSHIFTED) == []


def test_labels_equal_to_input_ids_are_right_for_hf_causal_lm_and_for_masked_lm():
    assert scan("""
    import torch
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained("gpt2")
    for batch in loader:
        input_ids = batch["input_ids"]
        labels = input_ids.clone()
        optimizer.zero_grad()
        out = model(input_ids=input_ids, labels=labels)
        out.loss.backward()
        optimizer.step()
        acc = (out.logits[:, :-1].argmax(-1) == input_ids[:, 1:]).float().mean()
        ce = torch.nn.functional.cross_entropy(out.logits[:, :-1].flatten(0, 1), input_ids[:, 1:].flatten())
    """) == []
    assert scan("""
    import torch, torch.nn.functional as F
    for batch in loader:
        input_ids = batch["input_ids"]
        labels = input_ids.clone()
        mask = torch.rand(labels.shape) < 0.15
        labels[~mask] = -100
        input_ids[mask] = tokenizer.mask_token_id
        logits = model(input_ids).logits
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1), ignore_index=-100)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    """) == []


LIT_VAE = """
import torch, torch.nn as nn, torch.nn.functional as F

class LitVAE(nn.Module):
    def __init__(self, d=256, latent=8):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(d, 128), nn.ReLU(), nn.Linear(128, 2 * latent))
        self.decoder = nn.Sequential(nn.Linear(latent, 128), nn.ReLU(), nn.Linear(128, d))

    def forward(self, x):
        mu, logvar = self.encoder(x).chunk(2, dim=-1)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return self.decoder(z), mu, logvar

    def elbo_terms(self, x):
        logits, mu, logvar = self(x)
        recon = F.binary_cross_entropy_with_logits(logits, x, reduction="sum") / x.size(0)
        kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp()) / x.size(0)
        return recon, kld

    def training_step(self, batch, batch_idx):
        (x,) = batch
        recon, kld = self.elbo_terms(x)
        loss = recon + beta * kld
        return loss
"""


def test_kl_subtracted_from_a_lightning_vae_loss_is_a_loss_sign_bug():
    code = inject(LIT_VAE, "loss = recon + beta * kld", "loss = recon - beta * kld")
    (hit,) = hits_of(code, "kl_subtracted_from_loss")
    assert hit.failure_mode == "loss_function" and hit.line == line_of(code, "loss = recon - beta * kld")
    assert scan(LIT_VAE) == []
    # an ELBO written with the negative KL is subtracted correctly
    assert scan(inject(inject(LIT_VAE, "kld = -0.5 * torch.sum(", "neg_kl = 0.5 * torch.sum("),
                       "return recon, kld", "return recon, neg_kl").replace("loss = recon + beta * kld", "loss = recon - beta * kld")) == []



def test_a_mean_reconstruction_beside_a_summed_kl_weighs_the_kl_by_the_input_size():
    """Blind dev vae_mlp_sprites16: BCE averaged over the 256 pixels beside a KL summed over the latent dims: the KL
    weighs 256x too much, the posterior collapses (logged KL 0.0000), reconstructions stay blurry. The ELBO's
    reconstruction is summed per sample, as the KL is; both averaged per element is a consistent (scaled) ELBO."""
    code = inject(LIT_VAE, 'recon = F.binary_cross_entropy_with_logits(logits, x, reduction="sum") / x.size(0)',
                  "recon = F.binary_cross_entropy_with_logits(logits, x)")
    code = inject(code, "kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp()) / x.size(0)",
                  "kld = (-0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).sum(dim=1)).mean()")
    (hit,) = hits_of(code, "kl_against_mean_reconstruction")
    assert hit.failure_mode == "loss_function" and hit.line == line_of(code, "recon = F.binary_cross_entropy_with")
    assert "reduction='none'" in hit.fix
    assert scan(LIT_VAE) == []  # reduction="sum" / batch beside a KL summed / batch
    summed = code.replace("F.binary_cross_entropy_with_logits(logits, x)",
                          'F.binary_cross_entropy_with_logits(logits, x, reduction="none").sum(dim=1).mean()')
    assert scan(summed) == []
    assert scan(code.replace(".sum(dim=1)).mean()", ").mean()")) == []  # both per element: a scaled ELBO
    # a loss module with its default reduction is the same mean; a KL from a helper that sums is the same KL
    module = inject(code, "recon = F.binary_cross_entropy_with_logits(logits, x)", "recon = self.rec_loss(logits, x)")
    module = inject(module, "self.decoder = nn.Sequential(", "self.rec_loss = nn.BCEWithLogitsLoss()\n        self.decoder = nn.Sequential(")
    assert "kl_against_mean_reconstruction" in scan(module)
    assert scan(module.replace("nn.BCEWithLogitsLoss()", "nn.BCEWithLogitsLoss(reduction='sum')")) == []
    helper = inject(code, "kld = (-0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).sum(dim=1)).mean()",
                    "kld = kl_to_prior(mu, logvar).mean()")
    helper += "\ndef kl_to_prior(mu, logvar):\n    return -0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).sum(dim=1)\n"
    assert "kl_against_mean_reconstruction" in scan(helper)
    # a pixel MSE read as a metric beside the ELBO terms is not a loss term
    metric = inject(LIT_VAE, "return recon, kld", "mse = F.mse_loss(torch.sigmoid(logits), x).item()\n        return recon, kld")
    assert scan(metric) == []
    # blind dev ecg_beat_conv1d_vae_kl_warmup: a squared error summed per sample is the objective; the per-element
    # MSE returned beside it is a metric for the log
    beside = ("def vae_terms(model, x):\n    xhat, mu, logvar = model(x)\n"
              "    recon = 0.5 * ((xhat - x) ** 2).sum(dim=(1, 2)) / 0.1 ** 2\n"
              "    kl = -0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).sum(dim=1)\n"
              "    return recon.mean(), kl.mean(), F.mse_loss(xhat, x)\n")
    assert "kl_against_mean_reconstruction" not in scan("import torch.nn.functional as F\n" + beside)
    assert "kl_against_mean_reconstruction" in scan("import torch.nn.functional as F\n" + beside.replace(
        "((xhat - x) ** 2).sum(dim=(1, 2))", "((xhat - x) ** 2).mean(dim=(1, 2))"))

def test_lightning_autoencoder_whose_decoder_ends_in_sigmoid_fed_to_bce_with_logits_through_self():
    code = """
    import torch.nn as nn
    class LitAutoEncoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = nn.Sequential(nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 8))
            self.decoder = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 784), nn.Sigmoid())
            self.criterion = nn.BCEWithLogitsLoss()

        def forward(self, x):
            return self.decoder(self.encoder(x))

        def training_step(self, batch, batch_idx):
            (x,) = batch
            x_hat = self(x)
            return self.criterion(x_hat, x)
    """
    assert scan(code) == ["sigmoid_into_bce_with_logits"]
    assert scan(code.replace("BCEWithLogitsLoss", "BCELoss")) == ["sigmoid_then_bce_loss"]
    assert scan(code.replace(", nn.Sigmoid())", ")")) == []


MEGATRON_STYLE = """
import math, torch

def main(args):
    model = build_model(args)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda it: cosine_with_warmup(it, args.train_iters))
    iteration, micro_step = 0, 0
    model.train()
    optimizer.zero_grad(set_to_none=True)
    while iteration < args.train_iters:
        tokens, labels = get_batch(train_iterator)
        loss = forward_step(model, tokens, labels)
        (loss / args.num_micro_batches).backward()
        micro_step += 1
        if micro_step % args.num_micro_batches != 0:
            continue
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        iteration += 1
"""


def test_scheduler_stepped_on_every_micro_batch_before_a_continue_guard_runs_k_times_too_fast():
    code = inject(MEGATRON_STYLE, "        optimizer.step()\n        scheduler.step()\n", "        optimizer.step()\n")
    code = inject(code, "        micro_step += 1\n", "        scheduler.step()\n        micro_step += 1\n")
    (hit,) = hits_of(code, "scheduler_stepped_per_micro_batch")
    assert hit.failure_mode == "lr_too_low" and hit.confidence >= 0.6  # sized in train_iters: optimizer steps
    assert hit.line == line_of(code, "        scheduler.step()") and "args.num_micro_batches" in hit.why
    assert hits_of(code, "scheduler_step_before_optimizer_step") == []  # the specific finding says it better
    assert scan(MEGATRON_STYLE) == []


def test_optimizer_step_on_every_micro_batch_with_zero_grad_only_at_the_boundary():
    code = inject(MEGATRON_STYLE, "        (loss / args.num_micro_batches).backward()\n",
                  "        (loss / args.num_micro_batches).backward()\n        optimizer.step()\n")
    code = inject(code, "        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad)\n        optimizer.step()\n",
                  "        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad)\n")
    (hit,) = hits_of(code, "step_every_micro_batch")
    assert hit.failure_mode == "missing_zero_grad" and hit.line == line_of(code, "        optimizer.step()")
    assert f"optimizer.zero_grad(set_to_none=True) at line {line_of(code, 'optimizer.zero_grad', 1)}" in hit.why
    flat = inject(fixture("correct_grad_accumulation.py"), "        scaler.scale(loss).backward()\n",
                  "        scaler.scale(loss).backward()\n        scaler.step(optimizer)\n")
    flat = inject(flat, "            scaler.step(optimizer)\n            scaler.update()\n", "            scaler.update()\n")
    assert [h.line for h in hits_of(flat, "step_every_micro_batch")] == [line_of(flat, "scaler.step(optimizer)")]


def test_a_schedule_sized_in_micro_batches_may_be_stepped_on_every_micro_batch():
    assert scan("""
    import torch
    from transformers import get_linear_schedule_with_warmup
    scheduler = get_linear_schedule_with_warmup(optimizer, 100, num_training_steps=len(train_loader) * epochs)
    for epoch in range(epochs):
        for step, (x, y) in enumerate(train_loader):
            loss = F.cross_entropy(model(x), y) / accum_steps
            loss.backward()
            scheduler.step()
            if (step + 1) % accum_steps == 0:
                optimizer.step()
                optimizer.zero_grad()
    """) == []


LINEAR_PROBE = """
import torch, torch.nn as nn

class ShapeClassifier(nn.Module):
    def __init__(self, num_labels):
        super().__init__()
        self.backbone = Backbone()
        self.classifier = nn.Linear(256, num_labels)

    def forward(self, pixel_values):
        return self.classifier(self.backbone(pixel_values))

def freeze_backbone(model):
    for p in model.backbone.parameters():
        p.requires_grad = False
    return model

def build_optimizer(model, args):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if p.ndim == 1 else decay).append(p)
    return torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=args.learning_rate)

model = freeze_backbone(ShapeClassifier(num_labels=5))
optimizer = build_optimizer(model, args)
for pixel_values, labels in train_loader:
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(pixel_values), labels)
    loss.backward()
    optimizer.step()
"""


def test_linear_probe_whose_optimizer_walks_the_frozen_backbone_never_trains_the_head():
    code = inject(LINEAR_PROBE, "    for name, p in model.named_parameters():", "    for name, p in model.backbone.named_parameters():")
    (hit,) = hits_of(code, "optimizer_over_frozen_part")
    assert hit.failure_mode == "frozen_params" and hit.line == line_of(code, "model.backbone.named_parameters()")
    assert f"requires_grad=False at line {line_of(code, 'p.requires_grad = False')}" in hit.why
    assert scan(LINEAR_PROBE) == []
    head_only = inject(LINEAR_PROBE, "    for name, p in model.named_parameters():", "    for name, p in model.classifier.named_parameters():")
    assert hits_of(head_only, "optimizer_over_frozen_part") == []  # the head is trainable: a deliberate probe


# --- quiet on correct code ---------------------------------------------------------------------


def test_static_scan_is_quiet_on_patterns_that_only_look_wrong():
    assert scan("""
    class Cube(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return torch.tensor(x.numpy() ** 3)
        @staticmethod
        def backward(ctx, g):
            return 3 * g
    """) == []
    assert scan("""
    class Agent:
        def __init__(self):
            self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=1e-2)
    """) == []
    assert scan("""
    def log_softmax(x):
        shifted = x
        if x.numel():
            shifted = x - torch.amax(x, -1, keepdim=True)
        return shifted - torch.log(torch.sum(torch.exp(shifted), -1, keepdim=True))
    """) == []
    assert scan(loop("""
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        for p in model.parameters():
            p.grad.requires_grad_(False)
        optimizer.step()
    """)) == []


def test_freeze_then_unfreeze_the_head_gaussian_weights_and_dist_autograd_are_not_bugs():
    assert scan(loop("""
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
    """).replace("for x, y in loader:", "for param in model.parameters():\n    param.requires_grad = False\n"
                 "for param in model.get_classifier().parameters():\n    param.requires_grad = True\nfor x, y in loader:")) == []
    assert scan("""
    weights = torch.exp(-0.5 * ((positions - center) / spread) ** 2)
    weights = weights / weights.sum()
    """) == []
    assert scan("""
    for data, target in loader:
        with dist_autograd.context() as context_id:
            loss = F.cross_entropy(model(data), target)
            dist_autograd.backward(context_id, [loss])
            opt.step(context_id)
    """) == []


def test_deliberate_stop_gradients_in_forward_are_not_a_cut_graph():
    module = """
    import copy, torch, torch.nn as nn, torch.nn.functional as F
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("pos_table", torch.randn(1, 512, 64))
        def forward(self, x, q, mems, target, probs):
            {body}
    """
    for body in ("return x + (q - x).detach()",                       # straight-through estimator
                 "return F.cross_entropy(x, target) * probs.detach()",  # a detached weight
                 "return x + self.pos_table[:, :x.size(1)].clone().detach()",  # a buffer
                 "return x, [m.detach() for m in mems]",               # carried memory
                 "return F.mse_loss(self.proj(x), target.detach())"):  # the target of a loss
        assert scan(module.replace("{body}", body)) == [], body
    assert scan(module.replace("{body}", "if self.detach_target:\n                target = target.detach()\n"
                                         "            return F.mse_loss(x, target)")) == []
    assert scan(module.replace("{body}", "h = self.enc(x).detach()\n            return self.head(h)")) == ["detach_in_forward"]


def test_frozen_teacher_guarded_log_helper_and_plotting_are_not_bugs():
    assert scan(loop("""
        optimizer.zero_grad()
        loss = F.kl_div(F.log_softmax(model(x), -1), F.log_softmax(teacher(x), -1), log_target=True)
        loss.backward()
        optimizer.step()
    """).replace("for x, y in loader:", "teacher = copy.deepcopy(model)\nfor p in teacher.parameters():\n"
                 "    p.requires_grad_(False)\nfor x, y in loader:")) == []
    assert scan(loop("""
        optimizer.zero_grad()
        loss = F.cross_entropy(resnet(x), y)
        loss.backward()
        optimizer.step()
    """).replace("for x, y in loader:", "for param in resnet.parameters():\n    param.requires_grad = False\n"
                 "resnet.fc = nn.Linear(resnet.fc.in_features, 100)\nfor x, y in loader:")) == []
    assert scan("""
    import matplotlib.pyplot as plt
    def log(t, eps=1e-20):
        return t.clamp(min=eps).log()
    prob = logits.softmax(dim=-1)
    entropy = -(prob * log(prob)).sum(dim=-1)
    plt.scatter(x, y)
    fig, ax = plt.subplots()
    ax.scatter(x, y)
    """) == []


def test_a_loss_turned_into_a_number_after_backward_is_logging_not_a_cut_graph():
    assert scan(loop("""
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        loss = loss.item()
    """)) == ["host_sync_every_step"]


def test_a_view_that_only_splits_a_transposed_dim_works_and_is_not_flagged():
    assert scan("x = tokens.transpose(1, 2).view(B, C, H, W)\n") == []
    assert scan("t = table.permute(1, 0).view(1, nH, S, S)\n") == []
    assert scan("y = att_out.transpose(1, 2).view(B, T, C)\n") == ["view_after_permute"]


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.py")), ids=lambda p: p.name)
def test_static_scan_is_quiet_on_correct_training_scripts(path):
    report = static_scan([path])
    assert report.issues == [] and report.findings == [] and report.errors == [], report.text()


@pytest.mark.parametrize("name", [n for n, m in META.items() if m["failure_mode"] == "healthy"])
def test_static_scan_is_quiet_on_healthy_examples(name):
    assert static_scan([EXAMPLES / name / "train.py"]).issues == []


@pytest.mark.parametrize("name", [n for n, m in META.items() if m["failure_mode"] != "healthy"])
def test_static_scan_is_quiet_on_every_fixed_twin(name):
    assert static_scan([EXAMPLES / name / "train_fixed.py"]).issues == []


# --- the report ------------------------------------------------------------------------------


def test_static_scan_reports_a_file_that_does_not_parse_instead_of_raising(tmp_path):
    (tmp_path / "broken.py").write_text("def train(:\n    pass\n")
    (tmp_path / "ok.py").write_text("x = 1\n")
    report = static_scan([tmp_path])
    assert report.files_scanned == 2 and len(report.errors) == 1
    assert "broken.py" in report.errors[0] and "SyntaxError" in report.errors[0]
    assert "1 error" in report.headline()


def test_static_scan_walks_directories_but_skips_venvs_and_hidden_dirs(tmp_path):
    bad = (EXAMPLES / "missing_zero_grad" / "train.py").read_text()
    for where in ("pkg/train.py", ".venv/lib/site.py", ".hidden/train.py", "pkg/site-packages/x.py"):
        (tmp_path / where).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / where).write_text(bad)
    report = static_scan([tmp_path])
    assert report.files_scanned == 1 and {i.file for i in report.issues} == {str(tmp_path / "pkg/train.py")}


def test_a_folder_scan_does_not_read_through_symlinks_that_leave_the_folder(tmp_path):
    bad = (EXAMPLES / "missing_zero_grad" / "train.py").read_text()
    outside, root = tmp_path / "outside", tmp_path / "project"
    (outside / "pkg").mkdir(parents=True)
    (root / "src").mkdir(parents=True)
    (outside / "secret.py").write_text(bad)
    (outside / "pkg" / "deep.py").write_text(bad)
    (root / "src" / "train.py").write_text("x = 1\n")
    (root / "src" / "stolen.py").symlink_to(outside / "secret.py")
    (root / "vendor").symlink_to(outside / "pkg", target_is_directory=True)
    (root / "src" / "alias.py").symlink_to(root / "src" / "train.py")  # inside: fine, read once
    os.mkfifo(root / "src" / "pipe.py")  # reading it would block forever
    report = static_scan([root])
    assert report.files_scanned == 1 and report.issues == [] and report.errors == [], report.text()
    assert sorted(Path(s.split(":")[0]).name for s in report.skipped) == ["pipe.py", "stolen.py", "vendor"]
    assert "3 entries skipped" in report.headline()


def test_static_scan_raises_a_triage_error_for_a_missing_path(tmp_path):
    with pytest.raises(TriageError):
        static_scan([tmp_path / "nope.py"])


def test_findings_carry_location_evidence_fix_and_avoid():
    report = static_scan([EXAMPLES / "frozen_params" / "train.py"])
    assert isinstance(report, StaticScanReport)
    (f,) = report.findings
    assert f.failure_mode == "frozen_params" and 0.6 <= f.confidence <= 0.9
    assert f.location.endswith(f"train.py:{META['frozen_params']['bug_line']}")
    assert f.evidence and f.fix and f.avoid == FAILURE_MODES["frozen_params"][1]
    assert "model.head.parameters()" in report.text()
    report.model_dump_json()  # serialisable as MCP structured output


def test_rule_table_uses_the_failure_mode_vocabulary():
    for rule in RULES.values():
        assert rule.failure_mode in FAILURE_MODES and 0 < rule.confidence < 1 and rule.why and rule.fix


def test_every_loop_rule_of_issue_14_carries_its_own_avoid_and_reaches_the_finding():
    loop_rules = [r for r in RULES if r.startswith("discarded_")] + [
        "zero_grad_between_backward_and_step", "scheduler_step_before_optimizer_step",
        "epoch_schedule_stepped_per_batch", "accumulation_loss_not_divided", "zero_grad_inside_accumulation",
        "targets_are_unshifted_inputs", "kl_subtracted_from_loss", "step_every_micro_batch",
        "scheduler_stepped_per_micro_batch", "optimizer_over_frozen_part"]
    for rule_id in loop_rules:
        assert RULES[rule_id].avoid and RULES[rule_id].avoid != FAILURE_MODES[RULES[rule_id].failure_mode][1], rule_id
    assert RULES["zero_grad_between_backward_and_step"].failure_mode == "missing_zero_grad"
    assert RULES["scheduler_step_before_optimizer_step"].confidence < 0.5


def test_a_loop_that_rebuilds_the_loss_and_the_batch_many_times_is_scanned_once_per_name():
    # each name has 30 assignments: a lookup that revisits names would take 30**8 steps here
    terms = "\n".join(f"        loss = loss + aux[{i}]\n        x = x.to(device) + x.float()" for i in range(30))
    code = ("for step, (x, y) in enumerate(loader):\n        loss = criterion(model(x), y)\n" + terms +
            "\n        loss.backward()\n        if (step + 1) % accum == 0:\n            optimizer.step()\n"
            "            optimizer.zero_grad()\n").replace("\n        ", "\n    ")
    assert "accumulation_loss_not_divided" in scan(code)


def test_a_deliberate_freeze_is_not_a_whole_model_freeze():
    code = loop("""
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
    """)
    # a helper that says what it does, and an optimizer fed only the parameters that still train
    helper = "def freeze(encoder):\n    for p in encoder.parameters():\n        p.requires_grad_(False)\n    return encoder\n"
    assert "whole_model_requires_grad_false" not in scan(helper + code)
    filtered = code.replace("for x, y in loader:", "for p in net.parameters():\n    p.requires_grad = False\n"
                            "opt2 = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)\n"
                            "for x, y in loader:")
    assert "whole_model_requires_grad_false" not in scan(filtered)
    plain = code.replace("for x, y in loader:", "for p in net.parameters():\n    p.requires_grad = False\nfor x, y in loader:")
    assert "whole_model_requires_grad_false" in scan(plain)


EVAL_IN_TRAIN_MODE = """
import torch
import torch.nn as nn

model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 2))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

def evaluate(loader):
    total = 0.0
    with torch.no_grad():
        for x, y in loader:
            total += nn.functional.cross_entropy(model(x), y).item()
    return total

for epoch in range(3):
    for x, y in train_loader:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    val_loss = evaluate(val_loader)
"""


def test_evaluation_under_no_grad_without_eval_mode_is_flagged_only_with_dropout_or_batchnorm():
    assert "evaluation_in_train_mode" in scan(EVAL_IN_TRAIN_MODE)
    # model.eval() anywhere (here in the loop before evaluating), or no layer that depends on the mode: quiet
    assert "evaluation_in_train_mode" not in scan(EVAL_IN_TRAIN_MODE.replace(
        "    val_loss = evaluate(val_loader)", "    model.eval()\n    val_loss = evaluate(val_loader)\n    model.train()"))
    assert "evaluation_in_train_mode" not in scan(EVAL_IN_TRAIN_MODE.replace("nn.Dropout(0.3), ", ""))
    # a no_grad block that is not an evaluation (an EMA update) is not one either
    ema = EVAL_IN_TRAIN_MODE.replace("def evaluate(loader):", "def ema_update(loader):").replace(
        "val_loss = evaluate(val_loader)", "ema_update(train_loader)").replace("val_loader", "train_loader")
    assert "evaluation_in_train_mode" not in scan(ema)
    # a decorated helper and a config's dropout=0.0 passed by name
    decorated = EVAL_IN_TRAIN_MODE.replace("def evaluate(loader):\n    total = 0.0\n    with torch.no_grad():\n",
                                           "@torch.no_grad()\ndef evaluate(loader):\n    total = 0.0\n    if True:\n")
    assert "evaluation_in_train_mode" in scan(decorated)
    no_dropout = decorated.replace("nn.Dropout(0.3), ", "").replace("model = nn.Sequential(",
                                                                    "dropout = 0.0\nmodel = Net(dropout=dropout) or nn.Sequential(")
    assert "evaluation_in_train_mode" not in scan(no_dropout)


# --- attention scores without 1/sqrt(d) (char_gpt_unscaled_attn) ------------------------------

ATTENTION = '''
import math
import torch
import torch.nn.functional as F

def attend(q, k, v, mask, scale):
    SCORES
    att = att.masked_fill(mask == 0, float("-inf"))
    att = F.softmax(att, dim=-1)
    return att @ v
'''


@pytest.mark.parametrize("scores,flagged", [
    ("att = q @ k.transpose(-2, -1)", True),
    ("att = torch.matmul(q, k.transpose(-1, -2))", True),
    ("att = torch.einsum('bhqd,bhkd->bhqk', q, k)", True),
    ("att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))", False),  # nanoGPT
    ("att = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.size(-1))", False),  # the Annotated Transformer
    ("q = q * scale; att = q @ k.transpose(-2, -1)", False),  # timm folds the scale into q
    ("att = q @ k.transpose(-2, -1); att /= math.sqrt(q.shape[-1])", False),
    ("att = q @ k.transpose(-2, -1); att /= d_k", False),
    ("att = x @ w.transpose(0, 1)", False),  # a linear layer's logits, not query-key scores
])
def test_attention_scores_softmaxed_without_the_sqrt_scale_are_flagged(scores, flagged):
    code = ATTENTION.replace("SCORES", scores)
    hits = hits_of(code, "unscaled_attention_scores")
    assert bool(hits) == flagged, scores
    if flagged:
        assert hits[0].failure_mode == "exploding_gradients" and hits[0].line == line_of(code, scores)
        assert "sqrt(head_dim)" in hits[0].why and "Vaswani" in hits[0].why


def test_unscaled_attention_in_the_blind_gpt_is_flagged_and_its_fix_is_quiet():
    run = REALISTIC / "transformer_lm" / "char_gpt_unscaled_attn"
    hits = [i for i in static_scan([run / "train.py"]).issues if i.rule == "unscaled_attention_scores"]
    assert [h.line for h in hits] == [87]
    assert "unscaled_attention_scores" not in rules_in(run / "train_fixed.py")


# --- inputs and targets indexed by two random draws (char_gpt_y_offset_mismatch) --------------

GET_BATCH = '''
import torch

def get_batch(data, block_size, batch_size):
    BODY
    return x, y
'''


@pytest.mark.parametrize("body,flagged", [
    ("x = torch.stack([data[i:i + block_size] for i in torch.randint(len(data) - block_size, (batch_size,))])\n"
     "    y = torch.stack([data[i + 1:i + 1 + block_size] for i in torch.randint(len(data) - block_size, (batch_size,))])",
     True),
    ("ix = torch.randint(len(data) - block_size, (batch_size,))\n"
     "    x = torch.stack([data[i:i + block_size] for i in ix])\n"
     "    y = torch.stack([data[i + 1:i + 1 + block_size] for i in ix])", False),  # nanoGPT: one draw for both
    ("x = data[torch.randperm(len(data))[:batch_size]]\n    y = x[:, 1:]", False),
])
def test_inputs_and_targets_indexed_by_two_random_draws_are_flagged(body, flagged):
    code = GET_BATCH.replace("BODY", body)
    hits = hits_of(code, "inputs_and_targets_drawn_apart")
    assert bool(hits) == flagged
    if flagged:
        assert hits[0].failure_mode == "data_pipeline" and hits[0].line == line_of(code, "y = torch.stack")
        assert "own random draw" in hits[0].why


# --- a label statistic fitted on every row feeds the features (booking_agent_rate_leak) --------------

TARGET_ENCODING = '''
import numpy as np

def fit_rate(groups, target, m=20.0):
    keys, inv = np.unique(groups, return_inverse=True)
    prior = target.mean()
    return dict(zip(keys, (np.bincount(inv, weights=target) + m * prior) / (np.bincount(inv) + m))), prior

def load(df):
    y = df["is_canceled"].astype(np.float32)
    tr, va = train_val_split(len(y))
    FIT
    rate = np.array([table.get(a, prior) for a in df["agent"]])
    X = np.column_stack([df["lead_time"], rate])
    return X[tr], y[tr], X[va], y[va]
'''


@pytest.mark.parametrize("fit,flagged", [
    ('table, prior = fit_rate(df["agent"], y)', True),                  # every row's label, validation included
    ('table, prior = fit_rate(df["agent"][tr], y[tr])', False),         # the training rows only
    ('table, prior = fit_rate(df["agent"], df["agent_tier"])', False),  # no label in it
    ('weights = np.bincount(y.astype(int)); table, prior = {}, 0.5', False),  # class weights: not a feature
])
def test_a_label_statistic_fitted_on_all_rows_and_fed_to_the_features_is_leakage(fit, flagged):
    code = TARGET_ENCODING.replace("FIT", fit)
    hits = hits_of(code, "label_statistic_in_features")
    assert bool(hits) == flagged, hits
    if flagged:
        assert hits[0].failure_mode == "data_leakage" and hits[0].line == line_of(code, "table, prior = fit_rate")
        assert "fitted on all of `y`" in hits[0].why and "features `X`" in hits[0].why


def test_a_fit_on_all_labels_in_a_function_that_never_splits_is_not_flagged():
    # without a split in sight, the rows may all be training rows (a held-out file read elsewhere)
    code = TARGET_ENCODING.replace("    tr, va = train_val_split(len(y))\n", "").replace(
        "FIT", 'table, prior = fit_rate(df["agent"], y)').replace("X[tr], y[tr], X[va], y[va]", "X, y")
    assert hits_of(code, "label_statistic_in_features") == []


# --- the features' rows dropped or re-ordered, the labels' not (turbine_vib_dropna_shift, features_shuffled_...) ---

ROWS = '''
import numpy as np

def drop_incomplete(X):
    keep = ~np.isnan(X).any(axis=1)
    return X[keep]

def split(X, y, seed):
    idx = np.random.default_rng(seed).permutation(len(X))
    return (X[idx[100:]], y[idx[100:]]), (X[idx[:100]], y[idx[:100]])

def load(path):
    X, y = read_table(path)
    MOVE
    return split(X, y, 0)
'''


@pytest.mark.parametrize("move,flagged", [
    ("X = drop_incomplete(X)", True),                            # a filter of this file, on X only
    ("X = X[~np.isnan(X).any(1)]", True),                          # the same filter inline
    ("order = np.argsort(X[:, 0]); X = X[order]", True),          # a sort of X only
    ("X = X.dropna()", True),                                      # a pandas filter
    ("np.random.shuffle(X)", True),                                # shuffled in place
    ("keep = ~np.isnan(X).any(1); X, y = X[keep], y[keep]", False),  # both filtered
    ("keep = ~np.isnan(X).any(1); X = X[keep]; y = y[keep]", False),
    ("order = np.argsort(X[:, 0]); X = X[order]; y = [y[i] for i in order]", False),  # labels rebuilt in order
    ("X = X[:, [0, 2, 3]]", False),                                # columns, not rows
    ("X = X[:5000]", False),                                       # truncation from the start keeps pairs
    ("X = X[FEATURES]", False),                                    # a list of column names
    ("y = y[np.argsort(y)]", False),                               # labels moved alone: not this rule
])
def test_rows_of_the_features_moved_apart_from_the_labels(move, flagged):
    code = ROWS.replace("MOVE", move.replace("; ", "\n    "))
    hits = hits_of(code, "rows_moved_apart_from_labels")
    assert bool(hits) == flagged, hits
    if flagged:
        assert hits[0].failure_mode == "data_pipeline" and hits[0].confidence >= 0.5
        assert "`y`" in hits[0].why and f"line {line_of(code, 'return split(X, y, 0)')} pairs them" in hits[0].why


def test_rows_moved_then_realigned_where_they_are_paired_are_not_flagged():
    code = ROWS.replace("MOVE", "order = np.argsort(X[:, 0])\n    X = X[order]").replace(
        "return split(X, y, 0)", "return split(X, y[order], 0)")
    assert hits_of(code, "rows_moved_apart_from_labels") == []


def test_sorted_features_sliced_beside_unsorted_labels_are_flagged():
    code = '''
import torch

def prepare(cut):
    ts, features, labels = load_snapshots()
    order = torch.argsort(ts)
    ts, features = ts[order], features[order]
    x_tr, x_va = features[:cut], features[cut:]
    y_tr, y_va = labels[:cut], labels[cut:]
    return x_tr, y_tr, x_va, y_va
'''
    hits = hits_of(code, "rows_moved_apart_from_labels")
    assert [h.line for h in hits] == [line_of(code, "ts, features = ts[order]")]
    assert "`labels`" in hits[0].why


@pytest.mark.parametrize("run,rule", [
    ("tabular/turbine_vib_dropna_shift", "rows_moved_apart_from_labels"),
    ("tabular/features_shuffled_labels_not", "rows_moved_apart_from_labels"),
    ("rnn_seq/syslog_gru_bucket_labels", "rows_moved_apart_from_labels"),
    ("tabular/netflow_shuffle_twice", "rows_moved_apart_from_labels"),
    ("cnn_bn/bracket_orientation_flip_aug", "label_changing_augmentation"),
    ("cnn_bn/arrow_signs_hflip_aug", "label_changing_augmentation"),
    ("autoencoder/spectra_vae_beta_lerp", "kl_weight_grows_past_its_end"),
    ("tabular/pump_maint_inner_join", "rows_moved_apart_from_labels"),
    ("autoencoder/identicon_vae_pixel_logvar", "unbounded_decoder_variance"),
    ("cnn_bn/sevenseg_hex_reader", "label_changing_augmentation"),
    ("cnn_bn/road_arrow_marking_flip", "label_changing_augmentation"),
    ("rnn_seq/har_accel_gru_packed", "rows_moved_apart_from_labels"),
])
def test_the_label_pairing_rules_fire_on_their_dev_bugs_and_not_on_their_fixes(run, rule):
    for script, flagged in (("train.py", True), ("train_fixed.py", False)):
        report = static_scan([EXAMPLES / "realistic" / run / script])
        hits = [i for i in report.issues if i.rule == rule]
        assert bool(hits) == flagged, (script, hits)


# --- a random flip / rotation that turns one class into another (bracket_orientation_flip_aug, arrow_signs_...) ---

AUG = '''
import torch
CLASSES = NAMES

class Crops(torch.utils.data.Dataset):
    def __getitem__(self, i):
        x, y = self.X[i], self.y[i]
        if torch.rand(1).item() < 0.5:
            x = AUGMENT
        REMAP
        return x, y

train_set = Crops()
'''


@pytest.mark.parametrize("names,augment,remap,flagged", [
    ('["up", "right", "down", "left"]', "torch.flip(x, dims=[-1])", "", True),       # a mirror turns left into right
    ('["up", "down", "ring"]', "torch.flip(x, dims=[-2])", "", True),                  # a vertical flip: up <-> down
    ('["scratch_h", "scratch_v", "ring"]', "torch.rot90(x, 1, dims=(1, 2))", "", True),  # a rotation: h <-> v
    ('["up", "down", "ring"]', "torch.flip(x, dims=[-1])", "", False),                 # up/down survive a mirror
    ('["blob", "ring", "square"]', "torch.rot90(x, 1, dims=(1, 2))", "", False),       # symmetric classes
    ('["left", "right"]', "torch.flip(x, dims=[-1])", "y = 1 - y", False),             # the label follows the image
    # characters (dev sevenseg_hex_reader: a flip turns b into d, 2 into 5 on seven segments)
    ('["0", "1", "2", "3", "A", "b", "C", "d"]', "torch.flip(x, dims=[-1])", "", True),
    ('["1", "2", "3", "4"]', "torch.rot90(x, 2, dims=(1, 2))", "", True),  # no known pair: text is not invariant
    ('["c", "o", "x", "l"]', "torch.flip(x, dims=[-1])", "y = MIRROR[y]", False),
])
def test_an_augmentation_that_maps_one_class_onto_another(names, augment, remap, flagged):
    code = AUG.replace("NAMES", names).replace("AUGMENT", augment).replace("REMAP", remap)
    hits = hits_of(code, "label_changing_augmentation")
    assert bool(hits) == flagged, hits
    if flagged:
        assert hits[0].failure_mode == "data_pipeline" and hits[0].line == line_of(code, "x = torch.")


@pytest.mark.parametrize("names,flagged", [
    ('ARROWS = ["left", "right", "straight", "straight_left", "straight_right"]', True),  # dev road_arrow_marking_flip
    ('SIDES = ["left", "right"]', False),               # two options, not a set of classes
    ('KINDS = ["ring", "blob", "square"]', False),      # no mirror pair among them
    ('PATHS = ["data/left", "data/right", "x"]', False),  # paths, not names
])
def test_class_names_in_a_list_named_otherwise_count_when_they_name_both_sides_of_a_mirror(names, flagged):
    code = AUG.replace("CLASSES = NAMES", names).replace("AUGMENT", "torch.flip(x, dims=[-1])").replace("REMAP", "")
    assert bool(hits_of(code, "label_changing_augmentation")) == flagged


def test_a_flip_whose_probability_defaults_to_zero_is_not_applied():
    """Dev sevenseg_hex_reader's fix: RandomCropFlip(flip_p=0.0) by default, built as RandomCropFlip()."""
    code = '''
import random
CLASSES = ("0", "1", "2", "3", "4", "5", "b", "d")

class RandomCropFlip:
    def __init__(self, pad=2, flip_p=P):
        self.pad, self.flip_p = pad, flip_p
        self.p = flip_p

    def __call__(self, x):
        if random.random() < self.p:
            x = x.flip(-1)
        return x

train_tf = RandomCropFlip(BUILT)
'''
    def fired(p, built=""):
        return bool(hits_of(code.replace("P", p).replace("BUILT", built), "label_changing_augmentation"))

    assert fired("0.5") and not fired("0.0") and not fired("0")
    assert fired("0.0", "flip_p=0.5") and fired("0.0", "2, 0.5")  # built with a probability: applied


def test_a_transform_written_but_not_applied_and_a_synthesis_by_label_are_not_flagged():
    unused = '''
import torch
CLASSES = ["left", "right"]

class RandomHorizontalFlip:
    def __call__(self, x):
        return x.flip(-1) if torch.rand(1) < 0.5 else x

train_tf = Compose([RandomShift(2)])
'''
    assert hits_of(unused, "label_changing_augmentation") == []
    applied = unused.replace("Compose([RandomShift(2)])", "Compose([RandomShift(2), RandomHorizontalFlip()])")
    assert [h.line for h in hits_of(applied, "label_changing_augmentation")] == [line_of(applied, "RandomHorizontalFlip()])")]
    synth = '''
import numpy as np
CLASSES = ["up", "right", "down", "left"]

def make_image(label):
    return np.rot90(base(), k=-label)
'''
    assert hits_of(synth, "label_changing_augmentation") == []

@pytest.mark.parametrize("xdef,ydef,flagged", [
    ('X = df[FEATURES].dropna()', 'y = df["label"]', True),                       # rows dropped for X only
    ('X = df[df.age > 0][FEATURES].values', 'y = df["label"].values', True),      # a filter for X only
    ('X = df[FEATURES].dropna()', 'y = df.dropna(subset=FEATURES)["label"]', False),  # the same rows for both
    ('X = df[FEATURES].fillna(0)', 'y = df["label"]', False),                      # no row dropped
    ('X = df.loc[df.ok, FEATURES]', 'y = df.loc[df.ok, "label"]', False),
    ('X = df[FEATURES]', 'y = df["label"]', False),
])
def test_two_columns_of_one_table_with_rows_dropped_from_one(xdef, ydef, flagged):
    code = ("def load(path):\n    df = read_csv(path)\n    " + xdef + "\n    " + ydef
            + "\n    return train_test_split(X, y, test_size=0.2)\n")
    hits = hits_of(code, "rows_moved_apart_from_labels")
    assert bool(hits) == flagged, hits
    if flagged:
        assert hits[0].line == 3 and "`df`" in hits[0].why and "line 5 pairs the two" in hits[0].why


@pytest.mark.parametrize("move,flagged", [
    ("rng.shuffle(X); rng.shuffle(y)", True),                                     # two draws, two orders
    ("X = X[rng.permutation(len(X))]; y = y[rng.permutation(len(y))]", True),
    ("np.random.seed(0); np.random.shuffle(X); np.random.seed(0); np.random.shuffle(y)", False),  # re-seeded
    ("perm = rng.permutation(len(X)); X = X[perm]; y = y[perm]", False),           # one draw for both
])
def test_features_and_labels_shuffled_by_two_separate_draws(move, flagged):
    code = ROWS.replace("MOVE", "rng = np.random.default_rng(0); " + move).replace("; ", "\n    ")
    assert bool(hits_of(code, "rows_moved_apart_from_labels")) == flagged


def test_sequences_sorted_for_bucketing_while_labels_keep_file_order():
    code = '''
def bucket_batches(seqs, labels, batch_size):
    seqs = sorted(seqs, key=len)
    out = []
    for start in range(0, len(seqs), batch_size):
        x = pad(seqs[start:start + batch_size])
        y = torch.tensor(labels[start:start + batch_size])
        out.append((x, y))
    return out
'''
    hits = hits_of(code, "rows_moved_apart_from_labels")
    assert [h.line for h in hits] == [line_of(code, "seqs = sorted(seqs")]
    fixed = code.replace("seqs = sorted(seqs, key=len)",
                         "order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))\n"
                         "    seqs = [seqs[i] for i in order]\n    labels = [labels[i] for i in order]")
    assert hits_of(fixed, "rows_moved_apart_from_labels") == []


def test_a_collate_that_sorts_sequences_for_packing_and_not_their_labels_is_flagged():
    """Blind dev har_accel_gru_packed: the collate sorts sequences and lengths for pack_padded_sequence, converts
    the labels to a tensor and returns them in arrival order. The pairing runs through `padded`, built from the
    sorted sequences; the conversion of the labels is not a re-order of them."""
    code = '''
def pad_collate(batch):
    seqs, labels = zip(*batch)
    lengths = torch.tensor([s.shape[0] for s in seqs])
    labels = torch.tensor(labels)
    lengths, order = lengths.sort(descending=True)
    seqs = [seqs[i] for i in order]
    padded = nn.utils.rnn.pad_sequence(seqs, batch_first=True)
    return padded, lengths, labels
'''
    hits = hits_of(code, "rows_moved_apart_from_labels")
    assert [h.line for h in hits] == [line_of(code, "seqs = [seqs[i] for i in order]")]
    assert "`labels`" in hits[0].why
    fixed = code.replace("    padded =", "    labels = labels[order]\n    padded =")
    assert hits_of(fixed, "rows_moved_apart_from_labels") == []
    in_order = code.replace("for i in order]", "for i in range(len(seqs))]")
    assert hits_of(in_order, "rows_moved_apart_from_labels") == []
    only_counted = code.replace("padded = nn.utils.rnn.pad_sequence(seqs, batch_first=True)", "padded = len(seqs)")
    assert hits_of(only_counted, "rows_moved_apart_from_labels") == []


# --- a KL weight ramped with no cap (dev spectra_vae_beta_lerp: beta reaches 20 by the last epoch) ---

RAMP = """
import torch

class LinearBetaSchedule:
    def __init__(self, beta_start, beta_end, anneal_steps):
        self.beta_start, self.beta_end, self.anneal_steps = beta_start, beta_end, anneal_steps

    def __call__(self, step):
        frac = FRAC
        return self.beta_start + (self.beta_end - self.beta_start) * frac

def train(model, loader, epochs, warmup_epochs):
    for epoch in range(epochs):
        kl_weight = LOOP
        for x in loader:
            recon, kl = model(x)
            kld = kl.sum() / x.size(0)
            loss = recon + kl_weight * kld
"""


@pytest.mark.parametrize("frac,loop,fires", [
    ("step / self.anneal_steps", "1.0", [10]),
    ("min(1.0, step / self.anneal_steps)", "1.0", []),  # capped
    ("step / self.anneal_steps if step < self.anneal_steps else 1.0", "1.0", []),  # ends by a comparison
    ("1.0", "epoch / warmup_epochs", [14]),  # a ramp written in the loop
    ("1.0", "min(1.0, epoch / warmup_epochs)", []),
    ("1.0", "(epoch % 4) / 4", []),  # cyclical annealing (Fu et al. 2019): a constant numerator is no step count
])
def test_a_kl_weight_ramped_without_a_cap_is_flagged_and_a_capped_or_cyclical_one_is_not(frac, loop, fires):
    code = RAMP.replace("FRAC", frac).replace("LOOP", loop)
    assert [h.line for h in hits_of(code, "kl_weight_grows_past_its_end")] == fires
    # the KL divided by the batch size and an LR warm-up written the same way are no KL weight ramp
    lr = code.replace("kl_weight", "lr_scale").replace("LinearBetaSchedule", "LinearWarmup")
    assert hits_of(lr, "kl_weight_grows_past_its_end") == []


JOINED = """
import pandas as pd

def load(sensors, maintenance):
    LABEL_LINE
    merged = pd.merge(sensors, maintenance, on="asset_id", how="inner")
    X = merged[FEATURES].to_numpy()
    FIXED_LINE
    return X, y
"""


@pytest.mark.parametrize("label,fixed,fires", [
    ('y = sensors.pop("failed").to_numpy()', "", True),  # labels in the left table's order, features in the join's
    ('y = sensors["failed"].to_numpy()', "", True),
    ("", 'y = merged["failed"].to_numpy()', False),  # the label comes through the join with its row
    ('y = sensors.pop("failed").to_numpy()', 'y = merged["failed"].to_numpy()', False),  # taken again after it
])
def test_labels_taken_before_a_join_and_paired_with_its_rows_are_flagged(label, fixed, fires):
    """Dev pump_maint_inner_join: an inner join drops 212 of 1500 pumps and re-sorts the rest by id; the labels
    popped before it keep the sensor file's order, so validation F1 stays 0."""
    code = JOINED.replace("LABEL_LINE", label or "pass").replace("FIXED_LINE", fixed or "pass")
    hits = hits_of(code, "rows_moved_apart_from_labels")
    assert [h.line for h in hits] == ([line_of(code, "pd.merge")] if fires else [])


GAUSS_DECODER = """
import torch
from torch import nn

class VAE(nn.Module):
    def decode(self, z):
        h = self.dec(z)
        mean = torch.sigmoid(self.dec_mean(h))
        logvar = HEAD
        return mean, logvar

    def encode(self, x):
        h = self.enc(x)
        logvar = self.enc_logvar(h)
        return self.enc_mu(h), logvar

def neg_elbo(model, x):
    x_mean, x_logvar, mu, logvar = model(x)
    nll = 0.5 * (x_logvar + (x - x_mean) ** 2 * torch.exp(-x_logvar))
    return nll.sum(1).mean()
"""


@pytest.mark.parametrize("head,fires", [
    ("self.dec_logvar(h)", True),
    ("-6.0 + torch.nn.functional.softplus(self.dec_logvar(h) + 6.0)", False),  # the dev run's fix
    ("self.dec_logvar(h).clamp(min=-6)", False),
])
def test_a_decoder_log_variance_straight_from_a_layer_is_flagged_in_a_gaussian_likelihood(head, fires):
    """Dev identicon_vae_pixel_logvar: background pixels are reconstructed exactly, the decoder's log-variance runs
    from -8 to -83 in 3 epochs and the loss is NaN from epoch 6. The encoder's log-variance sits in the KL: not it."""
    code = GAUSS_DECODER.replace("HEAD", head)
    assert [h.line for h in hits_of(code, "unbounded_decoder_variance")] == (
        [line_of(code, "logvar = " + head.split("(")[0][:12])] if fires else [])
    # no Gaussian likelihood scaled by exp(-logvar): a log-variance head alone is no finding
    assert hits_of(code.replace("torch.exp(-x_logvar)", "1.0"), "unbounded_decoder_variance") == []


NANOGPT_LAMBDA = """
import math, torch
learning_rate, min_lr, warmup_iters, lr_decay_iters = 1e-3, 1e-4, 60, 800

def get_lr(it):
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    coeff = 0.5 * (1.0 + math.cos(math.pi * min(1.0, (it - warmup_iters) / (lr_decay_iters - warmup_iters))))
    return min_lr + coeff * (learning_rate - min_lr)

def make_scheduler(optimizer):
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda=get_lr)

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
scheduler = make_scheduler(optimizer)
"""


def test_a_learning_rate_handed_to_lambda_lr_as_its_factor_squares_the_lr():
    """Blind dev pantry_notes_char_gpt: nanoGPT's get_lr (absolute LRs) given to LambdaLR, which multiplies the
    optimizer's LR by it: peak 1e-3 became 1e-6 and the loss went 3.64 -> 3.54. The fix divides by the base LR."""
    (hit,) = [i for i in scan_source(NANOGPT_LAMBDA, "train.py") if i.rule == "learning_rate_as_lambda_factor"]
    assert hit.failure_mode == "lr_too_low" and hit.line == line_of(NANOGPT_LAMBDA, "LambdaLR(optimizer")
    assert "squared" in hit.why and "factor" in hit.fix
    assert scan(NANOGPT_LAMBDA.replace("lr_lambda=get_lr", "lr_lambda=lambda it: get_lr(it) / learning_rate")) == []
    assert scan(NANOGPT_LAMBDA.replace("lr=learning_rate)", "lr=1.0)")) == []  # then absolute LRs are right
    # a factor-valued lambda (the usual warmup) is fine; one built from the LR is the same bug
    assert scan(NANOGPT_LAMBDA.replace("lr_lambda=get_lr", "lr_lambda=lambda it: min(1.0, (it + 1) / warmup_iters)")) == []
    assert "learning_rate_as_lambda_factor" in scan(
        NANOGPT_LAMBDA.replace("lr_lambda=get_lr", "lr_lambda=lambda it: learning_rate * min(1.0, it / warmup_iters)"))
    # the LR read from a config object (blind dev signal_cnn1d_adamw_warmup_cosine: cfg.lr, in a nested lr_lambda)
    cfg = NANOGPT_LAMBDA.replace("learning_rate, min_lr, warmup_iters, lr_decay_iters = 1e-3, 1e-4, 60, 800",
                                 "class cfg:\n    lr = 1e-3\nmin_lr, warmup_iters, lr_decay_iters = 1e-4, 60, 800"
                                 ).replace("learning_rate", "cfg.lr")
    assert "learning_rate_as_lambda_factor" in scan(cfg), cfg
    assert scan(cfg.replace("lr_lambda=get_lr", "lr_lambda=lambda it: get_lr(it) / cfg.lr")) == []
    assert scan(cfg.replace("lr=cfg.lr)", "lr=1.0)")) == []


GRU_FORECASTER = """
import torch, torch.nn as nn, torch.nn.functional as F

class Forecaster(nn.Module):
    def __init__(self, hidden=32, dropout=0.3):
        super().__init__()
        self.gru, self.head, self.dropout = nn.GRU(4, hidden, batch_first=True), nn.Linear(hidden, 1), dropout

    def forward(self, x):
        _, h = self.gru(x)
        h = F.dropout(h[-1], p=self.dropout)
        return self.head(h)
"""


def test_functional_dropout_without_the_modules_mode_stays_on_at_eval():
    """Blind dev sensor_forecast_gru_packed: F.dropout(h, p=self.dropout) in forward; training defaults to True, so
    model.eval() leaves it on and validation is noisy (val_mse 0.141 against 0.121 fixed)."""
    (hit,) = [i for i in scan_source(GRU_FORECASTER, "train.py") if i.rule == "functional_dropout_always_on"]
    assert hit.failure_mode == "train_eval_mode" and hit.line == line_of(GRU_FORECASTER, "F.dropout(")
    assert "training=self.training" in hit.fix
    assert scan(GRU_FORECASTER.replace("p=self.dropout)", "p=self.dropout, training=self.training)")) == []
    assert scan(GRU_FORECASTER.replace("p=self.dropout)", "self.dropout, self.training)")) == []
    assert scan(GRU_FORECASTER.replace("p=self.dropout)", "p=self.dropout, training=True)")) == []  # MC dropout
    # a bare augmentation function (called from the training loop only) is not a module's forward
    assert scan("import torch.nn.functional as F\ndef augment(x):\n    return F.dropout(x, 0.1)\n") == []


GRADUAL_UNFREEZE = textwrap.dedent("""
    import torch
    import torch.nn.functional as F

    def set_trainable(model, prefixes, flag=True):
        for name, p in model.named_parameters():
            if name.startswith(prefixes):
                p.requires_grad = flag

    def make_optimizer(params):
        trainable = [p for p in params if p.requires_grad]
        return torch.optim.AdamW(trainable, lr=1e-3)

    def finetune(model, loader):
        for p in model.encoder.parameters():
            p.requires_grad = False
        optimizer = make_optimizer(model.parameters())
        for epoch in range(6):
            if epoch == 1:
                set_trainable(model, ("encoder.layers.1",))
            for x, y in loader:
                loss = F.cross_entropy(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
""")


def test_an_optimizer_built_before_gradual_unfreezing_never_steps_the_unfrozen_layers():
    """Blind dev token_encoder_gradual_unfreeze: the optimizer kept only the parameters trainable when it was built
    (the head); the encoder unfrozen at epochs 1 and 2 got gradients and never moved."""
    (hit,) = [i for i in scan_source(GRADUAL_UNFREEZE, "train.py") if i.rule == "optimizer_built_before_unfreeze"]
    assert hit.failure_mode == "frozen_params" and hit.line == line_of(GRADUAL_UNFREEZE, "trainable = [p")
    assert "add_param_group" in hit.fix and "line 20" in hit.why
    rule = "optimizer_built_before_unfreeze"
    # every parameter handed over up front; the new ones added at the unfreeze; the optimizer rebuilt there
    assert rule not in scan(GRADUAL_UNFREEZE.replace("[p for p in params if p.requires_grad]", "list(params)"))
    assert rule not in scan(GRADUAL_UNFREEZE.replace(
        'set_trainable(model, ("encoder.layers.1",))',
        'set_trainable(model, ("encoder.layers.1",)); optimizer.add_param_group({"params": model.encoder.parameters()})'))
    assert rule not in scan(GRADUAL_UNFREEZE.replace(
        'set_trainable(model, ("encoder.layers.1",))',
        'set_trainable(model, ("encoder.layers.1",)); optimizer = make_optimizer(model.parameters())'))
    # freeze the backbone, unfreeze the head, then build the optimizer: the usual correct order
    assert rule not in scan(GRADUAL_UNFREEZE.replace('        if epoch == 1:\n            set_trainable(model, ("encoder.layers.1",))\n', "")
                            .replace("    optimizer = make_optimizer", "    set_trainable(model, ('head',))\n    optimizer = make_optimizer"))
    # a call that freezes more in the loop is not an unfreeze
    assert rule not in scan(GRADUAL_UNFREEZE.replace('("encoder.layers.1",))', '("encoder.layers.1",), False)'))


DENOISER = textwrap.dedent("""
    import torch
    import torch.nn.functional as F

    def corrupt(x, std=0.3):
        return x + std * torch.randn_like(x)

    def loss_fn(model, batch):
        (x,) = batch
        x_noisy = corrupt(x)
        recon = model(x_noisy)
        return F.mse_loss(recon, x_noisy)
""")


def test_a_denoising_autoencoder_scored_against_its_noisy_input_learns_the_identity():
    """Blind dev conv1d_denoising_ae_vibration: F.mse_loss(recon, x_noisy) - training loss 0.0015 while the error
    against the clean signal settled exactly at the noise variance (read `overfitting` 0.7 before)."""
    (hit,) = [i for i in scan_source(DENOISER, "train.py") if i.rule == "denoising_target_is_corrupted"]
    assert hit.failure_mode == "loss_function" and hit.line == line_of(DENOISER, "F.mse_loss(")
    assert "`x_noisy`" in hit.why and "`x`" in hit.why
    rule = "denoising_target_is_corrupted"
    assert rule not in scan(DENOISER.replace("F.mse_loss(recon, x_noisy)", "F.mse_loss(recon, x)"))  # the fix
    assert rule not in scan(DENOISER.replace("x_noisy = corrupt(x)", "x_noisy = x"))  # a plain autoencoder
    inline = DENOISER.replace("x_noisy = corrupt(x)", "x_noisy = x + 0.1 * torch.randn_like(x)")
    assert rule in scan(inline) and rule not in scan(inline.replace("F.mse_loss(recon, x_noisy)", "F.mse_loss(recon, x)"))


def test_requires_grad_assigned_on_a_module_changes_no_parameter():
    """Blind dev imu_encoder_staged_thaw: `getattr(model.encoder, name).requires_grad = True` sets a plain attribute
    on the module; the log prints "Unfreezing encoder.block3" and the encoder never trains."""
    code = textwrap.dedent("""
        def thaw(model, names):
            for name in names:
                getattr(model.encoder, name).requires_grad = True
            model.head.requires_grad = True
    """)
    hits = [i for i in scan_source(code, "train.py") if i.rule == "requires_grad_set_on_module"]
    assert [h.line for h in hits] == [4, 5] and hits[0].failure_mode == "frozen_params"
    assert "requires_grad_(" in hits[0].fix
    rule = "requires_grad_set_on_module"
    # parameters: a loop variable, a .weight, a named parameter, an indexed list of tensors
    assert rule not in scan("for p in model.parameters():\n    p.requires_grad = True\n")
    assert rule not in scan("model.fc.weight.requires_grad = False\nmodel.fc.bias.requires_grad = False\n")
    assert rule not in scan("self.pos_param.requires_grad = False\nparams[0].requires_grad = True\n")
    assert rule not in scan("getattr(model.encoder, name).requires_grad_(True)\n")


PLATEAU = """
import torch

def make_scheduler(optimizer):
    return torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, MODE factor=0.5, patience=2)

def main():
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    scheduler = make_scheduler(opt)
    for epoch in range(10):
        val_loss, val_acc = evaluate(model)
        scheduler.step(METRIC)
"""


def test_a_plateau_scheduler_watching_its_metric_the_wrong_way_is_lr_too_low():
    """ReduceLROnPlateau in mode 'max' stepped with a loss (or 'min', the default, with an accuracy) reads every
    improving epoch as a plateau and cuts the LR every `patience` epochs (PyTorch ReduceLROnPlateau docs)."""
    def plateau(mode, metric):
        return PLATEAU.replace("MODE", mode).replace("METRIC", metric)

    (hit,) = [i for i in scan_source(plateau("mode='max',", "val_loss"), "train.py")
              if i.rule == "plateau_mode_against_metric"]
    assert hit.failure_mode == "lr_too_low" and hit.line == line_of(PLATEAU, "scheduler.step(")
    assert "mode 'max'" in hit.why and "`val_loss`, a loss" in hit.why and "mode='min' for a loss" in hit.fix
    assert "plateau_mode_against_metric" in scan(plateau("", "val_acc"))  # the default mode is 'min'
    assert "plateau_mode_against_metric" in scan(plateau("'max',", "metrics['val_loss']"))  # positional mode
    assert scan(plateau("", "val_loss")) == [] and scan(plateau("mode='max',", "val_acc")) == []
    assert scan(plateau("mode=MODE_NAME,", "val_loss")) == []  # a mode the scan cannot read is not judged
    assert scan(plateau("mode='max',", "score_or_loss")) == []  # a name that says both is not judged
    both = plateau("mode='max',", "val_loss") + "\nother = torch.optim.lr_scheduler.ReduceLROnPlateau(opt)\n"
    assert scan(both) == []  # two plateau schedulers in two modes: which step is whose is not read


def test_layout_reshapes_finds_the_reshape_that_cut_the_windows_and_nothing_the_model_does():
    from tools.static_scan import layout_reshapes

    code = textwrap.dedent("""
        import numpy as np
        from torch import nn

        def windows(stream, n, L):
            return stream.reshape(n, stream.shape[1], L)

        def moved(stream, n, L):
            return stream.reshape(n, L, stream.shape[1]).transpose(0, 2, 1)

        def flat(x):
            return np.reshape(x, (len(x), -1))

        class Net(nn.Module):
            def forward(self, x):
                return x.view(x.size(0), 4, -1)
    """)
    assert layout_reshapes(code, 3) == [(6, "stream.reshape(n, stream.shape[1], L)")]
    assert layout_reshapes(code, 2) == [(12, "np.reshape(x, (len(x), -1))")]
    assert layout_reshapes("def broken(:", 3) == []


def test_scaler_fits_finds_where_a_standardisation_is_fitted_and_no_metric():
    from tools.static_scan import scaler_fits
    code = textwrap.dedent("""
        import numpy as np, torch
        class Net(torch.nn.Module):
            def forward(self, x):
                return x / x.std(dim=1, keepdim=True)
        def prepare(x, flat):
            mu, sd = x.mean(axis=(0, 1)), x.std(axis=(0, 1))
            return (x - mu) / sd, np.std(flat, axis=0)
        def evaluate(model, loader):
            with torch.no_grad():
                return torch.stack([model(b).var() for b in loader]).std()
        def train(model, opt, loader):
            for b in loader:
                loss = model(b).std()
                loss.backward()
                opt.step()
    """)
    assert scaler_fits(code) == [(7, "x.std(axis=(0, 1))"), (8, "np.std(flat, axis=0)")]
    assert scaler_fits("def broken(:") == []
