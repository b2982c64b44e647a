"""Prometheus metric definitions, one module per part (http, election, scheduler, executor)."""
