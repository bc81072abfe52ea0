"""Why a configuration was refused, in one line per problem that names the setting, where it came from
and the form it should take: for people, not a pydantic or TOML traceback.

Kept apart from ragsync/settings.py so that the Settings class stays a plain list of fields that
other features extend; nothing here knows any particular field. A nested table (e.g. `[[sources]]`)
is checked the same way as long as its model forbids extra keys (`ConfigDict(extra="forbid")`;
tests/test_settings.py checks that every model reachable from Settings does).
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from enum import Enum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

ENV_PREFIX = "RAGSYNC_"

_SECRETISH = ("secret", "password", "token", "key")
"""Values of these settings are never repeated back in an error message."""


class SettingsError(ValueError):
    """The configuration cannot be used; `problems` holds one self-contained line per problem."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = list(problems)


@dataclass(frozen=True, slots=True)
class Origins:
    """Where each top-level setting came from, to name it in a message (environment wins over the file)."""

    file: Path | None
    file_keys: frozenset[str]
    env: Mapping[str, str]  # setting name -> variable name, for the RAGSYNC_* variables that are set
    init_keys: frozenset[str]  # set by the program itself (e.g. a CLI option such as --home)

    def describe(self, top: str) -> str:
        if top in self.init_keys:
            return "a command-line option"
        if top in self.env:
            return f"environment variable {self.env[top]}"
        if top in self.file_keys and self.file is not None:
            return str(self.file)
        return "the defaults"


def closest(name: str, known: Iterable[str]) -> str | None:
    """The known name a typo most likely meant, compared without case and separators."""
    canon = {k.lower().replace("-", "_"): k for k in known}
    squashed = {k.replace("_", ""): v for k, v in canon.items()}
    wanted = name.lower().replace("-", "_")
    if wanted.replace("_", "") in squashed:
        return squashed[wanted.replace("_", "")]
    match = difflib.get_close_matches(wanted, list(canon), n=1, cutoff=0.6)
    return canon[match[0]] if match else None


def _suggest(name: str, known: Iterable[str], render: str = "{}") -> str:
    guess = closest(name, known)
    return f" (did you mean {render.format(guess)}?)" if guess else ""


def unknown_env_problems(
    environ: Mapping[str, str], fields: Iterable[str], allowed: Iterable[str]
) -> tuple[list[str], dict[str, str]]:
    """Problems for RAGSYNC_* variables that name no setting, and the setting -> variable map of the rest."""
    fields = list(fields)
    by_env = {ENV_PREFIX + f.upper(): f for f in fields}
    allowed_names = {a.upper() for a in allowed}
    problems: list[str] = []
    used: dict[str, str] = {}
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper in allowed_names:
            continue
        if upper in by_env:
            used[by_env[upper]] = name
            continue
        guess = closest(upper.removeprefix(ENV_PREFIX), fields)
        hint = f" (did you mean {ENV_PREFIX}{guess.upper()}?)" if guess else ""
        problems.append(f"environment variable {name}: unknown setting{hint}")
    return problems, used


def _unwrap(annotation: Any) -> list[Any]:
    """The member types of Optional/Union/Annotated, without None."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        out: list[Any] = []
        for arg in typing.get_args(annotation):
            if arg is not type(None):
                out.extend(_unwrap(arg))
        return out
    return [annotation]


def nested_models(annotation: Any) -> list[type[BaseModel]]:
    """Every pydantic model an annotation can hold (inside lists, dicts, unions)."""
    found: list[type[BaseModel]] = []
    for member in _unwrap(annotation):
        if isinstance(member, type) and issubclass(member, BaseModel):
            found.append(member)
            continue
        for arg in typing.get_args(member):
            if arg is not Ellipsis:
                found.extend(nested_models(arg))
    return found


def _expected(annotation: Any) -> str | None:
    """A plain description of a simple field type, or None to fall back on pydantic's wording."""
    members = _unwrap(annotation)
    optional = type(None) in typing.get_args(annotation) or annotation is None
    forms: list[str] = []
    for member in members:
        if typing.get_origin(member) is Literal:
            forms.append(" or ".join(repr(a) for a in typing.get_args(member)))
        elif member is bool:
            forms.append("true or false")
        elif member is int:
            forms.append("an integer")
        elif member is float:
            forms.append("a number")
        elif member is str:
            forms.append("a string")
        elif member is Path:
            forms.append("a path")
        elif member is datetime:
            forms.append("an ISO date or datetime")
        elif member is date:
            forms.append("an ISO date (YYYY-MM-DD)")
        elif isinstance(member, type) and issubclass(member, Enum):
            forms.append(" or ".join(repr(m.value) for m in member))
        else:
            return None
    if not forms:
        return None
    text = " or ".join(forms)
    return f"{text} (or unset)" if optional and len(forms) == 1 and forms[0] != "a path" else text


