"""No page of the console hands back markup it was given.

A link that carries ``<script>`` in a path segment or a query parameter, or a job whose stored
error, payload or queue holds it, must never be answered with that markup unescaped: a member
of staff who follows the link would run it in the admin's origin, next to the CSRF token.

The walk needs no list of URLs or parameters kept by hand, which would go stale as the console
grows. The console's URLs come from the URL resolver (every admin page of a django_jobs model,
their own views, the metrics view); real values for their path segments and query parameters
come from crawling the links the console itself renders, and more parameter names from the
names each view reads from ``request.GET`` and ``request.POST``. Each path segment and each
parameter is then replaced by markup in turn, by GET and by POST, and every response checked.
"""

from __future__ import annotations

import inspect
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

import pytest
from django.contrib.admin import ModelAdmin
from django.contrib.auth.models import User
from django.http import HttpResponse, QueryDict
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, resolve, reverse
from django.urls.converters import IntConverter
from django.urls.exceptions import Resolver404

from django_jobs.models import Job, JobEvent, Queue, ScheduleTick
from django_jobs.states import JobStatus
from tests.admin.console import staff
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

#: What an attacker puts in a link: it closes a quoted attribute and opens an element. Escaped,
#: ``<`` becomes ``&lt;``, so the tag below is in a response only if the markup came back whole.
MARKUP = "\"'><djj-probe onerror=alert(1)>"
TAG = "<djj-probe"
#: Content types a browser never renders as a document (the response must also say nosniff).
INERT_TYPES = {"text/plain"}
#: Pages visited per URL pattern, and how many of them the walk then fills with markup: the
#: names of every link's parameters are kept, so a few pages reach every parameter.
VISITS_PER_PATTERN = 3
BASES_PER_PATTERN = 2


@dataclass(frozen=True)
class ConsoleUrl:
    name: str  # namespaced, "admin:django_jobs_job_changelist"
    pattern: URLPattern


@dataclass
class Finding:
    method: str
    url: str
    data: dict[str, str]
    response: HttpResponse

    def describe(self) -> str:
        content_type = self.response.get("Content-Type", "(none)")
        return f"{self.method} {self.url} {self.data or ''} → {self.response.status_code} {content_type}"


@dataclass
class Walk:
    """What the crawl found, per URL pattern: its URLs and the parameter names seen with it."""

    urls: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    params: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))


# ---- the console's URLs, from the resolver ------------------------------------------------------


def console_urls() -> dict[str, ConsoleUrl]:
    """Every URL pattern the console serves: views of ModelAdmins of django_jobs' models, and
    views defined in django_jobs itself (the metrics view)."""
    found: dict[str, ConsoleUrl] = {}

    def visit(patterns: list[Any], namespace: str) -> None:
        for entry in patterns:
            if isinstance(entry, URLResolver):
                inner = f"{namespace}{entry.namespace}:" if entry.namespace else namespace
                visit(entry.url_patterns, inner)
            elif isinstance(entry, URLPattern) and entry.name and _belongs_to_console(entry.callback):
                found[f"{namespace}{entry.name}"] = ConsoleUrl(f"{namespace}{entry.name}", entry)

    visit(get_resolver().url_patterns, "")
    return found


def _belongs_to_console(callback: Callable[..., Any]) -> bool:
    owner = getattr(callback, "model_admin", None) or getattr(inspect.unwrap(callback), "__self__", None)
    if isinstance(owner, ModelAdmin):
        return owner.opts.app_label == "django_jobs"
    return getattr(inspect.unwrap(callback), "__module__", "").startswith("django_jobs")


def _converters(console_url: ConsoleUrl) -> dict[str, Any]:
    return dict(getattr(console_url.pattern.pattern, "converters", {}))


def _name_of(url: str, known: dict[str, ConsoleUrl]) -> str | None:
    try:
        match = resolve(urlsplit(url).path)
    except Resolver404:
        return None
    return match.view_name if match.view_name in known else None


# ---- crawling the links the console renders ---------------------------------------------------


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        wanted = {"a": "href", "form": "action"}.get(tag)
        for name, value in attrs:
            if name == wanted and value:
                self.found.append(value)


def _links(page: HttpResponse, base: str) -> Iterator[str]:
    if not page.get("Content-Type", "").startswith("text/html"):
        return
    parser = _Links()
    parser.feed(page.content.decode(errors="replace"))
    for link in parser.found:
        parts = urlsplit(link)
        if parts.scheme or parts.netloc or link.startswith("#"):
            continue
        if not parts.path:  # "?status=failed": the page's own path
            link = urlsplit(base).path + link
        elif not parts.path.startswith("/"):
            continue
        yield link.split("#", 1)[0]


