"""The repetitions of each scale (tiny: the smoke test; default; big); each workload declares its own sizes."""

from __future__ import annotations

#: Per scale: how many timed repetitions a workload runs unless it sets its own `reps`.
SCALE_REPS: dict[str, int] = {"tiny": 3, "default": 9, "big": 11}
