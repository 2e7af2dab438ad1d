"""``manage.py jobsselftest``: the guarantees proven on the user's own database and settings.

A run enqueues jobs of the self-test's own types in a queue of its own, starts worker processes
that serve only that queue, kills one mid-job (SIGKILL), freezes another past its lease
(SIGSTOP), and checks that every job ended where it should, that each effect happened once and
that a frozen worker's late writes changed nothing; it measures claim latency, recovery time
and throughput, then removes everything it wrote.

One module per role:

- ``jobs``: the job types (registered only in the self-test's processes: see there why) and
  the keys their effects record;
- ``preflight``: the refusals, before anything is written;
- ``lock``: the one run per queue (a marker job held by a unique key);
- ``processes``: the worker processes, from the side of the run that starts and signals them;
- ``worker_role``: the same, from inside one of them;
- ``run``: a whole run, its steps in order and the clean-up that follows whatever happened;
- ``harness``: what every step stands on (the plan, the workers, the one way of waiting,
  which also recovers the queue's expired leases);
- ``steps``: throughput, retries, claim latency, effects once; ``crashes``: the SIGKILL and the
  SIGSTOP, and what each must leave; ``figures``: the measurements, and how they are said;
- ``cleanup``: removing what a run wrote (or what an interrupted run left).
"""
