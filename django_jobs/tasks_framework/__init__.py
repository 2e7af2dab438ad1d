"""Django's Tasks framework on django_jobs: the backend, the two spellings of the framework's
API seen as one, the job type each task runs as, and its results."""
