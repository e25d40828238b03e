"""``fedldp`` writing into a pipe whose reader has gone (``fedldp reproduce --list | head``):
every command ends quietly, with the status of a Unix tool that SIGPIPE ended (client/cli/main.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

FEDLDP = [
    sys.executable,
    "-c",
    "import sys; from fedldp.client.cli.main import main; sys.exit(main())",
]


SIGPIPED = 128 + signal.SIGPIPE


@pytest.mark.parametrize(
    ("argv", "status"),
    [
        (["reproduce", "--list"], SIGPIPED),  # the report of issue 23
        (["protocols", "--json"], SIGPIPED),
        (
            ["simulate", "--protocol", "hetero-mean-rr", "--users", "500", "--seed", "1"],
            SIGPIPED,
        ),
        # argparse writes its help and exits before any handler runs; it ignores a failed write
        # (ArgumentParser._print_message), so the status stays its own
        (["--help"], 0),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else str(v),
)
def test_a_closed_pipe_ends_a_command_quietly(argv: list[str], status: int) -> None:
    """The reader closes its end before the command writes anything (as ``head`` does once it
    has its lines; closing it first makes the broken pipe certain, not a race with the pipe's
    buffer): no message, no traceback, and the exit status of a Unix tool that SIGPIPE ended."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [*FEDLDP, *argv], stdout=write, stderr=subprocess.PIPE, text=True, timeout=120
        )
    finally:
        os.close(write)
    assert done.stderr == ""
    assert done.returncode == status