def crawl(client: Client, known: dict[str, ConsoleUrl], seeds: list[str]) -> Walk:
    """Follow the console's links from ``seeds``: a few pages of each pattern are visited, the
    parameter names of every link are kept."""
    walk = Walk()
    queue, seen = list(seeds), set(seeds)
    while queue:
        url = queue.pop(0)
        name = _name_of(url, known)
        if name is None or len(walk.urls[name]) >= VISITS_PER_PATTERN:
            continue
        walk.urls[name].append(url)
        for link in _links(client.get(url), url):
            linked = _name_of(link, known)
            if linked is not None:
                walk.params[linked] |= _query(link).keys()
            if link not in seen:
                seen.add(link)
                queue.append(link)
    return walk


@contextmanager
def parameters_read() -> Iterator[set[str]]:
    """The names a view asks ``request.GET`` or ``request.POST`` for, while the block runs."""
    names: set[str] = set()
    originals = {name: getattr(QueryDict, name) for name in ("__getitem__", "__contains__", "get", "getlist")}

    def recording(method: Callable[..., Any]) -> Callable[..., Any]:
        def read(self: QueryDict, key: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(key, str):
                names.add(key)
            return method(self, key, *args, **kwargs)

        return read

    for name, method in originals.items():
        setattr(QueryDict, name, recording(method))
    try:
        yield names
    finally:
        for name, method in originals.items():
            setattr(QueryDict, name, method)


# ---- the checks ---------------------------------------------------------------------------------


def markup_came_back(finding: Finding) -> str | None:
    """Why the response is unsafe, or None."""
    response = finding.response
    headers = "\n".join(f"{key}: {value}" for key, value in response.items())
    if TAG in headers:
        return "markup in a header"
    body = b"".join(response) if response.streaming else response.content  # type: ignore[attr-defined]
    if TAG.encode() not in body:
        return None
    content_type = response.get("Content-Type", "").split(";", 1)[0].strip().lower()
    if content_type not in INERT_TYPES:
        return f"markup answered unescaped as {content_type or 'no content type'}"
    if response.get("X-Content-Type-Options", "").lower() != "nosniff":
        return f"markup answered as {content_type} that a browser may sniff as HTML (no nosniff)"
    return None


def _with_query(url: str, query: dict[str, str]) -> str:
    path = urlsplit(url).path
    return f"{path}?{urlencode(query)}" if query else path


def _query(url: str) -> dict[str, str]:
    return dict(parse_qsl(urlsplit(url).query, keep_blank_values=True))


def path_variants(url: str, console_url: ConsoleUrl) -> Iterator[str]:
    """``url`` with markup in each of its path segments in turn (those that take text)."""
    match = resolve(urlsplit(url).path)
    for key, converter in _converters(console_url).items():
        if isinstance(converter, IntConverter):
            continue  # no text gets past the resolver into the view
        kwargs = {**match.kwargs, key: MARKUP}
        yield _with_query(reverse(console_url.name, kwargs=kwargs), _query(url))


def segment_variants(url: str) -> Iterator[str]:
    """``url`` with markup in place of each segment of its path, fixed words included: a path
    that no longer resolves reaches the admin's catch-all view and the 404 page."""
    segments = urlsplit(url).path.split("/")
    for i, segment in enumerate(segments):
        if segment:
            yield "/".join([*segments[:i], quote(MARKUP, safe=""), *segments[i + 1 :]])


Request = tuple[str, str, dict[str, str]]  # method, url, form data


def requests_of(url: str, console_url: ConsoleUrl, names: set[str]) -> Iterator[Request]:
    """(method, url, form data): markup in each path segment, then in each parameter."""
    for variant in path_variants(url, console_url):
        yield "GET", variant, {}
        yield "POST", variant, {"reason": MARKUP}
    for variant in segment_variants(url):
        yield "GET", variant, {}
    query = _query(url)
    for name in sorted(names):
        yield "GET", _with_query(url, {**query, name: MARKUP}), {}
        yield "POST", _with_query(url, query), {**query, name: MARKUP}
    yield "GET", _with_query(url, {**query, MARKUP: MARKUP}), {}  # a name nobody expects


def fallback_url(console_url: ConsoleUrl) -> str:
    """A URL of a pattern no link reached: markup in every segment that takes text."""
    kwargs = {
        key: 1 if isinstance(converter, IntConverter) else MARKUP
        for key, converter in _converters(console_url).items()
    }
    return reverse(console_url.name, kwargs=kwargs)


# ---- data with markup stored in it, and the walk -----------------------------------------------


def stored_markup() -> Job:
    """Jobs in every state an action applies to, and markup wherever a caller, a handler or an
    operator chooses the text: errors, codes, payloads, events, a queue, a worker, a reason for
    a pause, a schedule's name."""
    JobFactory()
    JobFactory(running=True)
    JobFactory(status=JobStatus.NEEDS_REVIEW)
    JobFactory(completed=True)
    job: Job = JobFactory(
        failed=True,
        queue=MARKUP[:100],
        last_error=f"RuntimeError: {MARKUP}",
        last_error_code=MARKUP[:50],
        payload={MARKUP: MARKUP},
        worker_id=MARKUP,
    )
    JobEvent.objects.create(
        job_id=job.id,
        kind="failed",
        actor=MARKUP,
        reason=MARKUP,
        error=MARKUP,
        error_code=MARKUP,
        worker_id=MARKUP,
        details={MARKUP: MARKUP},
    )
    Queue.objects.create(name="emails", paused_by=MARKUP, reason=MARKUP)
    ScheduleTick.objects.create(schedule=MARKUP, tick_at="2026-01-01T00:00:00Z", outcome="missed")
    return job


def walk_the_console(client: Client) -> tuple[list[str], int]:
    """Every unsafe response as a line, and how many requests were made."""
    known = console_urls()
    seeds = [reverse(name) for name, url in known.items() if not _converters(url)]
    walk = crawl(client, known, seeds)
    for name, console_url in known.items():
        if not walk.urls.get(name):
            walk.urls[name].append(fallback_url(console_url))
    unsafe: list[str] = []
    made = 0
    for name, console_url in sorted(known.items()):
        for base in walk.urls[name][:BASES_PER_PATTERN]:
            with parameters_read() as read:
                client.get(base)
                client.post(base, _query(base))
            for method, url, data in requests_of(base, console_url, walk.params[name] | read):
                finding = Finding(method, url, data, _send(client, method, url, data))
                made += 1
                why = markup_came_back(finding)
                if why is not None:
                    unsafe.append(f"{why}: {finding.describe()}")
    return unsafe, made


def _send(client: Client, method: str, url: str, data: dict[str, str]) -> HttpResponse:
    """The request, and the page its redirects lead to: a message set by a view is shown there."""
    if method == "GET":
        return client.get(url, follow=True)
    return client.post(url, data, follow=True)


def test_the_walk_reaches_every_console_url_and_the_views_own_parameters(
    client: Client, superuser: User
) -> None:
    known = console_urls()
    # Proof that the resolver walk sees the console's own views, not only the admin's defaults.
    assert {"admin:django_jobs_job_action", "admin:django_jobs_queue", "admin:django_jobs_schedule",
            "admin:django_jobs_job_dashboard", "admin:django_jobs_job_changelist",
            "django_jobs:metrics"} <= set(known)  # fmt: skip
    stored_markup()
    client.force_login(superuser)
    seeds = [reverse(name) for name, url in known.items() if not _converters(url)]
    walk = crawl(client, known, seeds)
    # The crawl finds real values: an action on a job, a queue to pause, a schedule to run.
    assert any("ids=" in url for url in walk.urls["admin:django_jobs_job_action"])
    assert any("queue=" in url for url in walk.urls["admin:django_jobs_queue"])
    assert any("schedule=" in url for url in walk.urls["admin:django_jobs_schedule"])
    with parameters_read() as read:
        action = walk.urls["admin:django_jobs_job_action"][0]
        client.post(action, _query(action))
    assert {"ids", "reason"} <= read


@pytest.mark.parametrize("who", ["superuser", "viewer"])
def test_no_console_response_echoes_markup_from_a_link_or_a_stored_value(
    client: Client, superuser: User, who: str
) -> None:
    stored_markup()
    user = superuser if who == "superuser" else staff("viewer", "view_job", "view_scheduletick")
    client.force_login(user)
    unsafe, made = walk_the_console(client)
    assert made > 100  # the walk did walk
    assert not unsafe, f"{len(unsafe)} of {made} responses:\n" + "\n".join(unsafe[:20])


def test_a_refusal_that_quotes_the_url_is_plain_text(client: Client, superuser: User) -> None:
    client.force_login(superuser)
    for url in (
        reverse("admin:django_jobs_job_action", args=[MARKUP]),
        reverse("admin:django_jobs_queue", args=[MARKUP]),
        reverse("admin:django_jobs_schedule", args=[MARKUP]),
    ):
        response = client.get(url)
        assert response.status_code == 400
        assert response["Content-Type"] == "text/plain; charset=utf-8"
        assert response["X-Content-Type-Options"] == "nosniff"
        assert TAG in response.content.decode()  # still says what was wrong, as text
