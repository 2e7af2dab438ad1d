"""The periodic services that keep the tables true: recovery of lost executions, retention,
key and tick tidying, and the scheduler that fires declared schedules. Each has a ``run_once()``;
``runjobs`` runs them on threads, ``reapjobs`` from the command line."""
