from django.db import models


class Order(models.Model):
    class Status(models.TextChoices):
        WAITING_PAYMENT = "waiting_payment"
        PAID = "paid"

    amount_cents = models.PositiveIntegerField()
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.WAITING_PAYMENT)
    charge_id = models.BigIntegerField(null=True, unique=True)  # the provider's charge

    def __str__(self) -> str:
        return f"order {self.id} ({self.status})"


class Receipt(models.Model):
    order = models.OneToOneField(Order, on_delete=models.CASCADE)  # one receipt per order
    sent_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"receipt for order {self.order_id}"


class Charge(models.Model):
    """Kept by the payment provider, not by you: payments.py stands in for the provider."""

    idempotency_key = models.CharField(max_length=255, unique=True)
    amount_cents = models.PositiveIntegerField()

    def __str__(self) -> str:
        return f"charge {self.id} of {self.amount_cents} cents"
