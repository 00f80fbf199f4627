"""config.schema.json, generated from the pydantic model so editors complete and check config.yaml keys.

Regenerate: `python -m cpu_inference.config.json_schema > config.schema.json` (a test fails on drift)."""

from __future__ import annotations

import json

from cpu_inference.config.schema import Config


def render() -> str:
    schema = Config.model_json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "cdk-cpu-inference config.yaml"
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    print(render(), end="")
