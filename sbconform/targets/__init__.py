"""Targets: brokers under test, behind one interface (``base.Target``)."""

from __future__ import annotations

import inspect
from typing import Any, Callable

from .base import PEEK_LOCK, RECEIVE_AND_DELETE, Handle, Received, Target, TargetWrapper, unwrap

#: target name -> factory(**options) -> Target. Heavy targets import lazily.
_FACTORIES: dict[str, Callable[..., Target]] = {}


def register(name: str, factory: Callable[..., Target]) -> None:
    _FACTORIES[name] = factory


def _build(cls: type, name: str, options: dict[str, Any]) -> Target:
    """``cls(**options)``, an option it does not take being a one-line ValueError naming the
    options it does take (never a TypeError traceback)."""
    parameters = inspect.signature(cls).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        known = sorted(n for n, p in parameters.items() if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD))
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise ValueError(f"the {name} target has no option {unknown[0]!r} (its options: {', '.join(known)})")
    return cls(**options)


def _reference(without: str = "", **options: Any) -> Target:
    """The model in process. ``without=a,b`` drops capabilities, to see what a target
    lacking them would be spared (those scenarios are skipped, with the reason)."""
    from .reference import ReferenceTarget

    if options:
        raise ValueError(f"the reference target takes no options {sorted(options)} (only without=...)")
    target = ReferenceTarget()
    dropped = {c.strip() for c in without.split(",") if c.strip()}
    unknown = dropped - target.capabilities
    if unknown:
        raise ValueError(f"without={without!r}: the reference target has no capability {sorted(unknown)}")
    target.capabilities = target.capabilities - dropped
    return target


register("reference", _reference)


def _sdk(**options: Any) -> Target:
    """The azure-servicebus SDK against a connection string, or against ``sbconform serve``
    started by the target (``serve=true``)."""
    from .sdk import SdkTarget

    return _build(SdkTarget, "sdk", options)


register("sdk", _sdk)


def _container(**options: Any) -> Target:
    """A broker image (``sbconform serve``'s by default) started through testcontainers,
    driven through the azure-servicebus SDK."""
    try:
        from .container import ContainerTarget
    except ImportError as error:  # pragma: no cover
        raise ValueError(f"the container target needs the sdk and containers extras: {error}") from None
    return _build(ContainerTarget, "container", options)


register("container", _container)


def _emulator(**options: Any) -> Target:
    """Microsoft's Service Bus emulator and its SQL Server, started through testcontainers
    (``accept_eula=Y`` required; ``standin=true`` for sbconform's stand-ins), driven through the SDK."""
    try:
        from .emulator import EmulatorTarget
    except ImportError as error:  # pragma: no cover
        raise ValueError(f"the emulator target needs the sdk and containers extras: {error}") from None
    return _build(EmulatorTarget, "emulator", options)


register("emulator", _emulator)


#: name prefixes of targets that exist for the kit's own tests (deliberately broken brokers)
TEST_ONLY_PREFIXES = ("mutant-",)


def names(include_test_only: bool = False) -> list[str]:
    """The registered targets; those made for the kit's own tests only with ``include_test_only``."""
    return sorted(n for n in _FACTORIES if include_test_only or not n.startswith(TEST_ONLY_PREFIXES))


def make_target(name: str, **options: Any) -> Target:
    """Build the target called ``name`` (see ``names()``) with its options."""
    try:
        factory = _FACTORIES[name]
    except KeyError:
        raise ValueError(f"unknown target {name!r}; known targets: {', '.join(names())}") from None
    return factory(**options)


def boolean_option(name: str, value: Any) -> bool:
    """A yes/no target option (``serve=true``): true/yes/y/1 or false/no/n/0, any case; else a
    ValueError naming the option, the value and what is accepted."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "y"):
        return True
    if text in ("0", "false", "no", "n"):
        return False
    raise ValueError(f"{name}={value!r}: expected true or false (also yes/no, 1/0)")


def takes_exported_namespace(name: str, options: dict[str, Any]) -> bool:
    """Is ``$SBCONFORM_CONNECTION_STRING`` (exported, never typed) the namespace of target ``name``?
    Only the sdk target takes a connection string, and not with ``serve=true`` (it starts its own
    server): for every other run the variable may stay exported. Certify and the pytest plugin ask."""
    if name != "sdk":
        return False
    try:
        return not ("serve" in options and boolean_option("serve", str(options["serve"])))
    except ValueError:
        return True  # the target's own check says what is wrong with serve=


def parse_options(items: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """``["serve=true", "control=none"]`` -> ``{"serve": "true", "control": "none"}`` (dashes in
    names become underscores); an item without ``=`` is a ValueError."""
    options: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"expected KEY=VALUE, got {item!r}")
        options[key.strip().replace("-", "_")] = value
    return options


__all__ = ["PEEK_LOCK", "RECEIVE_AND_DELETE", "Handle", "Received", "Target", "boolean_option", "make_target", "names",
           "parse_options", "register", "takes_exported_namespace"]
