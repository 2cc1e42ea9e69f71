"""The one table of a job's transitions (``netdisco.cluster.jobs.TRANSITIONS``), pure."""

from __future__ import annotations

import itertools

import pytest
from structlog.testing import capture_logs

from netdisco.cluster.jobs import TERMINAL, TRANSITIONS, Job, JobState, allowed, transition

MOVES = {
    (JobState.PENDING, JobState.RUNNING),  # taken by its engine
    (JobState.PENDING, JobState.CANCELLED),  # cancelled while waiting
    (JobState.PENDING, JobState.LOST),  # its engine lost before the start
    (JobState.RUNNING, JobState.FINISHED),
    (JobState.RUNNING, JobState.FAILED),
    (JobState.RUNNING, JobState.CANCELLED),
    (JobState.RUNNING, JobState.LOST),
    (JobState.LOST, JobState.PENDING),  # requeued
}


@pytest.mark.parametrize("move", sorted(MOVES))
def test_every_allowed_transition_moves_the_job(move: tuple[JobState, JobState]) -> None:
    before, after = move
    job = Job(id="0123456789ab", spider="s", state=before)
    with capture_logs() as logs:
        moved = transition(job, after, error="why")
    assert moved is not None
    assert (moved.state, moved.error, job.state) == (after, "why", before)
    assert logs == []


def test_the_table_allows_exactly_these_moves_and_terminal_states_none() -> None:
    every = set(itertools.product(JobState, JobState))
    assert {m for m in every if allowed(*m)} == MOVES
    assert set(TRANSITIONS) == set(JobState)
    assert all(not TRANSITIONS[s] for s in TERMINAL)


def test_a_refused_transition_is_logged_with_both_states_and_changes_nothing() -> None:
    job = Job(id="0123456789ab", spider="s", state=JobState.FINISHED)
    with capture_logs() as logs:
        assert transition(job, JobState.RUNNING, started_at=1.0) is None
    assert logs == [
        {
            "event": "job_transition_refused",
            "log_level": "warning",
            "job": "0123456789ab",
            "state": "finished",
            "to": "running",
        }
    ]
    assert (job.state, job.started_at) == (JobState.FINISHED, None)
