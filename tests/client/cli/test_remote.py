"""``fedldp swarm``, ``fedldp studies`` and ``fedldp run`` against a real server process;
``fedldp server`` is that process."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fedldp.client.cli.main import main
from fedldp.client.population.build import PopulationSpec, build_population
from fedldp.client.simulate import fill_from_population, simulate
from fedldp.client.swarm.server_process import free_port, sqlite_url
from fedldp.protocol.catalogue import get_protocol
from tests.live import sqlite_server

pytestmark = pytest.mark.e2e

POPULATION = ["--users", "600", "--distribution", "two-point", "--mean", "0.2"]
MIX = ["--epsilon-mix", "0.5:0.5,2:0.5"]
FEDLDP = [
    sys.executable,
    "-c",
    "import sys; from fedldp.client.cli.main import main; sys.exit(main())",
]
"""The ``fedldp`` command line as a program (its console script, without depending on PATH)."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with sqlite_server(tmp_path_factory.mktemp("cli")) as process:
        yield process.url


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def simulated(name: str, spec: PopulationSpec, seed: int) -> Any:
    protocol = get_protocol(name)
    population = build_population(spec, seed)
    params = protocol.parse_params(fill_from_population(protocol, {}, population))
    return simulate(protocol, params, population, seed)


def test_swarm_json_matches_simulate_and_studies_show_it(
    server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--protocol", "hetero-mean-rr", *POPULATION, *MIX, "--seed", "3", "--json"]
    code, out, _ = run_cli(capsys, "simulate", *args)
    assert code == 0
    local = json.loads(out)
    swarm_args = ["--server", server, "--create", "hetero-mean-rr", *POPULATION, *MIX]
    code, out, err = run_cli(
        capsys, "swarm", *swarm_args, "--seed", "3", "--batch", "200", "--json", "--quiet"
    )
    assert code == 0, err
    remote = json.loads(out)
    assert set(local) - {"elapsed_s"} <= set(remote)
    assert remote["estimate"] == pytest.approx(local["estimate"], rel=1e-9)
    assert remote["truth"] == local["truth"]
    assert remote["epsilon_spent"] == local["epsilon_spent"]
    assert remote["users_served"] == 600  # it ran every user itself
    rounds = remote["diagnostics"]["participation"]["rounds"]
    assert remote["stats"]["reports"] == sum(r["received"] for r in rounds)
    assert (remote["stats"]["dropped"], remote["stats"]["refused"]) == (0, 0)
    study_id = remote["study_id"]

    code, out, _ = run_cli(capsys, "studies", "list", "--server", server, "--json")
    assert code == 0
    assert study_id in [s["id"] for s in json.loads(out)]
    code, out, _ = run_cli(capsys, "studies", "show", study_id, "--server", server, "--json")
    assert code == 0
    shown = json.loads(out)
    assert (shown["id"], shown["phase"], shown["n_participants"]) == (study_id, "finished", 600)
    assert shown["enrollment"] == "leased"  # the swarm enrolls its users through leases only
    code, out, _ = run_cli(capsys, "studies", "show", study_id, "--server", server)
    assert code == 0
    assert "leased (only holders of a lease enroll)" in out
    # the table names the protocol code the study was created with, as --json does
    assert f"{shown['protocol_origin']} {shown['protocol_version']}" in out
    code, out, _ = run_cli(
        capsys, "studies", "result", study_id[:8], "--server", server, "--json"
    )  # a unique prefix, as the CLI accepts everywhere it takes an id
    assert code == 0
    assert json.loads(out)["estimate"] == remote["estimate"]
    code, out, _ = run_cli(capsys, "studies", "list", "--server", server)
    assert code == 0
    assert study_id in out  # whole, on one line
    code, out, _ = run_cli(capsys, "studies", "watch", study_id, "--server", server)
    assert code == 0
    assert "estimate" in out
    # piped or redirected, the rounds table ends its line before the result's title begins
    assert any(line.strip() == "fedldp · hetero-mean-rr" for line in out.splitlines()), out


def test_cli_errors_are_one_line_with_the_code(
    server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli(capsys, "studies", "show", "nosuchstudy", "--server", server)
    assert code != 0
    assert "unknown_study" in err
    assert "Traceback" not in err
    code, _, err = run_cli(
        capsys, "swarm", "--server", server, "--create", "nope", "--users", "9", "--seed", "1"
    )
    assert code == 2
    assert "nope" in err
    assert "Traceback" not in err
    swarm = ["swarm", "--server", server, "--create", "user-mean", "--users", "9", "--seed", "1"]
    for extra, says in (
        (["--threads", "2"], "threads apply to batch mode"),
        (["--threads", "0", "--batch", "3"], "threads must be >= 1, got 0"),
        (["--batch", "0"], "--batch must lie in [1, 50000], got 0"),
    ):
        code, _, err = run_cli(capsys, *swarm, *extra)
        assert code == 2
        assert err.startswith(f"error: {says}"), err
    with pytest.raises(SystemExit) as parsed:  # argparse's refusal, before anything runs
        run_cli(capsys, *swarm, "--batch", "many")
    assert parsed.value.code == 2
    says = "argument --batch: invalid batch size 'many': give a number of users or auto"
    assert capsys.readouterr().err.startswith(f"error: {says}")


@pytest.mark.parametrize(
    ("command", "extra", "batch"),
    [
        ("swarm", ["--batch"], 25_000),  # 10^5 users, 2 threads: two blocks per thread
        ("swarm", ["--batch", "auto", "--processes", "2"], 12_500),
        ("swarm", ["--batch", "auto", "--users", "1000"], 10_000),  # at least MIN_BLOCK
        ("swarm", ["--batch", "auto", "--users", "1000000"], 50_000),  # at most MAX_BATCH
        ("swarm", ["--batch", "777"], 777),
        ("swarm", [], None),  # per user
        ("run", [], 25_000),  # batch mode by default, sized for the population
    ],
)
def test_the_batch_size_is_worked_out_for_the_population(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
    extra: list[str],
    batch: int | None,
) -> None:
    """``--batch`` alone, ``--batch auto`` and ``fedldp run`` without it: blocks of
    ``auto_batch`` users (two per privatizing thread, 10,000 to 50,000), what run_swarm gets."""
    from fedldp.client.cli import remote

    async def fake_run_swarm(*args: Any, **kw: Any) -> Any:
        raise ValueError(f"run_swarm got batch={kw['batch']}")

    monkeypatch.setattr(remote, "run_swarm", fake_run_swarm)
    where = ["--server", "http://127.0.0.1:9"] if command == "swarm" else []
    argv = [command, *where, "--users", "100000", "--seed", "1", "--threads", "2", *extra]
    if command == "swarm":
        argv += ["--create", "user-mean"]
    if batch is None:  # threads go with batch mode only
        argv.remove("--threads")
        argv.remove("2")
    code, _, err = run_cli(capsys, *argv)
    assert code == 2
    assert err.startswith(f"error: run_swarm got batch={batch}"), err


def test_a_swarm_with_another_population_is_refused_not_answered(
    server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 14: the same name and seed with another population used to join the finished
    study and print its old estimate beside the new truth, with exit code 0."""
    joined = ["swarm", "--server", server, "--create", "hetero-mean-rr", "--name", "same"]
    common = [*joined, "--lease", "--users", "300", "--distribution", "two-point", "--seed", "8"]
    code, out, err = run_cli(capsys, *common, "--mean", "0.2", "--batch", "--json", "--quiet")
    assert code == 0, err
    assert json.loads(out)["truth"] == pytest.approx(0.2, abs=0.2)
    code, out, err = run_cli(capsys, *common, "--mean", "-0.6", "--batch", "--json", "--quiet")
    assert code != 0
    assert "study_mismatch" in err
    assert "population_digest" in err  # the field that differs
    assert out == ""  # no estimate, no truth
    assert "Traceback" not in err


def test_swarm_creates_a_study_with_an_epsilon_range(
    server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    create = ["swarm", "--server", server, "--create", "central-wme", *POPULATION, "--seed", "4"]
    code, _, err = run_cli(capsys, *create, "--epsilon-min", "2", "--batch", "--quiet")
    assert code != 0
    assert "epsilon_out_of_range" in err  # the population's ε = 1 lies below the minimum
    assert "Traceback" not in err
    bounds = ["--epsilon-min", "0.5", "--epsilon-max", "2"]
    code, out, err = run_cli(capsys, *create, *bounds, "--batch", "--json", "--quiet")
    assert code == 0, err
    study_id = json.loads(out)["study_id"]
    code, out, _ = run_cli(capsys, "studies", "show", study_id, "--server", server, "--json")
    assert code == 0
    shown = json.loads(out)
    assert (shown["epsilon_min"], shown["epsilon_max"], shown["phase"]) == (0.5, 2.0, "finished")


def test_run_starts_a_server_runs_the_swarm_and_agrees(capsys: pytest.CaptureFixture[str]) -> None:
    spec = ["--users", "2000", "--samples", "16", "--distribution", "two-point", "--mean", "0.3"]
    code, out, err = run_cli(capsys, "run", *spec, "--seed", "5", "--json", "--quiet")
    assert code == 0, err
    remote = json.loads(out)
    local = simulated(
        "user-mean",
        PopulationSpec(users=2000, samples=16, distribution="two-point", mean=0.3),
        5,
    )
    assert remote["estimate"] == pytest.approx(local.result.estimate, rel=1e-9)
    assert remote["truth"] == pytest.approx(0.3)


def test_run_keeps_no_database_unless_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(capsys, "run", "--users", "1000", "--seed", "1", "--quiet", "--json")
    assert code == 0, err
    assert not list(tmp_path.glob("*.db"))


def test_a_classification_swarm_reports_its_excess_risk_and_predicts(
    server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The learning path from the terminal: the swarm's JSON carries the same task evaluation as
    ``simulate`` (excess risk, not the raw label mean), and ``studies predict`` answers from the
    finished study with the cell predictions of its result."""
    population = [
        "--users", "4000", "--samples", "16", "--distribution", "binned-classification",
        "--epsilon", "2",
    ]  # fmt: skip
    params = ["--param", "bins_per_axis=4"]
    code, out, _ = run_cli(
        capsys, "simulate", "--protocol", "user-classify", *population, *params, "--seed", "8",
        "--json",
    )  # fmt: skip
    assert code == 0
    local = json.loads(out)
    code, out, err = run_cli(
        capsys, "swarm", "--server", server, "--create", "user-classify", *population, *params,
        "--seed", "8", "--batch", "1000", "--json", "--quiet",
    )  # fmt: skip
    assert code == 0, err
    remote = json.loads(out)
    assert remote["estimate"] == local["estimate"]
    assert remote["error_norm"] == "excess risk"
    assert remote["evaluation"] == pytest.approx(local["evaluation"])
    study_id = remote["study_id"]
    code, out, err = run_cli(
        capsys, "studies", "predict", study_id, "--features", "0.1;0.4;0.6;0.9",
        "--server", server, "--json",
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["predictions"] == remote["estimate"]
    code, out, err = run_cli(
        capsys, "studies", "predict", study_id, "--features", "0.1;0.9", "--server", server
    )
    assert code == 0, err
    assert "prediction" in out
    code, _, err = run_cli(
        capsys, "studies", "predict", study_id, "--features", "0.1,0.2", "--server", server
    )
    assert code == 2
    assert "invalid_request" in err


def test_an_unreachable_server_is_announced_and_timeout_gives_up(
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    began = time.monotonic()
    code, _, err = run_cli(capsys, "studies", "list", "--server", url, "--timeout", "1.5")
    took = time.monotonic() - began
    assert code == 1
    lines = err.strip().splitlines()
    assert lines[0].startswith(f"GET {url}/v1/studies: retrying in ")
    assert "(connection refused; giving up after 1.5 s)…" in lines[0]
    assert lines[-1].startswith("error: unreachable: ")
    assert "connection refused" in lines[-1]
    assert took < 1.5 + 2.0  # the deadline, and the start of the interpreter's work


@pytest.mark.parametrize("workers", [None, 2])
def test_sigkill_of_fedldp_server_leaves_nothing_serving(
    tmp_path: Path, workers: int | None
) -> None:
    """``fedldp server`` is the server process (exec), not a parent of one: killing the pid the
    caller holds, with a signal it cannot forward, frees the port. With ``--workers 2`` that pid
    supervises two workers, which stop when it dies."""
    port = free_port()
    command = [
        *FEDLDP,
        "server",
        "--port",
        str(port),
        "--database-url",
        sqlite_url(tmp_path / "k.db"),
        *([] if workers is None else ["--workers", str(workers)]),
    ]
    with (tmp_path / "server.log").open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=2.0) as http:
            while True:
                assert process.poll() is None, (tmp_path / "server.log").read_text()
                try:
                    if http.get("/health").status_code == 200:
                        break
                except httpx.TransportError:
                    assert time.monotonic() < deadline, "the server never became healthy"
                    time.sleep(0.1)
        children = Path(f"/proc/{process.pid}/task/{process.pid}/children")
        kids = [int(c) for c in children.read_text().split()] if children.exists() else []
        assert len(kids) >= (workers or 0)  # the workers (and multiprocessing's tracker)
        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)
        refused_by = time.monotonic() + 5
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
            except ConnectionRefusedError:
                break
            assert time.monotonic() < refused_by, "something still serves the port"
            time.sleep(0.05)
        gone_by = time.monotonic() + 10
        while any(Path(f"/proc/{kid}").exists() for kid in kids):
            assert time.monotonic() < gone_by, "a worker outlived its supervisor"
            time.sleep(0.05)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_fedldp_server_passes_the_protocols_it_offers_on(tmp_path: Path) -> None:
    """``--protocols`` reaches the server, which stops at once on a name not installed."""
    run = subprocess.run(
        [
            *FEDLDP,
            "server",
            "--protocols",
            "user-mean,plug-missing",
            "--database-url",
            sqlite_url(tmp_path / "never.db"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 1
    assert run.stderr.startswith("error: unknown_protocol: ")
    assert "plug-missing" in run.stderr
    assert not (tmp_path / "never.db").exists()
