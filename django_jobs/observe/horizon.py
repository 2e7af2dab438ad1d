"""Who holds the vacuum horizon back, in words: what ``checkjobs``, the health check and the
dashboard say of each holder :mod:`django_jobs.reads.horizon` finds, and what to do about it.

A holder is reported past ``CHECK_HORIZON_WARNING`` seconds (or, where its age in time cannot
be read, past ``CHECK_HORIZON_XIDS`` transactions; an inactive slot always): always a warning.
The queue still runs while the horizon is held, only slower as dead rows pile up, and ending
someone else's session is a person's decision (docs/scaling.md, "A held vacuum horizon").
"""

from __future__ import annotations

from django_jobs.conf import jobs_settings
from django_jobs.reads.horizon import Holder, holders

#: The most holders named at once: the oldest decides the horizon, the next few are context.
SHOWN = 5


def held_horizon() -> list[Holder]:
    """What holds the horizon back now beyond the thresholds, the oldest snapshot first."""
    return holders(jobs_settings.CHECK_HORIZON_WARNING, jobs_settings.CHECK_HORIZON_XIDS, SHOWN)


def describe(holder: Holder) -> str:
    """Who it is and for how long, in one clause without its query or the remedy."""
    age = f"its snapshot is {holder.xid_age:,} transactions old"
    if holder.held_seconds is not None:
        return f"{_who(holder)} has held the vacuum horizon back for {holder.held_seconds:.0f}s ({age})"
    return f"{_who(holder)} holds the vacuum horizon back ({age})"


def sentence(holder: Holder) -> str:
    """The whole finding: who, for how long, what it costs, what to do, and its query last
    (the longest part, and the one a person reads only once the rest has said enough)."""
    cost = (
        "dead rows of the system catalogs stay, and the server keeps WAL for it"
        if holder.kind == "slot_catalog"
        else "no dead job row can be removed while it lasts"
    )
    text = f"{describe(holder)}: {cost}; {remedy(holder)}"
    if holder.query:
        text += f"; its statement: {holder.query}"
    return text


def remedy(holder: Holder) -> str:
    """What to do about it, with the statement to run where there is one."""
    if holder.kind == "session":
        end = f"SELECT pg_terminate_backend({holder.name})"
        if holder.hidden:
            return (
                f"end it with {end}; this role may not see its state or query (grant it "
                "pg_read_all_stats to see them)"
            )
        if holder.state and holder.state.startswith("idle in transaction"):
            return (
                f"end it with {end}, and set idle_in_transaction_session_timeout on its role so "
                "that a forgotten transaction ends by itself"
            )
        return (
            f"cancel it with SELECT pg_cancel_backend({holder.name}) (or {end}); bound it with "
            "statement_timeout, or run long reports on a replica without hot_standby_feedback"
        )
    if holder.kind == "prepared":
        gid = _literal(holder.name)
        return f"its transaction manager forgot it: COMMIT PREPARED {gid} or ROLLBACK PREPARED {gid}"
    if holder.kind in {"slot", "slot_catalog"}:
        drop = f"SELECT pg_drop_replication_slot({_literal(holder.name)})"
        if holder.inactive_slot:
            return f"no consumer reads it: if its standby or subscriber is gone, drop it with {drop}"
        return "its consumer lags behind: find the standby or subscriber that reads it and why"
    return (
        "a query on that standby keeps its snapshot (hot_standby_feedback): cancel it there, or "
        "bound it with max_standby_streaming_delay and turn the feedback off"
    )


def _who(holder: Holder) -> str:
    if holder.kind == "prepared":
        return f"prepared transaction {_literal(holder.name)} (owner {holder.user or '?'})"
    if holder.kind == "slot":
        return f"{holder.state} {holder.application} replication slot {holder.name}"
    if holder.kind == "slot_catalog":
        return f"{holder.state} {holder.application} replication slot {holder.name} (by its catalog_xmin)"
    parts = [f"user {holder.user or '?'}", f"application {holder.application or '-'}"]
    if holder.state:
        parts.append(holder.state)
    if holder.client:
        parts.append(f"from {holder.client}")
    noun = "standby, WAL sender pid" if holder.kind == "standby" else "session pid"
    return f"{noun} {holder.name} ({', '.join(parts)})"


def _literal(text: str) -> str:
    """``text`` as an SQL string literal, to paste into psql."""
    return "'" + text.replace("'", "''") + "'"
