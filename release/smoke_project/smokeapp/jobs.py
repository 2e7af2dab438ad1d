from django_jobs import job


# external=False: its only effect is its return value, stored in this database.
@job("smoke.add", external=False)
def add(ctx, payload):
    return {"sum": payload["a"] + payload["b"]}
