"""The tutorial's web API on queuecore: `app` (FastAPI) takes jobs and reports on them,
`jobs.REGISTRY` is what `queuecore worker` runs. See README, "Building a web API"."""
