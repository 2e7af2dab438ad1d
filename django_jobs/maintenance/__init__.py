"""The periodic services that keep the tables true, one role a module, each with a ``run_once()``
that does one pass and returns what it did:

- ``rescuer``: takes back running jobs whose lease expired;
- ``pruner``: retention of finished jobs, forgetting silent workers, tidying the rows of start
  limits, pruning schedule ticks;
- ``reaper``: one pass of the two above, step by step, and ``ReaperLoop``, its thread;
- ``periodic``: fires the ticks of declared schedules (``SchedulerLoop``), and runs one now;
- ``service``: what the loops share (a thread that repeats ``run_once()``, outages logged).

``runjobs`` runs the loops on threads, ``reapjobs`` a reaper pass from the command line."""
