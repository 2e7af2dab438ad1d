"""The payload fields job types declare searchable, and the index that serves each one.

``@job("shop.refund", search=("order_id",))`` lets the console find the jobs whose payload holds
``"order_id": "A-1234"`` by the term ``order_id=A-1234``. No table of millions of jobs is read
for it: each field has an expression index of its own, ``django_jobs_job_search_<field>``, on
the value's first 300 characters and the id, over the jobs whose payload has a value there (the
others, most of the table, are not in it). ``manage.py jobsindexes --create`` builds them
(:mod:`~django_jobs.maintenance.search_indexes`); until a field's index exists and is valid, a
search by it is refused, never run as a sequential scan.

The field is written into the statements as a literal, never a parameter: the planner matches
an index's expression only against the same expression, and ``payload ->> $1`` in a prepared
statement's generic plan is not ``payload ->> 'order_id'``. Names are held to
``names.SEARCH_FIELD_RE`` (ASCII letters, digits and _), so there is nothing to quote.

Why the first 300 characters, not the value: a B-tree entry holds at most about 2.7 kB, and an
index on the whole value would make PostgreSQL refuse every job whose field is longer (its
``enqueue()`` would fail). A value shorter than 300 characters is its own first 300, so
comparing those finds exactly the jobs whose field is the value; a term is shorter anyway. One
condition, not two: the planner, which has no statistics of a partial index's expression,
multiplies its guesses for each, and a guess of "almost no rows" would sort every match of a
common value. The planner also proves the index's predicate from it (``left`` and ``=`` are
strict: a null field gives no match). The ``id`` column lets the console's list (newest
first, 50 to a page) be an ordered scan of the matches even for a value thousands of jobs
share, rather than a sort of all of them, or a walk back through the whole table by the primary
key hoping to meet 50 of them soon.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from django.db import connections
from django.db.models import F, Func, Q, TextField
from django.db.models.lookups import Exact

from django_jobs.conf import jobs_settings
from django_jobs.names import SEARCH_FIELD_RE
from django_jobs.registry import registry

#: Every search index's name starts so; the field follows.
INDEX_PREFIX = "django_jobs_job_search_"
#: The characters of a value the index holds: more than a search term's value (``reads.search``'s
#: ``MAX_TERM_CHARS`` less the field and "="), and few enough for a B-tree entry in any encoding
#: (4 bytes each).
INDEXED_CHARS = 300

#: Built without a lock that stops writes (CONCURRENTLY); ``IF NOT EXISTS`` leaves alone one
#: another run built (or is building) meanwhile. The predicate is what the planner proves from
#: the search's own condition (``left`` and ``=`` are strict: a match has a field that is not
#: null), so the jobs without the field stay out of the index without the search repeating it.
CREATE_INDEX = (
    'CREATE INDEX CONCURRENTLY IF NOT EXISTS "{name}" ON django_jobs_job '
    f"(left(payload ->> '{{field}}', {INDEXED_CHARS}), id) WHERE (payload ->> '{{field}}') IS NOT NULL"
)
#: Dropped without blocking reads or writes of the job table either.
DROP_INDEX = 'DROP INDEX CONCURRENTLY IF EXISTS "{name}"'

#: The search indexes on the job table (whatever fields this process declares), each valid or
#: not, and whether a build of it is in progress. Reads the catalog only; no row of the table.
#: ``to_regclass`` resolves the table as the job queries do (search_path), and is NULL before
#: ``migrate``: then there are none.
FOUND_INDEXES = """
SELECT c.relname,
       i.indisvalid,
       EXISTS (SELECT 1 FROM pg_stat_progress_create_index p WHERE p.index_relid = i.indexrelid)
FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid = to_regclass('django_jobs_job') AND starts_with(c.relname, %s)
ORDER BY c.relname
"""


class IndexState(enum.StrEnum):
    """Where a search index stands."""

    #: Built and used by the planner: the field can be searched.
    VALID = "valid"
    #: ``CREATE INDEX CONCURRENTLY`` is running: valid once it ends.
    BUILDING = "building"
    #: Left behind by a build that was interrupted (or failed): the planner never uses it, yet
    #: every write to the job table still updates it. Drop it and build it again.
    INVALID = "invalid"
    #: Not built.
    MISSING = "missing"


@dataclass(frozen=True)
class SearchIndex:
    """A searchable field, the job types that declare it, and its index's state."""

    field: str
    types: tuple[str, ...]
    state: IndexState

    @property
    def name(self) -> str:
        return index_name(self.field)


