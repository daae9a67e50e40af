"""data_check watches how the factory reads its tables: a column of numbers that pandas read as text, compared
with a number, filters every row or none."""

import textwrap

import pytest

from conftest import run
from tools import probes as P

FLOWS = """
    import numpy as np
    import pandas as pd
    import torch
    from torch import nn
    import torch.nn.functional as F

    def export(path):
        rng = np.random.default_rng(0)
        n = 3000
        attack = rng.random(n) < 0.15
        label = np.where(attack, "1", "0").astype(object)
        label[rng.random(n) < 0.04] = "?"                     # flows the IDS did not score
        pd.DataFrame({"bytes": rng.lognormal(6, 1, n) * (1 + 4 * attack), "dur": rng.random(n),
                      "is_attack": label}).to_csv(path, index=False)

    def make_target():
        torch.manual_seed(0)
        export("flows.csv")
        flows = pd.read_csv("flows.csv")
        benign = flows[FILTER]
        x = torch.tensor(np.log1p(benign[["bytes", "dur"]].to_numpy()), dtype=torch.float32)
        model = nn.Sequential(nn.Linear(2, 1), nn.Linear(1, 2))
        return {"model": model, "data": [(b,) for b in x.split(256)],
                "loss_fn": lambda m, b: F.mse_loss(m(b[0]), b[0])}
"""


@pytest.mark.parametrize("filt, caught", [('flows["is_attack"] != 1', True),
                                          ('pd.to_numeric(flows["is_attack"], errors="coerce") != 1', False)])
def test_a_text_column_compared_with_a_number_is_named_with_its_line(workspace, filt, caught):
    """Blind dev campus_netflow_dense_ae: a '?' makes pandas read the label column as text, so `!= 1` holds on
    every row and every attack flow stays in the autoencoder's 'benign' training set; the run read healthy."""
    (workspace / "target.py").write_text(textwrap.dedent(FLOWS.replace("FILTER", filt)))
    rep = run(lambda: P.data_check(workspace, "target.py:make_target"))
    found = [f for f in rep.findings if f.facts.get("text_compared_with_number")]
    assert [f.failure_mode for f in found] == (["data_pipeline"] if caught else []), rep.text()
    if caught:
        f = found[0]
        assert f.confidence >= 0.75 and "is_attack != 1" in f.summary and "selects every row" in f.summary
        assert f.location == "target.py:21" and "pd.to_numeric" in f.fix


def test_the_text_comparison_check_fails_on_the_bug_and_passes_after_the_fix(workspace):
    from tools.regression import run_regression_test, write_regression_test
    target = workspace / "target.py"
    target.write_text(textwrap.dedent(FLOWS.replace("FILTER", 'flows["is_attack"] != 1')))
    rep = run(lambda: write_regression_test(workspace_root=workspace, failure_mode="data_pipeline",
                                            target="target.py:make_target",
                                            params={"only": ["test_no_text_column_is_compared_with_a_number"]}))
    assert rep.fails_now and rep.catches_bug and "'is_attack' holds numbers as text" in rep.failure_message, rep
    target.write_text(textwrap.dedent(FLOWS.replace("FILTER", 'pd.to_numeric(flows["is_attack"], errors="coerce") != 1')))
    after = run(lambda: run_regression_test(workspace_root=workspace, test_file=workspace / rep.path))
    assert after.passes_now, after
