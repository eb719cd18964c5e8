"""The alarm recorder: real local runs (consumers, a producer, the operator's ``dlq`` commands on moto) recorded as
alarm scenarios, ``python -m bench.alarm_recording NAME`` (or ``--all``; :mod:`.record`).

The lab's, not the product's: it runs the consumer, moto and :class:`bench.proxy.FaultProxy`. What it writes is data
for the product's evaluator, which reads it and nothing here: ``infra/alarms/recordings/NAME.json``
(:data:`infra.alarms.catalogue.RECORDINGS`, docs/alarms.md, "The model of what AWS publishes").
"""
