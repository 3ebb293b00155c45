"""The peers: other stream processors running the same workloads on the same Kafka and input.

Each ``*_app.py`` here is a standalone program, run by its own interpreter (a private virtual
environment for the Python peers, whose pins clash with fluvial's: Quix Streams needs
confluent-kafka < 2.13), so none of them imports fluvial. :mod:`fluvial.bench.systems` starts
them; :mod:`fluvial.bench.setup` installs them.
"""
