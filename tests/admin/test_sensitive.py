"""Sensitive payload fields: masked on every page for whoever lacks ``view_sensitive_payload``,
never changed in the database."""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client, override_settings

from django_jobs import job
from django_jobs.masking import MASK, Masker, masker_for
from django_jobs.models import Job, JobEvent
from django_jobs.states import EventKind, JobStatus
from tests.admin.console import LIST, act_url, detail_url, staff
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

CARD = "4242424242424242"
# A secret of bare digits could match a timestamp on the page by chance (".737" of a second).
CVC = "cvc-737"
SECRETS = (CARD, CVC, "sk_live_51Hx", "hunter2", "Bearer eyJhbGciOi", "tok_visa_9", "sess-8812")
PAYLOAD: dict[str, Any] = {
    "order": 7,
    "card": CARD,  # declared by the type
    "CVC": CVC,  # declared, in another case
    "customer": {"email_verified": True, "api_key": "sk_live_51Hx"},  # a default pattern, nested
    "logins": [{"user": "ann", "password": "hunter2"}],  # in a list
    "Authorization": "Bearer eyJhbGciOi",
    "card_token": {"id": "tok_visa_9", "brand": "visa"},  # a whole object is masked
}


def sensitive_job() -> Job:
    checkpoint = {"session_token": "sess-8812", "page": 3}
    job = JobFactory(type="test.payment", failed=True, payload=PAYLOAD, checkpoint=checkpoint)
    JobEvent.objects.create(
        job=job, kind=EventKind.RETRY_SCHEDULED, attempt=1, error_code="PROVIDER_5XX",
        details={"retry_in": 2.0, "card": CARD},
    )  # fmt: skip
    return job


@pytest.fixture
def viewers(superuser: User) -> dict[str, tuple[User, bool]]:
    """Who looks, and whether they may see the secrets."""
    return {
        "superuser": (superuser, True),
        "granted": (staff("granted", "view_job", "view_sensitive_payload"), True),
        "operator": (staff("operator", "view_job", "retry_job", "cancel_job", "resolve_job"), False),
        "view_only": (staff("viewer", "view_job"), False),
    }


@pytest.mark.parametrize("who", ["superuser", "granted", "operator", "view_only"])
def test_every_page_masks_secrets_for_whoever_lacks_the_permission(
    who: str, viewers: dict[str, tuple[User, bool]], login: Callable[[User | None], Client]
) -> None:
    job = sensitive_job()
    user, may_see = viewers[who]
    client = login(user)
    pages = {
        "list": client.get(LIST),
        "detail": client.get(detail_url(job.id)),
        "search": client.get(LIST, {"q": str(job.id)}),
        "confirmation": client.get(act_url("retry", job.id)),
    }
    detail = html.unescape(pages["detail"].content.decode())
    assert pages["detail"].status_code == 200
    assert '"order": 7' in detail and '"page": 3' in detail  # what is not sensitive stays readable
    if may_see:
        for secret in SECRETS:
            assert secret in detail
        assert "tok_visa_9" in detail and '"retry_in": 2.0' in detail
    else:
        for name, page in pages.items():
            content = html.unescape(page.content.decode())
            for secret in SECRETS:
                assert secret not in content, (name, secret)
        assert detail.count(MASK) == 8  # card, CVC, api_key, password, Authorization, card_token; 2 more
        assert '"retry_in": 2.0' in detail  # the history's details are masked, not hidden
    stored = Job.objects.get(id=job.id)
    assert (stored.payload, stored.checkpoint) == (PAYLOAD, {"session_token": "sess-8812", "page": 3})


def test_the_masker_looks_at_every_key_at_every_depth() -> None:
    masker = Masker(names=("card",), patterns=(r"token", r"^pin$"))
    value = {"Card": 1, "cards": 2, "x": [{"y": {"access_TOKEN": "t"}}], "pin": 4, "spin": 5, "n": None}
    assert masker.mask(value) == {
        "Card": MASK, "cards": 2, "x": [{"y": {"access_TOKEN": MASK}}], "pin": MASK, "spin": 5, "n": None,
    }  # fmt: skip
    assert masker.mask(["token", 1, None]) == ["token", 1, None]  # values are not keys
    assert masker.mask("secret") == "secret"
    assert value["Card"] == 1  # a copy: the original is left alone


def test_the_project_chooses_its_own_patterns() -> None:
    with override_settings(DJANGO_JOBS={"SENSITIVE_PAYLOAD_KEYS": [r"^e-?mail$"]}):
        masked = masker_for("test.payment").mask({"email": "a@b.c", "password": "p", "card": "c"})
    assert masked == {"email": MASK, "password": "p", "card": MASK}  # the type's own names stay
    masked = masker_for("no.such.type").mask({"password": "p", "card": "c"})
    assert masked == {"password": MASK, "card": "c"}  # an unknown type gets the project's patterns


@pytest.mark.parametrize("bad", ["card", ("card", ""), ("card", 3)])
def test_sensitive_names_are_checked_at_import(bad: Any) -> None:
    with pytest.raises(ValueError, match="sensitive must be a tuple of payload key names"):
        job("test.bad_sensitive", sensitive=bad)(lambda ctx, payload: None)


def test_masking_applies_to_jobs_of_every_status(
    viewers: dict[str, tuple[User, bool]], login: Callable[[User | None], Client]
) -> None:
    client = login(viewers["view_only"][0])
    for state in ({}, {"running": True}, {"completed": True}, {"status": JobStatus.NEEDS_REVIEW}):
        job = JobFactory(type="test.payment", payload={"card": CARD}, **state)
        assert CARD not in client.get(detail_url(job.id)).content.decode()


def test_a_return_value_is_shown_and_masked_like_a_payload(
    viewers: dict[str, tuple[User, bool]], login: Callable[[User | None], Client]
) -> None:
    job = JobFactory(type="test.payment", completed=True, return_value={"receipt": "R-7", "card": CARD})
    viewer = html.unescape(login(viewers["view_only"][0]).get(detail_url(job.id)).content.decode())
    assert '"receipt": "R-7"' in viewer and CARD not in viewer
    granted = html.unescape(login(viewers["granted"][0]).get(detail_url(job.id)).content.decode())
    assert CARD in granted
