"""Test harness: real PostgreSQL servers, subprocess replicas, fakes of outside services."""
