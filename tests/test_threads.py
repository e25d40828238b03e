"""BLAS threads are set where processes start (fedldp/threads.py), never by importing fedldp."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from fedldp.threads import VARIABLES


def _probe(code: str, env: dict[str, str]) -> Any:
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    return json.loads(run.stdout)


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    return {**env, **extra}


def test_importing_fedldp_sets_nothing() -> None:
    code = (
        "import json, os, fedldp.protocol.catalogue, fedldp.client.cli.main, "
        "fedldp.server.web.app; "
        f"print(json.dumps({{v: os.environ.get(v) for v in {VARIABLES!r}}}))"
    )
    assert _probe(code, _clean_env()) == dict.fromkeys(VARIABLES)


def test_a_process_start_takes_one_blas_thread_unless_the_environment_says_otherwise() -> None:
    code = (
        "import json, os, numpy\n"
        "from threadpoolctl import threadpool_info\n"
        "from fedldp.threads import one_blas_thread\n"
        "one_blas_thread()\n"
        "blas = [i['num_threads'] for i in threadpool_info() if i['user_api'] == 'blas']\n"
        f"print(json.dumps({{'env': {{v: os.environ.get(v) for v in {VARIABLES!r}}}, "
        "'blas': blas}))"
    )
    # numpy loaded first: the library is limited at run time, and the children get the variables
    started = _probe(code, _clean_env())
    assert started["env"] == dict.fromkeys(VARIABLES, "1")
    assert started["blas"]
    assert set(started["blas"]) == {1}
    given = _probe(code, _clean_env(OPENBLAS_NUM_THREADS="2"))
    assert given["env"] == {**dict.fromkeys(VARIABLES, "1"), "OPENBLAS_NUM_THREADS": "2"}
    assert set(given["blas"]) == {2}
