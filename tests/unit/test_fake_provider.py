"""The demo's stand-in provider hands out ids as a real one does: never the same twice, across
runs too, since the demo's invoices keep them under a UNIQUE constraint between runs."""

from __future__ import annotations

import json
import urllib.request

from testproject.demo.provider import FakeProvider


def charge(provider: FakeProvider, key: str, idempotency_key: str) -> str:
    request = urllib.request.Request(
        f"{provider.url}/operations/{key}",
        data=b"{}",
        method="POST",
        headers={"Idempotency-Key": idempotency_key},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return str(json.load(response)["id"])


def test_two_runs_of_the_provider_never_hand_out_the_same_id() -> None:
    ids = []
    for _ in range(2):  # two demo runs: each starts a provider of its own
        provider = FakeProvider().start()
        try:
            ids += [charge(provider, "charge-1", "key-1"), charge(provider, "charge-2", "key-2")]
        finally:
            provider.stop()
    assert len(set(ids)) == 4, ids


def test_a_repeated_idempotency_key_gets_the_same_object_back() -> None:
    provider = FakeProvider().start()
    try:
        assert charge(provider, "charge-1", "key-1") == charge(provider, "charge-1", "key-1")
        assert len(provider.objects_for("charge-1")) == 1
    finally:
        provider.stop()
