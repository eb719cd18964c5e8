"""A test's consumer on the simulated clock: the real :class:`consumer.runtime.consumer.Consumer` and moto's SQS and
DynamoDB, all on the virtual time of bench/sim (the scheduler runs every thread; a wait jumps the clock), so a test
of a backoff, a lease or a retry waits for none of them in real time and meets no timing the machine happens to
produce.

The test's body runs as the simulation's main thread (:meth:`Virtual.run`): it creates queues and sends with
:attr:`Virtual.sqs`, starts consumers with :meth:`Virtual.running` and waits with :meth:`Virtual.wait_until`, all on
the virtual clock. moto answers as in the ``sqs`` fixture, with the corrections bench/sim/aws.py lists (each
towards what AWS documents); tests/sim/test_aws_contract.py runs the same checks here and on plain moto.
"""

from __future__ import annotations

import contextlib
import functools
import random
from collections.abc import Callable, Iterator
from typing import Any

import boto3
from botocore import UNSIGNED
from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from botocore.config import Config

from bench.sim.aws import Aws, Faults
from bench.sim.clock import SimClock
from consumer import Message
from consumer.contract import WorkerContract
from consumer.runtime.consumer import Consumer
from consumer.runtime.idempotency import DynamoDBStore
from consumer.testing import WaitTimeoutError
from tests.integration.conftest import QueuePair
from tests.integration.support import consumer_of

#: Each request's latency, ms: a round trip on loopback, so requests take time on the virtual clock as on a real one.
LATENCY_MS = (1.0, 3.0)


class Virtual:
    """One simulated run for a test: its clock (:attr:`sim`), moto on that clock, and a client of the test's own.

    Entering the run resets every moto backend of the process (bench/sim/aws.py), the in-process moto server's
    included: what a module-scoped fixture made on moto does not outlive a test on the simulated clock."""

    def __init__(self, seed: int = 7) -> None:
        self.sim = SimClock(seed, switch_probability=0.0)
        self.aws = Aws(self.sim, random.Random(f"aws-{seed}"), Faults(), latency_ms=LATENCY_MS)
        self._sqs: Any = None

    @property
    def sqs(self) -> Any:
        """The test's boto3 SQS client (made inside the run, where moto is on the virtual clock)."""
        if self._sqs is None:
            self._sqs = self.aws.client("sqs", caller="test", faults=False)
        return self._sqs

    def run(self, body: Callable[[], None]) -> None:
        """Run ``body`` as the simulation's main thread, then end every thread it left; re-raise what ``body``
        raised (an assertion, a :class:`WaitTimeoutError`), or fail with what the scheduler saw. Once only: a closed
        simulation would run nothing and pass."""
        assert not self.sim.over, "a Virtual runs once: a second run() of a closed simulation would run nothing"
        raised: list[BaseException] = []

        def main() -> None:
            try:
                body()
            except BaseException as error:  # re-raised below, in the test's own thread
                raised.append(error)

        with self.aws:
            self.sim.run(main)
            self.sim.close()
        if raised:
            raise raised[0]
        assert self.sim.errors == [], "\n".join(self.sim.errors)

    def consumer_of(
        self, pair: QueuePair, contract: WorkerContract, handler: Callable[[Message], Any], **options: Any
    ) -> Consumer:
        """:func:`tests.integration.support.consumer_of` with this run's clock and a client of the consumer's own."""
        sqs = self.aws.client("sqs", caller="consumer", faults=False)
        return consumer_of(sqs, pair, contract, handler, clock=self.sim, **options)

    @contextlib.contextmanager
    def running(self, consumer: Consumer, *, stop_timeout: float = 60.0) -> Iterator[list[int]]:
        """``consumer.run()`` on a thread of the run for the ``with`` block; on leaving, stop it and wait (virtual
        seconds) for its exit. Yields a list that holds its exit code once it has exited."""
        exit_code: list[int] = []
        thread = self.sim.thread(lambda: exit_code.append(int(consumer.run())), name="consumer")
        thread.start()
        try:
            yield exit_code
        finally:
            consumer.stop()
            thread.join(stop_timeout)
            if thread.is_alive():
                raise WaitTimeoutError(f"consumer did not stop within {stop_timeout:g} virtual s of stop()")

    def wait_until(self, condition: Callable[[], Any], timeout: float = 60.0, what: str = "condition") -> None:
        """Until ``condition()`` holds, checked every 0.1 virtual seconds; :class:`WaitTimeoutError` past
        ``timeout`` virtual seconds."""
        deadline = self.sim.now + timeout
        while not condition():
            if self.sim.now > deadline:
                raise WaitTimeoutError(f"not within {timeout:g} virtual s: {what}")
            self.sim.sleep(0.1)

    @functools.cached_property
    def dynamodb(self) -> Any:
        """The test's boto3 DynamoDB client (made inside the run, where moto is on the virtual clock)."""
        return self.aws.client("dynamodb", caller="test", faults=False)

    def dynamodb_store(self, table: str, *, client: Any = None) -> DynamoDBStore:
        """A :class:`DynamoDBStore` of ``table`` for a consumer, as bench/sim/world.py builds one: ``client`` (one of
        this run's, when the test watches its calls) or a client of the consumer's own, and the records' times and the
        backoff before unprocessed items on this run's clock."""
        ddb = client if client is not None else self.aws.client("dynamodb", caller="consumer", faults=False)
        return DynamoDBStore(table, client=ddb, clock=self.sim.time, sleep=self.sim.sleep)

    def source_client(self, service: str) -> Any:
        """A boto3 client of a service that feeds queues (``"sns"``, ``"events"``): moto answers it in this process,
        each request taking the world's latency on the run's clock; the service starts empty in each run (the run's
        :class:`Aws` resets every moto backend). bench/sim/aws.py's transport carries SQS and DynamoDB only (SNS speaks
        the query protocol, which it does not read), and what these services deliver reaches a queue inside moto,
        past the transport that wakes the long polls: :class:`_MotoAnswers` wakes them."""
        config = Config(signature_version=UNSIGNED)
        client = _sources_session().client(service, config=config)
        client._endpoint.http_session = _MotoAnswers(self.aws, service)
        return client


@functools.cache
def _sources_session() -> boto3.Session:
    """One session for :meth:`Virtual.source_client`: it loads each service's model once."""
    from bench.sim.aws import REGION

    return boto3.Session(aws_access_key_id="sim", aws_secret_access_key="sim", region_name=REGION)


class _MotoAnswers:
    """botocore's HTTP session for :meth:`Virtual.source_client`: each request takes the world's latency each way
    and moto answers it; then every long poll waiting on a queue looks again (the call may have delivered there)."""

    def __init__(self, aws: Aws, service: str) -> None:
        self.aws = aws
        self.service = service

    def send(self, request: AWSPreparedRequest) -> AWSResponse:
        from moto.core.botocore_stubber import MockRawResponse
        from moto.core.models import botocore_stubber

        self.aws.sim.sleep(self.aws.latency(self.service))
        status, headers, raw = botocore_stubber.process_request(request)  # type: ignore[misc]
        for queue in list(self.aws.pollers):
            self.aws.notify(queue)
        self.aws.sim.sleep(self.aws.latency(self.service))
        return AWSResponse(request.url, status, headers, MockRawResponse(raw))

    def close(self) -> None:
        pass
