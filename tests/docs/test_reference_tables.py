"""Tables of the docs that name every member of a set the code defines: each says all of it and
nothing else, and the examples they give behave as they say."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.db.models.functions import Now
from django.test import Client

from django_jobs.console.jobs import JobAdmin
from django_jobs.models import Job
from django_jobs.states import EventKind
from tests.factories import JobFactory

DOCS = Path(__file__).resolve().parents[2] / "docs"
LIST = "/admin/django_jobs/job/"
#: What Django's change list reads besides the filters: the search, the page, the order.
CHANGE_LIST_PARAMETERS = {"q", "p", "o"}


def first_column(page: Path, header: str) -> list[str]:
    """The first cells (a `name` each) of the table whose header row starts with ``header``."""
    names: list[str] = []
    inside = False
    for line in page.read_text().splitlines():
        if line.startswith(f"| {header} |"):
            inside = True
            continue
        if inside and not line.startswith("|"):
            break
        if inside and not line.startswith("|---"):
            names.append(re.fullmatch(r"`(\w+)`", line.split("|")[1].strip()).group(1))
    return names


def test_the_lifecycle_names_every_event_kind_and_no_other() -> None:
    kinds = first_column(DOCS / "lifecycle.md", "kind")
    assert sorted(kinds) == sorted(EventKind.values)


def test_the_console_names_every_parameter_its_list_reads_and_no_other() -> None:
    documented = first_column(DOCS / "operations" / "console.md", "parameter")
    filters = {str(list_filter.parameter_name) for list_filter in JobAdmin.list_filter}
    assert sorted(documented) == sorted(filters | CHANGE_LIST_PARAMETERS)


@pytest.mark.django_db
def test_the_parameters_work_as_the_console_page_says(client: Client) -> None:
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    recent, old = JobFactory(failed=True), JobFactory(failed=True)
    Job.objects.filter(id=old.id).update(finished_at=Now() - dt.timedelta(days=3))

    def listed(query: str) -> set[int]:
        response = client.get(f"{LIST}?{query}")
        assert response.status_code == 200, query
        return {job.id for job in response.context["cl"].result_list}

    assert listed("status=failed") == {recent.id, old.id}
    assert listed("ended=90s") == listed("ended=2h") == {recent.id}
    since = (dt.datetime.now(dt.UTC) - dt.timedelta(days=1)).astimezone(dt.timezone(dt.timedelta(hours=1)))
    offset = since.isoformat(timespec="seconds").replace("+", "%2B")
    assert listed(f"ended={offset}") == {recent.id}
    assert listed("ended=" + since.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")) == {recent.id}
    assert listed("o=1&p=1") == {recent.id, old.id}
    # A "+" unescaped is a space: not a moment; and a Django lookup is refused.
    assert client.get(f"{LIST}?ended={offset.replace('%2B', '+')}").status_code == 302
    assert client.get(f"{LIST}?status__exact=failed").status_code == 400
