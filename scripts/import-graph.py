#!/usr/bin/env python3
"""Finds import circles between the files of a Rust crate.

    scripts/import-graph.py app/core app/http app

For every `.rs` file under each crate's `src/`, the modules it names through `crate::…`, `super::…` or
`self::…` (in `use` items, brace groups included, and in paths written inline) are resolved to the file
that defines them, which gives an edge file → file. A module's own `mod x;` declarations are not edges (a
parent holding a child is not an import), nor are its `#[cfg(test)]` modules' files (tests import what
they test). Every strongly connected component of more than one file is printed as a circle; the exit
status is 1 when there is any. `--dot` prints the graph in Graphviz form instead; `--self-test` checks the
checker on a planted crate (a circle through `use`, a brace group, `super::` and an inline path; tests and
`mod` declarations that must not count) and exits 1 if it misjudges it.
"""

import os
import re
import sys

USE = re.compile(r"\buse\s+((?:crate|super|self)::[^;]*);", re.S)
INLINE = re.compile(r"\b((?:crate|super|self)(?:::(?:super|[A-Za-z_][A-Za-z0-9_]*))+)")
COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
STRING = re.compile(r'"(?:\\.|[^"\\])*"')


def module_path(src, path):
    """The module path of a file: src/a/b.rs and src/a/b/mod.rs are ['a', 'b']; lib.rs and main.rs []."""
    rel = os.path.relpath(path, src)[: -len(".rs")].split(os.sep)
    if rel[-1] in ("mod", "lib", "main"):
        rel = rel[:-1]
    return rel


def expand(tree):
    """`a::{b, c::{d, e}}` → ['a::b', 'a::c::d', 'a::c::e'] (aliases and globs dropped)."""
    tree = re.sub(r"\s+", "", tree)
    brace = tree.find("{")
    if brace < 0:
        return [re.sub(r"as\w+$", "", tree).rstrip(":*")]
    head, inner = tree[:brace], tree[brace + 1 : tree.rfind("}")]
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(inner):
        depth += ch == "{"
        depth -= ch == "}"
        if ch == "," and depth == 0:
            parts.append(inner[start:i])
            start = i + 1
    parts.append(inner[start:])
    out = []
    for part in filter(None, parts):
        for sub in expand(part):
            out.append((head + sub) if sub not in ("self", "") else head.rstrip(":"))
    return out


def test_modules(text):
    """Names of the `#[cfg(test)] mod name;` declarations of a file."""
    return set(re.findall(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", text))


def graph(crate):
    src = os.path.join(crate, "src")
    files = {}
    for root, _, names in os.walk(src):
        for name in names:
            if name.endswith(".rs"):
                path = os.path.join(root, name)
                files[tuple(module_path(src, path))] = path
    skip = set()
    for modpath, path in files.items():
        for test in test_modules(open(path, encoding="utf-8").read()):
            skip.add(modpath + (test,))
    edges = {path: set() for path in files.values()}
    for modpath, path in files.items():
        if modpath in skip:
            continue
        text = STRING.sub('""', COMMENT.sub("", open(path, encoding="utf-8").read()))
        # Inline `mod tests { … }` blocks of a file are its tests too.
        text = re.split(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", text)[0]
        refs = [p for tree in USE.findall(text) for p in expand(tree)] + INLINE.findall(text)
        for ref in refs:
            segments = ref.split("::")
            if segments[0] == "crate":
                target = []
            else:
                target = list(modpath)
            for seg in segments[1:] if segments[0] == "crate" else segments:
                if seg == "super":
                    target = target[:-1]
                elif seg == "self":
                    continue
                else:
                    target.append(seg)
            # The longest prefix that is a file: the rest names items inside it.
            while target and tuple(target) not in files:
                target.pop()
            found = files.get(tuple(target))
            if found and found != path and tuple(target) not in skip:
                edges[path].add(found)
    return edges


def circles(edges):
    """Tarjan's strongly connected components with more than one file."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in edges:
        if v not in index:
            visit(v)
    return out


def self_test():
    """A planted crate: a → b → a is a circle (a `use` brace group, an inline `super::` path); c uses a
    but nothing uses c back (a's test module does, which is not an edge); a naming itself is no edge; lib
    only declares the modules."""
    import tempfile

    planted = {
        "lib.rs": "pub mod a;\npub mod b;\npub mod c;\n",
        "a.rs": "use crate::{b::{Thing, other}, a::A as _};\n#[cfg(test)]\nmod tests;\npub struct A;\n",
        "a/tests.rs": "use crate::c::C;\nuse super::A;\n",
        "b.rs": "pub struct Thing;\npub fn other() { let _ = super::a::A; }\n",
        "c.rs": "// crate::b::Thing in a comment is not an import\npub struct C;\nuse crate::a::A as _;\n",
    }
    with tempfile.TemporaryDirectory() as crate:
        for name, text in planted.items():
            path = os.path.join(crate, "src", name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        edges = graph(crate)
        rel = {os.path.relpath(v, crate): sorted(os.path.relpath(w, crate) for w in ws) for v, ws in edges.items()}
        loops = [[os.path.relpath(p, crate) for p in loop] for loop in circles(edges)]
    expected_edges = {
        "src/lib.rs": [],
        "src/a.rs": ["src/b.rs"],
        "src/a/tests.rs": [],
        "src/b.rs": ["src/a.rs"],
        "src/c.rs": ["src/a.rs"],
    }
    ok = rel == expected_edges and loops == [["src/a.rs", "src/b.rs"]]
    print(f"import-graph self-test: {'passed' if ok else 'FAILED'}: edges {rel}, circles {loops}")
    return 0 if ok else 1


def main(args):
    if "--self-test" in args:
        return self_test()
    dot = "--dot" in args
    crates = [a for a in args if a != "--dot"]
    if not crates:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    found = 0
    for crate in crates:
        edges = graph(crate)
        if dot:
            print(f'digraph "{crate}" {{')
            for v, ws in sorted(edges.items()):
                for w in sorted(ws):
                    print(f'  "{os.path.relpath(v, crate)}" -> "{os.path.relpath(w, crate)}";')
            print("}")
            continue
        loops = circles(edges)
        found += len(loops)
        for loop in loops:
            print(f"{crate}: import circle: " + " ↔ ".join(os.path.relpath(p, crate) for p in loop))
        files = len(edges)
        imports = sum(len(ws) for ws in edges.values())
        print(f"{crate}: {files} files, {imports} imports between them, {len(loops)} circles")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
