from django.db import transaction
from django.http import JsonResponse
from django.views.decorators.http import require_POST

from django_jobs import enqueue

from .models import Order


@require_POST
def checkout(request):
    with transaction.atomic():
        order = Order.objects.create(amount_cents=int(request.POST["amount_cents"]))
        # Commits with the order, or rolls back with it: never a charge for a missing order.
        enqueue("shop.charge_order", {"order_id": order.id})
    return JsonResponse({"order_id": order.id}, status=201)
