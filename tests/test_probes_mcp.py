"""The six probe tools over a real stdio MCP connection: answers on real examples, clear errors on bad input."""

import shutil
import textwrap

from conftest import EXAMPLES, run, stdio_client, text_of

PROBE_TOOLS = {"grad_norm_snapshot", "nan_hook_run", "overfit_test", "init_loss_check", "data_check", "lr_range_test"}


def _copy(ws, *names):
    for n in names:
        shutil.copytree(EXAMPLES / n, ws / n)


def _fork_servers() -> list:
    import os

    import psutil

    return [p for p in psutil.Process(os.getpid()).children(recursive=True)
            if any(a.endswith("mltriage_forkserver.py") for a in p.cmdline())]


def test_each_probe_tool_answers_on_a_real_example_over_stdio(workspace, no_stray_processes):
    # no_stray_processes: the server's fork server (and all it forked) ends with the session
    _copy(workspace, "nan_log_zero", "bad_init", "healthy_mlp", "label_leakage", "lr_too_high")
    from test_probes import CLAMP_AFTER_NORM, CLAMPED_IMAGES, DENOISER_PATCHES, _reader
    _reader(workspace, "last")
    (workspace / "clamped.py").write_text(textwrap.dedent(
        CLAMPED_IMAGES.replace("ORDER", CLAMP_AFTER_NORM).replace("BACKGROUND", "x.clamp(0, 1)")))
    (workspace / "left_behind.py").write_text(textwrap.dedent(DENOISER_PATCHES.replace("RETURNED", "clean")))
    calls = [
        ("nan_hook_run", {"target": "nan_log_zero/train.py:make_target"}, lambda s: s["found"] and s["cause"] == "log(0)"),
        ("init_loss_check", {"target": "bad_init/train.py:make_target"}, lambda s: s["verdict"] == "too_high"),
        ("overfit_test", {"target": "healthy_mlp/train.py:make_target", "steps": 200}, lambda s: s["passed"]),
        ("grad_norm_snapshot", {"target": "healthy_mlp/train.py:make_target"},
         lambda s: s["findings"] == [] and len(s["params"]) == 6),
        ("data_check", {"target": "label_leakage/train.py:make_target"},
         lambda s: any(f["failure_mode"] == "data_leakage" for f in s["findings"])),
        # a GRU read at the padded tensor's last step: the finding names the model's forward, file:line
        ("data_check", {"target": "reader_last_right.py:make_target"},
         lambda s: s["padding_output_change"] >= 1.0 and any(
             f["failure_mode"] == "data_pipeline" and f["confidence"] >= 0.75 and "in Reader.forward" in f["summary"]
             and f["location"].endswith("(Reader.forward)") and "lengths - 1" in f["fix"] for f in s["findings"])),
        # training inputs clipped where validation is not; a target the augmentation left behind
        ("data_check", {"target": "clamped.py:make_target"},
         lambda s: any(f["failure_mode"] == "data_pipeline" and "are clipped" in f["summary"] for f in s["findings"])),
        ("data_check", {"target": "left_behind.py:make_target"},
         lambda s: any(f["failure_mode"] == "data_pipeline" and "do not line up" in f["summary"]
                       for f in s["findings"])),
        ("lr_range_test", {"target": "lr_too_high/train.py:make_target", "steps": 60},
         lambda s: s["current_position"] in ("above", "diverging")),
    ]

    async def body():
        async with stdio_client(workspace) as c:
            listed = {t.name: t for t in (await c.list_tools()).tools}
            assert PROBE_TOOLS <= set(listed)
            assert all(listed[n].output_schema for n in PROBE_TOOLS)
            out = []
            for name, args, ok in calls:
                r = await c.call_tool(name, args)
                assert not r.is_error, text_of(r)
                assert ok(r.structured_content), (name, text_of(r))
                out.append(text_of(r))
            assert _fork_servers(), "the server started no fork server for its probes"
            return out

    texts = run(body)
    assert "log(0)" in texts[0]
    assert "nan" in str(texts[0]).lower()


def test_bad_inputs_give_clear_errors_and_the_server_keeps_serving(workspace, no_stray_processes):
    (workspace / "raises.py").write_text(textwrap.dedent("""
        import torch
        def make_target():
            raise ValueError("dataset path /data/missing not found")
    """))
    (workspace / "hangs.py").write_text(textwrap.dedent("""
        import time
        def make_target():
            time.sleep(600)
    """))
    (workspace / "segv.py").write_text(textwrap.dedent("""
        import ctypes
        def make_target():
            ctypes.string_at(0)
    """))
    _copy(workspace, "healthy_mlp")

    async def body():
        async with stdio_client(workspace) as c:
            r = await c.call_tool("init_loss_check", {"target": "nope.py:make_target"})
            assert r.is_error and "does not exist" in text_of(r)

            r = await c.call_tool("overfit_test", {"target": "raises.py:make_target"})
            assert not r.is_error
            s = r.structured_content
            assert s["error"]["phase"] == "make_target" and "dataset path" in s["error"]["message"]
            assert s["findings"][0]["failure_mode"] == "exception"
            assert "raises.py" in s["error"]["traceback_tail"]

            r = await c.call_tool("nan_hook_run", {"target": "hangs.py:make_target", "timeout_s": 3})
            assert r.is_error and "did not finish within" in text_of(r) and "timeout_s" in text_of(r)

            r = await c.call_tool("grad_norm_snapshot", {"target": "segv.py:make_target"})
            assert r.is_error and "SIGSEGV" in text_of(r) and "faulthandler" in text_of(r)

            r = await c.call_tool("grad_norm_snapshot", {"command": []})
            assert r.is_error

            r = await c.call_tool("init_loss_check", {"target": "healthy_mlp/train.py:make_target"})
            assert not r.is_error and r.structured_content["verdict"] == "ok"

    run(body)
