"""The results viewer under ``/ui``: sign-in sessions, and each project's catalog of its stored runs and jobs."""
