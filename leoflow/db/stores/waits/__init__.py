"""The statements of task waits (``wait_for``, ``depends_on_past``, approvals): the scheduler's and the API's."""
