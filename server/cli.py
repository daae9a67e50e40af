"""`mltriage`: serve, demo, install, and one subcommand per MCP tool for humans.

The per-tool subcommands are generated from the server's own tool schemas and call the tools
through an in-process MCP client, so the CLI and the agent see exactly the same behaviour.
"""

import argparse
import gc
import json
import logging
import sys
from pathlib import Path
from typing import Any


def _load_server(args):
    from server.app import configure, mcp
    from server.core import select_tools

    configure(args.workspace, args.allow_read)
    select_tools(getattr(args, "tools", None) or "all")
    return mcp


def _serve(args) -> int:
    # Start-up allocates some hundred thousand long-lived objects (the SDK's and our pydantic models
    # and schemas); collecting while they are built costs ~9% of the start-up CPU and frees ~3 MB.
    # Freezing them afterwards keeps them out of every later collection.
    http = None
    if args.http:
        from server import http_auth

        try:  # before loading the server: a bad address or missing token is a one-line error
            http = http_auth.settings(args.http, args.allow_host)
        except http_auth.HttpConfigError as e:
            print(f"mltriage: {e}", file=sys.stderr)
            return 2
    elif args.allow_host:
        print("mltriage: --allow-host only applies with --http", file=sys.stderr)
        return 2
    gc.disable()
    try:
        server = _load_server(args)
    except ValueError as e:  # an unknown --tools name: one line, not a traceback
        print(f"mltriage: {e}", file=sys.stderr)
        return 2
    finally:
        gc.freeze()
        gc.enable()
    if http:
        http_auth.serve(server, http)
    else:
        server.run("stdio")
    return 0


def _add_workspace(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workspace", default=".", help="directory the tools are confined to (default: cwd)")
    p.add_argument("--allow-read", action="append", default=[], metavar="DIR",
                   help="extra directory tools may read (logs on a scratch disk); repeatable")


def _arg_type(schema: dict) -> dict:
    """argparse kwargs for one JSON-schema property."""
    options = [s for s in schema.get("anyOf", [schema]) if s.get("type") != "null"]
    s = options[0] if len(options) == 1 else {}
    kind = s.get("type")
    if kind == "boolean":
        return {"action": argparse.BooleanOptionalAction}
    if kind == "integer":
        return {"type": int}
    if kind == "number":
        return {"type": float}
    if kind == "string":
        return {"type": str, **({"choices": s["enum"]} if "enum" in s else {})}
    if kind == "array" and s.get("items", {}).get("type") in ("string", "integer", "number"):
        item = {"string": str, "integer": int, "number": float}[s["items"]["type"]]
        return {"type": item, "nargs": "+"}
    return {"type": json.loads, "metavar": "JSON"}


def _tool_parsers(sub, tools) -> None:
    for t in tools:
        # argparse %-formats help text; tool docstrings say things like ">= 95%"
        doc = (t.description or "").strip().split("\n\n")[0].replace("%", "%%")
        p = sub.add_parser(t.name, aliases=[t.name.replace("_", "-")], help=doc.split("\n")[0], description=doc)
        _add_workspace(p)
        p.add_argument("--json", action="store_true", help="print the structured report as JSON")
        props = t.input_schema.get("properties", {})
        required = set(t.input_schema.get("required", []))
        for name, schema in props.items():
            kwargs = _arg_type(schema)
            kwargs["help"] = schema.get("description", "").replace("%", "%%")
            if name in required:
                kwargs["required"] = True
            p.add_argument("--" + name.replace("_", "-"), dest=name, default=None, **kwargs)
        p.set_defaults(tool=t.name, props=list(props))


async def _call(args) -> int:
    from mcp.client import Client

    from server.app import configure, mcp

    configure(args.workspace, args.allow_read)
    # the SDK logs every failed call at INFO; on a terminal the error text below already says it
    logging.getLogger("mcp").setLevel(logging.WARNING)
    arguments: dict[str, Any] = {k: getattr(args, k) for k in args.props if getattr(args, k) is not None}

    async def progress(done, total, message):
        print(f"  .. {message or ''} {done:g}/{total or '?'}", file=sys.stderr)

    async with Client(mcp) as client:
        result = await client.call_tool(args.tool, arguments, progress_callback=progress)
    if args.json and result.structured_content is not None:
        print(json.dumps(result.structured_content, indent=2))
    else:
        for block in result.content:
            print(block.text if getattr(block, "type", "") == "text" else f"[{block.type} content: use --json]")
    return 1 if result.is_error else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mltriage", description="Triage failing PyTorch training runs.")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the MCP server (stdio, or --http HOST:PORT)")
    _add_workspace(serve)
    serve.add_argument("--http", metavar="HOST:PORT",
                       help="serve streamable HTTP instead of stdio; needs 'Authorization: Bearer TOKEN' "
                            "(TOKEN from MLTRIAGE_HTTP_TOKEN, else generated and printed to stderr; "
                            "a non-loopback HOST needs MLTRIAGE_HTTP_TOKEN)")
    serve.add_argument("--allow-host", action="append", default=[], metavar="HOST",
                       help="with --http: another Host/Origin name clients may use (DNS-rebinding protection); repeatable")
    serve.add_argument("--tools", default="all", metavar="SET",
                       help="which tools to serve: core (evidence, triage, probes, journal, regression tests, "
                            "compare_runs), all (default; adds live runs and experiments), or a comma list of "
                            "sets (core, live, experiments) and tool names")
    serve.set_defaults(func=_serve)

    demo = sub.add_parser("demo", help="triage a bundled broken run end to end through a real MCP client")
    demo.add_argument("--example", default=None, help="which bundled example (default: the NaN one)")
    demo.set_defaults(func=lambda a: __import__("server.demo", fromlist=["run"]).run(a))

    install = sub.add_parser("install", help="install the server config and skills into an agent client")
    from server import install as installer
    installer.add_arguments(install)
    install.set_defaults(func=installer.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    import anyio

    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    if not argv or argv[0] not in ("serve", "demo", "install"):
        from server.app import mcp  # only the per-tool subcommands need the tool schemas

        _tool_parsers(parser._subparsers._group_actions[0], anyio.run(mcp.list_tools))
    args = parser.parse_args(argv)
    if hasattr(args, "tool"):
        return anyio.run(_call, args)
    return args.func(args) or 0
