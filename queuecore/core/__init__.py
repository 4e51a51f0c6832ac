"""The queue's rules with no I/O: every operation as a plan, the checks on what callers
pass in, how rows become answers, backoff, and the option set. Executors run the plans."""
