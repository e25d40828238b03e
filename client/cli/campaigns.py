"""``fedldp campaign simulate FILE --seed S`` (a campaign's occurrences in process) and ``fedldp
campaign run FILE --server URL --seed S --store DIR`` (each occurrence as a swarm against a
server, the devices' state in DIR: a second run goes on where the first stopped).

The file is a campaign template (``fedldp.client.campaign.template``, docs/campaigns.md): a
protocol and its parameters, a population (which may drift), ``every``/``times`` and a device
budget. Each occurrence's estimate is printed against its day's truth, with how many devices
enrolled and refused, then each device's cumulative ε spend.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

from fedldp.client.api.client import ApiClient
from fedldp.client.campaign.drive import run_campaign
from fedldp.client.campaign.simulate import CampaignResult, simulate_campaign
from fedldp.client.campaign.store import STORE_FILE, DeviceStore
from fedldp.client.campaign.template import CampaignTemplate, load_template
from fedldp.client.cli.studies import DEFAULT_SERVER, remote
from fedldp.protocol.core.wire import MAX_BATCH

__all__ = ["CAMPAIGN_COMMANDS", "render_campaign"]


def render_campaign(result: CampaignResult, delta: float | None = None) -> str:
    """One line per occurrence (day, enrolled, refused, estimate, truth), then the spends (ε at
    ``delta`` for a central protocol's composed releases)."""
    lines = [f"{'occurrence':>10} {'day':>7} {'enrolled':>8} {'refused':>7} {'estimate':>24} truth"]
    for o in result.occurrences:
        estimate = "-" if o.estimate is None else _short(o.estimate)
        lines.append(
            f"{o.index:>10} {o.day:>7.3g} {o.enrolled:>8} {o.refused:>7} {estimate:>24} "
            f"{_short(o.truth)}"
        )
    s, b = result.spent, result.bound
    at = "" if delta is None else f" at δ {delta:g}"
    lines.append(
        f"cumulative ε{at} per device: min {s.min():.6g}, mean {s.mean():.6g}, max {s.max():.6g} "
        f"(the server's charge: min {b.min():.6g}, mean {b.mean():.6g}, max {b.max():.6g})"
    )
    return "\n".join(lines) + "\n"


def _short(value: float | list[float]) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(f"{v:.4g}" for v in value[:4]) + (", …]" if len(value) > 4 else "]")
    return f"{value:.6g}"


def _print(result: CampaignResult, as_json: bool, template: CampaignTemplate) -> None:
    if as_json:
        print(json.dumps({**result.as_json(), "devices": result.spent.tolist()}))
    else:
        delta = None if template.budget is None else template.budget.delta
        sys.stdout.write(render_campaign(result, delta))


def _run_simulate(args: argparse.Namespace) -> int:
    template = load_template(args.file)
    _print(simulate_campaign(template, args.seed), args.json, template)
    return 0


def _run_remote(args: argparse.Namespace) -> int:
    if args.batch is not None and not 1 <= args.batch <= MAX_BATCH:
        raise ValueError(f"--batch must lie in [1, {MAX_BATCH}]")
    if args.limit is not None and args.limit < 1:
        raise ValueError("--limit must be >= 1")
    template = load_template(args.file)
    result = asyncio.run(
        run_campaign(
            args.server,
            template,
            args.seed,
            args.store,
            name=args.name,
            batch=args.batch,
            admin_key=args.admin_key,
            limit=args.limit,
        )
    )
    _print(result, args.json, template)
    return 0


async def _show(server: str, campaign_id: str, device: str | None) -> str:
    async with ApiClient(server) as api:
        if device is not None:
            return (await api.device_budget(campaign_id, device)).model_dump_json()
        return (await api.campaign(campaign_id)).model_dump_json()


def _run_show(args: argparse.Namespace) -> int:
    text = asyncio.run(_show(args.server, args.id, None))
    if args.json:
        print(text)
        return 0
    view = json.loads(text)
    budget = (
        "none"
        if view["budget_epsilon"] is None
        else f"ε {view['budget_epsilon']:g}"
        + ("" if view.get("budget_delta") is None else f" at δ {view['budget_delta']:g}")
        + " per "
        + ("lifetime" if view["budget_period"] is None else f"{view['budget_period']:g} d")
    )
    lines = [
        f"campaign {view['id']}: {view['protocol']}, every {view['every']:g} d, "
        f"{len(view['occurrences'])} of {view['times']} occurrences opened, clock "
        f"{'-' if view['clock'] is None else format(view['clock'], 'g')}, budget {budget}",
        f"{'occurrence':>10} {'day':>7} {'phase':>10} {'devices':>8} {'estimate':>24} truth",
    ]
    for o in view["occurrences"]:
        estimate = "-" if o["estimate"] is None else _short(o["estimate"])
        truth = "-" if o["truth"] is None else _short(o["truth"])
        lines.append(
            f"{o['index']:>10} {o['day']:>7.3g} {o['phase']:>10} {o['n_participants']:>8} "
            f"{estimate:>24} {truth}"
        )
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def _run_budget(args: argparse.Namespace) -> int:
    text = asyncio.run(_show(args.server, args.id, args.device))
    if args.json:
        print(text)
        return 0
    view = json.loads(text)
    own = None if args.store is None else _own_charges(args.store, args.device)
    remaining = "unlimited" if view["remaining"] is None else format(view["remaining"], "g")
    delta = view.get("budget_delta")
    rule = (
        "by the server's charges"
        if delta is None
        else f"at δ {delta:g} (its releases composed by dp-accounting's PLD accountant)"
    )
    lines = [
        f"device {view['device']}: spent ε {view['spent_total']:g} in all {rule}, "
        f"{view['spent_window']:g} in the clock's window, {remaining} left there"
    ]
    if own is not None:
        total = math.fsum(charge for charge, _ in own.values())
        lines.append(f"  its own ledger ({args.store}): ε {total:g} in all")
    for s in view["spends"]:
        line = (
            f"  occurrence {s['occurrence']} (day {s['day']:g}): ε {s['epsilon']:g} "
            f"(declared {s['declared']:g}), ε {s['cumulative']:g} in all after it"
        )
        if own is not None and s["occurrence"] in own:
            charge, state = own[s["occurrence"]]
            line += f", its own charge {charge:g}" + ("" if state < 0 else f" (state {state})")
        lines.append(line)
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def _own_charges(folder: Path, device: str) -> dict[int, tuple[float, int]]:
    """A swarm device's own charges (occurrence → (ε, memoized state)) from the device store
    in ``folder`` (its id is d<slot>); ValueError for another id or a folder with no store."""
    if not device.startswith("d") or not device[1:].isdigit():
        raise ValueError(f"a swarm's device ids are d<slot>, not {device!r}")
    if not (folder / STORE_FILE).is_file():
        raise ValueError(f"no device store in {folder}")
    with DeviceStore(folder) as store:
        return store.charges_of(int(device[1:]))


def add_campaign_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "campaign",
        help="recurring collections over the same devices (a template on a schedule)",
        description="Run a campaign: one study template repeated on a schedule over the same "
        "devices, with per-device ε budgets (docs/campaigns.md).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  fedldp campaign simulate examples/campaigns/daily-mean.yaml --seed 1\n"
        "  fedldp campaign run examples/campaigns/daily-mean.yaml --server http://127.0.0.1:8000 "
        "\\\n      --seed 1 --store devices --limit 3",
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
    run = commands.add_parser(
        "run",
        help="each occurrence as a swarm against a server, the devices' state kept in a folder",
        description="Run the campaign in FILE against a server: create it there (once), then "
        "for each remaining occurrence ask the server to open it, let each device check its "
        "budget, admit the devices that accept (the server checks its own ledger) and run them "
        "as a swarm. The devices' ledgers live in STORE (an SQLite file): running the command "
        "again goes on where it stopped. Prints what campaign simulate prints, for the "
        "occurrences finished so far.",
    )
    run.add_argument("file", type=Path, metavar="FILE", help="campaign template (YAML/JSON)")
    run.add_argument(
        "--server", default=DEFAULT_SERVER, metavar="URL", help=f"default {DEFAULT_SERVER}"
    )
    run.add_argument(
        "--seed", type=int, required=True, metavar="S", help="run seed (fixes the devices)"
    )
    run.add_argument(
        "--store", type=Path, required=True, metavar="DIR", help="folder of the device store"
    )
    run.add_argument("--name", metavar="NAME", help="the campaign's name on the server")
    run.add_argument(
        "--batch",
        type=int,
        default=256,
        metavar="B",
        help="users per batch agent of each occurrence's swarm (default 256)",
    )
    run.add_argument(
        "--limit", type=int, metavar="N", help="stop after N occurrences (run again to go on)"
    )
    run.add_argument(
        "--admin-key",
        default=os.environ.get("FEDLDP_ADMIN_KEY"),
        metavar="KEY",
        help="X-Admin-Key for creating the campaign and opening occurrences "
        "(default $FEDLDP_ADMIN_KEY)",
    )
    run.add_argument(
        "--json", action="store_true", help="one JSON object, with every device's spend"
    )
    run.set_defaults(handler=remote(_run_remote))
    show = commands.add_parser(
        "show",
        help="a server's campaign: its clock and each occurrence's study and estimate",
        description="Show a campaign held by a server: its schedule, clock and budget, and each "
        "opened occurrence's day, study phase, devices and estimate.",
    )
    show.add_argument("id", metavar="ID", help="the campaign's id")
    budget = commands.add_parser(
        "budget",
        help="a device's ε spend over a server's campaign",
        description="Show what the server charged a device in each occurrence of a campaign "
        "(the protocol's server-side charge rule, docs/longitudinal.md §5) and the ε it "
        "declared, its total after each, and what is left of its budget in the window of the "
        "campaign's clock; with --store, the device's own charges too (its own rule, which "
        "knows its memoized states). A central protocol's releases are composed at the "
        "campaign's δ by dp-accounting's PLD accountant: the totals are ε at that δ.",
    )
    budget.add_argument("id", metavar="ID", help="the campaign's id")
    budget.add_argument("device", metavar="DEVICE", help="the device's id (d<slot> for a swarm's)")
    budget.add_argument(
        "--store",
        type=Path,
        metavar="DIR",
        help="also the device's own charges, from the device store of fedldp campaign run",
    )
    for command, handler in ((show, _run_show), (budget, _run_budget)):
        command.add_argument(
            "--server", default=DEFAULT_SERVER, metavar="URL", help=f"default {DEFAULT_SERVER}"
        )
        command.add_argument("--json", action="store_true", help="the server's answer as JSON")
        command.set_defaults(handler=remote(handler))


CAMPAIGN_COMMANDS = [add_campaign_parser]
