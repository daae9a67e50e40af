"""mltriage script mode: instruments injected into an unmodified training script through PYTHONPATH.

Python imports this at start-up because its directory is first on PYTHONPATH. It does nothing unless
MLTRIAGE_JOB and MLTRIAGE_MODE are set, never imports torch itself (the instruments install when the
script imports torch), and then runs the sitecustomize that this one shadows, if there is one.
"""

import os
import sys


def _mltriage_boot():
    here = os.path.dirname(os.path.abspath(__file__))
    if os.environ.get("MLTRIAGE_JOB") and os.environ.get("MLTRIAGE_MODE"):
        probe_dir = os.path.dirname(here)
        if probe_dir not in sys.path:
            sys.path.append(probe_dir)  # only mltriage_* names live there
        try:
            import mltriage_instrument
            mltriage_instrument.install_when_torch_imports()
        except Exception as e:  # noqa: BLE001 - never break the user's script
            print(f"mltriage: instruments not installed: {type(e).__name__}: {e}", file=sys.stderr)
    _chain(here)


def _chain(here):
    """Run the user's own sitecustomize (the next one on sys.path), as Python would have."""
    import importlib.machinery
    import importlib.util
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or os.path.abspath(spec.origin or "") == os.path.abspath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 - site.py reports and continues; so do we
        print(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(e).__name__}: {e}", file=sys.stderr)


_mltriage_boot()
