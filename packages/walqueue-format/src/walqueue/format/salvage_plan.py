"""The salvage plan: the longest valid history of a damaged store, read from its survey (no writing).

`walqueue.format.survey` reads what survives; this module decides what a
repair can keep. `survey(directory)` is the survey plus its `SalvagePlan`.
The longest valid history starts from a base, an empty state (sequence 0)
or a snapshot that verifies, and continues with the transactions that
follow it without a gap. Of all bases, the one reaching the highest
sequence wins (ties: the snapshot CURRENT names, then the newer snapshot).
When a state machine is registered (`walqueue.format.replay`: the engine
registers its own), it replays the plan as well and the history stops
before the first invalid transaction, so that the salvaged store opens.

Apart from the writing (`walqueue.format.fsck.salvage`), because fsck's
check reads the plan to say what a salvage would drop, and the writing
checks the store it wrote with fsck's check: together they were a circle.
"""

from __future__ import annotations

import os
from typing import TypedDict

from walqueue.format.errors import CorruptStore
from walqueue.format.progress import Progress
from walqueue.format.replay import StateMachine, registered_state_machine, require_state_machine
from walqueue.format.survey import SalvagePlan, Survey, SurveySource, read_survey, seq_ranges

__all__ = ["END_OF_LOG", "NO_FRAME", "SurveyOptions", "survey"]


class SurveyOptions(TypedDict, total=False):
    """The keywords of `survey`, which `salvage` and `export_suffix` pass on to it as they are."""

    engine: bool | None
    progress: Progress | None


def survey(
    directory: str | os.PathLike[str], *, engine: bool | None = None, progress: Progress | None = None
) -> Survey:
    """Read everything that may hold history in `directory` (read only) and plan the longest history.

    `engine`: replay the plan with the registered state machine (``None``:
    if one is registered; ``True``: `ReplayUnavailable` if none is).
    `progress` is advanced by the bytes read. Raises `OSError` if the
    directory cannot be listed.
    """
    machine = require_state_machine("a salvage checked by the state machine") if engine else None
    if engine is None:
        machine = registered_state_machine()
    result = read_survey(directory, progress=progress)
    result.plan = _plan(SurveySource(result.directory), result, machine)
    if progress is not None:
        progress.finish()
    return result


# -- the plan ---------------------------------------------------------------------------------


def _reach(frames: dict[int, tuple[str, int, int]], base_seq: int) -> int:
    end = base_seq
    while end + 1 in frames:
        end += 1
    return end


NO_FRAME = "the next sequence is in no intact frame"
END_OF_LOG = "end of the log"

#: A base of the history: (snapshot file or None for the empty state, its seq, its tasks, named by CURRENT).
_Base = tuple[str | None, int, int, bool]


def _plan(source: SurveySource, result: Survey, machine: StateMachine | None) -> SalvagePlan:
    frames = result.frames
    bases: list[_Base] = [(None, 0, 0, False)]
    for snap in result.snapshots:
        if snap.valid:
            bases.append((snap.file, snap.seq, snap.tasks or 0, snap.named_by_current))
    ranked = sorted(bases, key=lambda b: (_reach(frames, b[1]), b[3], b[1]), reverse=True)
    best: tuple[_Base, int, str] | None = None
    for base in ranked:
        raw_end = _reach(frames, base[1])
        if best is not None and raw_end <= best[1]:
            break
        stop = NO_FRAME if raw_end < max(frames, default=0) else END_OF_LOG
        end = raw_end
        if machine is not None:
            checked = _replay(source, result, machine, base, raw_end)
            if checked is None:
                continue  # the snapshot's records are invalid for the state machine
            end, why = checked
            if why is not None:
                stop = why
        if best is None or end > best[1]:
            best = (base, end, stop)
    if best is None:  # every snapshot invalid and the empty base too: impossible, the empty base always works
        best = ((None, 0, 0, False), 0, "nothing is valid")
    (name, base_seq, tasks, _), last, stop = best
    highest = max([*frames, *(s.seq for s in result.snapshots)], default=0)
    above = [seq for seq in frames if seq > last]
    return SalvagePlan(
        base=name,
        base_seq=base_seq,
        base_tasks=tasks,
        last_seq=last,
        highest_seq=max(highest, last),
        lost=seq_ranges(set(range(last + 1, highest + 1)) - set(above)),
        intact_dropped=seq_ranges(above),
        engine_checked=machine is not None,
        stop=stop,
        unreadable=result.unreadable(),
    )


def _replay(
    source: SurveySource, result: Survey, machine: StateMachine, base: _Base, raw_end: int
) -> tuple[int, str | None] | None:
    """Apply the base and its transactions with the state machine; the last valid sequence and why it stops."""
    name, base_seq, _, _ = base
    try:
        if name is None:
            state = machine.new_state()
        else:
            with source.snapshot(name) as reader:
                # the header's clock and queue settings, when it has them
                extra = ({} if reader.clock is None else {"clock": reader.clock}) | (
                    {"queues": reader.queues} if reader.queues else {}
                )
                state = machine.from_records(reader.seq, reader.records(), **extra)
    except (machine.invalid, CorruptStore, OSError):
        return None
    for seq in range(base_seq + 1, raw_end + 1):
        file, offset, size = result.frames[seq]
        try:
            _, value = source.read_frame(file, offset, size)
            machine.apply(state, value)
        except machine.invalid as exc:
            return seq - 1, f"transaction {seq} is invalid for the state machine: {exc}"
        except (CorruptStore, OSError) as exc:
            return seq - 1, f"transaction {seq} can no longer be read: {exc}"
    return raw_end, None
