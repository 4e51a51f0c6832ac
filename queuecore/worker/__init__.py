"""The worker (W1 to W10): its roles (claimer, holdings, leases, listener, reporter, acks,
presence, schedules) for the sync `Worker` and the `AsyncWorker`, and in `processes/` the
handler processes that keep a crash to its own job."""
