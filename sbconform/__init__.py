"""sbconform: the conformance kit around the reference model.

Everything here may touch the outside world (targets, the AMQP endpoint, traces,
Spark, the CLI, the pytest plugin); the model itself is the dependency-free
``sbreference`` package.
"""

__version__ = "0.1.0"
