"""Composite alarm rules (AlarmRule), parsed once and evaluated on the states of the alarms they name.

The grammar and the states are the ones CloudWatch documents; anything else (AT_LEAST, an unknown word) is refused
in one line naming it (:class:`Unsupported`).
- PutCompositeAlarm, AlarmRule and the composite alarm's states:
  https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_PutCompositeAlarm.html
- "Create a composite alarm", rule expressions and their examples:
  https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/Create_Composite_Alarm.html
  (its source as last published on GitHub, 2023-05-17:
  https://github.com/awsdocs/amazon-cloudwatch-user-guide/blob/b355497/doc_source/Create_Composite_Alarm.md)

Documented rules encoded:
- ALARM(x), OK(x), INSUFFICIENT_DATA(x) are TRUE when alarm x is in that state; TRUE and FALSE always are what they
  say; AND, OR and NOT combine them; parentheses group (AlarmRule).
- x is an alarm name or ARN, in double quotes or not (AlarmRule); an ARN ``arn:PARTITION:cloudwatch:REGION:ACCOUNT:
  alarm:NAME`` names the alarm NAME, the states here being keyed by name.
- The composite alarm goes into ALARM only if the rule is met (PutCompositeAlarm), OK otherwise; INSUFFICIENT_DATA
  only in the moment after it is created, before its first evaluation ("this initial time after creation is the
  only time that the alarm can be in INSUFFICIENT_DATA state"), so a child in INSUFFICIENT_DATA never makes it so:
  the child's state is read like any other (ALARM(x) is false, INSUFFICIENT_DATA(x) true).

Where the documentation is silent, the reading chosen:
- NOT applies to the one term after it (``ALARM(a) AND NOT ALARM(b)`` reads as the guide describes it: a in ALARM
  and b not); AND and OR have no documented precedence, and neither reading of ``a OR b AND c`` pages in every case
  the other does once NOT is around it, so mixing them without parentheses is refused rather than guessed (CDK's
  AlarmRule.allOf/anyOf always parenthesize);
- keywords are read in any case: the API reference tells to set a rule to ``false`` to break a cycle, the guide
  ``False``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NoReturn

from infra.alarms.definitions import ALARM, INSUFFICIENT_DATA, OK, STATES, Unsupported

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class _Const:
    value: bool


@dataclass(frozen=True)
class _State:
    state: str  # ALARM, OK or INSUFFICIENT_DATA
    name: str  # the alarm's name (an ARN's last part)


@dataclass(frozen=True)
class _Not:
    operand: _Term


@dataclass(frozen=True)
class _Join:
    op: str  # AND or OR
    operands: tuple[_Term, ...]


_Term = _Const | _State | _Not | _Join


class Rule:
    """A parsed AlarmRule: :meth:`evaluate` on the states of the alarms it names, keyed by alarm name."""

    def __init__(self, text: str, root: _Term) -> None:
        self.text = text
        self._root = root

    def alarm_names(self) -> set[str]:
        """The names of the alarms the rule reads (ARNs reduced to the name)."""
        names: set[str] = set()

        def walk(term: _Term) -> None:
            if isinstance(term, _State):
                names.add(term.name)
            elif isinstance(term, _Not):
                walk(term.operand)
            elif isinstance(term, _Join):
                for operand in term.operands:
                    walk(operand)

        walk(self._root)
        return names

    def evaluate(self, states: Mapping[str, str]) -> bool:
        """Whether the rule is met; every alarm it names must have a state in ``states`` (refused naming the first
        that has none, even where the rule would not need it)."""
        for name in sorted(self.alarm_names()):
            if name not in states:
                raise ValueError(f"composite rule: no state given for alarm {name} (rule {self.text!r})")
            if states[name] not in STATES:
                raise ValueError(f"composite rule: alarm {name} is in {states[name]!r}, not one of {STATES}")
        return _value(self._root, states)

    def __repr__(self) -> str:
        return f"Rule({self.text!r})"


def _value(term: _Term, states: Mapping[str, str]) -> bool:
    if isinstance(term, _Const):
        return term.value
    if isinstance(term, _State):
        return states[term.name] == term.state
    if isinstance(term, _Not):
        return not _value(term.operand, states)
    results = (_value(operand, states) for operand in term.operands)
    return all(results) if term.op == "AND" else any(results)


def composite_state(rule: Rule, states: Mapping[str, str]) -> str:
    """ALARM when the rule is met, OK otherwise: after its first evaluation a composite alarm is never in
    INSUFFICIENT_DATA, whatever its children's states (PutCompositeAlarm, see the module docstring)."""
    return ALARM if rule.evaluate(states) else OK


