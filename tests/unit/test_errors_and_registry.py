from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import pytest

from django_jobs import (
    ErrorCode,
    JobContext,
    PermanentError,
    RateLimitedError,
    Reconciliation,
    RetryableError,
    SkipJob,
    job,
)
from django_jobs.checks import check_effects_declared
from django_jobs.errors import OutcomeKind, classify
from django_jobs.registry import AlreadyRegistered, InvalidHandler, registry


@pytest.mark.parametrize(
    ("exc", "kind", "code"),
    [
        (RetryableError("x", code="PROVIDER_5XX"), OutcomeKind.RETRY, "PROVIDER_5XX"),
        (RetryableError("x"), OutcomeKind.RETRY, ErrorCode.UNKNOWN),
        (PermanentError("x", code="AUTH_FAILED"), OutcomeKind.FAIL, "AUTH_FAILED"),
        (RateLimitedError("x", retry_after=3), OutcomeKind.RETRY, ErrorCode.RATE_LIMITED),
        (SkipJob("gone"), OutcomeKind.SKIP, ErrorCode.SKIPPED),
        (TimeoutError(), OutcomeKind.RETRY, ErrorCode.NETWORK_TIMEOUT),
        (ConnectionResetError(), OutcomeKind.RETRY, ErrorCode.NETWORK_ERROR),
        (KeyError("x"), OutcomeKind.RETRY, ErrorCode.UNKNOWN),
    ],
)
def test_classify(exc: Exception, kind: OutcomeKind, code: str) -> None:
    result = classify(exc)
    assert (result.kind, result.code) == (kind, code)


def test_rate_limited_carries_its_retry_after() -> None:
    assert classify(RateLimitedError("x", retry_after=7.5)).retry_after == 7.5
    with pytest.raises(ValueError, match="retry_after"):
        RateLimitedError("x", retry_after=-1)


@pytest.fixture
def scratch_names() -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    for name in names:
        registry.unregister(name)


def test_job_registers_a_handler_with_its_policy(scratch_names: list[str]) -> None:
    scratch_names.append("scratch.one")

    @job("scratch.one", queue="mail", priority=10, max_attempts=7, timeout=30)
    def handler(ctx: JobContext, payload: dict[str, Any]) -> None: ...

    job_type = registry.get("scratch.one")
    assert job_type is not None
    assert job_type.handler is handler
    assert (job_type.default_queue, job_type.priority, job_type.default_max_attempts) == ("mail", 10, 7)
    assert handler.job_name == "scratch.one"  # type: ignore[attr-defined]


def test_a_name_cannot_be_taken_by_another_handler(scratch_names: list[str]) -> None:
    scratch_names.append("scratch.two")

    @job("scratch.two")
    def first(ctx: JobContext, payload: dict[str, Any]) -> None: ...

    with pytest.raises(AlreadyRegistered, match=r"scratch\.two"):

        @job("scratch.two")
        def second(ctx: JobContext, payload: dict[str, Any]) -> None: ...


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"priority": 101}, "priority"),
        ({"priority": True}, "priority"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"timeout": 0}, "timeout"),
        ({"version": 0}, "version"),
        ({"queue": "bad queue"}, "queue"),
    ],
)
def test_invalid_policies_fail_at_import_time(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        job("scratch.invalid", **kwargs)


@pytest.mark.parametrize("name", ["", "has space", "x" * 201, "quote'd"])
def test_invalid_type_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="invalid job type name"):
        job(name)


def test_idempotency_key_is_stable_across_attempts() -> None:
    import uuid

    from django_jobs.runtime.lease import Lease

    def lease() -> Lease:
        return Lease(42, uuid.uuid4(), 60.0)

    keys = {
        JobContext(
            job_id=42,
            type="billing.charge",
            queue="q",
            attempt=a,
            max_attempts=5,
            execution_id=uuid.uuid4(),
            lease=lease(),
        ).idempotency_key("charge")
        for a in (1, 2, 3)
    }
    assert keys == {"billing.charge:job-42:charge"}
    keyed = JobContext(
        job_id=42,
        type="billing.charge",
        queue="q",
        attempt=1,
        max_attempts=5,
        execution_id=uuid.uuid4(),
        unique_key="invoice:7",
        lease=lease(),
    )
    assert keyed.idempotency_key() == "billing.charge:invoice:7"


