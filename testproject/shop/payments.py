"""A stand-in for your payment provider (Stripe, Adyen…). Like them, it makes one charge per
idempotency key, and answers a key it has seen with the charge it already made."""

from .models import Charge


def charge(amount_cents, idempotency_key, lose_answer=False):
    made, created = Charge.objects.get_or_create(
        idempotency_key=idempotency_key, defaults={"amount_cents": amount_cents}
    )
    if created and lose_answer:
        # The charge is made, but its answer is lost on the way back (a dropped connection):
        # the caller cannot tell whether the customer was charged.
        raise TimeoutError("no answer from the payment provider")
    return made


def find_charge(idempotency_key):
    """The charge made with this key, or None: what a provider's lookup API answers."""
    return Charge.objects.filter(idempotency_key=idempotency_key).first()