def _from_pydantic(message: str) -> str:
    text = message.removeprefix("Value error, ").removeprefix("Assertion failed, ")
    for prefix in ("Input should be ", "Input is "):
        if text.startswith(prefix):
            text = text.removeprefix(prefix)
            text = text.split(", unable")[0]
            return "expected " + text
    return text


def _walk(model: type[BaseModel], loc: Sequence[int | str]) -> tuple[str, Any, type[BaseModel], str]:
    """(dotted setting name, its annotation or None, the model that holds the last key, the last key).

    pydantic's location also holds union members' tags (e.g. a model's name): parts that are neither
    an index nor a field of the models in reach are skipped, except the last (an unknown key).
    """
    name = ""
    in_reach: list[type[BaseModel]] = [model]
    annotation: Any = None
    holder: type[BaseModel] = model
    last = ""
    for position, part in enumerate(loc):
        if isinstance(part, int):
            name += f"[{part}]"
            continue
        owner = next((m for m in in_reach if part in m.model_fields), None)
        if owner is None:
            if position == len(loc) - 1:
                holder = in_reach[0] if in_reach else holder
                name += f".{part}" if name else part
                last, annotation = part, None
            continue
        holder, last = owner, part
        name += f".{part}" if name else part
        annotation = owner.model_fields[part].annotation
        in_reach = nested_models(annotation)
    return name, annotation, holder, last


def _tables(value: Any) -> bool:
    """A list or map of tables (`[[sources]]`): its repr would be a wall of text; the message names the entries."""
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list | tuple) else ()
    return any(isinstance(item, dict | BaseModel) for item in items)


def _shown(setting: str, value: Any) -> str:
    if any(word in setting.lower() for word in _SECRETISH) or _tables(value):
        return ""
    text = repr(value)
    return f" = {text if len(text) <= 60 else text[:57] + '...'}"


def validation_problems(exc: ValidationError, model: type[BaseModel], origins: Origins) -> list[str]:
    """One line per bad setting (the first error pydantic reports for it)."""
    problems: list[str] = []
    seen: set[str] = set()
    for error in exc.errors():
        loc = error["loc"]
        if not loc:
            problems.append(f"settings: {_from_pydantic(error['msg'])}")
            continue
        top = str(loc[0])
        where = origins.describe(top)
        name, annotation, holder, last = _walk(model, loc)
        if name in seen:
            continue
        seen.add(name)
        if error["type"] == "extra_forbidden":
            fields = list(holder.model_fields)
            parent = name.rsplit(".", 1)[0] if "." in name else ""
            scope = f" in [{parent.split('[')[0]}]" if parent else ""
            problems.append(f"{where}: unknown setting {last!r}{scope}" + _suggest(last or "", fields, "'{}'"))
            continue
        expected = _expected(annotation) if error["type"] not in ("value_error", "assertion_error") else None
        because = f"expected {expected}" if expected else _from_pydantic(error["msg"])
        problems.append(f"{where}: {name}{_shown(name, error.get('input'))} is invalid: {because}")
    return problems
