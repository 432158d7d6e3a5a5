"""Validation of a gemmscope JSON document against its shipped JSON Schema (gemmscope/schemas),
shared by the tests of every command that writes one."""

import json
from pathlib import Path

from jsonschema import Draft202012Validator
from referencing import Registry, Resource

import gemmscope
from gemmscope.report import documents

SCHEMA_DIR = Path(gemmscope.__file__).parent / "schemas"
SCHEMAS = {path.name.removesuffix(".schema.json"): json.loads(path.read_text(encoding="utf-8"))
           for path in sorted(SCHEMA_DIR.glob("*.schema.json"))}
# The schemas refer to each other by $id (urn:gemmscope:schema:<kind>), as a consumer's would.
REGISTRY = Registry().with_resources((schema["$id"], Resource.from_contents(schema)) for schema in SCHEMAS.values())


def assert_valid(document: dict, kind: str) -> None:
    validator = Draft202012Validator(SCHEMAS[kind], registry=REGISTRY)
    errors = sorted(validator.iter_errors(document), key=lambda e: list(map(str, e.absolute_path)))
    where = ["/".join(map(str, e.absolute_path)) or "(top)" for e in errors]
    assert not errors, "\n".join(f"{w}: {e.message[:300]}" for w, e in zip(where[:10], errors))
    assert document["schema_version"] == documents.SCHEMA_VERSION