def _three_params(ctx: JobContext, payload: dict[str, Any], extra: str) -> None: ...


def _ctx_only(ctx: JobContext) -> None: ...


def _keyword_only(*, ctx: JobContext, payload: dict[str, Any]) -> None: ...


def _required_keyword(ctx: JobContext, payload: dict[str, Any], *, region: str) -> None: ...


def _no_params() -> None: ...


@pytest.mark.parametrize(
    ("handler", "why"),
    [
        (_three_params, "missing a required argument: 'extra'"),
        (_ctx_only, "too many positional arguments"),
        (_keyword_only, "too many positional arguments"),
        (_required_keyword, "argument: 'region'"),  # "keyword-only argument" from Python 3.12
        (_no_params, "too many positional arguments"),
        (lambda payload: None, "too many positional arguments"),
    ],
)
def test_a_handler_that_cannot_take_ctx_and_payload_is_refused_at_registration(
    handler: Any, why: str
) -> None:
    with pytest.raises(InvalidHandler, match=r"handler\(ctx, payload\)") as refused:
        job("scratch.unfit")(handler)
    assert why in str(refused.value)
    assert f"{handler.__module__}.{handler.__qualname__}(" in str(refused.value)  # where to look
    assert "scratch.unfit" not in registry  # nothing was registered


def test_a_handler_that_is_not_callable_is_refused() -> None:
    with pytest.raises(InvalidHandler, match="must decorate a function, not str"):
        job("scratch.unfit")("not a function")  # type: ignore[type-var]
    assert "scratch.unfit" not in registry


class _CallableHandler:
    def __call__(self, ctx: JobContext, payload: dict[str, Any]) -> str:
        return "instance"


class _Handlers:
    def handle(self, ctx: JobContext, payload: dict[str, Any]) -> str:
        return "method"


def _with_options(
    ctx: JobContext, payload: dict[str, Any], region: str = "eu", *rest: Any, **extra: Any
) -> str:
    return region


def _partial_target(prefix: str, ctx: JobContext, payload: dict[str, Any]) -> str:
    return prefix


async def _coroutine(ctx: JobContext, payload: dict[str, Any]) -> str:
    return "async"


@pytest.mark.parametrize(
    "handler",
    [
        _with_options,
        lambda ctx, payload: "lambda",
        lambda *args: "varargs",
        lambda ctx, /, payload, **kwargs: "positional-only",
        functools.partial(_partial_target, "partial"),
        functools.partial(_three_params, extra="bound by keyword"),
        _CallableHandler(),
        _Handlers().handle,
        _coroutine,
        print,  # a builtin: its call is its own business
    ],
)
def test_every_shape_that_takes_ctx_and_payload_registers(handler: Any, scratch_names: list[str]) -> None:
    scratch_names.append("scratch.fit")
    job("scratch.fit")(handler)
    job_type = registry.get("scratch.fit")
    assert job_type is not None and job_type.handler is handler
    job("scratch.fit")(handler)  # importing the module again registers the same handler again


# ---- stored class names ---------------------------------------------------------------------


def test_the_exception_classes_the_package_exports_are_stored_by_their_public_name() -> None:
    from django_jobs import ActionRefused, LeaseLost, PermanentError, SkipJob
    from django_jobs.errors import ResultNotJSON, class_path

    assert class_path(LeaseLost) == "django_jobs.LeaseLost"  # defined in runtime.context
    assert class_path(PermanentError) == "django_jobs.PermanentError"
    assert class_path(SkipJob) == "django_jobs.SkipJob"
    assert class_path(ActionRefused) == "django_jobs.ActionRefused"  # defined in transitions
    assert class_path(ValueError) == "builtins.ValueError"
    assert class_path(ResultNotJSON) == "django_jobs.errors.ResultNotJSON"  # not exported: as it is

    class LeaseLostToo(LeaseLost):  # a user's subclass keeps its own path
        pass

    assert class_path(LeaseLostToo).endswith("LeaseLostToo")


