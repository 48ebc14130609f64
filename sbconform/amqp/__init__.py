"""The AMQP vocabulary of sbconform, in one place.

``codec``: model error code <-> AMQP condition <-> management status; a Service Bus
message <-> the reference model's ``Message`` in both directions, keeping every section
the broker does not own as the sender encoded it (``sbspec/wire.md`` lists each fact and
its source). ``values``: just enough of the AMQP 1.0 type system to read and write those
sections without a toolkit in between.
"""
