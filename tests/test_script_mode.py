"""Script mode: an unmodified training command, watched through torch's global hooks (sitecustomize on PYTHONPATH)."""

import shutil
import sys
import textwrap

import pytest

from conftest import EXAMPLES, run
from tools import probes as P
from tools.errors import TriageError


def write(ws, name, body):
    (ws / name).write_text(textwrap.dedent(body))
    return name


DDP_SCRIPT = """
    import os
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    for step in range(20):
        x, y = torch.randn(16, 8, generator=g), torch.rand(16, 1, generator=g)
        opt.zero_grad()
        p = torch.sigmoid(model(x))
        if rank == 1 and step == 3:
            p = p * 0                       # rank 1's probabilities collapse to exactly 0 at step 3
        loss = -(y * torch.log(p)).mean()
        loss.backward()
        opt.step()
    dist.destroy_process_group()
"""


def test_script_nan_run_names_the_log_in_the_users_loss_code(workspace):
    shutil.copy(EXAMPLES / "nan_log_zero" / "train.py", workspace / "train.py")
    rep = run(lambda: P.nan_hook_run(workspace, command=["python", "train.py", "--steps", "200"], timeout_s=120))
    assert rep.mode == "script" and rep.found, rep.text()
    assert rep.phase == "loss" and rep.op == "log" and rep.cause == "log(0)"
    assert rep.op_location.startswith("train.py:24")


