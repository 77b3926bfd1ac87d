"""The engine: a pure state machine (`state`), the storage around it, and `Queue`."""
