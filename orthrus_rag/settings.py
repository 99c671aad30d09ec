"""Typed settings: a config group checked against the dataclass it maps onto. An unknown key or a value of the
wrong type is a `SettingError` naming the key; every mistake a user can make in a command line or config is a
`UserError`, which the apps print as one line."""
from __future__ import annotations

import contextlib
import dataclasses
import types
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from omegaconf import DictConfig, OmegaConf

T = TypeVar("T")


class UserError(Exception):
    """A mistake in the command line or config: reported as one message, without a traceback."""


class SettingError(UserError, TypeError):
    """A config value that is no setting of its group, or of the wrong type; the message names the key."""


@contextlib.contextmanager
def user_errors(*kinds: type[Exception], prefix: str = "", suffix: str = "") -> Iterator[None]:
    """An exception of `kinds` raised in the block becomes a UserError: `<prefix><its message><suffix>`."""
    try:
        yield
    except kinds as error:
        raise UserError(f"{prefix}{error}{suffix}") from error


def check_settings(cls: type, values: Mapping[str, Any], section: str, skip: tuple[str, ...] = ()) -> None:
    """Every key of `values` is an init field of the dataclass `cls` (less `skip`) and fits its type."""
    hints = get_type_hints(cls)
    known = [f.name for f in dataclasses.fields(cls) if f.init and f.name not in skip]
    for key, value in values.items():
        if key not in known:
            raise SettingError(f"{section}: no setting {key!r} ({section}.{key}); its settings are {known}")
        if not _fits(value, hints[key]):
            raise SettingError(f"{section}.{key}: expected {_describe(hints[key])}, got {value!r}")


def typed(cls: type[T], values: Mapping[str, Any] | DictConfig, section: str) -> T:
    """The config group `values` as the dataclass `cls`, checked first (`check_settings`)."""
    values = plain(values)
    check_settings(cls, values, section)
    return cls(**values)


def plain(values: Mapping[str, Any] | DictConfig) -> dict[str, Any]:
    """A config group as a plain dict, interpolations resolved."""
    return OmegaConf.to_container(values, resolve=True) if isinstance(values, DictConfig) else dict(values)


def _fits(value: Any, hint: Any) -> bool:
    origin, args = get_origin(hint), get_args(hint)
    if hint is Any:
        return True
    if hint is type(None):
        return value is None
    if origin in (Union, types.UnionType):
        return any(_fits(value, arg) for arg in args)
    if origin is Literal:
        return value in args
    if hint in (int, float):  # an int fits a float setting; a bool is neither
        return isinstance(value, (int, hint)) and not isinstance(value, bool)
    if hint is Path:
        return isinstance(value, (str, Path))
    if origin is dict:
        return isinstance(value, dict) and all(_fits(k, args[0]) and _fits(v, args[1]) for k, v in value.items())
    return isinstance(value, origin or hint)


_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false", type(None): "null",
          Path: "a path"}


def _describe(hint: Any) -> str:
    if get_origin(hint) in (Union, types.UnionType, Literal):
        return " or ".join(_describe(arg) if get_origin(hint) is not Literal else repr(arg) for arg in get_args(hint))
    return _NAMES.get(hint, f"a {getattr(get_origin(hint) or hint, '__name__', hint)}")