HETERO_SCRIPT = """
    import torch
    from torch import nn

    torch.manual_seed(0)
    x = torch.randn(256, 6)
    y = torch.cat([x[:, :3] @ torch.randn(3, 2), torch.zeros(256, 1)], 1)  # a sensor stuck at 0


    class Hetero(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(6, 32), nn.Tanh())
            self.mu = nn.Sequential(nn.Linear(32, 3), nn.ReLU())
            self.logvar = nn.Linear(32, 3)

        def forward(self, x):
            h = self.body(x)
            return self.mu(h), self.logvar(h)


    model = Hetero()
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    for step in range(400):
        mu, logvar = model(x)
        loss = (0.5 * logvar + (y - mu) ** 2 / (2 * torch.exp(logvar))).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


def test_script_nan_of_a_likelihood_running_to_minus_inf_is_not_called_the_lr(workspace):
    # a learnt variance collapsing on a constant target (scada_hetero_ae_stuck_sensor): the loss falls without
    # limit and the gradient norm grows with it; lowering the LR only delays the NaN, the variance needs a floor
    write(workspace, "train.py", HETERO_SCRIPT)
    rep = run(lambda: P.nan_hook_run(workspace, command=["python", "train.py"], max_steps=200, timeout_s=120))
    assert rep.found and rep.cause == "loss unbounded below", rep.text()
    assert len(rep.loss_history) >= 8 and rep.loss_history[-1] < rep.loss_history[0] < 0
    assert [f.failure_mode for f in rep.findings] == ["nan_inf"] and rep.findings[0].confidence >= 0.85
    assert "logvar.clamp" in rep.findings[0].fix


def test_unbounded_below_needs_a_negative_loss_still_falling():
    assert P.unbounded_below([-10.0 - i for i in range(20)])
    assert not P.unbounded_below([1.0 + i for i in range(20)])  # a divergence raises the loss
    assert not P.unbounded_below([-10.0] * 20)  # a settled negative NLL
    assert not P.unbounded_below([-10.0, -11.0, -12.0])  # too few to tell


def test_a_norm_in_the_hundreds_is_the_lrs_sign_only_against_a_small_loss():
    """A VAE loss summed over pixels (~450 nats) has a steady norm of 300-500 from its first step (dev
    pv_profile_vae_logvar_nan, sevenseg_vae_kl_anneal): a NaN after it is not the LR's, whatever op it hit.
    The same norms against a loss of 2 are."""
    norms = [310.0, 420.0, 290.0, 300.0, 350.0, 520.0, 280.0, 260.0]
    assert P.nan_cause("mul", [], "loss", norms + [float("nan")], [450.0] * 8 + [float("nan")])[0] == "overflow"
    assert P.nan_cause("mul", [], "loss", norms + [float("nan")], [2.0] * 8 + [float("nan")])[0] == "lr"
    # growth of the norm itself still is, at any scale (toy lr_too_high: 14 -> 1e18 in eight steps)
    grown = [14.0, 1.5e3, 1.3e6, 1.5e9, 2.6e11]
    assert P.nan_cause("mul", [], "loss", grown, [8.4, 7e3, 6.5e7, 2e11, 3.8e14])[0] == "lr"


def test_torchrun_two_ranks_are_merged_and_the_first_rank_is_named(workspace):
    write(workspace, "ddp.py", DDP_SCRIPT)
    rep = run(lambda: P.nan_hook_run(workspace, command=["torchrun", "--nproc-per-node", "2", "ddp.py"],
                                     timeout_s=150))
    assert rep.found and rep.rank == 1 and rep.step == 3, rep.text()
    assert rep.op == "log" and rep.phase == "loss"
    assert sorted(r.rank for r in rep.ranks) == [0, 1]
    assert "rank 1 of 2" in rep.findings[0].summary


def test_script_grad_snapshot_recovers_parameter_names_and_the_detached_encoder(workspace):
    shutil.copy(EXAMPLES / "detached_graph" / "train.py", workspace / "train.py")
    rep = run(lambda: P.grad_norm_snapshot(workspace, command=["python", "train.py", "--steps", "50"], steps=2,
                                           timeout_s=120))
    assert rep.mode == "script" and rep.step == 2
    names = {p.name for p in rep.params}
    assert "encoder.0.weight" in names and "head.0.weight" in names
    f = next(f for f in rep.findings if f.failure_mode == "broken_graph")
    assert "encoder" in f.location


def test_script_grad_snapshot_notices_zero_grad_is_never_called(workspace):
    write(workspace, "acc.py", """
        import torch
        from torch import nn
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        x, y = torch.randn(64, 8), torch.randn(64, 1)
        for step in range(10):
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()          # no zero_grad: gradients pile up
            opt.step()
    """)
    rep = run(lambda: P.grad_norm_snapshot(workspace, command=["python", "acc.py"], steps=5, timeout_s=120))
    assert any(f.failure_mode == "missing_zero_grad" for f in rep.findings), rep.text()


def test_instruments_chain_to_the_users_sitecustomize_and_leave_torchless_scripts_alone(workspace, tmp_path):
    own = tmp_path / "own_site"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import os\nos.environ['USER_SITE_RAN'] = 'yes'\n")
    write(workspace, "plain.py", """
        import os, sys
        print("user site:", os.environ.get("USER_SITE_RAN"), "torch loaded:", "torch" in sys.modules)
        sys.exit(0)
    """)
    import os
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(own)
    try:
        with pytest.raises(TriageError) as e:
            run(lambda: P.nan_hook_run(workspace, command=[sys.executable, "plain.py"], timeout_s=60))
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH")
        else:
            os.environ["PYTHONPATH"] = old
    assert "before any optimizer step" in str(e.value)
    from tools.probe_runner import run_probe  # the same run, to read the script's stdout
    oc = run(lambda: run_probe("mltriage_script", {}, workspace_root=workspace, timeout_s=60,
                               env={"PYTHONPATH": f"{P.INJECT_DIR}:{own}", "MLTRIAGE_MODE": "nan"},
                               command=[sys.executable, "plain.py"]))
    assert "user site: yes torch loaded: False" in oc.stdout_tail


def test_a_script_that_crashes_before_training_is_a_clear_error(workspace):
    write(workspace, "boom.py", "import torch\nraise SystemExit('config file missing')\n")
    with pytest.raises(TriageError, match="config file missing"):
        run(lambda: P.nan_hook_run(workspace, command=["python", "boom.py"], timeout_s=60))


CLIPPED_LOOP = """
    import torch
    from torch import nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 64), nn.Tanh(), nn.Linear(64, 1))
    with torch.no_grad():
        model[2].weight.mul_(400.0)          # a huge output layer: gradients far above any clip
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x, y = torch.randn(64, 8), torch.randn(64, 1)
    for step in range(20):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
