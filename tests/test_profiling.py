"""profile_steps: a loop that calls .item() and print(tensor) every step gets those two lines named."""

from pathlib import Path

import anyio
import pytest

from tools.errors import TriageError
from tools.profiling import profile_steps

TRAIN = '''\
import argparse

import torch
from torch import nn


def make_target():
    torch.manual_seed(0)
    x, y = torch.randn(256, 16), torch.randint(0, 4, (256,))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=32)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    return {"model": model, "data": loader, "loss_fn": lambda m, b: nn.functional.cross_entropy(m(b[0]), b[1])}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    t = make_target()
    model, opt = t["model"], torch.optim.SGD(t["model"].parameters(), lr=0.1)
    step = 0
    while step < args.steps:
        for xb, yb in t["data"]:
            loss = t["loss_fn"](model, (xb, yb))
            opt.zero_grad()
            loss.backward()
            opt.step()
            running = loss.item()
            print(loss)
            step += 1
    print("finished all steps")


if __name__ == "__main__":
    main()
'''

CRASH = '''\
import torch
model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(5):
    loss = model(torch.randn(8, 4)).sum()
    loss.backward()
    opt.step()
    if step == 3:
        raise RuntimeError("boom at step 3")
'''


@pytest.fixture
def ws(workspace: Path, monkeypatch) -> Path:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # 2 shared cores: spinning OpenMP threads only add noise
    (workspace / "train_sync.py").write_text(TRAIN)
    (workspace / "crash.py").write_text(CRASH)
    (workspace / "no_train.py").write_text("import torch\nprint(torch.ones(2))\n")
    return workspace


def profile(ws, **kw):
    return anyio.run(lambda: profile_steps(workspace_root=ws, timeout_s=120, **kw))


def _line_of(code: str) -> int:
    return next(i for i, line in enumerate(TRAIN.splitlines(), 1) if line.strip() == code)


def test_item_and_print_every_step_are_named_by_line_in_script_mode(ws, no_stray_processes):
    item, printed = f"train_sync.py:{_line_of('running = loss.item()')}", f"train_sync.py:{_line_of('print(loss)')}"
    r = profile(ws, command=["python", "train_sync.py", "--steps", "1000"], steps=8)
    assert r.mode == "script" and r.steps == 8 and r.device == "cpu"
    by_kind = {s.kind: s for s in r.syncs}
    assert by_kind[".item()"].location == item and by_kind[".item()"].per_step == 1.0
    assert by_kind["print/repr(tensor)"].location == printed
    assert "print(loss)" in by_kind["print/repr(tensor)"].code
    f = next(f for f in r.findings if f.failure_mode == "slow_throughput")
    assert item in f.summary and printed in f.summary
    assert r.top_ops and r.top_modules[0].name.startswith("Sequential")
    assert r.data_share is not None and r.optimizer_share is not None
    assert r.sync_ops.get("aten::_local_scalar_dense", 0) >= 8


def test_target_mode_profiles_the_factory_without_its_logging(ws):
    r = profile(ws, target="train_sync.py:make_target", steps=5)
    assert r.mode == "target" and r.steps == 5
    assert not [s for s in r.syncs if s.per_step >= 1]  # Adam/SGD's own CPU step counters are not user syncs
    assert {m.name for m in r.top_modules} >= {"Sequential.0", "Sequential.2"}
    assert r.data_share > 0  # the DataLoader's __next__ is timed


def test_a_script_that_crashes_before_the_window_closes_is_reported(ws):
    r = profile(ws, command=["python", "crash.py"], steps=20)
    assert r.steps == 2 and any("ended after" in n for n in r.notes), r.text()


def test_a_script_that_never_steps_an_optimizer_says_so(ws):
    r = profile(ws, command=["python", "no_train.py"], steps=5)
    assert r.steps == 0 and any("no optimizer.step()" in n for n in r.notes)


@pytest.mark.parametrize("kw, says", [
    ({}, "exactly one of target or command"),
    ({"target": "train_sync.py:make_target", "command": ["python", "x.py"]}, "exactly one"),
    ({"command": []}, "non-empty list"),
    ({"command": ["definitely-not-a-binary-xyz", "a"]}, "not an executable"),
    ({"target": "train_sync.py:make_target", "steps": 0}, "out of range"),
    ({"target": "train_sync.py:nope"}, "no callable 'nope'"),
])
def test_bad_input_is_a_clear_error(ws, kw, says):
    with pytest.raises(TriageError, match=says):
        profile(ws, **kw)
    assert (ws / "train_sync.py").read_text() == TRAIN
