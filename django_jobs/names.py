"""The names a caller chooses: job types, queues, external calls, searchable payload keys; the
priority range, and the range of job ids.

Pure: the registry, the settings, the models and the console all check names against these,
so they live below all of them.
"""

from __future__ import annotations

import re

#: A queue name, as PostgreSQL checks it (its "$" is the end of the string).
QUEUE_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,99}$"
# In Python, \Z: "$" also matches before a trailing newline, and "emails\n" is not a name.
NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,199}\Z")
QUEUE_RE = re.compile(QUEUE_PATTERN.removesuffix("$") + r"\Z")
#: The name of an external call (``@job(external_calls=...)``, ``ctx.external_call(name)``).
CALL_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,99}\Z")
PRIORITY_RANGE = range(-100, 101)  # the range of Django's Tasks framework; higher runs first
#: The largest id a job can have (its column is a ``bigint``).
MAX_JOB_ID = 2**63 - 1
#: A payload key a job type declares searchable (``@job(search=...)``). It is written into an
#: index's expression and name, so only ASCII letters, digits and _ (nothing to quote, nothing
#: to inject), and at most 40 characters: ``django_jobs_job_search_<key>`` then fits
#: PostgreSQL's 63-character names, which it would otherwise cut silently (two keys, one name).
SEARCH_FIELD_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,39}\Z")
