"""mltriage's live instrument, put on PYTHONPATH by run_training. Stdlib only, and it never breaks the run.

Python imports the first `sitecustomize` on sys.path, so this one first runs the user's own (if they
have one), then starts the instrument in mltriage_live (which installs its torch hooks once torch is
imported).
"""

import os
import sys


def _chain_to_the_users_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    ours = sys.modules.pop("sitecustomize", None)
    hidden = [(i, p) for i, p in enumerate(sys.path) if os.path.abspath(p or os.curdir) == here]
    for i, _ in reversed(hidden):
        del sys.path[i]
    try:
        import sitecustomize  # noqa: F401 - the user's own, found further down sys.path
    except ImportError as e:
        if e.name != "sitecustomize":
            print(f"Error in the user's sitecustomize: {e!r}", file=sys.stderr)
    except Exception as e:  # noqa: BLE001 - like site.py: report and carry on
        print(f"Error in the user's sitecustomize: {e!r}", file=sys.stderr)
    finally:
        for i, p in hidden:
            sys.path.insert(i, p)
        if ours is not None:
            sys.modules["sitecustomize"] = ours


_chain_to_the_users_sitecustomize()

if os.environ.get("MLTRIAGE_LIVE_DIR"):
    try:
        import mltriage_live

        mltriage_live.start()
    except Exception as e:  # noqa: BLE001 - the user's run matters more than our instrument
        print(f"[mltriage] live instrument disabled: {e!r}", file=sys.stderr)
