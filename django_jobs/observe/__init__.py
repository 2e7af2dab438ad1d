"""What an operator or a probe reads: metrics, liveness and readiness, findings, diagnosis of
one job, and the metrics view. Reads only: nothing here changes a job."""
