"""Lighter tool schemas for tools/list (issue 15): same meaning, fewer characters.

pydantic writes a `title` on every property (the field name again, capitalised) and repeats the same
`anyOf` (a `Num` is number | "nan"/"inf"/"-inf" | null) wherever the type is used. Every schema in
tools/list must stand alone, since a client validates each tool's result against that tool's
schema and MCP has no shared schema registry; so a repeated shape is defined once in the schema's
own `$defs` and referenced, and the titles go. Validation is unchanged: the SDK validates arguments
and results against the pydantic models, and a client validating against these schemas accepts
exactly what it accepted before.
"""

import json
from collections import Counter
from typing import Any

MIN_SHARED = 40  # characters of an anyOf worth a $defs entry when it repeats
INPUT_DROPS = {"title", "maximum", "exclusiveMinimum", "exclusiveMaximum"}


def slim(schema: dict) -> dict:
    """An input schema without pydantic's titles, bounds the server checks itself, null branches of optional
    arguments, and with repeated anyOfs in $defs. (Output schemas are written light from the start:
    server/output_schema.py.)"""
    return _share_any_of(_optional_without_null(_strip(schema, INPUT_DROPS)))


def _optional_without_null(schema: dict) -> dict:
    """An optional argument whose default is null is described by its real type: leaving it out says null.

    The server still accepts an explicit null (its pydantic model does); the schema just stops
    spending characters on the null branch and `"default": null` for every optional argument.
    """
    required = set(schema.get("required", []))
    props = {}
    for name, prop in schema.get("properties", {}).items():
        if name not in required and prop.get("default", 0) is None:
            prop = {k: v for k, v in prop.items() if k != "default"}
            if isinstance(prop.get("type"), list) and "null" in prop["type"]:
                kept = [t for t in prop["type"] if t != "null"]
                prop["type"] = kept[0] if len(kept) == 1 else kept
            elif isinstance(prop.get("anyOf"), list):
                kept = [o for o in prop["anyOf"] if o != {"type": "null"}]
                rest = {k: v for k, v in prop.items() if k != "anyOf"}
                prop = {**kept[0], **rest} if len(kept) == 1 else {"anyOf": kept, **rest}
        props[name] = prop
    return {**schema, "properties": props}


def _strip(node: Any, drop: set[str], in_properties: bool = False) -> Any:
    """Drop the `drop` keywords (not properties of those names) and fold simple nullable unions."""
    if isinstance(node, list):
        return [_strip(x, drop) for x in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if not in_properties and key in drop and not isinstance(value, (dict, list)):
            continue
        out[key] = _strip(value, drop,
                          in_properties=key in ("properties", "$defs", "patternProperties"))
    if not in_properties:
        out = _fold_nullable(out)
        if isinstance(out.get("enum"), list) and out.get("type") == "string" and all(isinstance(e, str) for e in out["enum"]):
            del out["type"]  # an enum of strings already says string
    return out


def _fold_nullable(node: dict) -> dict:
    """{"anyOf": [{"type": "string"}, {"type": "null"}]} -> {"type": ["string", "null"]}."""
    options = node.get("anyOf")
    if not isinstance(options, list) or not all(isinstance(o, dict) and set(o) == {"type"} for o in options):
        return node
    types = [o["type"] for o in options]
    if not all(isinstance(t, str) for t in types):
        return node
    rest = {k: v for k, v in node.items() if k != "anyOf"}
    return {"type": types, **rest}


def _any_ofs(node: Any):
    if isinstance(node, dict):
        if isinstance(node.get("anyOf"), list):
            yield json.dumps(node["anyOf"], sort_keys=True)
        for v in node.values():
            yield from _any_ofs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _any_ofs(v)


def _share_any_of(schema: dict) -> dict:
    counts = Counter(_any_ofs(schema))
    shared = {key: f"Num" if _is_num(key) else f"U{i}" for i, key in enumerate(
        k for k, n in counts.most_common() if n >= 2 and len(k) >= MIN_SHARED)}
    if not shared:
        return schema

    def replace(node: Any) -> Any:
        if isinstance(node, list):
            return [replace(x) for x in node]
        if not isinstance(node, dict):
            return node
        out = {k: replace(v) for k, v in node.items()}
        key = json.dumps(node["anyOf"], sort_keys=True) if isinstance(node.get("anyOf"), list) else None
        if key in shared:
            del out["anyOf"]
            out = {"$ref": f"#/$defs/{shared[key]}", **out}
        return out

    out = replace(schema)
    defs = dict(out.get("$defs", {}))
    defs.update({name: {"anyOf": replace(json.loads(key))} for key, name in shared.items()})
    return {**out, "$defs": defs}


def _is_num(key: str) -> bool:
    return '"nan"' in key and '"number"' in key and '"null"' in key
