"""The version of all three WALQueue distributions, for code that runs from a source tree too.

`walqueue.format.__version__`, `walqueue.__version__`, `walqueue --version`
and `walqueue-fsck --version` all read this one line. The distributions pin
each other exactly, so the format layer's version is the engine's and the
CLI's. `python tools/release.py bump X.Y.Z` rewrites it together with the
three pyproject.toml files, and `release.py check` fails if they disagree.
"""

__version__ = "0.1.0"
