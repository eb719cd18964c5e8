"""infra/alarms/composite.py against CloudWatch's composite alarm documentation: every documented AlarmRule example is
a case here, checked on every combination of its alarms' states against the meaning the documentation gives it.

https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_PutCompositeAlarm.html (AlarmRule, states)
https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/Create_Composite_Alarm.html (rule expressions)
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from infra.alarms.composite import composite_state, parse_rule
from infra.alarms.definitions import ALARM, INSUFFICIENT_DATA, OK, STATES, Unsupported

ARN = "arn:aws:cloudwatch:us-east-1:123456789012:alarm:"
#: The ConsumerStalled rule as CDK synthesizes it (infra/queue_alarms.py: allOf(late, idle) anyOf no_tasks).
STACK_RULE = (
    f'((ALARM("{ARN}S-StalledBacklogLate") AND ALARM("{ARN}S-StalledNothingDeleted"))'
    f' OR ALARM("{ARN}S-StalledNoRunningTasks"))'
)

Meaning = Callable[[dict[str, str]], bool]


def every_state(names: list[str]) -> list[dict[str, str]]:
    return [dict(zip(names, states, strict=True)) for states in itertools.product(STATES, repeat=len(names))]


def assert_means(rule: str, names: list[str], meaning: Meaning) -> None:
    parsed = parse_rule(rule)
    assert parsed.alarm_names() == set(names)
    for states in every_state(names):
        assert parsed.evaluate(states) == meaning(states), states
        assert composite_state(parsed, states) == (ALARM if meaning(states) else OK), states


DOCUMENTED: list[tuple[str, list[str], Meaning]] = [
    # "goes into ALARM state only if both CPUUtilizationTooHigh and DiskReadOpsTooHigh alarms are in ALARM state"
    (
        "ALARM(CPUUtilizationTooHigh) AND ALARM(DiskReadOpsTooHigh)",
        ["CPUUtilizationTooHigh", "DiskReadOpsTooHigh"],
        lambda s: s["CPUUtilizationTooHigh"] == ALARM and s["DiskReadOpsTooHigh"] == ALARM,
    ),
    # "if CPUUtilizationTooHigh is in ALARM state and DeploymentInProgress is not in ALARM state"
    (
        "ALARM(CPUUtilizationTooHigh) AND NOT ALARM(DeploymentInProgress)",
        ["CPUUtilizationTooHigh", "DeploymentInProgress"],
        lambda s: s["CPUUtilizationTooHigh"] == ALARM and s["DeploymentInProgress"] != ALARM,
    ),
    # "if CPUUtilizationTooHigh OR DiskReadOpsTooHigh is in ALARM state, and if NetworkOutTooHigh is in OK state"
    (
        "(ALARM(CPUUtilizationTooHigh) OR ALARM(DiskReadOpsTooHigh)) AND OK(NetworkOutTooHigh)",
        ["CPUUtilizationTooHigh", "DiskReadOpsTooHigh", "NetworkOutTooHigh"],
        lambda s: (s["CPUUtilizationTooHigh"] == ALARM or s["DiskReadOpsTooHigh"] == ALARM)
        and s["NetworkOutTooHigh"] == OK,
    ),
    # The console's "Rule expression with conditions": quoted names over several lines.
    (
        '(ALARM("CPUUtilizationTooHigh") OR \nALARM("DiskReadOpsTooHigh")) AND \nOK("NetworkOutTooHigh")',
        ["CPUUtilizationTooHigh", "DiskReadOpsTooHigh", "NetworkOutTooHigh"],
        lambda s: (s["CPUUtilizationTooHigh"] == ALARM or s["DiskReadOpsTooHigh"] == ALARM)
        and s["NetworkOutTooHigh"] == OK,
    ),
    # "INSUFFICIENT_DATA("alarm-name or alarm-ARN") is TRUE if the named alarm is in INSUFFICIENT_DATA state"
    ('INSUFFICIENT_DATA("a")', ["a"], lambda s: s["a"] == INSUFFICIENT_DATA),
    ('OK("a")', ["a"], lambda s: s["a"] == OK),
    ('ALARM("a")', ["a"], lambda s: s["a"] == ALARM),
]


@pytest.mark.parametrize(("rule", "names", "meaning"), DOCUMENTED, ids=[d[0] for d in DOCUMENTED])
def test_the_documented_examples_mean_what_the_documentation_says(
    rule: str, names: list[str], meaning: Meaning
) -> None:
    assert_means(rule, names, meaning)


def test_the_stacks_rule_reads_names_from_arns() -> None:
    late, idle, none = "S-StalledBacklogLate", "S-StalledNothingDeleted", "S-StalledNoRunningTasks"
    assert_means(STACK_RULE, [late, idle, none], lambda s: (s[late] == ALARM and s[idle] == ALARM) or s[none] == ALARM)


@pytest.mark.parametrize(
    ("rule", "expected"),
    [
        ("TRUE", True),
        ("FALSE", False),
        ("false", False),
        ("False", False),
        ("NOT FALSE", True),
        ("TRUE AND FALSE", False),
    ],
)
def test_true_and_false_are_constants_in_any_case(rule: str, expected: bool) -> None:
    """ "TRUE always evaluates to TRUE, and FALSE always evaluates to FALSE"; the documentation breaks a cycle by
    setting a rule to ``false`` (API reference) or ``False`` (user guide)."""
    parsed = parse_rule(rule)
    assert parsed.alarm_names() == set()
    assert parsed.evaluate({}) is expected
    assert composite_state(parsed, {}) == (ALARM if expected else OK)


def test_a_composite_alarm_is_never_insufficient_data_after_its_first_evaluation() -> None:
    """PutCompositeAlarm: INSUFFICIENT_DATA only in the initial time after creation. Children without data make the
    rule false (OK), or true where the rule asks for INSUFFICIENT_DATA."""
    children = {"a": INSUFFICIENT_DATA, "b": INSUFFICIENT_DATA}
    assert composite_state(parse_rule("ALARM(a) OR ALARM(b)"), children) == OK
    assert composite_state(parse_rule("ALARM(a) OR INSUFFICIENT_DATA(b)"), children) == ALARM
    assert composite_state(parse_rule("NOT OK(a)"), children) == ALARM


@pytest.mark.parametrize(
    ("rule", "meaning"),
    [
        # NOT applies to the one term after it (the documented "AND NOT ALARM(x)"), a group to the group.
        ("NOT ALARM(a) AND ALARM(b)", lambda s: s["a"] != ALARM and s["b"] == ALARM),
        ("NOT (ALARM(a) AND ALARM(b))", lambda s: not (s["a"] == ALARM and s["b"] == ALARM)),
        ("NOT NOT ALARM(a) OR OK(b)", lambda s: s["a"] == ALARM or s["b"] == OK),
        ("ALARM(a) OR ALARM(b) OR OK(a)", lambda s: s["a"] == ALARM or s["b"] == ALARM or s["a"] == OK),
        ("(((ALARM(a))) AND (TRUE OR ALARM(b)))", lambda s: s["a"] == ALARM),
        ("alarm(a) and not ok(b)", lambda s: s["a"] == ALARM and s["b"] != OK),  # keywords in any case
        ('ALARM( "a" ) AND ALARM( b )', lambda s: s["a"] == ALARM and s["b"] == ALARM),
    ],
)
def test_operators_and_grouping(rule: str, meaning: Meaning) -> None:
    assert_means(rule, ["a", "b"], meaning)


@pytest.mark.parametrize(
    ("reference", "name"),
    [
        ("CPUUtilizationTooHigh", "CPUUtilizationTooHigh"),
        ('"CPUUtilizationTooHigh"', "CPUUtilizationTooHigh"),
        ('"name with spaces, (parentheses) and AND"', "name with spaces, (parentheses) and AND"),
        (f"{ARN}S-StalledBacklogLate", "S-StalledBacklogLate"),
        (f'"{ARN}S-StalledBacklogLate"', "S-StalledBacklogLate"),
        ('"arn:aws-cn:cloudwatch:cn-north-1:123456789012:alarm:a:b"', "a:b"),
    ],
)
def test_alarms_are_named_by_name_or_arn_quoted_or_not(reference: str, name: str) -> None:
    """ "You can use either alarm names or ARNs"; names "can be surrounded with double-quotes ("), but do not have to
    be"."""
    rule = parse_rule(f"ALARM({reference})")
    assert rule.alarm_names() == {name}
    assert rule.evaluate({name: ALARM}) is True
    assert rule.evaluate({name: OK}) is False


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ("AT_LEAST(2, ALARM, (a, b))", "function AT_LEAST is not implemented"),
        ("FOO", "keyword FOO is not implemented"),
        ("ALARM(a) XOR ALARM(b)", "unexpected text"),
        ("ALARM(a) AND ALARM(b) OR ALARM(c)", "AND and OR mixed without parentheses"),
        ("ALARM(a) OR ALARM(b) AND ALARM(c)", "AND and OR mixed without parentheses"),
        ("ALARM(a) && ALARM(b)", "unexpected text"),
        ("ALARM(a", "expected an alarm name and ')'"),
        ('ALARM("a)', "unterminated quoted alarm name"),
        ('ALARM("a" b)', "expected ')'"),
        ("ALARM()", "empty alarm name"),
        ("(ALARM(a)", "expected ')'"),
        ("NOT", "expected ALARM(...)"),
        ("", "expected ALARM(...)"),
        ("ALARM(arn:aws:sns:us-east-1:123456789012:alarm:a)", "is not a CloudWatch alarm ARN"),
        ("ALARM(arn:aws:cloudwatch:us-east-1:123456789012:alarm:)", "is not a CloudWatch alarm ARN"),
    ],
)
def test_what_is_not_documented_or_malformed_is_refused_in_one_line(rule: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")) as raised:
        parse_rule(rule)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("rule", ["AT_LEAST(2, ALARM, (a, b))", "FOO", "ALARM(a) AND ALARM(b) OR ALARM(c)"])
def test_refusals_of_what_is_not_implemented_are_unsupported(rule: str) -> None:
    with pytest.raises(Unsupported):
        parse_rule(rule)


def test_an_alarm_without_a_state_is_refused_by_name() -> None:
    rule = parse_rule("ALARM(a) OR ALARM(b)")
    with pytest.raises(ValueError, match="no state given for alarm b"):
        rule.evaluate({"a": ALARM})  # even where a alone decides
    with pytest.raises(ValueError, match="alarm a is in 'PENDING'"):
        composite_state(rule, {"a": "PENDING", "b": OK})
