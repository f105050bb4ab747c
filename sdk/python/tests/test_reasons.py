"""`TendError.reasons`: the named reasons a refusal begins with, read as the
host's rules/src/reason.rs reads them. Pure Python: no wasm, no host."""

import pytest

from tend_sdk import BudgetExhausted, Denied, TendError
from tend_sdk.errors import MAX_REASONS


def reasons(message: str) -> list[str]:
    return BudgetExhausted(message).reasons


@pytest.mark.parametrize(
    "name",
    [
        "budget",
        "window",
        "health",
        "limit",
        "breaker",
        "stale-state",
        "unverified",
        "pdb:default/web-pdb",
        "pdb:kube-system/*",
        "pdb:a/web-0.example",
    ],
)
def test_every_reason_reads_back_from_its_tag(name):
    assert reasons(f"[{name}] why it is so") == [name]
    assert reasons(f"budget-exhausted: [{name}] why it is so") == [name]


def test_several_reasons_read_back_in_order():
    message = "[pdb:default/a] [pdb:default/b] [window] held"
    assert reasons(message) == ["pdb:default/a", "pdb:default/b", "window"]
    assert reasons("[budget][window] no space between") == ["budget", "window"]


def test_at_most_eight_reasons_are_read():
    assert MAX_REASONS == 8
    assert reasons("[budget] " * 20 + "x") == ["budget"] * 8


def test_reading_stops_at_an_unknown_tag():
    assert reasons("[budget] [nope] [window] x") == ["budget"]
    assert reasons("[budget]  [window] two spaces") == ["budget"]


@pytest.mark.parametrize(
    "message",
    [
        "outside the window",
        "[nope] not a reason",
        "[Window] upper case",
        "[budget without its end",
        " [budget] not at the start",
        "denied: [budget] another kind of error",
        "budget-exhausted:[budget] no space after the kind",
        "",
        "[",
        "[]",
    ],
)
def test_a_message_without_a_known_tag_at_its_start_has_no_reason(message):
    assert reasons(message) == []


@pytest.mark.parametrize(
    "tag",
    [
        "pdb:default",
        "pdb:Default/web",
        "pdb:default/Web",
        "pdb:default/web pdb",
        "pdb:default/../x",
        "pdb:default/a/b",
        "pdb:/web",
        "pdb:default/",
        "pdb:-default/web",
        "pdb:default/web-",
        "pdb:default/a..b",
        "pdb:default/é",
        "pdb:" + "a" * 64 + "/web",
        "pdb:default/" + "a" * 254,
        "pdb:default/" + "a" * 64,
        "pdb:kube-system/**",
    ],
)
def test_a_pdb_tag_names_a_valid_namespace_and_name_only(tag):
    assert reasons(f"[{tag}] blocked") == []


def test_the_longest_valid_pdb_names_are_read():
    namespace = "n" * 63
    name = ".".join(["a" * 62] * 4) + ".a"
    assert len(name) == 253
    assert reasons(f"[pdb:{namespace}/{name}] blocked") == [f"pdb:{namespace}/{name}"]


def test_every_error_case_has_reasons():
    assert Denied("[window] x").reasons == ["window"]
    assert TendError("no tag here").reasons == []
