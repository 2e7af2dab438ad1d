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
