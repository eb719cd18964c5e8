"""The bad-input corpus: messages the notifications handler must refuse, each as its own message.

Every case is poison to :func:`consumer.examples.notifications.parse` (not JSON,
or JSON that breaks the schema), so each must end in the DLQ with a reason at
its first receive, whatever its size, characters or attributes, and the
consumer must keep running. The attribute cases pair a poison body with the
attributes under test, because the handler never reads attributes: what they
exercise is the consumer around it (``Message.from_sqs``, the idempotency key,
trace context, the DLQ move that must carry them along).

SQS accepts only these characters in a body or String attribute: ``#x9 | #xA |
#xD | #x20-#xD7FF | #xE000-#xFFFD | #x10000-#x10FFFF``
(https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessage.html),
and a body of at least one character: "empty" is sent as whitespace, the
closest body SQS allows. A NUL or other C0 control character cannot be sent at
all; as JSON escape text (``\\u0000``) it can.

:func:`fifo_cases` are the FIFO edge cases, run on a FIFO pair under
:func:`fifo_handle` (the demo declaration, FIFO).
"""

from __future__ import annotations

import base64
import gzip
import json
import random
from dataclasses import dataclass, field
from typing import Any

from consumer import Message, worker
from consumer.examples import demo, notifications
from consumer.limits import SQS_MAX_MESSAGE_BYTES
from consumer.local.harness import IDEMPOTENCY_ATTRIBUTE, sample_event

#: The attribute the producer uses for the event id (also the consumer's idempotency-key attribute).
KEY_ATTRIBUTE = IDEMPOTENCY_ATTRIBUTE
#: What the chaos producer adds to every message: room to leave in a max-size body.
DEFAULT_MAX_MESSAGE_BYTES = SQS_MAX_MESSAGE_BYTES


@dataclass(frozen=True)
class Case:
    """One corpus message: ``name`` (a stable kind), what it is, and the SendMessage arguments."""

    name: str
    what: str
    body: str
    attributes: dict[str, Any] = field(default_factory=dict)
    group_id: str | None = None  # FIFO only
    deduplication_id: str | None = None  # FIFO only
    #: "dlq" (must end in the DLQ with a reason at receive 1), "applied" (a good FIFO neighbour),
    #: or "deduplicated" (SQS drops it as a duplicate of an earlier send).
    expect: str = "dlq"
    event_id: str | None = None  # good FIFO neighbours: their Idempotency-Key at the downstream

    def send_arguments(self, queue_url: str) -> dict[str, Any]:
        arguments: dict[str, Any] = {"QueueUrl": queue_url, "MessageBody": self.body}
        if self.attributes:
            arguments["MessageAttributes"] = self.attributes
        if self.group_id is not None:
            arguments["MessageGroupId"] = self.group_id
        if self.deduplication_id is not None:
            arguments["MessageDeduplicationId"] = self.deduplication_id
        return arguments


def _string(value: str) -> dict[str, str]:
    return {"DataType": "String", "StringValue": value}


def _sqs_allows(c: str) -> bool:
    return c in "\t\n\r" or "\x20" <= c <= "\ud7ff" or "\ue000" <= c <= "\ufffd" or c >= "\U00010000"


def _sqs_safe(text: str) -> str:
    """Drop the characters SQS refuses (see the module docstring)."""
    return "".join(c for c in text if _sqs_allows(c))


