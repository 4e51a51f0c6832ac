"""What a worker and a queue tell the people who watch them: the observer interface,
Prometheus metrics, OpenTelemetry traces, the worker's log lines and text tables."""
