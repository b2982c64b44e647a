"""Scheduling: DAG specs, the leader's scheduling loop, runs and the task state machine."""
