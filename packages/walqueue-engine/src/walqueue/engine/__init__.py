"""The engine: a pure state machine (`state`), the storage around it, and `Queue`.

Importing it registers the state machine with the format layer, whose
offline tools (`walqueue-fsck --replay`, salvage) replay logs with it but
may not import the engine themselves.
"""

from walqueue.engine import replay_provider as _replay_provider  # noqa: F401  (registers the state machine)
