"""`python -m server [--workspace DIR]` serves stdio; `python -m server TOOL ...` is the CLI."""

import sys

from server.cli import main

args = sys.argv[1:]
if not args or (args[0].startswith("-") and args[0] not in ("-h", "--help")):
    args = ["serve", *args]
sys.exit(main(args))
