"""WALQueue: a single-writer, durable task queue built on the standard library.

Only the public names live here. The path extension must come first: the
format and CLI layers are separate distributions that contribute
`walqueue.format` and `walqueue.cli` to this package from their own source
directories (editable installs, or the three `src` folders on PYTHONPATH).

`__version__` is the version of all three distributions (one source:
`walqueue.format`'s, which this distribution pins exactly). `Status` and
`Stats` are types for type checkers (`Queue.tasks(status)`, `Queue.stats()`).
`python -m walqueue` prints the version and where the commands are.
"""

from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)

import logging  # noqa: E402

# A library logs, the application decides where it goes: without this, an
# application that configured no logging would see recovery warnings on stderr.
logging.getLogger("walqueue").addHandler(logging.NullHandler())

from walqueue.engine import types as _types  # noqa: E402
from walqueue.engine.queue import Queue  # noqa: E402
from walqueue.engine.types import *  # noqa: E402, F403  (the public types: `types.__all__` lists them once)
from walqueue.format import __version__  # noqa: E402

__all__ = ["__version__", "Queue"]
__all__ += _types.__all__
