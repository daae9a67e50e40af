"""`mltriage install` (being written)."""


def add_arguments(parser):
    parser.add_argument("--client", required=True)


def run(args):
    raise SystemExit("mltriage install: not implemented yet")
