"""What runs inside ``runjobs``: the worker's services (claiming, executing, heartbeats, writing
outcomes, waking up) and the pools that run handlers. Nothing outside ``runtime`` and the
commands that start a worker imports from here."""
