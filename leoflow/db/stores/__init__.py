"""The stores: every SQL statement Leoflow runs, one module per entity it stores.

"Where is the SQL for pools?" has one answer: :mod:`leoflow.db.stores.pools`. A store's functions
take a :data:`~leoflow.db.connection.database.Connection` the caller opened (a transaction, a
fenced transaction or a read) and speak Leoflow types; the tables are :mod:`leoflow.db.tables`.
"""
