"""The task endpoints (server/services/tasks.py): ``hold`` (a long poll answered as soon as the
study moves on) and ``final`` on a report task (no later round has the participant, by the fixed
plan); a batch's answer lists exactly those who have not reported yet."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
from pydantic import TypeAdapter

from fedldp.client.population.features import synthetic_population
from fedldp.protocol.core.wire import (
    Enrollment,
    EnrollmentBatch,
    Task,
    TaskBatch,
    TaskDone,
    TaskReport,
    TaskWait,
)
from fedldp.server.services import tasks as tasks_module
from tests.server.helpers import (
    batch_tasks,
    create_study,
    enroll,
    expect_error,
    start,
    submit_batch,
)

TASK: TypeAdapter[Task] = TypeAdapter(Task)


async def ask(
    client: httpx.AsyncClient, study_id: str, e: Enrollment, hold: float | None = None
) -> httpx.Response:
    query = "" if hold is None else f"?hold={hold}"
    return await client.get(
        f"/v1/studies/{study_id}/participants/{e.participant_id}/task{query}",
        headers={"Authorization": f"Bearer {e.token}"},
    )


async def task_of(client: httpx.AsyncClient, study_id: str, e: Enrollment) -> Task:
    answer = await ask(client, study_id, e)
    assert answer.status_code == 200, answer.text
    return TASK.validate_json(answer.content)


async def user_mean(client: httpx.AsyncClient) -> tuple[str, list[Enrollment], list[Enrollment]]:
    """user-mean with 12 participants, started: its stage-one and stage-two cohorts."""
    study = await create_study(client, "user-mean", {"samples_per_user": 4})
    people = await enroll(client, study.id, [1.0] * 12)
    await start(client, study.id)
    tasks = [await task_of(client, study.id, e) for e in people]
    one = [e for e, t in zip(people, tasks, strict=True) if isinstance(t, TaskReport)]
    two = [e for e, t in zip(people, tasks, strict=True) if isinstance(t, TaskWait)]
    assert len(one) == len(two) == 6
    return study.id, one, two


async def test_a_held_task_answers_as_soon_as_the_next_round_opens(
    client: httpx.AsyncClient,
) -> None:
    study_id, one, two = await user_mean(client)
    expect_error(await ask(client, study_id, two[0], hold=11), 422, "invalid_request")
    expect_error(await ask(client, study_id, two[0], hold=-1), 422, "invalid_request")
    started = time.monotonic()
    at_once = TASK.validate_json((await ask(client, study_id, two[0], hold=0)).content)
    assert isinstance(at_once, TaskWait)  # hold=0 (the default): the old answer, not held
    assert time.monotonic() - started < 1
    held = asyncio.create_task(ask(client, study_id, two[0], hold=5))
    await asyncio.sleep(0.3)
    assert not held.done()  # stage two can only wait while stage one runs: held back
    started = time.monotonic()
    await submit_batch(client, study_id, 0, "histogram", one, [[0.5]] * len(one))
    answer = TASK.validate_json((await held).content)
    assert isinstance(answer, TaskReport)
    assert answer.round == 1
    assert time.monotonic() - started < 3  # woken by the transition, not by the hold's end
    started = time.monotonic()
    again = TASK.validate_json((await ask(client, study_id, two[0], hold=5)).content)
    assert isinstance(again, TaskReport)  # it has work: no holding
    assert time.monotonic() - started < 1


async def test_a_held_task_that_stays_waiting_answers_wait_at_the_hold_end(
    client: httpx.AsyncClient,
) -> None:
    study_id, _, two = await user_mean(client)
    started = time.monotonic()
    answer = TASK.validate_json((await ask(client, study_id, two[0], hold=0.6)).content)
    assert isinstance(answer, TaskWait)
    assert 0.6 <= time.monotonic() - started < 3


async def test_user_means_two_stages_are_each_final(client: httpx.AsyncClient) -> None:
    """user-mean's stages have disjoint cohorts: every report task is the participant's last."""
    study_id, one, two = await user_mean(client)
    first = [await task_of(client, study_id, e) for e in one]
    assert all(isinstance(t, TaskReport) and t.round == 0 and t.final for t in first)
    await submit_batch(client, study_id, 0, "histogram", one, [[0.5]] * len(one))
    second = [await task_of(client, study_id, e) for e in two]
    assert all(isinstance(t, TaskReport) and t.round == 1 and t.final for t in second)


async def test_a_one_round_protocol_s_report_is_final(client: httpx.AsyncClient) -> None:
    study = await create_study(client, "hetero-mean-rr")
    people = await enroll(client, study.id, [1.0, 0.5, 2.0])
    await start(client, study.id)
    for e in people:
        found = await task_of(client, study.id, e)
        assert isinstance(found, TaskReport)
        assert found.final


async def histoftree_started(client: httpx.AsyncClient) -> tuple[str, list[Enrollment]]:
    """A started histoftree study of 400 participants: everyone reports a label (round 0),
    then a cell (round 1)."""
    population = synthetic_population(400, 3, 4.0, mask="aligned", private=2, test_size=10)
    study = await create_study(client, "histoftree", population.params(depth=2, bins=2), seed=9)
    body = {
        "epsilons": population.epsilon.tolist(),
        "metadata": {k: v.tolist() for k, v in population.metadata.items()},
    }
    response = await client.post(f"/v1/studies/{study.id}/participants/batch", json=body)
    people = EnrollmentBatch.model_validate_json(response.content).enrollments
    await start(client, study.id)
    return study.id, people


async def test_a_report_task_with_a_later_round_is_not_final(client: httpx.AsyncClient) -> None:
    """histoftree: everyone reports a label (round 0), then a cell (round 1)."""
    study_id, people = await histoftree_started(client)
    label = await task_of(client, study_id, people[0])
    assert isinstance(label, TaskReport)
    assert (label.round, label.final) == (0, False)
    await submit_batch(client, study_id, 0, "scalar", people, [[0.5]] * len(people))
    cell = await task_of(client, study_id, people[0])
    assert isinstance(cell, TaskReport)
    assert (cell.round, cell.final) == (1, True)


async def test_a_batch_says_when_its_reporters_last_task_is_due(
    client: httpx.AsyncClient,
) -> None:
    """``RoundTasks.final``: histoftree's label round (everyone has a cell round after it) is
    not the last, its cell round is; each of user-mean's stages is its cohort's last."""
    study_id, people = await histoftree_started(client)
    [label] = (await batch_tasks(client, study_id, people)).reports
    assert (label.round, label.final) == (0, False)
    await submit_batch(client, study_id, 0, "scalar", people, [[0.5]] * len(people))
    [cell] = (await batch_tasks(client, study_id, people)).reports
    assert (cell.round, cell.final) == (1, True)

    study_id, one, two = await user_mean(client)
    [first] = (await batch_tasks(client, study_id, one + two)).reports
    assert (first.round, first.final) == (0, True)
    await submit_batch(client, study_id, 0, "histogram", one, [[0.5]] * len(one))
    [second] = (await batch_tasks(client, study_id, one + two)).reports
    assert (second.round, second.final) == (1, True)


@pytest.mark.parametrize("hold", [None, 2])
async def test_a_done_participant_is_told_at_once(
    client: httpx.AsyncClient, hold: float | None
) -> None:
    study = await create_study(client, "hetero-mean-rr")
    people = await enroll(client, study.id, [1.0, 1.0])
    await start(client, study.id)
    await submit_batch(client, study.id, 0, "bit", people, [[1.0], [-1.0]])
    started = time.monotonic()
    answer = TASK.validate_json((await ask(client, study.id, people[0], hold)).content)
    assert answer.kind == "done"
    assert time.monotonic() - started < 1


def reporting(batch: TaskBatch) -> set[int]:
    return {pid for tasks in batch.reports for pid in tasks.participant_ids}


async def test_batch_tasks_know_who_reported_in_a_round_however_its_block_is_cut(
    client: httpx.AsyncClient,
) -> None:
    """The batch task endpoint counts a block's reports when the batch holds every cohort member
    of its span (none or all reported), and reads them one by one otherwise: each answer lists
    exactly those who have not reported yet."""
    study_id, one, _ = await user_mean(client)
    one.sort(key=lambda e: e.participant_id)
    every = {e.participant_id for e in one}
    assert reporting(await batch_tasks(client, study_id, one)) == every  # none reported: count 0
    sent = [one[0], one[2], one[5]]  # the span's ends among them
    await submit_batch(client, study_id, 0, "histogram", sent, [[0.5]] * len(sent))
    unsent = every - {e.participant_id for e in sent}
    assert reporting(await batch_tasks(client, study_id, one)) == unsent  # some of the span
    assert reporting(await batch_tasks(client, study_id, one[1:5])) == unsent  # not the whole span
    assert reporting(await batch_tasks(client, study_id, [one[1], one[3]])) == {
        one[1].participant_id,
        one[3].participant_id,
    }
    assert reporting(await batch_tasks(client, study_id, sent)) == set()  # not the whole span
    rest = [e for e in one if e.participant_id in unsent]
    await submit_batch(client, study_id, 0, "histogram", rest[:2], [[0.5]] * 2)
    last = [e for e in one if e.participant_id in unsent][2:]
    assert reporting(await batch_tasks(client, study_id, one)) == {e.participant_id for e in last}
    assert reporting(await batch_tasks(client, study_id, one[:2])) == set()  # all of its span


async def every_task_agrees(
    client: httpx.AsyncClient, study_id: str, people: list[Enrollment]
) -> None:
    """Each participant's own task is its item of the batch answer (a done participant's
    ``reported_rounds`` aside: batch answers do not say them; ``final`` is said for a round's
    reporters together, so an item that says it is final is final on its own too), as worked
    out for one participant by ``tasks._one_task``."""
    batch = {
        i.participant_id: i.task for i in (await batch_tasks(client, study_id, people)).items()
    }
    for e in people:
        own = await task_of(client, study_id, e)
        item = batch[e.participant_id]
        if isinstance(own, TaskReport) and isinstance(item, TaskReport) and not item.final:
            own = own.model_copy(update={"final": False})
        elif isinstance(own, TaskDone):
            own = own.model_copy(update={"reported_rounds": []})
        assert own == batch[e.participant_id], e.participant_id


async def test_a_participants_task_is_its_item_of_the_batch_answer(
    client: httpx.AsyncClient,
) -> None:
    population = synthetic_population(400, 3, 4.0, mask="aligned", private=2, test_size=10)
    study = await create_study(client, "histoftree", population.params(depth=2, bins=2), seed=9)
    body = {
        "epsilons": population.epsilon.tolist(),
        "metadata": {k: v.tolist() for k, v in population.metadata.items()},
    }
    response = await client.post(f"/v1/studies/{study.id}/participants/batch", json=body)
    people = EnrollmentBatch.model_validate_json(response.content).enrollments
    some = people[:: len(people) // 24]
    await every_task_agrees(client, study.id, some)  # enrolling
    await start(client, study.id)
    await every_task_agrees(client, study.id, some)  # round 0 open
    half = people[: len(people) // 2]
    await submit_batch(client, study.id, 0, "scalar", half, [[0.5]] * len(half))
    await every_task_agrees(client, study.id, some)  # half of them reported
    rest = people[len(people) // 2 :]
    await submit_batch(client, study.id, 0, "scalar", rest, [[0.5]] * len(rest))
    await every_task_agrees(client, study.id, some)  # round 1 open

    study_id, one, two = await user_mean(client)
    await every_task_agrees(client, study_id, one + two)
    await submit_batch(client, study_id, 0, "histogram", one, [[0.5]] * len(one))
    await every_task_agrees(client, study_id, one + two)  # stage two's round
    await submit_batch(client, study_id, 1, "scalar", two, [[0.5]] * len(two))
    await every_task_agrees(client, study_id, one + two)  # finished


async def test_a_held_batch_is_worked_out_again_only_when_the_study_moves(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A held batch answer is kept through the wake-ups (every POLL_S) that find the study's
    phase and round unchanged (another study's transitions included), and worked out again as
    soon as the next round opens."""
    study_id, one, two = await user_mean(client)
    other = await create_study(client, "hetero-mean-laplace")  # its transitions wake us too
    worked: list[int] = []
    tasks_of_ids = tasks_module._tasks_of

    def counted(*args: Any, **kwargs: Any) -> Any:  # the private answer (tasks._Answer)
        worked.append(1)
        return tasks_of_ids(*args, **kwargs)

    monkeypatch.setattr(tasks_module, "_tasks_of", counted)
    body = {"participant_ids": [e.participant_id for e in two], "tokens": [e.token for e in two]}
    hold = 8.0  # far longer than the test takes under load; the answer comes at the transition
    started = time.monotonic()
    held = asyncio.create_task(client.post(f"/v1/studies/{study_id}/tasks?hold={hold}", json=body))
    await asyncio.sleep(3 * tasks_module.POLL_S)
    await enroll(client, other.id, [1.0] * 2)
    await start(client, other.id)  # a transition, of another study
    await asyncio.sleep(tasks_module.POLL_S)
    assert not held.done()
    assert len(worked) == 1  # the first ask only
    await submit_batch(client, study_id, 0, "histogram", one, [[0.5]] * len(one))  # round 1 opens
    answer = TaskBatch.model_validate_json((await held).content)
    assert time.monotonic() - started < hold  # woken by the transition, not the hold's end
    assert {i.participant_id for i in answer.items()} == {e.participant_id for e in two}
    assert all(isinstance(i.task, TaskReport) for i in answer.items())
    assert len(worked) == 2
