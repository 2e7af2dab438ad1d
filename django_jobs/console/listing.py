"""The job list at any table size: no full ``COUNT(*)`` (the paginator uses the planner's
estimate on large results), filter choices from loose index scans, every filter served by an
index, and a change list that reads nothing but the columns it shows.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import BadRequest
from django.core.paginator import InvalidPage, Paginator
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.functional import cached_property

from django_jobs.conf import jobs_settings
from django_jobs.console import restore_holds
from django_jobs.console.job_filter import InvalidFilter, parse_moment
from django_jobs.errors import ErrorCode
from django_jobs.models import Job
from django_jobs.models.restore import open_hold
from django_jobs.reads.estimates import estimated_rows
from django_jobs.states import JobStatus

#: Above this many rows (by the planner's estimate) the list shows an estimate, not a count.
EXACT_COUNT_LIMIT = 10_000
#: The list pages no deeper than this: an OFFSET of millions reads millions of rows. Filters
#: and the search reach any job in one page.
MAX_PAGES = 200

#: What the list reads: never the payload, checkpoint, progress or error of 50 rows.
LIST_COLUMNS = (
    "id", "type", "queue", "status", "attempts", "max_attempts", "last_error_code", "worker_id",
    "available_at", "started_at", "finished_at", "created_at", "lease_expires_at",
)  # fmt: skip


class EstimatedCountPaginator(Paginator):  # type: ignore[type-arg]  # generic only in the stubs
    """Counts exactly only small results; large ones use the planner's row estimate.

    Pages beyond ``MAX_PAGES`` do not exist: reaching them would read every row before them.
    """

    @cached_property
    def num_pages(self) -> int:
        return min(super().num_pages, MAX_PAGES)

    def validate_number(self, number: Any) -> int:
        page = int(super().validate_number(number))
        if page > MAX_PAGES:
            raise InvalidPage(f"the list pages no deeper than {MAX_PAGES}: narrow it with a filter")
        return page

    @cached_property
    def count(self) -> int:
        queryset = self.object_list
        if not isinstance(queryset, QuerySet):
            return len(queryset)
        estimate = estimated_rows(queryset)
        if estimate > EXACT_COUNT_LIMIT:
            return estimate
        return queryset.count()


# ---- filters: choices without reading the table ---------------------------------------------------


def text_parameter(name: str, value: str | None) -> str | None:
    """A filter value or search term as PostgreSQL can compare it; NUL is a 400, not a 500."""
    if value is not None and "\x00" in value:
        raise BadRequest(f"the {name} parameter holds a NUL character")
    return value


class _TextFilter(admin.SimpleListFilter):
    def value(self) -> str | None:
        return text_parameter(str(self.parameter_name), super().value())


class _IndexedValuesFilter(_TextFilter):
    column = ""

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        values = Job.objects.using(jobs_settings.DATABASE).distinct_values(self.column)
        return [(value, value) for value in values]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        value = self.value()
        return queryset.filter(**{self.column: value}) if value else queryset


class QueueFilter(_IndexedValuesFilter):
    title = "queue"
    parameter_name = "queue"
    column = "queue"


class TypeFilter(_IndexedValuesFilter):
    title = "type"
    parameter_name = "type"
    column = "type"


class ErrorCodeFilter(_IndexedValuesFilter):
    """Jobs whose last error had this code, whatever became of them since (a job that failed
    once and then completed keeps its last error)."""

    title = "last error code (any status)"
    parameter_name = "error_code"
    column = "last_error_code"


class FailedWithCodeFilter(_IndexedValuesFilter):
    """Only the jobs that are failed now, with this error code: what an incident is about."""

    title = "failed now, with error code"
    parameter_name = "failed_code"
    column = "last_error_code"

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        value = self.value()
        return queryset.filter(status=JobStatus.FAILED, last_error_code=value) if value else queryset


class StatusFilter(_TextFilter):
    title = "status"
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(str(value), str(label)) for value, label in JobStatus.choices]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        return queryset.filter(status=self.value()) if self.value() else queryset


class AttentionFilter(_TextFilter):
    """The two questions of an incident: what is stuck, and what waits for a human."""

    title = "needs attention"
    parameter_name = "attention"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("stale", "Stale running (lease expired)"), ("review", "Needs review")]

    #: The status each question implies: with another status chosen too, the answer is empty.
    #: Said without a query, because PostgreSQL plans ``status = 'completed' AND status =
    #: 'needs_review'`` as a walk of the whole table in id order, looking for rows that cannot be.
    IMPLIED_STATUS = {"stale": JobStatus.RUNNING, "review": JobStatus.NEEDS_REVIEW}

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        implied = self.IMPLIED_STATUS.get(self.value() or "")
        if implied is None:
            return queryset
        if request.GET.get(StatusFilter.parameter_name) not in (None, "", implied):
            return queryset.none()
        if implied is JobStatus.RUNNING:
            return queryset.filter(pk__in=Job.objects.using(queryset.db).stale().values("pk"))
        return queryset.filter(status=implied)


class RestoreFilter(_TextFilter):
    """The jobs a restore hold keeps waiting, and those its release settled."""

    title = "restore hold"
    parameter_name = "restore"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            ("held", "Held now (external types, enqueued before the open hold)"),
            ("settled", "Settled by a release (code RESTORED)"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        value = self.value()
        if value == "settled":
            return queryset.filter(last_error_code=ErrorCode.RESTORED)
        if value != "held":
            return queryset
        hold = open_hold(jobs_settings.DATABASE)
        if hold is None:
            return queryset.none()
        return queryset.filter(
            type__in=restore_holds.outside_types(),
            status__in=restore_holds.HELD_STATUSES,
            created_at__lt=hold.opened_at,
        )


class EndedFilter(_TextFilter):
    """The jobs that ended since a moment: an age offered here, or any moment the query string
    gives (``?ended=14:00``, ``?ended=2026-12-04T14:00``, ``?ended=90m``)."""

    title = "ended"
    parameter_name = "ended"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        offered = [("1h", "In the last hour"), ("6h", "In the last 6 hours"), ("24h", "In the last day"),
                   ("7d", "In the last week")]  # fmt: skip
        value = self.value()
        if value and value not in dict(offered):
            offered.append((value, f"Since {value}"))
        return offered

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        value = self.value()
        if not value:
            return queryset
        try:
            since = parse_moment(value, "ended")
        except InvalidFilter as exc:
            raise IncorrectLookupParameters(str(exc)) from None
        return queryset.filter(finished_at__gte=since)


class WorkflowFilter(_TextFilter):
    """The jobs of one workflow (its page links here): shown only while it is chosen."""

    title = "workflow"
    parameter_name = "workflow"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        value = self.value()
        return [(value, f"workflow {value}")] if value else []

    def queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> QuerySet[Job]:
        value = self.value()
        if not value:
            return queryset
        if not value.isdigit() or len(value) > 18:
            raise IncorrectLookupParameters(f"{value[:40]!r} is not a workflow id")
        return queryset.filter(workflow_id=int(value))


# ---- the list -----------------------------------------------------------------------------------


class JobChangeList(ChangeList):
    """The list of jobs reads only the columns it shows (a payload may weigh 256 KiB)."""

    def get_queryset(self, request: HttpRequest, *args: Any, **kwargs: Any) -> QuerySet[Job]:
        return super().get_queryset(request, *args, **kwargs).only(*LIST_COLUMNS)
