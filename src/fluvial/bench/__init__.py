"""``fluvial bench``: fluvial and its peers side by side on the same Kafka and the same input.

- :mod:`~fluvial.bench.workloads`: the input data and fluvial's pipelines;
- :mod:`~fluvial.bench.systems` and :mod:`~fluvial.bench.peers`: the systems under test;
- :mod:`~fluvial.bench.harness` and :mod:`~fluvial.bench.measure`: one run and what it observes;
- :mod:`~fluvial.bench.report`: the markdown table and the plots.
"""
