"""The backends the framework's own test suites run against, retargeted at ``JobsBackend``.

The suites were written for the framework's reference backends: ``DummyBackend`` (enqueue
stores the task; nothing runs it) and ``ImmediateBackend`` (enqueue runs the task at once, one
attempt). Here the first is ``JobsBackend`` as a project configures it, and the second is
:class:`ImmediateJobsBackend`: ``JobsBackend`` whose ``enqueue()`` lets a burst worker run what
it wrote before returning the result read back from the database — the same enqueue, claim,
executor, outcome writer, signals and result reads as ``runjobs``, only started by the call.
"""

from __future__ import annotations

from typing import Any

from django_jobs.tasks_framework.backend import JobsBackend
from django_jobs.testing import run_jobs

#: OPTIONS of an immediate backend: one attempt, as the reference backend makes.
IMMEDIATE_OPTIONS = {"MAX_ATTEMPTS": 1}


class ImmediateJobsBackend(JobsBackend):
    """``JobsBackend``, run at once: each enqueue is followed by a burst worker on its queue."""

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        result = super().enqueue(task, args, kwargs)
        run_jobs(queues=[task.queue_name])
        return self.get_result(result.id)
