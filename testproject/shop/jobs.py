from django_jobs import compare_and_set, job

from . import payments
from .models import Order, Receipt


# external=True: it charges a card at a provider, which a restored database cannot take back.
@job("shop.charge_order", max_attempts=5, external=True)
def charge_order(ctx, payload):
    order = Order.objects.get(id=payload["order_id"])

    # Elsewhere: the provider deduplicates on the key. Anchored on the order, the key is the
    # same on every attempt and for every job that charges this order.
    charge = payments.charge(
        order.amount_cents,
        idempotency_key=ctx.idempotency_key(anchor=f"order:{order.id}"),
        lose_answer=payload.get("simulate_lost_answer", False) and ctx.attempt == 1,
    )

    # A state change: waiting_payment → paid in one UPDATE; an earlier execution may have made it.
    compare_and_set(
        Order.objects.filter(id=order.id),
        "status",
        Order.Status.WAITING_PAYMENT,
        Order.Status.PAID,
        charge_id=charge.id,
    )

    # In this database: the effect and its key commit together, so it happens once.
    with ctx.effect(f"receipt:order:{order.id}") as first_time:
        if first_time:
            Receipt.objects.create(order=order)
