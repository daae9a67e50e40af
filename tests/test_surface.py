"""loss_surface: the entropy term of the NaN examples is non-finite at p = 0; dead zones and imbalance are flagged."""

from pathlib import Path

import anyio
import pytest

from tools.errors import TriageError
from tools.surface import loss_surface

LOSSES = '''
import torch

def entropy(p, q):
    """The two-argument entropy term of a hand-written BCE: -(p log p + q log q). NaN at p = 0."""
    return -(p * torch.log(p) + q * torch.log(q))

def entropy_fixed(p, q):
    """Clamped inside the log: finite value and gradient at p = 0 (xlogy alone still has an infinite gradient)."""
    return -(p * p.clamp_min(1e-8).log() + q * q.clamp_min(1e-8).log())

def hinge(x, y):
    return torch.relu(1.0 - x * y)

def imbalanced(x, y):
    return 1e4 * x ** 2 + 1e-2 * y ** 2

def batch_mean(x, y):
    return ((x - 1) ** 2 + y ** 2).mean()

def detached(x, y):
    return x ** 2 + y.detach() ** 2

def raises(x, y):
    return x @ y.reshape(3, -1)
'''


@pytest.fixture
def ws(workspace: Path) -> Path:
    (workspace / "losses.py").write_text(LOSSES)
    return workspace


def surface(ws, fn, xr=(0.0, 1.0), yr=(0.0, 1.0), n=40, plot=False):
    return anyio.run(lambda: loss_surface(f"losses.py:{fn}", xr, yr, n, plot, workspace_root=ws, timeout_s=120))


def test_entropy_loss_is_flagged_non_finite_at_p_zero_and_the_xlogy_form_is_not(ws):
    report, png = surface(ws, "entropy", n=40, plot=True)
    nan = [f for f in report.findings if f.failure_mode == "nan_inf"]
    assert nan, report.text()
    assert report.nonfinite.lines == ["x = 0", "y = 0"]
    assert report.nonfinite.x_min == 0.0 and report.nonfinite.example.x == 0.0
    zero = next(p for p in report.table if p.label == "zero")
    assert zero.loss == "nan" and zero.flag == "non-finite loss"
    small = next(p for p in report.table if p.label == "small")
    assert isinstance(small.loss, float) and small.flag == ""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert '"nan"' in report.model_dump_json()  # markers, never bare NaN

    fixed, _ = surface(ws, "entropy_fixed")
    assert fixed.nonfinite is None
    assert not [f for f in fixed.findings if f.failure_mode == "nan_inf"]


def test_hinge_dead_zone_is_flagged(ws):
    report, _ = surface(ws, "hinge", xr=(-2, 2), yr=(-2, 2))
    dead = [f for f in report.findings if f.failure_mode == "dead_units"]
    assert dead and report.dead_zone.fraction > 0.2


def test_gradient_imbalance_of_a_million_is_flagged(ws):
    report, _ = surface(ws, "imbalanced", xr=(-1, 1), yr=(-1, 1))
    f = next(f for f in report.findings if f.failure_mode == "loss_function")
    assert report.grad_ratio_x_over_y > 1e5 and "x dominates" in f.summary


def test_a_batch_reducing_function_is_evaluated_point_by_point(ws):
    report, _ = surface(ws, "batch_mean", xr=(-2, 2), yr=(-2, 2), n=12)
    assert report.mode == "pointwise"
    assert abs(report.argmin[0] - 1.0) < 0.4 and abs(report.argmin[1]) < 0.4
    assert report.findings[0].failure_mode == "healthy"


def test_detached_input_is_a_broken_graph(ws):
    report, _ = surface(ws, "detached", xr=(-1, 1), yr=(-1, 1), n=10)
    f = next(f for f in report.findings if f.failure_mode == "broken_graph")
    assert "to y" in f.summary


def test_a_function_that_raises_is_reported_as_data(ws):
    report, png = surface(ws, "raises", n=10, plot=True)
    assert png is None
    f = report.findings[0]
    assert f.failure_mode == "shape_mismatch" and "losses.py" in f.location


@pytest.mark.parametrize("fn, xr, says", [
    ("losses.py:nope", (0, 1), "has no callable 'nope'"),
    ("missing.py:f", (0, 1), "does not exist"),
    ("losses.py:entropy", (1, 0), "low < high"),
    ("losses.py:entropy", (0, float("nan")), "finite interval"),
])
def test_bad_input_is_a_clear_error(ws, fn, xr, says):
    with pytest.raises(TriageError, match=says):
        anyio.run(lambda: loss_surface(fn, xr, (0, 1), 10, False, workspace_root=ws, timeout_s=60))
    assert (ws / "losses.py").read_text() == LOSSES
