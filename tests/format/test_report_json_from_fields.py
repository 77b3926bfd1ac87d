"""A report's JSON object is its dataclass fields, nested reports in their own JSON form."""

from dataclasses import dataclass, field

from walqueue.format.jsonfields import FieldsJson, fields_json
from walqueue.format.survey import Damage, SegmentSurvey


@dataclass(frozen=True, slots=True)
class _Leaf(FieldsJson):
    name: str
    size: int | None = None


@dataclass(slots=True)
class _Tree(FieldsJson):
    title: str
    leaves: list[_Leaf] = field(default_factory=list)
    pair: tuple[_Leaf, ...] = ()
    counts: dict[str, int] = field(default_factory=dict)
    hidden: int = 0


def test_every_field_is_reported_under_its_own_name_in_declaration_order() -> None:
    assert list(_Leaf("a").to_json().items()) == [("name", "a"), ("size", None)]


def test_nested_reports_lists_and_tuples_become_their_json() -> None:
    tree = _Tree("t", [_Leaf("a", 1)], (_Leaf("b"),), {"ready": 2})
    assert tree.to_json() == {
        "title": "t",
        "leaves": [{"name": "a", "size": 1}],
        "pair": [{"name": "b", "size": None}],
        "counts": {"ready": 2},
        "hidden": 0,
    }


def test_omitted_fields_are_left_out() -> None:
    assert fields_json(_Tree("t"), omit=("leaves", "pair", "counts", "hidden")) == {"title": "t"}


def test_a_segment_survey_reports_its_torn_tail_as_an_object() -> None:
    segment = SegmentSurvey("wal-1.log", 1, 10, damage=[Damage("wal-1.log", 2, 3, "digest")], torn=(8, 2))
    assert segment.to_json() == {
        "file": "wal-1.log",
        "number": 1,
        "size": 10,
        "runs": [],
        "damage": [{"file": "wal-1.log", "offset": 2, "bytes": 3, "reason": "digest"}],
        "torn": {"offset": 8, "bytes": 2},
        "unreadable": None,
    }