def parse_rule(rule: str) -> Rule:
    """Parse an AlarmRule; a syntax error is a ValueError, a function or keyword not implemented :class:`Unsupported`,
    in one line naming it."""
    parser = _Parser(rule)
    root = parser.expression()
    parser.skip_space()
    if parser.at < len(rule):
        parser.fail("unexpected text")
    return Rule(rule, root)


class _Parser:
    """Recursive descent: expression = term ((AND | OR) term)*; term = NOT term | ( expression ) | TRUE | FALSE |
    STATE ( alarm )."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.at = 0

    def fail(self, what: str) -> NoReturn:
        shown = repr(self.text[self.at : self.at + 20]) if self.at < len(self.text) else "the end"
        raise ValueError(f"composite rule: {what} at {shown} (position {self.at}) in {self.text!r}")

    def skip_space(self) -> None:
        while self.at < len(self.text) and self.text[self.at].isspace():
            self.at += 1

    def word(self) -> str | None:
        """The next word as written, consumed; None (nothing consumed) when the next token is not a word."""
        self.skip_space()
        match = _WORD.match(self.text, self.at)
        if match is None:
            return None
        self.at = match.end()
        return match.group()

    def expect(self, char: str) -> None:
        self.skip_space()
        if not self.text.startswith(char, self.at):
            self.fail(f"expected {char!r}")
        self.at += 1

    def expression(self) -> _Term:
        operands, ops = [self.term()], set()
        while True:
            start = self.at
            op = (self.word() or "").upper()
            if op not in ("AND", "OR"):
                self.at = start
                break
            ops.add(op)
            operands.append(self.term())
        if len(ops) > 1:
            raise Unsupported(
                f"composite rule: AND and OR mixed without parentheses (no documented precedence) in {self.text!r}"
            )
        return operands[0] if not ops else _Join(ops.pop(), tuple(operands))

    def term(self) -> _Term:
        self.skip_space()
        if self.text.startswith("(", self.at):
            self.at += 1
            inner = self.expression()
            self.expect(")")
            return inner
        written = self.word()
        if written is None:
            self.fail("expected ALARM(...), OK(...), INSUFFICIENT_DATA(...), TRUE, FALSE, NOT or '('")
        word = written.upper()
        if word == "NOT":
            return _Not(self.term())
        if word in ("TRUE", "FALSE"):
            return _Const(word == "TRUE")
        self.skip_space()
        called = self.text.startswith("(", self.at)
        if word in (ALARM, OK, INSUFFICIENT_DATA) and called:
            self.at += 1
            return _State(word, self.alarm())
        raise Unsupported(f"composite rule: {'function' if called else 'keyword'} {written} is not implemented")

    def alarm(self) -> str:
        """The alarm inside STATE( ... ): a quoted or bare name or ARN, and the closing parenthesis."""
        self.skip_space()
        if self.text.startswith('"', self.at):
            end = self.text.find('"', self.at + 1)
            if end < 0:
                self.fail("unterminated quoted alarm name")
            reference = self.text[self.at + 1 : end]
            self.at = end + 1
        else:
            end = self.text.find(")", self.at)
            reference = self.text[self.at : end if end >= 0 else len(self.text)].strip()
            if end < 0 or any(c in reference for c in '("'):
                self.fail("expected an alarm name and ')'")
            self.at = end
        self.expect(")")
        if not reference:
            self.fail("empty alarm name")
        return _alarm_name(reference, self)


def _alarm_name(reference: str, parser: _Parser) -> str:
    """An alarm ARN (arn:PARTITION:cloudwatch:REGION:ACCOUNT:alarm:NAME) reduced to NAME; a name as it is."""
    if not reference.startswith("arn:"):
        return reference
    parts = reference.split(":", 6)
    if len(parts) != 7 or parts[2] != "cloudwatch" or parts[5] != "alarm" or not parts[6]:
        parser.fail(f"{reference} is not a CloudWatch alarm ARN")
    return parts[6]
