"""disq's benchmark harness (`python -m bench`).

The modules of the package: `cli` (the command line and the run), `scenarios`
(what each scenario runs and reports), `load` (the load generator's worker
processes), `protocols` (disq, redis-server and beanstalkd on the wire), `servers`
(starting and stopping them), `report` (Markdown, JSON, PNG). The older scripts
beside them (single_node.py, cluster.py, federation.py) run on their own with
redis-benchmark: `python bench/single_node.py`.
"""
