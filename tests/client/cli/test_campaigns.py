"""``fedldp campaign simulate`` (client/cli/campaigns.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedldp.client.campaign.simulate import simulate_campaign
from fedldp.client.campaign.template import load_template
from fedldp.client.cli.main import main

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
