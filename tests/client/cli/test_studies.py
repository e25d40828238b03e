"""``fedldp.client.cli.studies``: study ids by unique prefix; the retry policy of ``--timeout``."""

from __future__ import annotations

import argparse
import json
from typing import Any

import httpx
import pytest

from fedldp.client.api.client import ApiClient, InvalidRequestError, NotFoundError
from fedldp.client.api.retry import stderr_notice
from fedldp.client.cli.studies import resolve_study_id, retry_policy

IDS = ["3fa0" + "0" * 28, "3fb1" + "1" * 28, "9c00" + "2" * 28]


def listing(request: httpx.Request) -> httpx.Response:
    assert request.url.path == "/v1/studies"
    studies: list[dict[str, Any]] = [
        {
            "id": i,
            "name": None,
            "protocol": "user-mean",
            "params": {},
            "trust": "local",
            "phase": "finished",
            "seed": 1,
            "n_participants": 0,
            "enrollment_target": None,
            "enrollment_deadline": None,
            "current_round": None,
            "rounds": [],
            "round_deadline_s": 60.0,
            "quorum": 1.0,
            "epsilon_min": 1e-6,
            "epsilon_max": 1e3,
            "warnings": [],
            "failure_reason": None,
            "created_at": "2026-01-01T00:00:00Z",
        }
        for i in IDS
    ]
    return httpx.Response(200, content=json.dumps({"studies": studies}))


async def resolve(given: str) -> str:
    async with ApiClient("http://fedldp.test", transport=httpx.MockTransport(listing)) as api:
        return await resolve_study_id(api, given)


@pytest.mark.parametrize(("given", "expected"), [("3fa", IDS[0]), ("3FB1", IDS[1]), ("9", IDS[2])])
async def test_a_unique_prefix_names_its_study(given: str, expected: str) -> None:
    assert await resolve(given) == expected


async def test_a_whole_id_is_taken_as_it_is_without_listing() -> None:
    unknown = "f" * 32
    assert await resolve(unknown) == unknown  # the server answers unknown_study for it


@pytest.mark.parametrize("given", ["3f", "3", ""])
async def test_an_ambiguous_or_empty_prefix_is_a_clear_error(given: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        await resolve(given)
    assert info.value.code == "ambiguous_study_id"
    if given:
        assert f"2 studies start with {given!r}" in info.value.detail
        assert IDS[0] in info.value.detail
        assert IDS[1] in info.value.detail


async def test_a_prefix_of_no_study_is_unknown() -> None:
    with pytest.raises(NotFoundError) as info:
        await resolve("abc")
    assert info.value.code == "unknown_study"


def test_timeout_bounds_the_retries_by_time() -> None:
    default = retry_policy(argparse.Namespace(timeout=None))
    assert (default.deadline_s, default.notify) == (None, stderr_notice)
    bounded = retry_policy(argparse.Namespace(timeout=2.5))
    assert bounded.deadline_s == 2.5
    assert bounded.notify is stderr_notice
    with pytest.raises(ValueError, match="--timeout"):
        retry_policy(argparse.Namespace(timeout=-1.0))
