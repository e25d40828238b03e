"""A swarm whose study is still running once its users reported (client/swarm/run.py
``final_result``): a round with fewer reports than its quorum waits for its deadline, so the
swarm stops with ``not_finished`` naming what to do (a shorter ``--round-deadline``, or following
the study with ``fedldp studies watch``), not the server's bare answer."""

from __future__ import annotations

from typing import cast

import pytest

from fedldp.client.api.client import ApiClient
from fedldp.client.api.errors import PhaseError, SwarmError
from fedldp.client.swarm.run import final_result


class Running:
    """The part of ApiClient ``final_result`` uses: a study whose result is never ready."""

    def __init__(self) -> None:
        self.asked = 0

    async def result(self, study_id: str) -> None:
        self.asked += 1
        raise PhaseError(
            "not_finished", f"study {study_id} is running; its result is not ready", 409
        )


async def test_a_study_still_running_after_the_patience_names_the_deadline_and_watch() -> None:
    api = Running()
    with pytest.raises(SwarmError) as caught:
        await final_result(cast(ApiClient, api), "6f1c", patience_s=0.0)
    assert caught.value.code == "not_finished"
    assert "study 6f1c is running" in caught.value.detail
    assert "--round-deadline" in caught.value.detail
    assert "fedldp studies watch 6f1c" in caught.value.detail
    assert api.asked >= 1


async def test_another_refusal_is_the_servers() -> None:
    class Gone:
        async def result(self, study_id: str) -> None:
            raise PhaseError("study_not_running", "no", 409)

    with pytest.raises(PhaseError):
        await final_result(cast(ApiClient, Gone()), "6f1c", patience_s=0.0)
