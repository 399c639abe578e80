"""Command-line tools of the repository (benchmarks, draft-head training); run them as scripts."""
