"""``fedldp campaign simulate FILE --seed S``: a campaign's occurrences in process.

The file is a campaign template (``fedldp.client.campaign.template``, docs/campaigns.md): a
protocol and its parameters, a population (which may drift), ``every``/``times`` and a device
budget. Each occurrence's estimate is printed against its day's truth, with how many devices
enrolled and refused, then each device's cumulative ε spend.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from fedldp.client.campaign.simulate import CampaignResult, simulate_campaign
from fedldp.client.campaign.template import load_template

__all__ = ["CAMPAIGN_COMMANDS", "render_campaign"]


def render_campaign(result: CampaignResult) -> str:
    """One line per occurrence (day, enrolled, refused, estimate, truth), then the spends."""
    lines = [f"{'occurrence':>10} {'day':>7} {'enrolled':>8} {'refused':>7} {'estimate':>24} truth"]
    for o in result.occurrences:
        estimate = "-" if o.estimate is None else _short(o.estimate)
        lines.append(
            f"{o.index:>10} {o.day:>7.3g} {o.enrolled:>8} {o.refused:>7} {estimate:>24} "
            f"{_short(o.truth)}"
        )
    s = result.spent
    lines.append(
        f"cumulative ε per device: min {s.min():.6g}, mean {s.mean():.6g}, max {s.max():.6g}"
    )
    return "\n".join(lines) + "\n"


def _short(value: float | list[float]) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(f"{v:.4g}" for v in value[:4]) + (", …]" if len(value) > 4 else "]")
    return f"{value:.6g}"


def _run_simulate(args: argparse.Namespace) -> int:
    template = load_template(args.file)
    result = simulate_campaign(template, args.seed)
    if args.json:
        print(json.dumps({**result.as_json(), "devices": result.spent.tolist()}))
    else:
        sys.stdout.write(render_campaign(result))
    return 0


def add_campaign_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "campaign",
        help="recurring collections over the same devices (a template on a schedule)",
        description="Run a campaign: one study template repeated on a schedule over the same "
        "devices, with per-device ε budgets (docs/campaigns.md).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  fedldp campaign simulate daily.yaml --seed 1",
    )
    commands = parser.add_subparsers(dest="campaign_command", required=True, metavar="COMMAND")
    simulate = commands.add_parser(
        "simulate",
        help="every occurrence in process under a simulated clock",
        description="Run every occurrence of the campaign in FILE in process and print each "
        "occurrence's estimate against the day's truth and each device's cumulative ε spend.",
    )
    simulate.add_argument("file", type=Path, metavar="FILE", help="campaign template (YAML/JSON)")
    simulate.add_argument(
        "--seed", type=int, required=True, metavar="S", help="run seed (fixes the devices)"
    )
    simulate.add_argument(
        "--json", action="store_true", help="one JSON object, with every device's spend"
    )
    simulate.set_defaults(handler=_run_simulate)


CAMPAIGN_COMMANDS = [add_campaign_parser]
