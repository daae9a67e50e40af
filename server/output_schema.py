"""Output schemas for tools/list, written from a report model's fields without pydantic's generator.

Deriving 27 full JSON schemas with pydantic was most of what the server added to the SDK's start-up
(issue 17), and the list then threw most of it away to stay light (issue 15). This writes the light
schema directly: the report's own fields one level deep, and in full only the shapes an agent
decides on (`Finding`, its `Evidence`, triage's `NextStep`). A report that validates against its
pydantic model validates against this schema: every constraint here is one the model enforces.
The SDK still validates each result against the pydantic model itself (`FuncMetadata.output_model`).
"""

import types
import typing
from typing import Any, Literal, Union

from pydantic import BaseModel

# Records spelled out in full; any other nested model is checked as an object.
SPELLED_OUT = ("Finding", "Evidence", "NextStep")
# A finite number, the marker of a non-finite one ("nan", "inf", "-inf"), or null (tools.report.Num).
NUM = {"type": ["number", "string", "null"]}
MAX_ENUM = 8  # a longer vocabulary (the 21 failure-mode ids) is a string here; the instructions list it
_SIMPLE = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}


def output_schema(model: type[BaseModel]) -> dict:
    """The schema a client validates `model`'s structured content against (valid draft 2020-12)."""
    defs: dict[str, dict] = {}
    schema = _object(model, defs)
    if defs:
        schema["$defs"] = defs
    return schema


def _object(model: type[BaseModel], defs: dict) -> dict:
    # a field excluded from serialisation (Finding.facts) never reaches the client: it has no place in the schema
    fields = {name: field for name, field in model.model_fields.items() if not field.exclude}
    props = {name: _type(field.annotation, defs) for name, field in fields.items()}
    required = [name for name, field in fields.items() if field.is_required()]
    return {"type": "object", "properties": props, **({"required": required} if required else {})}


def _type(annotation: Any, defs: dict) -> dict:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type(args[0], defs)
    if annotation in _SIMPLE:
        return {"type": _SIMPLE[annotation]}
    if origin is Literal:
        return {"enum": list(args)} if len(args) <= MAX_ENUM else {"type": "string"}
    if origin in (Union, types.UnionType):
        return _union(args, defs)
    if origin in (list, tuple, set, frozenset) or annotation in (list, tuple, set):
        items = [a for a in args if a is not Ellipsis]
        if origin is tuple and len(items) != 1:
            return {"type": "array"}  # a fixed pair such as (step, value)
        return {"type": "array", **({"items": _type(items[0], defs)} if items else {})}
    if origin is dict or annotation is dict:
        return {"type": "object"}
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        name = annotation.__name__
        if name not in SPELLED_OUT:
            return {"type": "object"}
        if name not in defs:
            defs[name] = {}  # reserved first: a model may refer to itself
            defs[name] = _object(annotation, defs)
        return {"$ref": f"#/$defs/{name}"}
    return {}  # Any, or a type JSON has no word for: anything


def _union(args: tuple, defs: dict) -> dict:
    options = [_type(a, defs) for a in args]
    if any(o.get("enum") == ["nan", "inf", "-inf"] for o in options):  # tools.report.Num
        defs["Num"] = NUM
        return {"$ref": "#/$defs/Num"}
    if all(set(o) == {"type"} and isinstance(o["type"], str) for o in options):
        names = [o["type"] for o in options]
        names = [t for t in names if not (t == "integer" and "number" in names)]  # a number covers both
        return {} if len(set(names) - {"null"}) >= 3 else {"type": names}  # a measured value of any kind
    if len(options) == 2 and {"type": "null"} in options:
        other = next(o for o in options if o != {"type": "null"})
        if isinstance(other.get("type"), str):
            return {**other, "type": [other["type"], "null"]}
        if "$ref" in other or "enum" in other:
            return {"anyOf": [other, {"type": "null"}]}
    if any(o == {} for o in options):
        return {}
    return {"anyOf": options}
