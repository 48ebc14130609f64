"""The recording proxy (``sbconform record``): relays AMQP between clients and a broker
and writes what the clients did as a trace (``sbspec/trace-format.md``)."""
