"""The simulated world: the real consumer on a virtual clock, scheduled from a seed, against moto's SQS and DynamoDB.

- :mod:`.clock`: the virtual clock and its threads (one runs at a time; time jumps only when every thread waits);
- :mod:`.aws`: moto's backends on that clock, behind a transport that adds latency and faults per request;
- :mod:`.world`: a seeded run (queues, producers, consumers, handlers, kills and signals) and its invariants;
- :mod:`.functions`: the same run with the worker as a Lambda function (an event source mapping, execution
  environments, throttles, timeouts, cold starts);
- :mod:`.scenarios`: named regression scenarios, one per race the world found.

``python -m bench.simulate --seeds N`` explores seeds (``--target lambda``: Lambda plans); docs/testing.md ("The
simulated world") says what it covers.
"""
