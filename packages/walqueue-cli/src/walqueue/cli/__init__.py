"""The command line a person types: the JSON-lines consumer (`python -m walqueue.cli DIRECTORY`,
script `walqueue`) and the interactive shell (`walqueue shell`).

The server is `walqueue.serve` and the clients are `walqueue.client`.
`walqueue.cli.Client` and `walqueue.cli.AsyncClient` still work, as
deprecated re-exports of `walqueue.client`'s (a `DeprecationWarning` says
where they live now); `python -m walqueue.cli.serve` still starts the
server (`walqueue.cli.serve` is kept as a re-export package for that).
The clients are imported on first use, so that the consumer does not pay
for asyncio at start-up.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from walqueue.client import AsyncClient, Client

__all__ = ["AsyncClient", "Client"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        warnings.warn(
            f"walqueue.cli.{name} is deprecated: import it from walqueue.client", DeprecationWarning, stacklevel=2
        )
        import walqueue.client

        return getattr(walqueue.client, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
