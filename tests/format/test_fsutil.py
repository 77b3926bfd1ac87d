"""fsutil: a short `os.write` is finished, a write of nothing is an error."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from walqueue.format import fsutil


def _trickle(monkeypatch: pytest.MonkeyPatch, step: int) -> list[int]:
    """Make `os.write` write at most `step` bytes per call; return the sizes it was asked for."""
    real_write = os.write
    asked: list[int] = []

    def write(fd: int, data: bytes | memoryview) -> int:
        asked.append(len(data))
        return real_write(fd, bytes(data[:step]))

    monkeypatch.setattr(os, "write", write)
    return asked


@pytest.mark.parametrize("step", [1, 3, 64])
def test_write_all_finishes_a_short_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: int) -> None:
    data = bytes(range(200))
    asked = _trickle(monkeypatch, step)
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT)
    try:
        fsutil.write_all(fd, data)
    finally:
        os.close(fd)
    assert (tmp_path / "f").read_bytes() == data
    assert asked[0] == len(data) and len(asked) == -(-len(data) // step)


def test_write_rest_continues_after_the_first_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = b"0123456789" * 7
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT)
    try:
        written = os.write(fd, data[:11])
        _trickle(monkeypatch, 4)
        fsutil.write_rest(fd, data, written)
    finally:
        os.close(fd)
    assert (tmp_path / "f").read_bytes() == data


@pytest.mark.parametrize("first", [True, False])
def test_a_write_of_nothing_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first: bool) -> None:
    real_write = os.write
    calls = 0

    def write(fd: int, data: bytes | memoryview) -> int:
        nonlocal calls
        calls += 1
        if first or calls > 1:
            return 0
        return real_write(fd, bytes(data[:5]))

    monkeypatch.setattr(os, "write", write)
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT)
    try:
        with pytest.raises(OSError, match="wrote 0 bytes"):
            fsutil.write_all(fd, b"x" * 20)
    finally:
        os.close(fd)
