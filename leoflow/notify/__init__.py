"""Webhook notifications: the leader's outcome observer and its deliverer (see their modules)."""
