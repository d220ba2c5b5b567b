#!/usr/bin/env python3
"""Holds the module graph of docs/architecture.md: every `#include "M/..."` in src/ must name the
including module itself or one it may reach through the "depends on" column of the module table.
Exit 1 with each offending include (file:line, and the path it would need), 0 when the layout
holds. Run by scripts/lint.sh; `scripts/check-modules.py --self-test` checks the checker.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
TABLE_ROW = re.compile(r"^\| `(\w+)` \|.*\| ([^|]*) \|\s*$")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"/]+)/[^"]+"')
# Modules that must never reach each other, whatever the table says: the two node agents share
# what they need through nodeagent, so a change to one cannot break the other.
NEVER_REACH = [("deviceplugin", "draplugin"), ("draplugin", "deviceplugin")]
# Targets beside a module's own folder: generated protobuf headers live under the module that
# owns the .proto (deviceplugin/..., draplugin/...), so they are checked as that module.


def read_graph(doc_text):
    """{module: set of direct dependencies} from the architecture table; "all" for cli."""
    graph = {}
    for line in doc_text.splitlines():
        m = TABLE_ROW.match(line)
        if not m:
            continue
        module, deps = m.group(1), m.group(2).strip()
        if deps in ("—", "-", ""):
            graph[module] = set()
        elif deps == "all":
            graph[module] = {"*"}
        else:
            graph[module] = {d.strip(" `") for d in deps.split(",")}
    return graph


def reachable(graph, module):
    seen, todo = set(), [module]
    while todo:
        m = todo.pop()
        for d in graph.get(m, ()):
            if d not in seen:
                seen.add(d)
                todo.append(d)
    return seen


def forbidden_edges(graph):
    """Messages for each NEVER_REACH pair the table lets one module reach."""
    for module, other in NEVER_REACH:
        if module in graph and other in reachable(graph, module):
            yield (f"docs/architecture.md: {module} may reach {other}; the node agents share through "
                   "nodeagent and never include each other")


def violations(graph, files):
    """files: iterable of (path relative to src/, text). Yields messages."""
    unknown = set()
    for rel, text in files:
        module = rel.split("/", 1)[0]
        if module not in graph:
            if module not in unknown:
                unknown.add(module)
                yield f"src/{module}/: a folder the module table of docs/architecture.md does not list"
            continue
        allowed = reachable(graph, module)
        if "*" in allowed:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            target = m.group(1)
            if target == module or target not in graph or target in allowed:
                continue
            yield (f"src/{rel}:{number}: {module} includes {target}, which it may not reach "
                   f"({module} -> {', '.join(sorted(graph[module])) or 'nothing'}; "
                   "docs/architecture.md)")


def self_test():
    graph = read_graph("| `base` | x | — |\n| `topology` | x | base |\n"
                       "| `tracker` | x | topology |\n| `kube` | x | base |\n| `cli` | x | all |\n")
    good = [("tracker/a.cc", '#include "base/result.h"\n#include "tracker/a.h"\n'),
            ("cli/m.cc", '#include "kube/client.h"\n')]
    bad = [("topology/a.cc", 'int x;\n#include "tracker/tracker.h"\n'),
           ("tracker/b.cc", '#  include "kube/pod.h"\n'),
           ("newmod/c.cc", "\n")]
    assert not list(violations(graph, good)), list(violations(graph, good))
    found = list(violations(graph, bad))
    assert len(found) == 3, found
    assert found[0].startswith("src/topology/a.cc:2: topology includes tracker"), found[0]
    agents = read_graph("| `nodeagent` | x | — |\n| `deviceplugin` | x | nodeagent |\n"
                        "| `draplugin` | x | nodeagent |\n")
    assert not list(forbidden_edges(agents))
    agents["draplugin"].add("deviceplugin")
    assert len(list(forbidden_edges(agents))) == 1
    assert list(violations(agents, [("draplugin/p.cc", '#include "deviceplugin/m.h"\n')])) == []
    print("check-modules self-test: ok")
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    graph = read_graph((ROOT / "docs/architecture.md").read_text())
    if not graph:
        print("check-modules: no module table found in docs/architecture.md", file=sys.stderr)
        return 1
    src = ROOT / "src"
    files = [(str(p.relative_to(src)), p.read_text(errors="replace"))
             for p in sorted(src.rglob("*")) if p.suffix in (".h", ".cc", ".proto") and p.is_file()]
    found = list(forbidden_edges(graph)) + list(violations(graph, files))
    for message in found:
        print(message, file=sys.stderr)
    if found:
        print(f"check-modules: {len(found)} include(s) break the module graph", file=sys.stderr)
        return 1
    print(f"check-modules: {len(files)} files in {len(graph)} modules keep the graph of "
          "docs/architecture.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
