"""MkDocs hook: the HTTP API reference, generated from the orchestrator's FastAPI app.

At build time the orchestrator is built with `create_app` (on a throwaway SQLite file; no
lifespan runs, so nothing starts and nothing is fetched), its OpenAPI document is written
into the site as `api/openapi.json`, and `api/reference.md` is rendered from it: every
endpoint by tag with its parameters, body and answers, then every schema with its fields.
Plain Markdown: the page needs no script and nothing from the internet.
"""

from __future__ import annotations

import json
import logging
import re
import tempfile
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

log = logging.getLogger("mkdocs.hooks.openapi")

REFERENCE = "api/reference.md"
SPEC = "api/openapi.json"
METHODS = ("get", "post", "put", "patch", "delete")


def orchestrator_openapi() -> dict[str, Any]:
    from orchestrator.app import create_app
    from orchestrator.settings import OrchestratorSettings

    with tempfile.TemporaryDirectory(prefix="crosscheck-docs-") as folder:
        settings = OrchestratorSettings(
            service_token="docs-build-only-service-token",  # never served
            database_url=f"sqlite:///{Path(folder) / 'docs.sqlite'}",
        )
        spec: dict[str, Any] = create_app(settings).openapi()
        return spec


def schema_anchor(name: str) -> str:
    return "schema-" + re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def type_text(schema: dict[str, Any]) -> str:
    """A JSON schema as a short type: `string`, `array of [RunPublic](#schema-runpublic)`."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{schema_anchor(name)})"
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    if "enum" in schema:
        return "one of " + ", ".join(f"`{v}`" for v in schema["enum"])
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            parts = [type_text(s) for s in schema[key]]
            return " or ".join(dict.fromkeys(p for p in parts if p))
    kind = schema.get("type")
    if kind == "array":
        return "array of " + type_text(schema.get("items", {}))
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return "object of " + type_text(schema["additionalProperties"])
    if isinstance(kind, list):
        return " or ".join(kind)
    if kind == "string" and "format" in schema:
        return f"string ({schema['format']})"
    return str(kind or "any")


def bounds(schema: dict[str, Any]) -> str:
    found = []
    for key, word in (
        ("minimum", ">="),
        ("exclusiveMinimum", ">"),
        ("maximum", "<="),
        ("exclusiveMaximum", "<"),
        ("minLength", "min length"),
        ("maxLength", "max length"),
        ("minItems", "min items"),
        ("maxItems", "max items"),
    ):
        if key in schema:
            found.append(f"{word} {schema[key]}")
    return ", ".join(found)


def cell(text: object) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def default_text(schema: dict[str, Any]) -> str:
    return f"`{json.dumps(schema['default'])}`" if "default" in schema else ""


def render_operation(method: str, path: str, op: dict[str, Any]) -> list[str]:
    lines = [f"### {method.upper()} `{path}`", ""]
    if op.get("summary"):
        lines += [f"**{op['summary']}.** {op.get('description', '')}".rstrip(), ""]
    params = op.get("parameters", [])
    if params:
        lines += ["| parameter | in | type | required | default | description |"]
        lines += ["|---|---|---|---|---|---|"]
        for p in params:
            schema = p.get("schema", {})
            lines.append(
                f"| `{p['name']}` | {p['in']} | {cell(type_text(schema))} "
                f"| {'yes' if p.get('required') else 'no'} | {cell(default_text(schema))} "
                f"| {cell(p.get('description', schema.get('description', '')))} |"
            )
        lines.append("")
    body = op.get("requestBody")
    if body:
        for media, content in body.get("content", {}).items():
            lines += [f"Body (`{media}`): {type_text(content.get('schema', {}))}", ""]
    lines += ["| answer | description | body |", "|---|---|---|"]
    for code, answer in op.get("responses", {}).items():
        content = answer.get("content", {})
        shape = "; ".join(
            f"`{media}` {type_text(c.get('schema', {}))}".rstrip() for media, c in content.items()
        )
        lines.append(f"| {code} | {cell(answer.get('description', ''))} | {cell(shape)} |")
    lines.append("")
    return lines


def render_schema(name: str, schema: dict[str, Any]) -> list[str]:
    lines = [f"### {name} {{ #{schema_anchor(name)} }}", ""]
    if schema.get("description"):
        lines += [" ".join(schema["description"].split()), ""]
    properties = schema.get("properties")
    if not properties:
        lines += [f"Type: {type_text(schema)}", ""]
        return lines
    required = set(schema.get("required", []))
    lines += ["| field | type | required | default | description |", "|---|---|---|---|---|"]
    for field, prop in properties.items():
        kind = type_text(prop)
        extra = bounds(prop)
        lines.append(
            f"| `{field}` | {cell(kind + (f' ({extra})' if extra else ''))} "
            f"| {'yes' if field in required else 'no'} | {cell(default_text(prop))} "
            f"| {cell(prop.get('description', ''))} |"
        )
    lines.append("")
    return lines


def render(spec: dict[str, Any]) -> str:
    info = spec.get("info", {})
    lines = [
        "# HTTP API reference",
        "",
        f"Generated when the docs are built from the orchestrator's own OpenAPI document "
        f"({cell(info.get('title', ''))} {cell(info.get('version', ''))}, OpenAPI "
        f"{spec.get('openapi', '')}), so it describes the code as it is. The document itself: "
        f"[openapi.json](openapi.json); a running orchestrator also serves it at "
        f"`/openapi.json` and its interactive form at `/docs`. The guide is "
        f"[HTTP API](index.md); the websocket `WS /v1/events` is described there, as OpenAPI "
        f"has no words for it.",
        "",
    ]
    by_tag: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for path, operations in spec.get("paths", {}).items():
        for method in METHODS:
            if method in operations:
                op = operations[method]
                tag = (op.get("tags") or ["other"])[0]
                by_tag.setdefault(tag, []).append((method, path, op))
    for tag, ops in by_tag.items():
        lines += [f"## {tag}", ""]
        for method, path, op in ops:
            lines += render_operation(method, path, op)
    lines += ["## Schemas", ""]
    for name, schema in sorted(spec.get("components", {}).get("schemas", {}).items()):
        lines += render_schema(name, schema)
    return "\n".join(lines)


def on_files(files: Files, config: MkDocsConfig) -> Files:
    try:
        spec = orchestrator_openapi()
    except Exception as exc:  # the build must say why, then fail under --strict
        log.warning("openapi: the orchestrator's OpenAPI document could not be built: %r", exc)
        return files
    files.append(File.generated(config, SPEC, content=json.dumps(spec, indent=2)))
    files.append(File.generated(config, REFERENCE, content=render(spec)))
    return files
