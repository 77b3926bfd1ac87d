"""The JSON form of a report's dataclass, derived from its fields rather than written out again.

fsck's report, the survey, a salvage plan and CURRENT's pointer are
dataclasses whose JSON object is their fields under their own names, with
a nested report (or a list of them) in its own JSON form. Spelling that out
per class restated each field list a second time, and a field added to one
list but not the other went silently missing from `--json`; here the class
is the one list. A class whose JSON differs (a computed value, a renamed
key) starts from `fields_json` and changes only what differs.
"""

from collections.abc import Container
from dataclasses import fields
from typing import Any

__all__ = ["FieldsJson", "fields_json", "json_value"]


def json_value(value: Any) -> Any:
    """`value` as it goes into a JSON report: an object with `to_json` as its JSON, a list (or tuple) item by item."""
    to_json = getattr(value, "to_json", None)
    if to_json is not None:
        return to_json()
    if isinstance(value, list | tuple):
        return [json_value(item) for item in value]
    return value


def fields_json(report: Any, *, omit: Container[str] = ()) -> dict[str, Any]:
    """Each field of the dataclass instance `report` (but those in `omit`), in declaration order, as JSON."""
    return {f.name: json_value(getattr(report, f.name)) for f in fields(report) if f.name not in omit}


class FieldsJson:
    """A report whose JSON object is exactly its fields: `to_json` is `fields_json` of it (mix into a dataclass)."""

    __slots__ = ()

    def to_json(self) -> dict[str, Any]:
        """The report as a JSON object: each field under its own name."""
        return fields_json(self)
