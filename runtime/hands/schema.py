"""What a server's JSON schemas may make the coworker do: check arguments, here, and nothing else.

Owns the check of a call's arguments against the input schema its server listed (`problem`),
and the verdict, when a server lists a tool, on whether its schema can be used at all
(`unusable`). A server is untrusted, and so is every schema it sends (ADR-0039):
- nothing is fetched: a `$ref` resolves within the schema and the bundled metaschemas only
  (an empty `referencing.Registry`, which has no `retrieve`), and a schema with a reference
  that does not begin with `#` makes its tool unusable;
- no regular expression of a server's runs here: `pattern`, `patternProperties`, the
  `additionalProperties` beside a `patternProperties` and `unevaluatedProperties` (both need
  those expressions to know which names they cover) are not enforced locally; the server judges
  them. Python's `re` backtracks without bound and cannot be interrupted, not even by SIGTERM:
  `^(a+)+$` against thirty a's and a "!" held the loop for minutes;
- a schema that is not valid JSON Schema makes its tool unusable; anything that goes wrong while
  checking a call (a reference that does not resolve, a schema that recurses forever) is
  `SchemaUnusable`, a refusal of that call, never an exception into the tick.
It never calls a server, never logs (its callers do, once) and never changes a schema: what
the model is offered is the server's schema as listed (redacted by runtime/hands/server.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jsonschema
from jsonschema.protocols import Validator
from referencing import Registry

# No `retrieve`: a reference outside the schema is Unresolvable, never fetched. jsonschema
# combines it with the bundled metaschemas (https://json-schema.org/...), which are local.
NO_REMOTE: Registry[Any] = Registry()
_REFS = ("$ref", "$dynamicRef")
_DATA = ("enum", "const", "default", "examples")  # values, not schemas: never walked for $ref


class SchemaUnusable(Exception):
    """The tool's schema broke the check of a call (its text is one line, for a WARNING)."""


def _skip(*_args: Any) -> Iterator[Any]:
    """A keyword not enforced locally (it would run a server's regular expression)."""
    return iter(())


def _local(cls: type[Validator]) -> type[Validator]:
    """`cls` with no keyword that runs a regular expression of the schema's."""
    if cls in _LOCAL:
        return _LOCAL[cls]
    additional = cls.VALIDATORS.get("additionalProperties")

    def additional_properties(validator: Any, value: Any, instance: Any,
                              schema: dict[str, Any]) -> Iterator[Any]:
        if additional is None or "patternProperties" in schema:
            return iter(())  # which names are "additional" is decided by the server's patterns
        return additional(validator, value, instance, schema) or iter(())

    local = jsonschema.validators.extend(cls, {
        "pattern": _skip, "patternProperties": _skip, "unevaluatedProperties": _skip,
        "additionalProperties": additional_properties})
    _LOCAL[cls] = local
    return local


_LOCAL: dict[type[Validator], type[Validator]] = {}


def _validator_class(schema: dict[str, Any]) -> type[Validator]:
    return jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)


def references(schema: Any) -> Iterator[Any]:
    """Every `$ref` and `$dynamicRef` value in `schema` (not inside enum/const/default/examples)."""
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key in _REFS:
                yield value
            elif key not in _DATA:
                yield from references(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from references(value)


def unusable(schema: Any) -> str | None:
    """Why this input schema cannot be used (one line), or None. Checked once, when the
    server lists the tool; a tool whose schema is unusable is not offered."""
    if not isinstance(schema, dict):
        return "its input schema is not a JSON object"
    try:
        _validator_class(schema).check_schema(schema)
    except jsonschema.exceptions.SchemaError as e:
        return f"its input schema is not valid JSON Schema ({' '.join(e.message.split())[:200]})"
    except Exception as e:  # noqa: BLE001 - a schema the checker chokes on is unusable, not a crash
        return f"its input schema cannot be read ({type(e).__name__})"
    for ref in references(schema):
        if not isinstance(ref, str) or not ref.startswith("#"):
            return (f"its input schema refers outside itself ({str(ref)[:120]!r}); nothing is "
                    "fetched")
    return None


def local_validator(schema: dict[str, Any]) -> Validator:
    """A validator of `schema` that fetches nothing and runs none of its regular expressions."""
    return _local(_validator_class(schema))(schema, registry=NO_REMOTE)


def problem(schema: dict[str, Any], arguments: Any) -> str | None:
    """Why `arguments` break the tool's input schema (one line), or None when they fit, as far
    as is checked here (no pattern; see the module docstring). Raises SchemaUnusable when the
    schema itself broke the check."""
    if not isinstance(arguments, dict):
        return "arguments must be a JSON object"
    try:
        error = jsonschema.exceptions.best_match(local_validator(schema).iter_errors(arguments))
    except Exception as e:  # noqa: BLE001 - the server's schema, not the arguments, failed
        why = " ".join(str(e).split())[:200] or type(e).__name__
        raise SchemaUnusable(f"its input schema cannot be checked ({type(e).__name__}: {why})"
                             ) from e
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"{where + ': ' if where else ''}{' '.join(error.message.split())[:300]}"
