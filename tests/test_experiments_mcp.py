"""The experiment tools over a real stdio MCP connection: structured reports, PNGs, NaN markers, clear errors."""

import math
import random
from pathlib import Path

import anyio

from conftest import stdio_client, text_of

LOSSES = '''
import torch

def entropy(p, q):
    return -(p * torch.log(p) + q * torch.log(q))
'''

LOOP = '''
import torch
model = torch.nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(50):
    loss = model(torch.randn(16, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.4f}")
'''


def _workspace(ws: Path) -> Path:
    rng = random.Random(0)
    rows = ["seed,lr,val_loss"]
    for seed in (1, 2, 3, 4):
        base = rng.gauss(0, 1)
        for lr in (1e-4, 1e-3, 1e-2):
            rows.append(f"{seed},{lr},{2 + base + 0.3 * math.log10(lr) + rng.gauss(0, 0.02)}")
    rows.append("5,0.01,nan")
    (ws / "sweep.csv").write_text("\n".join(rows) + "\n")
    (ws / "before.log").write_text("".join(f"step {s} loss {'nan' if s > 10 else 1.0 / s}\n" for s in range(1, 21)))
    (ws / "after.log").write_text("".join(f"step {s} loss {0.9 / s}\n" for s in range(1, 21)))
    (ws / "losses.py").write_text(LOSSES)
    (ws / "loop.py").write_text(LOOP)
    return ws


def test_experiment_tools_over_stdio_answer_with_reports_images_and_clear_errors(workspace, no_stray_processes):
    ws = _workspace(workspace)
    (ws.parent / "outside.csv").write_text("seed,lr,loss\n1,1,1\n")

    async def go():
        with anyio.fail_after(240):
            async with stdio_client(ws, env={"OMP_NUM_THREADS": "1"}) as c:
                r = await c.call_tool("sweep_analysis", {"path": "sweep.csv", "metric": "val_loss", "param": "lr"})
                assert not r.is_error, text_of(r)
                group = r.structured_content["groups"][0]
                t = {v["value"]: v["t_stat"] for v in group["values"]}
                assert t[0.01] > 2 and t[0.0001] < -2
                assert any("single seed" in w or "missing seed" in w for w in r.structured_content["warnings"])

                r = await c.call_tool("compare_runs", {"before": "before.log", "after": "after.log", "plot": True})
                assert not r.is_error, text_of(r)
                assert r.structured_content["verdict"] == "improved"
                assert r.structured_content["before"]["final"] == "nan"
                assert any(getattr(b, "type", "") == "image" for b in r.content)

                progress = []

                async def on_progress(done, total, message):
                    progress.append(done)

                r = await c.call_tool("loss_surface", {"function": "losses.py:entropy", "x_range": [0, 1],
                                                       "y_range": [0, 1], "n": 20}, progress_callback=on_progress)
                assert not r.is_error, text_of(r)
                assert r.structured_content["nonfinite"]["lines"] == ["x = 0", "y = 0"]
                assert "nan_inf" in {f["failure_mode"] for f in r.structured_content["findings"]}
                assert any(getattr(b, "type", "") == "image" for b in r.content)
                assert progress

                r = await c.call_tool("profile_steps", {"command": ["python", "loop.py"], "steps": 3})
                assert not r.is_error, text_of(r)
                syncs = r.structured_content["syncs"]
                assert any(s["location"] == "loop.py:10" and s["kind"] == ".item()" for s in syncs), syncs

                bad = [
                    ("sweep_analysis", {"path": "../outside.csv", "metric": "loss", "param": "lr"}, "outside"),
                    ("sweep_analysis", {"path": "sweep.csv", "metric": "acc", "param": "lr"}, "no metric column 'acc'"),
                    ("compare_runs", {"before": "missing.log", "after": "after.log"}, "does not exist"),
                    ("compare_runs", {"before": "before.log", "after": "after.log", "metric": "acc"}, "no series 'acc'"),
                    ("loss_surface", {"function": "losses.py:entropy", "x_range": [1, 0], "y_range": [0, 1]}, "low < high"),
                    ("loss_surface", {"function": "../outside.py:f", "x_range": [0, 1], "y_range": [0, 1]}, "outside"),
                    ("loss_surface", {"function": "entropy", "x_range": [0, 1], "y_range": [0, 1]}, "must look like"),
                    ("loss_surface", {"function": "losses.py:entropy", "x_range": [0, 1], "y_range": [0, 1], "n": 5000}, "n"),
                    ("profile_steps", {}, "exactly one of target or command"),
                    ("profile_steps", {"target": "nope.py:make_target"}, "does not exist"),
                ]
                for name, args, says in bad:
                    r = await c.call_tool(name, args)
                    assert r.is_error, (name, args, text_of(r))
                    assert says in text_of(r), (name, text_of(r))

                r = await c.call_tool("sweep_analysis", {"path": "sweep.csv", "metric": "val_loss", "param": "lr"})
                assert not r.is_error  # the server is still healthy after the errors

    anyio.run(go)
    assert (ws / "sweep.csv").read_text().startswith("seed,lr,val_loss")
