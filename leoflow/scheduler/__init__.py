"""Scheduling: the leader's loop, its steps, and the task state machine (the DAG model lives in leoflow.model)."""
