"""Typed config: values read into dataclasses, errors naming the key and the fix."""

from dataclasses import dataclass, field
from typing import Optional

import pytest

from tend_sdk import Context, Invalid
from tend_sdk.config import key


@dataclass
class Cache:
    endpoint: str = key(example="http://127.0.0.1:5000")


@dataclass
class Config:
    url: str = key(example="http://127.0.0.1:10248/healthz")
    expect_status: int = 200
    timeout: Optional[float] = None
    caches: list[Cache] = field(default_factory=list)


def parse(config: str) -> Config:
    return Context("node-probe", config).config_as(Config)


def test_values_are_read_with_defaults():
    config = parse('{"url": "http://x/", "timeout": 2, "caches": [{"endpoint": "http://c/"}]}')
    assert config == Config("http://x/", 200, 2.0, [Cache("http://c/")])


@pytest.mark.parametrize(
    "config, message",
    [
        ("{}", 'url: expected a string, for example "http://127.0.0.1:10248/healthz"'),
        ('{"url": 3}', 'url: expected a string, for example "http://127.0.0.1:10248/healthz"'),
        ('{"url": "u", "expect-status": true}', "expect-status: expected an integer"),
        ('{"url": "u", "caches": [{"endpoint": "e"}, {}]}', 'caches[1].endpoint: expected a string, for example "http://127.0.0.1:5000"'),
        ('{"url": "u", "urls": []}', "urls: unknown key; expected one of url, expect-status, timeout, caches"),
        ("[1]", ".: expected a table"),
        ("{", ".: not JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
    ],
)
def test_errors_name_the_key_and_the_fix(config, message):
    with pytest.raises(Invalid) as error:
        parse(config)
    assert error.value.message == f"[plugins.node-probe.config] {message}"
