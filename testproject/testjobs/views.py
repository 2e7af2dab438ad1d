"""The order flow over HTTP (tests/process/test_durable_http.py): a view enqueues a durable
order job addressed by its payment's key, and a webhook view signals it."""

from __future__ import annotations

import json

from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

import django_jobs
from django_jobs import enqueue


class WebhookRefused(Exception):
    """The webhook's own write failed after the signal: the transaction rolls back with it."""


@csrf_exempt
@require_POST
def place_order(request: HttpRequest) -> JsonResponse:
    body = json.loads(request.body)
    order = body["order"]
    payload = {"run": f"order{order}", "timeout": body.get("timeout", 60), "sleep": body.get("sleep", 3)}
    with transaction.atomic():
        job = enqueue("test.order_flow", payload, signal_key=f"pay:{order}")
    return JsonResponse({"job": job.id}, status=201)


@csrf_exempt
@require_POST
def payment_webhook(request: HttpRequest) -> HttpResponse:
    body = json.loads(request.body)
    try:
        with transaction.atomic():
            stored = django_jobs.signal(f"pay:{body['intent']}", "paid", {"amount": body["amount"]})
            if body.get("fail_after_signal"):
                raise WebhookRefused("the webhook's own write failed")
    except django_jobs.UnknownSignalKey:
        return HttpResponse(status=404)
    except WebhookRefused:
        return HttpResponse(status=500)
    return JsonResponse({"stored": stored})


urlpatterns_durable = [
    ("orders/", place_order),
    ("webhooks/payment/", payment_webhook),
]
