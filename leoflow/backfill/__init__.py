"""Backfills: the leader's service that creates a backfill's runs as room allows."""
