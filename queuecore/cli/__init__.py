"""The `queuecore` command line (`main`), one module per group of commands."""