"""


def test_script_grad_norms_are_read_before_clip_grad_norm_hides_the_explosion(workspace):
    write(workspace, "clipped.py", CLIPPED_LOOP)
    rep = run(lambda: P.grad_norm_snapshot(workspace, command=["python", "clipped.py"], steps=3, timeout_s=120))
    assert rep.clipped is True
    assert rep.global_grad_norm > 10, rep.text()  # after the clip it would be 1.0
    assert all(g > 10 for g in rep.grad_norm_history), rep.grad_norm_history
    assert any(f.failure_mode == "exploding_gradients" for f in rep.findings), rep.text()


def test_zero_grad_between_backward_and_step_is_named_as_the_call_order_not_a_cut_graph(workspace):
    write(workspace, "order.py", """
        import torch
        from torch import nn
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x, y = torch.randn(64, 8), torch.randn(64, 1)
        for step in range(20):
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            opt.zero_grad()          # wipes the gradients the next line needs
            opt.step()
    """)
    rep = run(lambda: P.grad_norm_snapshot(workspace, command=["python", "order.py"], steps=3, timeout_s=120))
    modes = [f.failure_mode for f in rep.findings]
    assert modes[0] == "missing_zero_grad" and "broken_graph" not in modes, rep.text()
    assert "after backward() and before optimizer.step()" in rep.findings[0].summary


def test_a_script_that_crashes_on_its_second_batch_is_a_finding_with_the_frame(workspace):
    write(workspace, "crash.py", """
        import torch
        from torch import nn
        model = nn.Linear(8, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        batches = [torch.randn(16, 8), torch.randn(16, 7)]   # the second batch lost a feature
        for x in batches:
            opt.zero_grad()
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
    """)
    rep = run(lambda: P.nan_hook_run(workspace, command=["python", "crash.py"], max_steps=20, timeout_s=120))
    top = rep.findings[0]
    assert top.failure_mode == "shape_mismatch" and top.confidence >= 0.9, rep.text()
    assert "mat1 and mat2" in top.summary and "crash.py:9" in top.location


def test_a_model_left_in_eval_mode_by_the_loop_is_seen_in_script_mode(workspace):
    write(workspace, "evalmode.py", """
        import torch
        from torch import nn
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 1))
        opt = torch.optim.SGD(model.parameters(), lr=1e-2)
        x, y = torch.randn(64, 8), torch.randn(64, 1)
        model.eval()
        for step in range(10):
            opt.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
    """)
    rep = run(lambda: P.grad_norm_snapshot(workspace, command=["python", "evalmode.py"], steps=3, timeout_s=120))
    f = next(f for f in rep.findings if f.failure_mode == "train_eval_mode")
    assert f.confidence >= 0.9, rep.text()


def test_an_evaluate_that_leaves_eval_mode_on_is_named_at_the_first_step_it_affects(workspace):
    write(workspace, "validate.py", """
        import torch
        from torch import nn
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 1))
        opt = torch.optim.SGD(model.parameters(), lr=1e-2)
        x, y = torch.randn(64, 8), torch.randn(64, 1)

        def validate():
            model.eval()                  # never switched back
            with torch.no_grad():
                return ((model(x) - y) ** 2).mean().item()

        model.train()
        for epoch in range(3):
            for step in range(5):
                opt.zero_grad()
                loss = ((model(x) - y) ** 2).mean()
                loss.backward()
                opt.step()
            validate()
    """)
    rep = run(lambda: P.nan_hook_run(workspace, command=["python", "validate.py"], max_steps=12, timeout_s=120))
    f = rep.findings[0]
    assert f.failure_mode == "train_eval_mode" and f.confidence >= 0.9, rep.text()
    assert "optimizer step 6" in f.summary


def test_an_inplace_relu_model_trained_with_a_loss_module_runs_under_the_nan_hooks(workspace):
    """Dev sevenseg_hex_reader: conv-BN-ReLU(inplace=True) blocks and nn.CrossEntropyLoss() called as a module. The
    global backward hook is kept off for a model with in-place modules; the loss module, a later root without one,
    brought it back, and the script 'crashed' on its second step inside our own hook (a false `exception`)."""
    write(workspace, "inplace.py", """
        import torch
        from torch import nn
        torch.manual_seed(0)
        model = nn.Sequential(nn.Conv2d(1, 8, 3), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
                              nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))
        criterion = nn.CrossEntropyLoss()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(6):
            x, y = torch.randn(16, 1, 12, 12), torch.randint(0, 4, (16,))
            opt.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            opt.step()
    """)
    rep = run(lambda: P.nan_hook_run(workspace, command=["python", "inplace.py"], max_steps=5, timeout_s=120))
    assert not rep.error and rep.steps_run == 5 and not rep.findings, rep.text()
