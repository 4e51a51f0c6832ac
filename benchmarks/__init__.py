"""Benchmarks of queuecore against raw-driver floors and peer queues: `python -m benchmarks.run`."""
