"""What starting fedldp imports: the catalogue is imported by every CLI command and server worker,
so what it pulls in is paid at each start."""

from __future__ import annotations

import subprocess
import sys


def test_starting_the_server_or_the_cli_does_not_import_scipy_stats() -> None:
    """``scipy.stats`` takes 0.3 s to import: the catalogue's modules use ``scipy.special`` (the
    same functions underneath), and the few that need ``scipy.stats`` import it where used."""
    probe = (
        "import sys, fedldp.server.web.app, fedldp.client.cli.main, fedldp.protocol.catalogue; "
        "print(sorted(m for m in sys.modules if m.startswith('scipy.stats')))"
    )
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "[]"
