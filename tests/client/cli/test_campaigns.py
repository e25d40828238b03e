"""``fedldp campaign simulate`` (client/cli/campaigns.py)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from fedldp.client.campaign.simulate import simulate_campaign
from fedldp.client.campaign.template import load_template
from fedldp.client.cli.main import main
from tests.live import sqlite_server

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "campaigns" / "daily-mean.yaml"


def test_campaign_simulate_prints_what_simulate_campaign_returns(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["campaign", "simulate", str(EXAMPLE), "--seed", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    expected = simulate_campaign(load_template(EXAMPLE), 2)
    assert out["occurrences"] == [o.as_json() for o in expected.occurrences]
    assert out["devices"] == expected.spent.tolist()
    assert main(["campaign", "simulate", str(EXAMPLE), "--seed", "2"]) == 0
    table = capsys.readouterr().out
    assert table.count("\n") == 32  # a header, 30 occurrences, the spends
    assert "cumulative ε per device: min 30, mean 30, max 30" in table


def test_the_central_example_admits_what_its_comment_says(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """examples/campaigns/central-weekly-mean.yaml: a lifetime budget of 2 at δ = 1e-6 admits
    five of seven daily central-wme-vector releases, composed by the PLD accountant."""
    central = EXAMPLE.with_name("central-weekly-mean.yaml")
    assert main(["campaign", "simulate", str(central), "--seed", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [o["enrolled"] for o in out["occurrences"]] == [20_000] * 5 + [0, 0]
    assert 1.9 < min(out["devices"]) == max(out["devices"]) <= 2.0


@pytest.mark.parametrize(
    "example", sorted(EXAMPLE.parent.glob("*.yaml")), ids=lambda path: path.stem
)
def test_every_example_campaign_runs(example: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["campaign", "simulate", str(example), "--seed", "1"]) == 0
    assert "cumulative ε" in capsys.readouterr().out


def test_a_bad_campaign_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("protocol: classic-duchi\npopulation: {users: 10}\nevery: daily\ntimes: 3\n")
    assert main(["campaign", "simulate", str(bad), "--seed", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert err.count("\n") == 1
    assert "1d, 12h" in err


SMALL = """\
protocol: classic-duchi
population: {users: 300, distribution: two-point, epsilon-mix: "0.5:0.4,1:0.6"}
every: 12h
times: 3
budget: {epsilon: 1.5, period: 1d}
"""


@pytest.mark.e2e
def test_campaign_run_show_and_budget_against_a_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "small.yaml"
    path.write_text(SMALL)
    with sqlite_server(tmp_path) as server:
        run = ["campaign", "run", str(path), "--server", server.url, "--seed", "3"]
        run += ["--store", str(tmp_path / "devices"), "--json"]
        assert main([*run, "--limit", "2"]) == 0
        first = json.loads(capsys.readouterr().out)
        assert [o["index"] for o in first["occurrences"]] == [0, 1]
        assert main(run) == 0
        done = json.loads(capsys.readouterr().out)
        expected = simulate_campaign(load_template(path), 3)
        assert [o["enrolled"] for o in done["occurrences"]] == [300, 120, 300]
        assert [o["enrolled"] for o in done["occurrences"]] == [
            o.enrolled for o in expected.occurrences
        ]
        assert done["devices"] == expected.spent.tolist()
        with httpx.Client(base_url=server.url) as http:
            (campaign,) = http.get("/v1/campaigns").json()["campaigns"]
        assert main(["campaign", "show", campaign["id"], "--server", server.url]) == 0
        shown = capsys.readouterr().out.splitlines()
        assert "3 of 3 occurrences opened, clock 1, budget ε 1.5 per 1 d" in shown[0]
        assert [line.split()[2] for line in shown[2:]] == ["finished"] * 3
        # each occurrence's truth, as the driver declared it (the day's law's mean)
        assert [float(line.split()[5]) for line in shown[2:]] == [
            float(f"{o.truth:.6g}") for o in expected.occurrences if isinstance(o.truth, float)
        ]
        assert main(["campaign", "budget", campaign["id"], "d0", "--server", server.url]) == 0
        budget = capsys.readouterr().out
        assert budget.startswith("device d0: spent ε ")
        assert budget.count("  occurrence ") in (2, 3)  # ε 1: days 0 and 1; ε 0.5: all three
        store = ["--store", str(tmp_path / "devices")]
        assert (
            main(["campaign", "budget", campaign["id"], "d0", "--server", server.url, *store]) == 0
        )
        own = capsys.readouterr().out
        assert f"its own ledger ({tmp_path / 'devices'}): ε {expected.spent[0]:g} in all" in own
        assert own.count(", its own charge ") == budget.count("  occurrence ")
        assert main(["campaign", "show", "nope", "--server", server.url]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: unknown_campaign: ")
        assert err.count("\n") == 1


CENTRAL = """\
protocol: central-wme-vector
population: {users: 100, distribution: gaussian, mean: 0.1, dimension: 3}
every: 1d
times: 3
budget: {epsilon: 1.3, delta: 1e-6}
"""


@pytest.mark.e2e
def test_a_central_campaigns_budget_shows_the_composed_epsilon_at_delta(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """central-wme-vector at ε = 1, ε 1.3 at δ 1e-6 for life: two releases compose to 1.17,
    three to 1.48, so the third occurrence admits nobody; ``campaign budget`` prints the
    composed ε after each occurrence, the server's numbers."""
    path = tmp_path / "central.yaml"
    path.write_text(CENTRAL)
    with sqlite_server(tmp_path) as server:
        run = ["campaign", "run", str(path), "--server", server.url, "--seed", "3"]
        assert main([*run, "--store", str(tmp_path / "devices"), "--json"]) == 0
        done = json.loads(capsys.readouterr().out)
        assert [o["enrolled"] for o in done["occurrences"]] == [100, 100, 0]
        with httpx.Client(base_url=server.url) as http:
            (campaign,) = http.get("/v1/campaigns").json()["campaigns"]
            view = http.get(f"/v1/campaigns/{campaign['id']}/devices/d0/budget").json()
        assert main(["campaign", "show", campaign["id"], "--server", server.url]) == 0
        assert "budget ε 1.3 at δ 1e-06 per lifetime" in capsys.readouterr().out
        assert main(["campaign", "budget", campaign["id"], "d0", "--server", server.url]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[0].startswith(f"device d0: spent ε {view['spent_total']:g} in all at δ 1e-06")
        cumulative = [s["cumulative"] for s in view["spends"]]
        assert [line.rsplit("ε ", 1)[1] for line in lines[1:]] == [
            f"{c:g} in all after it" for c in cumulative
        ]
        assert cumulative[-1] == done["devices"][0]
    assert main(["campaign", "simulate", str(path), "--seed", "3"]) == 0
    assert f"cumulative ε at δ 1e-06 per device: min {cumulative[-1]:.6g}," in (
        capsys.readouterr().out
    )
