"""Defect 9: the admin OpenAPI document did not tell the truth: statuses the API answers
were missing, request bodies were free-form objects (schemathesis found schema-valid
bodies rejected and `"disabled": 0`, `"name": null` accepted), and 405s had no `Allow`."""

from __future__ import annotations

from typing import Any

import httpx

from tests.admin.helpers import admin, options, two_tier_fleet
from tests.harness import Stack

ERROR = {"$ref": "#/components/schemas/ErrorResponse"}


def _error_schema(response: dict[str, Any]) -> Any:
    return response.get("content", {}).get("application/json", {}).get("schema")


def test_every_status_is_documented_with_the_error_schema(stack: Stack, sqlite_url: str) -> None:
    stack.start_gateway(two_tier_fleet(stack), options(sqlite_url))
    doc = admin(stack).get("/admin/openapi.json").json()
    assert "HTTPValidationError" not in str(doc)  # validation errors are 400s here
    assert doc["security"] == [{"adminKey": []}]
    for path, operations in doc["paths"].items():
        for method, op in operations.items():
            statuses = set(op["responses"])
            assert {"400", "401", "403", "503"} <= statuses, (method, path)
            if "{" in path:
                assert "404" in statuses, (method, path)
            for status, response in op["responses"].items():
                if status.startswith(("4", "5")):
                    assert _error_schema(response) == ERROR, (method, path, status)
            if path.startswith("/admin/providers") and method in ("post", "put", "patch"):
                assert {"422"} <= statuses
                body = op["requestBody"]["content"]["application/json"]["schema"]
                suffix = {"patch": "Patch", "put": "Replace"}.get(method, "")
                assert body == {"$ref": f"#/components/schemas/ProviderConfig{suffix}"}
    provider = doc["components"]["schemas"]["ProviderConfig"]
    assert provider["additionalProperties"] is False and provider["required"] == ["id", "base_url"]
    assert provider["properties"]["id"]["pattern"].startswith("^[A-Za-z0-9]")
    # a PUT body may leave out the id, which its path names (schemathesis sent `{}`, the
    # API took it, and the document had said `id` was required)
    replace = doc["components"]["schemas"]["ProviderConfigReplace"]
    assert replace["required"] == ["base_url"]
    assert replace["properties"] == provider["properties"]
    pa = admin(stack).get("/admin/providers/pa").json()
    del pa["id"]
    assert admin(stack).put("/admin/providers/pa", json=pa).status_code == 200
    assert "required" not in doc["components"]["schemas"]["ModelConfigReplace"]
    patch = doc["components"]["schemas"]["ProviderConfigPatch"]
    assert "required" not in patch
    assert {"type": "null"} in patch["properties"]["base_url"]["anyOf"]  # null removes
    keys = doc["components"]["schemas"]["KeyFields"]["properties"]
    assert keys["disabled"]["type"] == "boolean" and keys["name"]["type"] == "string"


def test_bodies_hold_json_types_and_405_names_every_method(stack: Stack, sqlite_url: str) -> None:
    stack.start_gateway(two_tier_fleet(stack), options(sqlite_url))
    api = admin(stack)
    for bad in ({"disabled": 0}, {"name": None}, {"rpm": "5"}, {"allowed_models": [""]}):
        resp = api.post("/admin/keys", json=bad)
        assert resp.status_code == 400, (bad, resp.text)
        assert resp.json()["error"]["problems"]
    assert api.post("/admin/keys", json={"name": "ok", "rpm": 5.0}).status_code == 201
    assert api.get("/admin/keys").json()["data"][0]["rpm"] == 5
    # the config's lenient reading would take "8" and 1; the admin API takes JSON's types
    for field, value in (("max_concurrency", "8"), ("unified_kv", 1), ("discovery", "yes")):
        resp = api.patch("/admin/providers/pa", json={field: value})
        assert resp.status_code == 422, (field, resp.text)
        assert resp.json()["error"]["problems"][0]["path"] == field
    assert api.patch("/admin/providers/pa", json={"max_concurrency": 8}).status_code == 200

    wrong = api.post("/admin/providers/pa", json={})
    assert wrong.status_code == 405
    assert wrong.headers["allow"] == "DELETE, GET, PATCH, PUT"
    assert api.delete("/admin/status").headers["allow"] == "GET"
    gateway = httpx.put(stack.url + "/v1/chat/completions")
    assert gateway.status_code == 405 and gateway.headers["allow"] == "POST"