def standard_cases(max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES, seed: int = 3) -> list[Case]:
    """The standard-queue corpus: one message per kind, each poison, each expected in the DLQ at receive 1."""
    rng = random.Random(seed)
    good = sample_event("evt-corpus-good", 1)
    text = json.dumps(good)
    noise = bytes(rng.getrandbits(8) for _ in range(4096))
    # A body of exactly the queue's maximum size (ASCII, so characters = bytes): JSON whose recipient
    # breaks the schema's 320-character limit, so it is refused as poison rather than delivered.
    frame = json.dumps(sample_event("evt-corpus-max-size", 1, recipient=""))
    max_body = frame.replace('"recipient": ""', '"recipient": "' + "r" * (max_message_bytes - len(frame)) + '"')

    def poison(name: str) -> str:
        # Its own body per case: without an idempotency-key attribute the key is the body's hash,
        # and two messages with one body are one piece of work (the second would wait for the first).
        return json.dumps(sample_event(f"evt-corpus-{name}", 1, channel="pigeon"))

    cases = [
        Case("invalid_json_truncated", "JSON cut off mid-object", text[:-7]),
        Case("invalid_json_single_quotes", "a Python dict repr, not JSON", repr(good)),
        Case("invalid_json_trailing_comma", "a trailing comma", text[:-1] + ",}"),
        Case("form_encoded", "form-encoded, not JSON", "event_id=evt-corpus-form&type=notification.requested"),
        Case("json_array", "a JSON array holding a valid event", json.dumps([good])),
        Case("json_null", "the JSON literal null", "null"),
        Case("json_number", "a JSON number", "42"),
        Case("json_string", "a JSON string holding the event", json.dumps(text)),
        Case("schema_missing_field", "no recipient", json.dumps(sample_event("evt-corpus-missing", 1, recipient=None))),
        Case(
            "schema_wrong_type",
            "recipient is a number",
            json.dumps(sample_event("evt-corpus-type", 1, recipient=12345)),
        ),
        Case("schema_unknown_property", "an extra property", json.dumps({**good, "priority": "high"})),
        Case(
            "schema_bad_enum", "channel not allowed", json.dumps(sample_event("evt-corpus-enum", 1, channel="pigeon"))
        ),
        Case("schema_wrong_event_type", "type is not notification.requested", json.dumps({**good, "type": "x"})),
        Case("schema_id_too_long", "event_id of 129 characters", json.dumps(sample_event("e" * 129, 1))),
        Case("empty_whitespace", "whitespace only (SQS refuses an empty body)", " \t\r\n "),
        Case("max_size_body", f"a body of exactly {max_message_bytes} bytes (the queue's maximum)", max_body),
        Case(
            "binary_looking",
            "random bytes as Latin-1, minus the characters SQS refuses, after a PNG-like signature",
            "\x89PNG\r\n" + _sqs_safe(noise.decode("latin-1")),
        ),
        Case(
            "base64_gzip_blob",
            "base64 of gzip data (binary-looking ASCII)",
            base64.b64encode(gzip.compress(noise)).decode(),
        ),
        Case("utf8_bom_prefix", "a byte-order mark before valid JSON", "\ufeff" + text),
        Case(
            "unicode_rtl_zero_width",
            "a right-to-left override in the channel, zero-width characters in a key",
            json.dumps({**good, "channel": "\u202eliame"}, ensure_ascii=False).replace(
                '"recipient"', '"reci\u200bpient\u200d"'
            ),
        ),
        Case(
            "unicode_surrogate_edges",
            "U+D7FF, U+E000, U+FFFD, U+10000, U+10FFFF (the edges SQS allows) in the template",
            json.dumps({**good, "template": "\ud7ff\ue000\ufffd\U00010000\U0010ffff"}, ensure_ascii=False),
        ),
        Case(
            "json_lone_surrogate_escape",
            "a lone surrogate as JSON escape text (valid JSON, not valid Unicode) in the template",
            text.replace('"template": "welcome"', '"template": "\\ud800"').replace(
                '"template": "password_reset"', '"template": "\\ud800"'
            ),
        ),
        Case(
            "json_nul_escape",
            "NUL as JSON escape text (SQS refuses a raw NUL) in the channel",
            text.replace('"channel": "sms"', '"channel": "sms\\u0000"'),
        ),
        Case(
            "control_characters",
            "a raw tab inside a JSON string, DEL and C1 controls (U+007F, U+0085) in the template",
            text.replace('"template": "password_reset"', '"template": "pass\tword\x7f\x85"'),
        ),
        Case("no_attributes", "a poison body with no message attributes at all", poison("no_attributes")),
        Case(
            "ten_attributes",
            "the maximum of 10 attributes (no room left for the reason: they must be folded)",
            poison("ten_attributes"),
            {f"attr-{n}": _string(f"value {n}") for n in range(10)},
        ),
        Case(
            "huge_attributes",
            "two 64 KiB attributes (String and Binary) next to a poison body",
            poison("huge_attributes"),
            {"big-text": _string("t" * 65_536), "big-blob": {"DataType": "Binary", "BinaryValue": noise * 16}},
        ),
        Case(
            "binary_and_custom_types",
            "Binary, Binary.gzip, Number and String.json attributes",
            poison("binary_and_custom_types"),
            {
                "payload": {"DataType": "Binary", "BinaryValue": noise[:64]},
                "payload-gz": {"DataType": "Binary.gzip", "BinaryValue": gzip.compress(b"x" * 100)},
                "attempt": {"DataType": "Number", "StringValue": "-1.5e3"},
                "meta": {"DataType": "String.json", "StringValue": json.dumps({"k": ["\u202e", 1]})},
            },
        ),
        Case(
            "idempotency_key_huge",
            "an idempotency-key attribute of 4 KiB (DynamoDB keys stop at 2,048 bytes)",
            poison("idempotency_key_huge"),
            {KEY_ATTRIBUTE: _string("k" * 4096)},
        ),
        Case(
            "idempotency_key_binary",
            "an idempotency-key attribute of type Binary",
            poison("idempotency_key_binary"),
            {KEY_ATTRIBUTE: {"DataType": "Binary", "BinaryValue": b"\x00\xffkey"}},
        ),
        Case(
            "malformed_trace_attributes",
            "a malformed traceparent, a tracestate of invisible characters",
            poison("malformed_trace_attributes"),
            {"traceparent": _string("00-zzzz-not-a-trace-01"), "tracestate": _string("\u202e=\u200b")},
        ),
        Case(
            "long_attribute_names",
            "attribute names of 256 characters (the maximum) with dots, dashes and underscores",
            poison("long_attribute_names"),
            {("a.b-c_" * 43)[:256]: _string("v"), ("Z" * 255) + "9": _string("\U0010ffff")},
        ),
    ]
    return [Case(c.name, c.what, c.body, c.attributes, event_id=f"corpus:{c.name}") for c in cases]


