"""journal_search under a hostile query: a 1 MB query over a 10 MB entry answers, with a clear error."""

import random
import string

import pytest
from conftest import run, stdio_client, text_of

from tools.errors import TriageError
from tools.journal import MAX_QUERY_CHARS, journal_search


def _huge_journal(path, mib: int = 10):
    rnd = random.Random(0)
    words = " ".join("".join(rnd.choices(string.ascii_lowercase, k=7)) for _ in range(mib * 131_072))
    lines = [words[i:i + 200] for i in range(0, len(words), 200)]
    path.write_text("# notes\n\n### huge entry\n- **Failure mode:** nan_inf\n- **Symptom:** loss nan\n  "
                    + "\n  ".join(lines) + "\n")


def test_megabyte_query_over_ten_megabyte_entry_is_a_clear_error_over_stdio(workspace):
    _huge_journal(workspace / "journal.md")
    query = " ".join("q%06d" % i for i in range(150_000))  # ~1 MB of distinct words

    async def body():
        async with stdio_client(workspace) as client:
            bad = await client.call_tool("journal_search", {"query": query})
            assert bad.is_error and "characters long" in text_of(bad), text_of(bad)[:300]
            # the server is still responsive and a normal search over the huge entry answers
            ok = await client.call_tool("journal_search", {"query": "nan zebraquasar"})
            assert not ok.is_error, text_of(ok)[:300]
            assert [e["title"] for e in ok.structured_content["entries"]] == ["huge entry"]

    run(body)


def test_repeated_words_count_once(tmp_path):
    path = tmp_path / "journal.md"
    _huge_journal(path, mib=1)
    query = "nan " * (MAX_QUERY_CHARS // 4 - 1)  # under the length bound, hundreds of copies of one word
    assert [e.title for e in journal_search(path, query).entries] == ["huge entry"]


def test_too_many_distinct_words_is_a_clear_error(tmp_path):
    with pytest.raises(TriageError, match="distinct words"):
        journal_search(tmp_path / "journal.md", " ".join(f"w{i}" for i in range(200)))