def index_name(field: str) -> str:
    """The name of ``field``'s index (at most 63 characters: ``SEARCH_FIELD_RE`` says 40)."""
    return INDEX_PREFIX + _checked(field)


def create_sql(field: str) -> str:
    """The statement that builds ``field``'s index."""
    return CREATE_INDEX.format(name=index_name(field), field=_checked(field))


def drop_sql(name: str) -> str:
    """The statement that drops the search index ``name`` (a name the catalog gave: one made by
    hand under the prefix may hold any character, so it is quoted as an identifier)."""
    if not name.startswith(INDEX_PREFIX):
        raise ValueError(f"{name!r} is not a search index")
    return DROP_INDEX.format(name=name.replace('"', '""'))


def declared() -> dict[str, tuple[str, ...]]:
    """Each field the registered job types declare searchable, with the types that declare it
    (sorted, by field)."""
    by_field: dict[str, list[str]] = {}
    for job_type in registry.all():
        for field in job_type.search:
            by_field.setdefault(field, []).append(job_type.name)
    return {field: tuple(sorted(names)) for field, names in sorted(by_field.items())}


def found_indexes() -> dict[str, IndexState]:
    """The search indexes the job table has, by name: valid, building or invalid. One query of
    the catalog."""
    with connections[jobs_settings.DATABASE].cursor() as cursor:
        cursor.execute(FOUND_INDEXES, [INDEX_PREFIX])
        rows = cursor.fetchall()
    return {
        name: IndexState.VALID if valid else IndexState.BUILDING if building else IndexState.INVALID
        for name, valid, building in rows
    }


def search_indexes() -> list[SearchIndex]:
    """The index of each declared field, in the state the database has it (one query)."""
    found = found_indexes()
    return [
        SearchIndex(field, types, found.get(index_name(field), IndexState.MISSING))
        for field, types in declared().items()
    ]


def unused_indexes() -> list[str]:
    """The search indexes no registered job type declares a field for any more (one query):
    each costs every write to the job table, and serves no search."""
    wanted = {index_name(field) for field in declared()}
    return [name for name in found_indexes() if name not in wanted]


def field_equals(field: str, value: str, types: Sequence[str]) -> Q:
    """The jobs of ``types`` whose payload's ``field``, as text, is ``value``: the condition the
    field's index serves. A number or a boolean compares by its JSON text (``42``, ``true``).
    Raises ``ValueError`` for a value of ``INDEXED_CHARS`` characters or more: its first ones
    would also match longer values."""
    if len(value) >= INDEXED_CHARS:
        raise ValueError(f"a payload field is searched by fewer than {INDEXED_CHARS} characters")
    return Q(Exact(IndexedText(field), value)) & Q(type__in=list(types))


class PayloadText(Func):
    """``payload ->> '<field>'``: the field's value as text, the key as a literal."""

    output_field = TextField()

    def __init__(self, field: str) -> None:
        super().__init__(F("payload"), template=f"(%(expressions)s ->> '{_checked(field)}')")


class IndexedText(Func):
    """``left(payload ->> '<field>', 300)``: the expression of the field's index, as its
    statement writes it (the planner matches expressions, not meanings)."""

    output_field = TextField()

    def __init__(self, field: str) -> None:
        super().__init__(PayloadText(field), template=f"left(%(expressions)s, {INDEXED_CHARS})")


def _checked(field: str) -> str:
    # The one guard between a name and the SQL it is written into: callers validate already,
    # and this keeps a name that did not come through @job from reaching a statement.
    if not isinstance(field, str) or not SEARCH_FIELD_RE.match(field):
        raise ValueError(f"{str(field)[:50]!r} is not a searchable payload key")
    return field
