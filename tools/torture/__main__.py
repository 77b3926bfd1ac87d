"""``python tools/torture ...`` (or ``python -m torture`` from tools/): run the campaigns."""

import sys
from pathlib import Path

if not __package__:  # run as a directory, which heads sys.path: tools/ takes its place (see harness.run_main)
    here = Path(__file__).resolve().parent
    sys.path[:] = [str(here.parent)] + [entry for entry in sys.path if Path(entry or ".").resolve() != here]

import harness  # noqa: E402

sys.exit(harness.run_main("torture.runner"))
