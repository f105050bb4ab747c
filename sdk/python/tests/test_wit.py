"""The wrappers hold to the WIT: every function a plugin imports has a method
(its name in snake case) on the capability's wrapper of `Host`, so a function
or capability added to `wit/` fails here until Python can call it."""

import re
from pathlib import Path

from tend_sdk.host import Host

WIT = Path(__file__).resolve().parents[3] / "wit"


def imported_functions() -> dict[str, list[str]]:
    """Each interface the world imports, with its functions' WIT names."""
    interfaces: dict[str, list[str]] = {}
    for file in sorted(WIT.glob("*.wit")):
        text = file.read_text()
        for name, body in re.findall(r"^interface ([a-z][a-z0-9-]*) \{(.*?)^\}", text, re.M | re.S):
            interfaces[name] = re.findall(r"^\s*%?([a-z][a-z0-9-]*): func\(", body, re.M)
    world = (WIT / "world.wit").read_text()
    imported = re.findall(r"^\s*import ([a-z][a-z0-9-]*);", world, re.M)
    return {name: interfaces[name] for name in imported if interfaces.get(name)}


def test_every_imported_wit_function_has_a_wrapper():
    host = Host(backend=None)
    functions = imported_functions()
    assert sum(len(f) for f in functions.values()) >= 47, functions
    missing = []
    for interface, names in functions.items():
        if interface == "log":
            # `log.log` is Host.log itself.
            assert callable(host.log)
            continue
        wrapper = getattr(host, interface.replace("-", "_"), None)
        for name in names:
            if not callable(getattr(wrapper, name.replace("-", "_"), None)):
                missing.append(f"{interface}.{name}")
    assert not missing, f"no Python wrapper for {missing}: add it to tend_sdk/host.py"
