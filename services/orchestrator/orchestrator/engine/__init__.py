"""The durable reflection loop on DBOS Transact."""
