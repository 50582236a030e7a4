#!/usr/bin/env python3
"""Prints the crate's module dependency graph (top-level modules of src/, from `use crate::…`
and `crate::…` paths) and fails when it has a cycle. `make module-graph`; CI runs it.

A reading of the source, not of rustc's resolution: enough to keep the arrows pointing one way
(config → registry → provider → turn → executor → backend → api)."""
import os, re, sys

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")

def top_module(path):
    rel = os.path.relpath(path, SRC)
    first = rel.split(os.sep)[0]
    return first[:-3] if first.endswith(".rs") else first

def main():
    edges = {}
    pat = re.compile(r"\bcrate::([a-z_][a-z0-9_]*)")
    for root, _, files in os.walk(SRC):
        for f in files:
            if not f.endswith(".rs"):
                continue
            p = os.path.join(root, f)
            m = top_module(p)
            if m in ("main", "lib"):
                continue
            text = open(p, encoding="utf-8").read()
            # Test modules may reach anywhere; only the shipped code counts.
            text = re.split(r"#\[cfg\(test\)\]\s*mod tests", text)[0]
            text = "\n".join(l for l in text.splitlines() if not l.lstrip().startswith("//"))
            # `super::` inside a nested module stays in the same top-level module.
            for dep in pat.findall(text):
                if dep != m:
                    edges.setdefault(m, set()).add(dep)
            edges.setdefault(m, set())
    for m in sorted(edges):
        print(f"{m} -> {', '.join(sorted(edges[m])) or '-'}")
    # Cycle detection (Tarjan's strongly connected components).
    index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]
    def visit(v):
        index[v] = low[v] = counter[0]; counter[0] += 1
        stack.append(v); on.add(v)
        for w in edges.get(v, ()):
            if w not in edges:
                continue
            if w not in index:
                visit(w); low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(sorted(comp))
    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    if sccs:
        for c in sccs:
            print("cycle among: " + ", ".join(c), file=sys.stderr)
        return 1
    print("no cycles")
    return 0

if __name__ == "__main__":
    sys.exit(main())
