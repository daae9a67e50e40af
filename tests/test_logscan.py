"""The float columns of the scan: pydantic_core's JSON parser must read every cell exactly as float() does."""

import math
import random
import struct
from decimal import Decimal, localcontext

from tools import logscan
from tools.logscan import FloatCache, ScanPool, floats, to_float


def bits(xs: list[float]) -> list[bytes]:
    return [struct.pack("<d", x) for x in xs]  # -0.0 is not 0.0, and one NaN is another


def float_texts(rnd: random.Random, n: int) -> list[str]:
    """Decimal numbers as logs print them, and as no log does: 17+ digits, subnormals, overflow, exact midpoints."""
    out = []
    for _ in range(n):
        k = rnd.random()
        if k < 0.3:
            out.append(f"{rnd.random() * 10 ** rnd.randint(-5, 5):.{rnd.randint(0, 20)}f}")
        elif k < 0.6:
            out.append(f"{rnd.uniform(-1, 1) * 10 ** rnd.randint(-320, 308):.{rnd.randint(0, 25)}e}")
        elif k < 0.8:
            digits = "".join(rnd.choice("0123456789") for _ in range(rnd.randint(1, 40)))
            out.append(f"{digits[0]}.{digits[1:] or '0'}e{rnd.randint(-340, 320)}")
        else:  # halfway between two doubles: the rounding rule decides
            x = rnd.uniform(0, 1e6)
            y = struct.unpack("<d", struct.pack("<Q", struct.unpack("<Q", struct.pack("<d", x))[0] + 1))[0]
            with localcontext() as c:
                c.prec = 60
                out.append(str((Decimal(x) + Decimal(y)) / 2))
    return out


def test_json_columns_round_exactly_as_float_does():
    texts = float_texts(random.Random(1), 40000)
    for i in range(0, len(texts), 500):
        cells = [t.encode() for t in texts[i:i + 500]]
        got = logscan._json_floats(cells)
        assert got is not None  # plain JSON numbers all: the fast path took them
        assert bits(got) == bits([float(c) for c in cells])


ODD_CELLS = ["-0", "0", "-0.0", "1e999", "-1e999", "1" + "0" * 400, "12345678901234567890123", "nan", "NaN",
             "inf", "-inf", "Infinity", "1.", ".5", "+1", "1_000", "007", " 1", "", "true", "null", "1,5",
             "[1]", "1e", "--1", "0x10", "\u0661\u0662"]


def test_cells_json_reads_differently_are_read_by_float():
    cache = FloatCache()
    for odd in ODD_CELLS:
        for kind in (str, bytes):
            cells = [x if kind is str else x.encode() for x in ["1.5", odd, "2", "-3.25e-2"]]
            if kind is bytes and not odd.isascii():
                continue
            assert bits(floats(cells, cache)) == bits([to_float(c) for c in cells]), (odd, kind)
            assert bits(floats(cells[1:2], FloatCache())) == bits([to_float(cells[1])]), (odd, kind)


def test_integer_cells_become_floats():
    got = floats([b"1", b"2", b"3"], FloatCache())
    assert got == [1.0, 2.0, 3.0] and all(type(x) is float for x in got)


def test_without_pydantic_core_the_columns_are_the_same(monkeypatch):
    cells = [t.encode() for t in float_texts(random.Random(2), 2000)] + [c.encode() for c in ODD_CELLS if c.isascii()]
    fast = floats(cells, FloatCache())
    monkeypatch.setattr(logscan, "from_json", None)
    assert bits(floats(cells, FloatCache())) == bits(fast)


def test_the_bare_worker_parses_columns_with_pydantic_core(tmp_path):
    """The worker runs without site-packages (-S); it must still find pydantic_core, or it scans ~2x slower."""
    lines = "".join(f"step {i} loss {1 + math.sin(i):.4f} lr 1.0e-3\n" for i in range(2000)).encode()
    path = tmp_path / "w.log"
    path.write_bytes(lines)
    spec = (r"(?m)^(?:(?:step (\S++) loss (\S++) lr (\S++)))$", ((("step", "loss", "lr"), 0, (True, True, True), True),))
    with open(path, "rb") as f, ScanPool(f.fileno(), 1) as pool:
        scanned = pool.result(pool.submit(0, len(lines), spec))
        maps = open(f"/proc/{pool.procs[0].pid}/maps").read()
    assert scanned is not None and scanned["nrows"] == 2000
    loss = scanned["vals"][0][0][1]
    assert loss == [float(f"{1 + math.sin(i):.4f}") for i in range(2000)]
    assert "_pydantic_core" in maps  # the Rust extension is loaded in the worker
