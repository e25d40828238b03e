"""``fedldp protocols`` shows each numeric parameter's range (client/cli/main.py), the one the
server checks at create (protocol/core/base/bounds.py)."""

from __future__ import annotations

import json

import pytest

from fedldp.client.cli.main import main
from fedldp.protocol.catalogue import CATALOGUE


def test_protocols_show_each_numeric_range(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["protocols", "--json"]) == 0
    listed = {p["name"]: p for p in json.loads(capsys.readouterr().out)["protocols"]}
    laplace = {q["name"]: q for q in listed["hetero-mean-laplace"]["parameters"]}
    assert laplace["hi"]["range"] == "[-1e+50, 1e+50]"
    assert laplace["beta"]["range"] == "[1e-12, 1)"  # ")": the bound itself is refused
    assert laplace["clip"]["range"] is None  # a boolean
    for name, protocol in CATALOGUE.items():
        properties = protocol.params_model.model_json_schema()["properties"]
        for q in listed[name]["parameters"]:
            options = properties[q["name"]].get("anyOf", [properties[q["name"]]])
            numeric = any(o.get("type") in ("number", "integer") for o in options)
            assert (q["range"] is not None) == numeric, (name, q)
            assert numeric <= ("inf" not in (q["range"] or "")), (name, q)  # both ends finite
    assert main(["protocols"]) == 0
    assert "beta=0.05 in [1e-12, 1)" in capsys.readouterr().out
