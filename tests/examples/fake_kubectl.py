"""A stand-in for ``kubectl`` in the Kueue example's tests: ClusterQueues as JSON files.

``FAKE_KUBE_DIR`` holds ``NAME.json`` per ClusterQueue and ``calls.log`` (one line per
call: ``get NAME`` or ``patch NAME``). Supported: ``get clusterqueue NAME -o json`` and
``patch clusterqueue NAME --type=json -p BODY`` (``test``/``replace``/``add`` operations;
a failed ``test`` exits 1 like the API server's refusal, and every accepted patch bumps
``metadata.resourceVersion``). A queue named in ``FAKE_KUBE_FAIL`` (comma-separated)
refuses every patch; with ``FAKE_KUBE_RACE`` set, every ``get`` is followed by a
concurrent change (the stored ``resourceVersion`` moves on after the read).
``FAKE_KUBE_DELAY`` (seconds) makes every call take that long, as a slow API server does.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any


def _walk(doc: Any, path: str) -> tuple[Any, str | int]:
    parts = [p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:]]
    for part in parts[:-1]:
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    last = parts[-1]
    return doc, int(last) if isinstance(doc, list) else last


def apply_json_patch(doc: Any, ops: list[dict[str, Any]]) -> Any:
    """RFC 6902 ``test``, ``replace`` and ``add`` on ``doc`` (in place); ``ValueError``
    when a ``test`` fails or a replaced path is missing."""
    for op in ops:
        parent, key = _walk(doc, op["path"])
        if op["op"] == "test":
            try:
                current = parent[key]
            except (KeyError, IndexError) as exc:
                raise ValueError(f"test of missing {op['path']}") from exc
            if current != op["value"]:
                raise ValueError(f"test failed at {op['path']}: {current!r} != {op['value']!r}")
        elif op["op"] == "replace":
            if isinstance(parent, dict) and key not in parent:
                raise ValueError(f"replace of missing {op['path']}")
            parent[key] = op["value"]
        elif op["op"] == "add":
            parent[key] = op["value"]
        else:
            raise ValueError(f"unsupported op {op['op']}")
    return doc


def main(argv: list[str]) -> int:
    state = Path(os.environ["FAKE_KUBE_DIR"])
    fail = set(filter(None, os.environ.get("FAKE_KUBE_FAIL", "").split(",")))
    verb, kind, name, *rest = argv
    assert kind == "clusterqueue", argv
    time.sleep(float(os.environ.get("FAKE_KUBE_DELAY", "0")))
    with (state / "calls.log").open("a") as log:
        log.write(f"{verb} {name}\n")
    file = state / f"{name}.json"
    if not file.exists():
        print(f'Error from server (NotFound): clusterqueues "{name}" not found', file=sys.stderr)
        return 1
    cq = json.loads(file.read_text())
    if verb == "get":
        assert rest == ["-o", "json"], argv
        print(json.dumps(cq))
        if os.environ.get("FAKE_KUBE_RACE"):
            meta = cq.setdefault("metadata", {})
            meta["resourceVersion"] = str(int(meta.get("resourceVersion", "0")) + 1)
            file.write_text(json.dumps(cq))
        return 0
    assert verb == "patch" and rest[:2] == ["--type=json", "-p"], argv
    if name in fail:
        print(f"Error from server: refusing to patch {name}", file=sys.stderr)
        return 1
    try:
        apply_json_patch(cq, json.loads(rest[2]))
    except ValueError as exc:
        print(f"The request is invalid: {exc}", file=sys.stderr)
        return 1
    meta = cq.setdefault("metadata", {})
    meta["resourceVersion"] = str(int(meta.get("resourceVersion", "0")) + 1)
    file.write_text(json.dumps(cq))
    print(f"clusterqueue.kueue.x-k8s.io/{name} patched")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
