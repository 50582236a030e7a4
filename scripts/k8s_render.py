#!/usr/bin/env python3
"""Renders the kustomizations under deploy/kubernetes/ without a kustomize binary.

`make k8s-check` must run where no current `kubectl` or `kustomize` can be installed (the
package registries CI reaches have neither; Debian's kubectl 1.20 embeds kustomize v2, which
predates `patches`), so this implements the small subset of kustomize that the repository's
kustomizations use, and refuses anything else:

- `resources:` files (one or more YAML documents) and directories holding a kustomization;
- `patches:` with a `target` (group/version/kind/name) and an inline JSON6902 `patch`
  (operations add, remove, replace, test).

Where `kubectl` is installed, scripts/k8s_check.py also renders with `kubectl kustomize` and
requires the same objects, so this subset cannot drift from the real tool unnoticed.

Usage: k8s_render.py DIR   prints the rendered objects of DIR/kustomization.yaml as YAML.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import yaml

SUPPORTED_KEYS = {"apiVersion", "kind", "resources", "patches"}


class RenderError(Exception):
    """A kustomization this renderer does not understand, or a patch that does not apply."""


def load_documents(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        docs = [d for d in yaml.safe_load_all(f) if d is not None]
    for d in docs:
        if not isinstance(d, dict) or "kind" not in d:
            raise RenderError(f"{path}: every document must be a Kubernetes object")
    return docs


def render(root: Path) -> list[dict]:
    """The objects of the kustomization in `root`, in resource order."""
    kfile = root / "kustomization.yaml"
    if not kfile.is_file():
        raise RenderError(f"{root}: no kustomization.yaml")
    with kfile.open(encoding="utf-8") as f:
        k = yaml.safe_load(f) or {}
    unknown = set(k) - SUPPORTED_KEYS
    if unknown:
        raise RenderError(
            f"{kfile}: {sorted(unknown)} not supported by scripts/k8s_render.py "
            f"(supported: {sorted(SUPPORTED_KEYS)}); extend it, or keep the overlay simpler"
        )
    if k.get("kind") != "Kustomization":
        raise RenderError(f"{kfile}: kind must be Kustomization")
    objects: list[dict] = []
    for entry in k.get("resources", []):
        path = (root / entry).resolve()
        if path.is_dir():
            objects.extend(render(path))
        elif path.is_file():
            objects.extend(load_documents(path))
        else:
            raise RenderError(f"{kfile}: resource {entry} does not exist")
    seen = set()
    for o in objects:
        key = identity(o)
        if key in seen:
            raise RenderError(f"{kfile}: {key} is defined twice")
        seen.add(key)
    for i, p in enumerate(k.get("patches", [])):
        apply_patch(objects, p, f"{kfile}: patches[{i}]")
    return objects


def identity(o: dict) -> tuple[str, str, str]:
    meta = o.get("metadata") or {}
    return (o.get("apiVersion", ""), o["kind"], meta.get("name", ""))


def matches(o: dict, target: dict) -> bool:
    group, _, version = o.get("apiVersion", "").rpartition("/")
    checks = {
        "group": group,
        "version": version,
        "kind": o["kind"],
        "name": (o.get("metadata") or {}).get("name"),
    }
    for key, want in target.items():
        if key not in checks:
            raise RenderError(f"target key {key!r} not supported")
        if checks[key] != want:
            return False
    return True


def apply_patch(objects: list[dict], p: dict, where: str) -> None:
    if set(p) != {"target", "patch"}:
        raise RenderError(f"{where}: only inline JSON6902 patches with a target are supported")
    ops = yaml.safe_load(p["patch"])
    if not isinstance(ops, list):
        raise RenderError(f"{where}: the patch must be a JSON6902 list of operations")
    hits = [o for o in objects if matches(o, p["target"])]
    if not hits:
        raise RenderError(f"{where}: the target {p['target']} matches nothing")
    for o in hits:
        for op in ops:
            json6902(o, op, where)


def split_pointer(pointer: str, where: str) -> list[str]:
    if not pointer.startswith("/"):
        raise RenderError(f"{where}: path {pointer!r} must start with /")
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]


def json6902(doc: dict, op: dict, where: str) -> None:
    """Applies one RFC 6902 operation in place."""
    kind = op.get("op")
    tokens = split_pointer(op.get("path", ""), where)
    parent = doc
    for t in tokens[:-1]:
        try:
            parent = parent[int(t)] if isinstance(parent, list) else parent[t]
        except (KeyError, IndexError, ValueError) as e:
            raise RenderError(f"{where}: {op['path']} does not exist ({e})") from None
    last = tokens[-1]
    if kind in ("add", "replace", "test") and "value" not in op:
        raise RenderError(f"{where}: {kind} needs a value")
    value = copy.deepcopy(op.get("value"))
    try:
        if isinstance(parent, list):
            index = len(parent) if (last == "-" and kind == "add") else int(last)
            if kind == "add":
                if index > len(parent):
                    raise IndexError(index)
                parent.insert(index, value)
            elif kind == "remove":
                del parent[index]
            elif kind == "replace":
                parent[index] = value
            elif kind == "test":
                if parent[index] != value:
                    raise RenderError(f"{where}: test of {op['path']} failed")
            else:
                raise RenderError(f"{where}: op {kind!r} not supported")
        elif isinstance(parent, dict):
            if kind == "add":
                parent[last] = value
            elif kind == "remove":
                del parent[last]
            elif kind == "replace":
                if last not in parent:
                    raise KeyError(last)
                parent[last] = value
            elif kind == "test":
                if parent[last] != value:
                    raise RenderError(f"{where}: test of {op['path']} failed")
            else:
                raise RenderError(f"{where}: op {kind!r} not supported")
        else:
            raise RenderError(f"{where}: {op['path']}: parent is not a container")
    except (KeyError, IndexError, ValueError) as e:
        raise RenderError(f"{where}: {kind} {op['path']}: no such element ({e})") from None


def dump(objects: list[dict]) -> str:
    return yaml.safe_dump_all(objects, sort_keys=False, default_flow_style=False, width=100)


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        sys.stdout.write(dump(render(Path(sys.argv[1]))))
    except RenderError as e:
        print(f"k8s_render: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
