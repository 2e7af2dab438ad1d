"""What the console's search box (and a bulk operation's ``search``) finds: exact matches only,
each one served by an index, so a search costs the same on a table of any size.

A term is a job id (``123`` or ``#123``), an exact type, unique key or error code, or
``field=value`` for a payload field a job type declares searchable (``@job(search=(...))``;
see :mod:`django_jobs.reads.search_fields`). A term in double quotes is searched as a plain one:
``"sync=42"`` finds the unique key ``sync=42``.
"""

from __future__ import annotations

import re

from django.db.models import Q

from django_jobs.masking import masker_for
from django_jobs.reads.search_fields import IndexState, declared, field_equals, found_indexes, index_name

#: A job id as typed by a person: ASCII digits that fit a bigint, optionally after "#".
JOB_ID = re.compile(r"^#?[0-9]{1,18}$")
#: The longest term searched: unique keys and error codes are shorter.
MAX_TERM_CHARS = 300
#: ``field=value``: a name as a payload key may be written, "=", the value (spaces around "="
#: are a person's, not the value's). Whether the name is a searchable field is asked next.
FIELD_TERM = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)\Z", re.DOTALL)
#: The command that builds the indexes a search by a field needs.
BUILD_COMMAND = "manage.py jobsindexes --create"
#: At most so many searchable fields are named in a refusal.
MAX_NAMED_FIELDS = 20


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
    if len(term) >= 2 and term[0] == term[-1] == '"':
        term = term[1:-1]
    else:
        field_search = payload_search(term)
        if field_search is not None:
            return field_search
    match = Q(type=term) | Q(unique_key=term) | Q(last_error_code=term)
    # ASCII digits only: str.isdigit() is true for "²", which int() refuses.
    if JOB_ID.match(term):
        match |= Q(id=int(term.lstrip("#")))
    return match


def payload_search(term: str) -> Q | None:
    """The condition of ``field=value`` (the jobs of the types that declare ``field`` searchable
    whose payload's ``field`` is ``value``), or None for a term not of that form (a plain term).

    Raises ``SearchRefused`` when no registered type declares the field, when one that does
    holds it sensitive, and when the field's index is not there to serve the search (missing,
    still building, or left invalid): a search without it would read the whole table. Asks the
    catalog once, for the index.
    """
    shaped = FIELD_TERM.match(term)
    if shaped is None:
        return None
    field, value = shaped.group(1), shaped.group(2).strip()
    types = declared().get(field)
    if types is None:
        raise SearchRefused(_undeclared(field, term))
    if not value:
        raise SearchRefused(f"give a value to search the payload field {field!r} for: {field}=…")
    secret = [name for name in types if masker_for(name).is_sensitive(field)]
    if secret:
        raise SearchRefused(
            f"the payload field {field!r} is sensitive for {', '.join(secret)}: it is not searchable"
        )
    state = found_indexes().get(index_name(field), IndexState.MISSING)
    if state is not IndexState.VALID:
        raise SearchRefused(_unserved(field, state))
    return field_equals(field, value, types)


def _undeclared(field: str, term: str) -> str:
    fields = list(declared())
    named = ", ".join(fields[:MAX_NAMED_FIELDS]) + (" …" if len(fields) > MAX_NAMED_FIELDS else "")
    searchable = (
        f"the searchable ones are {named}" if fields else "no job type declares one (@job(search=(...)))"
    )
    return (
        f"{field!r} is not a searchable payload field: {searchable}. To find a unique key or error "
        f'code holding "=", put it in double quotes: "{term[:60]}"'
    )


def _unserved(field: str, state: IndexState) -> str:
    index = index_name(field)
    if state is IndexState.BUILDING:
        return f"the index of the payload field {field!r} ({index}) is still being built: search once it is"
    why = "is missing" if state is IndexState.MISSING else "is invalid (its build was interrupted)"
    return f"the index of the payload field {field!r} ({index}) {why}: run {BUILD_COMMAND}"
