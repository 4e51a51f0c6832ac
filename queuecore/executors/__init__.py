"""The two executors of the operations' plans, sync (`SQLQueue`) and asyncio
(`AsyncSQLQueue`), with the hot path, reconnecting and `wait()`: the only part of the
queue that talks to the database."""
