"""The campaigns in order, their shares of the time, and the command line."""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from harness import command_line

from . import (
    background,
    bad_input,
    bytes_damage,
    chains,
    client_kill,
    crash_points,
    environment,
    hostile_clients,
    kill,
    os_faults,
    pipeline_disconnect,
    replica,
    server_kill,
    workers,
)
from .harness import Report, quiet_walqueue_logging
from .kill_child import kill_zygote


@dataclass(frozen=True)
class Campaign:
    """One row of the registry: a campaign's name, its share of --seconds and its entry point."""

    name: str
    #: Share of --seconds (renormalized over the campaigns selected).
    share: float
    run: Callable[[int, float, Report], None]


#: Every campaign, in the order a run goes through them. Adding one is a module and a row here.
REGISTRY: tuple[Campaign, ...] = (
    Campaign("crash-points", 0.19, crash_points.campaign_crash_points),
    Campaign("kill", 0.19, kill.campaign_kill),
    Campaign("bytes", 0.19, bytes_damage.campaign_bytes),
    Campaign("os-faults", 0.15, os_faults.campaign_os_faults),
    Campaign("background", 0.12, background.campaign_background),
    Campaign("bad-input", 0.14, bad_input.campaign_bad_input),
    Campaign("environment", 0.14, environment.campaign_environment),
    Campaign("server-kill", 0.1, server_kill.campaign_server_kill),  # walqueue-serve
    Campaign("client-kill", 0.06, client_kill.campaign_client_kill),
    Campaign("hostile-clients", 0.06, hostile_clients.campaign_hostile_clients),
    Campaign("pipeline-disconnect", 0.06, pipeline_disconnect.campaign_pipeline_disconnect),
    Campaign("workers", 0.08, workers.campaign_workers),  # walqueue-worker --processes
    Campaign("replica", 0.08, replica.campaign_replica),  # continuous backup: kill -9, store faults, restores
    Campaign("chains", 0.08, chains.campaign_chains),  # task functions' follow-ups under kills
)
CAMPAIGNS = tuple(campaign.name for campaign in REGISTRY)
BUDGET_SHARES = {campaign.name: campaign.share for campaign in REGISTRY}
RUNNERS = {campaign.name: campaign.run for campaign in REGISTRY}
DEFAULT_SECONDS = 60.0
_DESCRIPTION = "The torture harness: WALQueue against its reference model, under every fault we can make."


def budgets(seconds: float, names: Sequence[str]) -> dict[str, float]:
    """Split `seconds` over the selected campaigns by their shares."""
    total = sum(BUDGET_SHARES[name] for name in names)
    return {name: seconds * BUDGET_SHARES[name] / total for name in names}


def run_campaign(name: str, seed: int, budget: float, targets: dict[str, int] | None = None) -> Report:
    """Run one campaign in this process and return its report (never raises for a divergence).

    `targets` are counts the caller will require (see `Report.targets`).
    """
    report = Report(name, targets=dict(targets or {}))
    started = time.monotonic()
    with quiet_walqueue_logging():
        try:
            RUNNERS[name](seed, budget, report)
        except Exception:
            report.diverge(f"{name}: the harness failed\n{traceback.format_exc(limit=8)}")
    report.seconds = time.monotonic() - started
    return report


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["--kill-zygote"]:
        return kill_zygote()
    parser = command_line("torture", _DESCRIPTION)
    parser.add_argument("--seed", type=int, default=1, help="the seed of every campaign (default 1)")
    parser.add_argument(
        "--seconds", type=float, default=DEFAULT_SECONDS, help="total time, split across campaigns (default 60)"
    )
    parser.add_argument(
        "--campaign",
        action="extend",
        nargs="+",
        choices=CAMPAIGNS,
        metavar="NAME",
        help=f"run only these, in the usual order (one of {', '.join(CAMPAIGNS)}; repeatable)",
    )
    options = parser.parse_args(arguments)
    names = options.campaign or list(CAMPAIGNS)
    names = [name for name in CAMPAIGNS if name in names]
    print(f"torture: seed {options.seed}, {options.seconds:g} s over {', '.join(names)}", flush=True)
    passed = failed = 0
    finish = time.monotonic() + options.seconds
    for position, name in enumerate(names):
        # Each campaign gets its share of the time that is left, so one that overruns
        # (the bytes campaign always finishes its first store) shortens the ones after it.
        budget = budgets(max(0.0, finish - time.monotonic()), names[position:])[name]
        report = run_campaign(name, options.seed, budget)
        print(report.line(), flush=True)
        for message in report.divergences:
            print("  DIVERGENCE " + message.replace("\n", "\n    "), flush=True)
        if report.divergence_count > len(report.divergences):
            print(f"  ... and {report.divergence_count - len(report.divergences)} more", flush=True)
        if report.passed:
            passed += 1
        else:
            failed += 1
    print(f"{passed} passed, {failed} failed", flush=True)
    return 0 if failed == 0 else 1
