"""queuecore against its raw-driver floors and its peers, side by side, in one run.

    python -m benchmarks.run [--quick] [--json results.json] [--pg-dsn URL]

See benchmarks/README.md for what each row means. This module stays empty of imports:
worker processes are spawned, and each re-imports the main module, so anything imported
here would count in every worker's peak RSS (a floor's worker must not carry SQLAlchemy).
"""

if __name__ == "__main__":
    import sys

    from benchmarks.harness import main

    sys.exit(main())
