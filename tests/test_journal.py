"""journal.md: appended atomically by concurrent writers, never rewritten, parsed back into records."""

import datetime as dt
import multiprocessing
import threading
from pathlib import Path

import pytest

from tools.errors import TriageError
from tools.journal import HEADER, journal_append, journal_search, parse_journal
from tools.workspace import Workspace

ENTRY = dict(title="NaN loss at step 512 from log(0) in the entropy bonus", failure_mode="nan_inf",
             symptom="loss became NaN at step 512; last finite loss 2.31",
             root_cause="torch.log(p) on a softmax output that underflows to exactly 0",
             fix="model.py:88 use torch.log(p.clamp_min(1e-8))")

HAND_WRITTEN = """# My project notes

Some thoughts about the data, with trailing spaces   
and a line without a newline at the end:

## Debugging Log

### [2024-03-01] - Loss plateau at 2.3
**Symptom**: loss stuck at ln(10) for 5k steps
**Root Cause**: optimizer built before the model was moved, lr=0 group
**Fix**: rebuild the optimizer
**Resolution**: Training resumed successfully
no newline here"""


def test_append_creates_the_journal_with_a_header_and_parses_back(tmp_path):
    path = tmp_path / "journal.md"
    report = journal_append(path, **ENTRY, evidence=["nan_hook_run: first non-finite in policy.entropy", "log: step 512"],
                            resolution="2000 steps finite", test_path="tests/test_entropy_stays_finite.py",
                            tags=["nan", "entropy"], today=dt.date(2025, 5, 4))
    text = path.read_text()
    assert text.startswith(HEADER) and text.endswith(report.markdown)
    assert report.created and report.anchor == "2025-05-04-nan-loss-at-step-512-from-log-0-in-the-entropy-bonus"
    assert f'<a id="{report.anchor}"></a>' in report.markdown
    [entry] = parse_journal(text)
    assert entry.model_dump(exclude={"line"}) == {
        "anchor": report.anchor, "date": "2025-05-04", "title": ENTRY["title"], "failure_mode": "nan_inf",
        "symptom": ENTRY["symptom"], "evidence": ["nan_hook_run: first non-finite in policy.entropy", "log: step 512"],
        "root_cause": ENTRY["root_cause"], "fix": ENTRY["fix"], "resolution": "2000 steps finite",
        "test_path": "tests/test_entropy_stays_finite.py", "tags": ["nan", "entropy"], "extra": {}}
    assert report.entry == entry


def test_hand_written_journal_is_preserved_byte_for_byte(tmp_path):
    path = tmp_path / "journal.md"
    path.write_bytes(HAND_WRITTEN.encode())
    for _ in range(3):
        journal_append(path, **ENTRY)
    text = path.read_text()
    assert text.startswith(HAND_WRITTEN) and not text.startswith(HAND_WRITTEN + HEADER)
    entries = parse_journal(text)
    assert [e.title for e in entries] == ["Loss plateau at 2.3"] + [ENTRY["title"]] * 3
    seed = entries[0]
    assert (seed.date, seed.root_cause, seed.resolution) == (
        "2024-03-01", "optimizer built before the model was moved, lr=0 group", "Training resumed successfully\nno newline here")
    assert len({e.anchor for e in entries[1:]}) == 3  # repeated titles get distinct anchors


def test_multiline_values_cannot_forge_entries_or_fields(tmp_path):
    path = tmp_path / "journal.md"
    tricky = "first line\n### 2020-01-01 — a fake entry\n- **Fix**: a fake fix\n<a id=\"fake\"></a>"
    journal_append(path, **{**ENTRY, "symptom": tricky, "title": "two\nlines"})
    [entry] = parse_journal(path.read_text())
    assert entry.symptom == tricky and entry.fix == ENTRY["fix"] and entry.title == "two lines"


def _append_many(path: str, who: str, n: int, barrier) -> None:
    barrier.wait()
    for i in range(n):
        journal_append(Path(path), **{**ENTRY, "title": f"{who} entry {i}", "symptom": f"{who}-{i} " + "x" * 3000})


def _check_whole(path: Path, expected_titles: set[str]) -> None:
    entries = parse_journal(path.read_text())
    assert {e.title for e in entries} == expected_titles and len(entries) == len(expected_titles)
    for e in entries:  # each symptom arrived whole, not interleaved with another writer's bytes
        who_i = e.title.replace(" entry ", "-")
        assert e.symptom == f"{who_i} " + "x" * 3000 and e.fix == ENTRY["fix"]
    assert path.read_text().count(HEADER) == 1


def test_32_threads_append_32_whole_entries(tmp_path):
    path = tmp_path / "journal.md"
    barrier = threading.Barrier(32)
    threads = [threading.Thread(target=_append_many, args=(str(path), f"t{k}", 1, barrier)) for k in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    _check_whole(path, {f"t{k} entry 0" for k in range(32)})


def test_32_processes_append_32_whole_entries(tmp_path):
    path = tmp_path / "journal.md"
    path.write_text(HAND_WRITTEN)
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(32)
    procs = [ctx.Process(target=_append_many, args=(str(path), f"p{k}", 1, barrier)) for k in range(32)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * 32
    assert path.read_text().startswith(HAND_WRITTEN)
    entries = parse_journal(path.read_text())
    assert len(entries) == 33 and {e.title for e in entries[1:]} == {f"p{k} entry 0" for k in range(32)}
    assert all(e.symptom.endswith("x" * 3000) and e.fix == ENTRY["fix"] for e in entries[1:])


@pytest.mark.parametrize("bad, message", [
    ({"failure_mode": "nan"}, "unknown failure_mode 'nan'. Use one of: exception, shape_mismatch, nan_inf"),
    ({"title": "  "}, "title is empty"),
    ({"fix": ""}, "fix is empty"),
])
def test_bad_entries_are_refused_and_nothing_is_written(tmp_path, bad, message):
    with pytest.raises(TriageError, match=message):
        journal_append(tmp_path / "journal.md", **{**ENTRY, **bad})
    assert not (tmp_path / "journal.md").exists()


def test_journal_path_must_be_a_file_inside_the_workspace(tmp_path):
    ws = Workspace(tmp_path / "ws")
    ws.root.mkdir()
    with pytest.raises(TriageError, match="outside the write roots"):
        journal_append(ws.write_path("../journal.md"), **ENTRY)
    (ws.root / "journal.md").mkdir()
    with pytest.raises(TriageError, match="is a directory"):
        journal_append(ws.write_path("journal.md"), **ENTRY)
    assert not (tmp_path / "journal.md").exists()


def test_search_answers_has_this_happened_before(tmp_path):
    path = tmp_path / "journal.md"
    assert not journal_search(path, "nan").exists
    path.write_text(HAND_WRITTEN)
    journal_append(path, **ENTRY, tags=["entropy"])
    journal_append(path, title="Loss explodes after warmup", failure_mode="lr_too_high", symptom="loss 1e4 at step 900",
                   root_cause="peak lr 10x too high for batch 32", fix="config.yaml:12 lr 3e-3 -> 3e-4")
    assert [e.title for e in journal_search(path, "entropy NaN").entries] == [ENTRY["title"]]
    assert [e.failure_mode for e in journal_search(path, failure_mode="lr_too_high").entries] == ["lr_too_high"]
    ranked = journal_search(path, "loss step lr").entries
    assert ranked[0].title == "Loss explodes after warmup" and len(ranked) == 3
    assert journal_search(path).total_entries == 3 and journal_search(path, "zebra quasar").entries == []
    with pytest.raises(TriageError, match="unknown failure_mode"):
        journal_search(path, failure_mode="nans")
