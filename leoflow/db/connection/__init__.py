"""Connection plumbing: how Leoflow opens, budgets, pools and fences its database connections.

Nothing here knows a Leoflow table except the two it must (the fencing check reads the
leadership row; the wake-up channel is a ``NOTIFY``); the stores in :mod:`leoflow.db.stores`
hold the SQL of each entity. Driver errors become Leoflow errors here (:mod:`.driver_errors`).
"""
