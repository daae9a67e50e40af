"""Installing like every MCP server: the built wheel served through uvx, against the checkout; prints a markdown table.

    python benchmarks/bench_packaging.py          # 3 warm spawns per way
    python benchmarks/bench_packaging.py -n 5

Measured in one run:
(a) `python -m build` (isolated, wheel + sdist) and the wheel's size;
(b) spawn -> tools/list answered -> tail_log answered, over stdio with a real MCP client, for
    - the reference: the checkout's own venv, `python -m server serve` (what the tests use);
    - `uvx --from <wheel> mltriage serve` with uv's cache warm (the everyday start), and the same
      with `UV_OFFLINE=1` (no index revalidation);
    - the same with an empty cache (the first start on a machine: uv resolves and downloads the
      dependencies from the index), and what the cache holds afterwards;
    ratios against the reference. The client's cwd is a temporary directory outside the checkout.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
NETWORK_ENV = {k: v for k, v in os.environ.items()
               if k.startswith(("UV_", "SSL_CERT_")) or k.lower() in ("http_proxy", "https_proxy", "no_proxy")}


async def _session(command: str, args: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    from mcp.client import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(command=command, args=args, cwd=str(cwd), env=env)
    start = time.perf_counter()
    async with Client(params) as client:
        await client.list_tools()
        listed = time.perf_counter() - start
        result = await client.call_tool("tail_log", {"path": "train.log", "lines": 20})
        assert not result.is_error
        called = time.perf_counter() - start
    return listed, called


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=3, help="warm spawns per way (median)")
    n = ap.parse_args().n
    with tempfile.TemporaryDirectory(prefix="mltriage-bench-pkg-") as tmp:
        tmp = Path(tmp)
        ws, out = tmp / "ws", tmp / "dist"
        ws.mkdir()
        (ws / "train.log").write_text("".join(f"step {i} loss {2.3 - i * 1e-3:.4f}\n" for i in range(2000)))

        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)], check=True,
                       capture_output=True)
        build_s = time.perf_counter() - t
        [wheel] = out.glob("*.whl")
        wheel_kib = wheel.stat().st_size / 1024

        checkout = (sys.executable, ["-m", "server", "serve", "--workspace", str(ws)],
                    {"PYTHONPATH": str(ROOT)}, ROOT)
        uvx_args = ["--python", sys._base_executable, "--from", str(wheel), "mltriage", "serve", "--workspace", str(ws)]
        cold_cache = tmp / "uv-cache"
        ways = {
            "checkout, `python -m server serve` (reference)": checkout,
            "`uvx --from <wheel> mltriage serve`, warm cache": (str(BIN / "uvx"), uvx_args, dict(NETWORK_ENV), tmp),
            # uv revalidates the index on each start; offline it runs from the cache alone
            "the same with `UV_OFFLINE=1`": (str(BIN / "uvx"), uvx_args, {**NETWORK_ENV, "UV_OFFLINE": "1"}, tmp),
        }
        # one untimed start fills the default cache for the wheel, as a user's second start would find it
        anyio.run(_session, str(BIN / "uvx"), uvx_args, tmp, dict(NETWORK_ENV))
        rows = []
        for label, (cmd, args, env, cwd) in ways.items():
            runs = [anyio.run(_session, cmd, args, cwd, env) for _ in range(n)]
            rows.append((label, statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs), n))
        cold = anyio.run(_session, str(BIN / "uvx"), uvx_args, tmp,
                         {**NETWORK_ENV, "UV_CACHE_DIR": str(cold_cache)})
        rows.append(("`uvx --from <wheel> mltriage serve`, empty cache (downloads deps)", *cold, 1))
        cache_mb = _du(cold_cache) / 2**20
        shutil.rmtree(cold_cache, ignore_errors=True)

    ref = rows[0][1]
    print(f"build (isolated, wheel + sdist): {build_s:.1f} s; wheel {wheel_kib:.0f} KiB; "
          f"uv cache after a cold start: {cache_mb:.0f} MB\n")
    print("| way | spawn -> tools/list (s) | spawn -> tail_log answered (s) | vs reference | runs |")
    print("| --- | --- | --- | --- | --- |")
    for label, listed, called, runs in rows:
        print(f"| {label} | {listed:.2f} | {called:.2f} | {listed / ref:.2f}x | {runs} |")


if __name__ == "__main__":
    main()
