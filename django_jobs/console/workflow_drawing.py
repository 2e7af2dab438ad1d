"""A workflow drawn as inline SVG: its stages as columns from left to right, each job a box in
the colour of its status, and an arrow from each box to the boxes that wait for it.

A stage of more than ``MAX_DRAWN`` jobs (a group of 100,000) is one box that counts its jobs
by status. Every text is escaped; nothing is fetched from elsewhere (no script, no CDN).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe

from django_jobs.reads import workflows as reads

#: Jobs of one stage drawn one by one; a larger stage is one box with counts.
MAX_DRAWN = 12

_WIDTH, _HEIGHT, _GAP_X, _GAP_Y, _MARGIN = 190, 44, 60, 14, 10
#: The fill of each status (the console's own palette, readable in light and dark themes).
COLOURS = {
    "waiting": "#d9d9d9",
    "pending": "#cfe2f3",
    "running": "#9fc5e8",
    "completed": "#b6d7a8",
    "skipped": "#d9ead3",
    "failed": "#ea9999",
    "cancelled": "#f4cccc",
    "needs_review": "#ffe599",
}


@dataclass
class Box:
    key: str
    stage: int
    title: str
    detail: str
    colour: str
    url: str | None = None
    feeds: set[int] = field(default_factory=set)
    waits_on: set[int] = field(default_factory=set)


def boxes(workflow_id: int, job_url: str) -> list[Box]:
    """The boxes of the workflow's drawing; ``job_url`` has ``{}`` where a job's id goes."""
    stages = reads.stage_statuses(workflow_id)
    small = sorted(s for s, counts in stages.items() if sum(counts.values()) <= MAX_DRAWN)
    large = sorted(s for s in stages if s not in small)
    drawn: list[Box] = []
    for job_id, job_type, status, stage, role, feeds, waits_on in reads.stage_jobs(workflow_id, small):
        label = job_type if role == "step" else f"{role}: {job_type}"
        box = Box(f"job:{job_id}", stage, label, f"#{job_id} {status}", COLOURS.get(status, "#fff"))
        box.url = job_url.format(job_id)
        box.feeds = {feeds} if feeds is not None else set()
        box.waits_on = {waits_on} if waits_on is not None else set()
        drawn.append(box)
    by_stage: dict[int, Box] = {}
    for stage in large:
        counts = stages[stage]
        total = sum(counts.values())
        ordered = sorted(counts.items(), key=lambda item: -item[1])
        detail = ", ".join(f"{count:,} {status}" for status, count in ordered)
        most = max(counts.items(), key=lambda item: item[1])[0]
        by_stage[stage] = Box(f"stage:{stage}", stage, f"{total:,} jobs", detail, COLOURS.get(most, "#fff"))
        drawn.append(by_stage[stage])
    for stage, feeds, waits_on in reads.stage_links(workflow_id, large) if large else []:
        if feeds is not None:
            by_stage[stage].feeds.add(feeds)
        if waits_on is not None:
            by_stage[stage].waits_on.add(waits_on)
    return sorted(drawn, key=lambda box: box.stage)


def svg(drawn: Iterable[Box]) -> SafeString:
    """The boxes as an SVG element, with arrows from each box to those that wait for it."""
    columns: dict[int, list[Box]] = {}
    for box in drawn:
        columns.setdefault(box.stage, []).append(box)
    stages = sorted(columns)
    at: dict[str, tuple[int, int]] = {}
    for x, stage in enumerate(stages):
        for y, box in enumerate(columns[stage]):
            at[box.key] = (_MARGIN + x * (_WIDTH + _GAP_X), _MARGIN + y * (_HEIGHT + _GAP_Y))
    width = _MARGIN * 2 + len(stages) * (_WIDTH + _GAP_X) - _GAP_X
    height = _MARGIN * 2 + max((len(c) for c in columns.values()), default=1) * (_HEIGHT + _GAP_Y) - _GAP_Y
    every = [box for stage in stages for box in columns[stage]]
    parts = [
        format_html(
            '<svg xmlns="http://www.w3.org/2000/svg" class="djj-workflow" width="{}" height="{}" '
            'viewBox="0 0 {} {}" role="img" aria-label="the workflow, step by step">'
            '<defs><marker id="djj-arrow" markerWidth="8" markerHeight="8" refX="7" refY="4" orient="auto">'
            '<path d="M0,0 L8,4 L0,8 z" fill="#666"/></marker></defs>',
            width,
            height,
            width,
            height,
        )
    ]
    for upstream in every:
        for downstream in every:
            if upstream.feeds & downstream.waits_on:
                (x1, y1), (x2, y2) = at[upstream.key], at[downstream.key]
                parts.append(
                    format_html(
                        '<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#666" marker-end="url(#djj-arrow)"/>',
                        x1 + _WIDTH,
                        y1 + _HEIGHT // 2,
                        x2 - 2,
                        y2 + _HEIGHT // 2,
                    )
                )
    for box in every:
        x, y = at[box.key]
        shape = format_html(
            '<rect x="{}" y="{}" width="{}" height="{}" rx="4" fill="{}" stroke="#555"/>'
            '<text x="{}" y="{}" font-size="12" fill="#000">{}</text>'
            '<text x="{}" y="{}" font-size="11" fill="#333">{}</text>',
            x, y, _WIDTH, _HEIGHT, box.colour,
            x + 6, y + 17, _clip(box.title, 28),
            x + 6, y + 34, _clip(box.detail, 32),
        )  # fmt: skip
        if box.url:
            shape = format_html('<a href="{}"><title>{}</title>{}</a>', box.url, box.detail, shape)
        else:
            shape = format_html("<g><title>{}</title>{}</g>", box.detail, shape)
        parts.append(shape)
    parts.append(mark_safe("</svg>"))
    # Every part was built by format_html, which escaped what it was given.
    return mark_safe("".join(parts))


def _clip(text: str, length: int) -> str:
    return escape(text if len(text) <= length else text[: length - 1] + "…")
