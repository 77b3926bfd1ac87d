"""Placeholder: Queue is being written."""


class Queue:  # pragma: no cover - replaced by the real implementation
    def __init__(self, *args: object, **kwargs: object) -> None:
        raise NotImplementedError
