"""bertlite's benchmarks: `python -m bench JOB --help` from the repository root.

Jobs: throughput, cold-start, profile, serve, ray, int8, kernels, grids. Every job can write its
numbers with --json PATH; bench/common.py gives each result the same environment record (commit,
CPU, versions, a relative model id). bench/results/README.md says how to publish a run.
"""
