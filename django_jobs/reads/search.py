"""What the console's search box (and a bulk operation's ``search``) finds: exact matches only,
each one served by an index, so a search costs the same on a table of any size.

A term is a job id (``123`` or ``#123``), an exact type, unique key or error code, or
``field=value`` for a payload field a job type declares searchable (``@job(search=(...))``;
see :mod:`django_jobs.search_fields`).
"""

from __future__ import annotations

import re

from django.db.models import Q

#: A job id as typed by a person: ASCII digits that fit a bigint, optionally after "#".
JOB_ID = re.compile(r"^#?[0-9]{1,18}$")
#: The longest term searched: unique keys and error codes are shorter.
MAX_TERM_CHARS = 300


class SearchRefused(ValueError):
    """The term cannot be searched without reading the whole table (or holds what PostgreSQL
    refuses): the message says why and what to do."""


def search_condition(term: str) -> Q:
    """The condition a search ``term`` stands for. Raises ``SearchRefused`` for a term no index
    could serve."""
    term = term.strip()
    if "\x00" in term:
        raise SearchRefused("the search holds a NUL character")
    if len(term) > MAX_TERM_CHARS:
        raise SearchRefused(f"search for at most {MAX_TERM_CHARS} characters")
    field_search = payload_search(term)
    if field_search is not None:
        return field_search
    match = Q(type=term) | Q(unique_key=term) | Q(last_error_code=term)
    # ASCII digits only: str.isdigit() is true for "²", which int() refuses.
    if JOB_ID.match(term):
        match |= Q(id=int(term.lstrip("#")))
    return match


def payload_search(term: str) -> Q | None:
    """``field=value`` for a searchable payload field, or None when the term is not of that
    form (a plain term). Filled in by :mod:`django_jobs.search_fields`."""
    return None