def fifo_cases() -> list[Case]:
    """FIFO edge cases: poison in the middle and at the head of a group, a shared dedup id, long ids.

    The good neighbours carry their event id as the downstream's Idempotency-Key, so the
    downstream's arrival order shows whether each group kept its order around the poison.
    """

    def good(group: str, n: int) -> Case:
        event_id = f"evt-fifo-{group}-{n}"
        return Case(
            f"fifo_{group}_good_{n}",
            f"good message {n} of group {group}",
            json.dumps(sample_event(event_id, n)),
            group_id=group,
            deduplication_id=event_id,
            expect="applied",
            event_id=event_id,
        )

    def bad(name: str, what: str, group: str, deduplication_id: str | None = None) -> Case:
        return Case(
            name,
            what,
            json.dumps(sample_event(f"evt-{name}", 0, channel="pigeon")),
            group_id=group,
            deduplication_id=deduplication_id or f"dedup-{name}",
            event_id=f"corpus:{name}",
        )

    long_group = ("g!#$%&'()*+,-./:;<=>?@[\\]^_`{|}~" * 4)[:128]
    return [
        good("mid", 1),
        good("mid", 2),
        bad("fifo_poison_mid_group", "poison third in a group of five: the rest must go on, in order", "mid"),
        good("mid", 3),
        good("mid", 4),
        bad("fifo_poison_group_head", "poison first in its group, two good ones behind it", "head"),
        good("head", 1),
        good("head", 2),
        bad("fifo_shared_dedup_id", "poison; a later good send reuses its deduplication id", "dedup", "dedup-shared"),
        Case(
            "fifo_shared_dedup_id_repeat",
            "good body, same deduplication id within 5 min: SQS accepts the send and drops the message",
            json.dumps(sample_event("evt-fifo-dedup-dropped", 1)),
            group_id="dedup",
            deduplication_id="dedup-shared",
            expect="deduplicated",
            event_id="evt-fifo-dedup-dropped",
        ),
        bad("fifo_long_ids", "group and deduplication ids of 128 characters, all punctuation", long_group, long_group),
    ]


@worker(**demo.DECLARATION, fifo=True, content_based_deduplication=True)
def fifo_handle(message: Message) -> None:
    """The notifications handler under the demo declaration, on a FIFO pair (for the FIFO corpus)."""
    notifications.handle(message)