@pytest.mark.parametrize(
    ("stored", "reads"),
    [
        ("django_jobs.context.LeaseLost", "django_jobs.LeaseLost"),  # the flat layout's module
        ("django_jobs.runtime.context.LeaseLost", "django_jobs.LeaseLost"),
        ("django_jobs.errors.PermanentError", "django_jobs.PermanentError"),
        ("django_jobs.LeaseLost", "django_jobs.LeaseLost"),
        ("django_jobs.errors.ResultNotJSON", "django_jobs.errors.ResultNotJSON"),
        ("myapp.errors.LeaseLost", "myapp.errors.LeaseLost"),  # not ours, whatever its name
        ("django_jobs.context.JobContext", "django_jobs.context.JobContext"),  # exported, no exception
        ("builtins.ValueError", "builtins.ValueError"),
    ],
)
def test_a_stored_class_name_of_ours_reads_as_its_public_name_whatever_module_it_named(
    stored: str, reads: str
) -> None:
    from django_jobs.errors import public_class_path

    assert public_class_path(stored) == reads


def test_the_public_exceptions_the_rules_name_are_those_the_package_exports() -> None:
    import django_jobs
    from django_jobs.errors import PUBLIC_EXCEPTIONS

    names = {name: getattr(django_jobs, name) for name in django_jobs.__all__}
    exported = {name for name, it in names.items() if isinstance(it, type) and issubclass(it, BaseException)}
    assert exported == PUBLIC_EXCEPTIONS


# ---- where a type's effects are: external --------------------------------------------------------


def _noop(ctx: JobContext, payload: dict[str, Any]) -> None: ...


def _found(ctx: JobContext, payload: dict[str, Any]) -> Reconciliation:
    return Reconciliation.DONE


@pytest.mark.parametrize(
    ("kwargs", "outside", "says"),
    [
        ({}, True, False),  # says nothing: unknown means outside
        ({"external": True}, True, True),
        ({"external": False}, False, True),
        ({"external_calls": ("charge",)}, True, True),
        ({"reconcile": _found}, True, True),
        ({"on_lost": "needs_review"}, True, True),
    ],
    ids=["nothing", "external", "inside", "external_calls", "reconcile", "needs_review"],
)
def test_only_a_type_that_says_its_effects_stay_in_the_database_runs_through_a_restore_hold(
    scratch_names: list[str], kwargs: dict[str, Any], outside: bool, says: bool
) -> None:
    scratch_names.append("scratch.effects")
    job("scratch.effects", **kwargs)(_noop)
    job_type = registry.get("scratch.effects")
    assert job_type is not None
    assert (job_type.acts_outside, job_type.says_where_effects_are) == (outside, says)
    found = [m for m in check_effects_declared() if "'scratch.effects'" in m.msg]
    assert [m.id for m in found] == ([] if says else ["django_jobs.W008"])


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"external_calls": ("charge",)}, "external_calls"),
        ({"reconcile": _found}, "reconcile"),
        ({"on_lost": "needs_review"}, 'on_lost="needs_review"'),
    ],
)
def test_external_false_beside_what_says_the_type_acts_outside_is_refused(
    kwargs: dict[str, Any], named: str
) -> None:
    said = f"external=False says every effect stays in the database, but {named}"
    with pytest.raises(ValueError, match=said):
        job("scratch.contradiction", external=False, **kwargs)(_noop)
    assert registry.get("scratch.contradiction") is None


def test_the_project_and_the_apps_types_all_say_where_their_effects_are() -> None:
    # The quickstart's charge says it calls a provider; the library's own types, that they
    # write only this database. (Types a test registers for itself are not the project's.)
    ours = ("django_jobs.", "testproject.")
    named = [m.msg for m in check_effects_declared() if getattr(m.obj, "__module__", "").startswith(ours)]
    assert named == []
    charge = registry.get("shop.charge_order")
    assert charge is not None and charge.external is True and charge.acts_outside
