"""Import graph of src/fluvial from the ast: module -> imported fluvial modules.

Each edge is tagged: 'top' (module level), 'lazy' (inside a function), 'tc' (under TYPE_CHECKING).
Usage: python import_graph.py SRC --edges FROM_PREFIX TO_PREFIX | --cycles MODULE...
"""

import ast
import pathlib
import sys
from collections import defaultdict

src = pathlib.Path(sys.argv[1])
mods = {}
for p in src.rglob("*.py"):
    rel = p.relative_to(src).with_suffix("")
    parts = list(rel.parts)
    is_pkg = parts[-1] == "__init__"
    if is_pkg:
        parts = parts[:-1]
    mods[".".join(parts)] = (p, is_pkg)


def resolve(name):
    # the longest known module that prefixes name
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


edges = defaultdict(set)  # (a, b) -> kinds
for mod, (path, is_pkg) in mods.items():
    tree = ast.parse(path.read_text())
    pkg = mod if is_pkg else mod.rpartition(".")[0]

    def walk(node, kind):
        for child in ast.iter_child_nodes(node):
            k = kind
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                k = "lazy" if kind == "top" else kind
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for c in child.body:
                    walk_stmt(c, "tc")
                for c in child.orelse:
                    walk_stmt(c, kind)
                continue
            walk_stmt(child, k)

    def walk_stmt(node, kind, mod=mod, pkg=pkg):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")
                up = up[: len(up) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            targets = [base + "." + a.name for a in node.names] + [base]
            # 'from x import y': y is a module if known, else x
            targets = [t for t in targets[:-1] if t in mods] or [targets[-1]]
        for t in targets:
            r = resolve(t)
            if r and r != mod and r.startswith("fluvial"):
                edges[(mod, r)].add(kind)
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            walk(node, kind)

    walk(tree, "top")

args = sys.argv[2:]
if args and args[0] == "--edges":
    a, b = args[1], args[2]
    for (x, y), kinds in sorted(edges.items()):
        if (x == a or x.startswith(a + ".")) and (y == b or y.startswith(b + ".")):
            print(f"  {x} -> {y}  [{','.join(sorted(kinds))}]")
elif args and args[0] == "--cycles":
    # module-level cycles among runtime imports (top + lazy; TYPE_CHECKING excluded),
    # reported as strongly connected components that contain the given modules
    want = args[1:]
    g = defaultdict(set)
    for (x, y), kinds in edges.items():
        if kinds - {"tc"}:
            g[x].add(y)
    # Tarjan
    index, low, stack, on, sccs, i = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def strong(v):
        index[v] = low[v] = i[0]
        i[0] += 1
        stack.append(v)
        on.add(v)
        for w in g[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            sccs.append(comp)

    for v in list(mods):
        if v not in index:
            strong(v)
    for comp in sccs:
        if len(comp) > 1 and any(any(c == w or c.startswith(w + ".") for w in want) for c in comp):
            named = [c for c in comp if any(c == w or c.startswith(w + ".") for w in want)]
            print(f"cycle of {len(comp)} modules containing {named}")
            # every import between the cycle's modules
            for c in sorted(comp):
                for d in sorted(g[c] & set(comp)):
                    print(f"    {c} -> {d}  [{','.join(sorted(edges[(c, d)]))}]")
