"""The schema and every statement the queue runs, written once for all databases and
compiled once per dialect; the reads behind `queuecore stats`, the dashboard and the
queue-level gauges."""
