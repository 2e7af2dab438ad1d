from __future__ import annotations

from django.db import models


class SentEmail(models.Model):
    """A business effect of the demo: one welcome email per user, guarded by a constraint."""

    user_id = models.BigIntegerField()
    kind = models.CharField(max_length=50)
    sent_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = (models.UniqueConstraint(fields=["kind", "user_id"], name="demo_one_email_per_kind"),)

    def __str__(self) -> str:
        return f"{self.kind} → user {self.user_id}"


class Invoice(models.Model):
    """A business state machine moved by a job with compare-and-set, guarded by constraints."""

    class Status(models.TextChoices):
        WAITING_PAYMENT = "waiting_payment"
        PAID = "paid"

    number = models.CharField(max_length=50, unique=True)
    amount_cents = models.PositiveIntegerField()
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.WAITING_PAYMENT)
    charge_id = models.CharField(max_length=100, null=True, blank=True, unique=True)
    paid_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = (
            # The last line of defence: a paid invoice always names the charge that paid it.
            models.CheckConstraint(
                condition=models.Q(status="waiting_payment") | models.Q(charge_id__isnull=False),
                name="demo_paid_invoice_has_charge",
            ),
        )

    def __str__(self) -> str:
        return f"invoice {self.number} ({self.status})"
