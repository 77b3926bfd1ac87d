"""``python tools/torture ...`` (or ``python -m torture`` from tools/): run the campaigns.

Run as a directory, this file's own directory is first on sys.path and the
package is not imported yet; replace that entry with tools/ so the package
imports as `torture` (its modules use relative imports).
"""

import sys
from pathlib import Path

if not __package__:
    here = Path(__file__).resolve().parent
    sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != here]
    sys.path.insert(0, str(here.parent))
    from torture.runner import main
else:
    from .runner import main

sys.exit(main())
