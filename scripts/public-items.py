#!/usr/bin/env python3
"""Count the public items of the ringwal library, per module.

Builds the crate's rustdoc JSON (nightly rustdoc; the JSON output is
unstable) and walks it from the crate root the way a user's `use` paths
do: through public modules and re-exports, a glob re-export expanding to
its module's names. Each module's count is the names a user can write
after its path (`ringwal::verify::stat` is one name of `verify`); a
sub-module is one name of its parent and has its own row. Methods and
associated items of the types in a module are counted apart, in the
`assoc` column.

    scripts/public-items.py                      # default features
    scripts/public-items.py --features internals
    scripts/public-items.py --all-features --list  # every path too

The JSON goes to target/public-items (a target directory of its own, so
that a nightly build does not disturb the stable one's cache).
"""

import argparse
import collections
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build(features, all_features):
    target = os.path.join(ROOT, "target", "public-items")
    cmd = ["cargo", "+nightly", "rustdoc", "-p", "ringwal", "--lib", "--target-dir", target]
    if all_features:
        cmd.append("--all-features")
    elif features:
        cmd += ["--features", features]
    cmd += ["--", "-Z", "unstable-options", "--output-format", "json"]
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=sys.stderr)
    return os.path.join(target, "doc", "ringwal.json")


def kind_of(item):
    return next(iter(item["inner"]))


def public_assoc(index, item):
    """Public associated items of a struct, enum or trait: inherent
    methods, constants and types (trait impls add no name a user types),
    or the trait's own items."""
    inner = item["inner"]
    k = kind_of(item)
    if k == "trait":
        return len(inner["trait"]["items"])
    if k not in ("struct", "enum", "union"):
        return 0
    n = 0
    for impl_id in inner[k]["impls"]:
        imp = index.get(str(impl_id))
        if imp is None:
            continue
        body = imp["inner"]["impl"]
        if body["trait"] is not None or body.get("is_synthetic") or body.get("blanket_impl"):
            continue
        for a in body["items"]:
            a = index.get(str(a))
            if a is not None and a["visibility"] == "public":
                n += 1
    return n


def walk(doc):
    index, paths = doc["index"], doc["paths"]
    modules = collections.OrderedDict()  # path -> list of (name, kind, assoc)
    seen_modules = set()

    def visit(mod_id, path):
        if (mod_id, path) in seen_modules:
            return
        seen_modules.add((mod_id, path))
        rows = modules.setdefault(path, [])
        for child_id in index[str(mod_id)]["inner"]["module"]["items"]:
            child = index.get(str(child_id))
            if child is None or child["visibility"] != "public":
                continue
            k = kind_of(child)
            if k == "use":
                u = child["inner"]["use"]
                target = index.get(str(u["id"])) if u["id"] is not None else None
                if u["is_glob"]:
                    if target is not None and kind_of(target) == "module":
                        for name, kind, assoc in list_module(target["id"]):
                            rows.append((name, kind, assoc))
                    continue
                if target is None:
                    # Another crate's item re-exported: one name.
                    ext = paths.get(str(u["id"]))
                    rows.append((u["name"], ext["kind"] if ext else "external", 0))
                    continue
                if kind_of(target) == "module":
                    rows.append((u["name"], "module", 0))
                    visit(target["id"], f"{path}::{u['name']}")
                    continue
                rows.append((u["name"], kind_of(target), public_assoc(index, target)))
            elif k == "module":
                rows.append((child["name"], "module", 0))
                visit(child_id, f"{path}::{child['name']}")
            elif k in ("impl",):
                continue
            else:
                rows.append((child["name"], k, public_assoc(index, child)))

    def list_module(mod_id):
        out = []
        for child_id in index[str(mod_id)]["inner"]["module"]["items"]:
            child = index.get(str(child_id))
            if child is None or child["visibility"] != "public" or kind_of(child) == "impl":
                continue
            if kind_of(child) == "use":
                u = child["inner"]["use"]
                target = index.get(str(u["id"])) if u["id"] is not None else None
                out.append((u["name"], kind_of(target) if target else "external",
                            public_assoc(index, target) if target else 0))
            else:
                out.append((child["name"], kind_of(child), public_assoc(index, child)))
        return out

    visit(doc["root"], index[str(doc["root"])]["name"])
    return modules


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--features", default="", help="cargo features, comma-separated")
    ap.add_argument("--all-features", action="store_true")
    ap.add_argument("--json", help="use this rustdoc JSON instead of building one")
    ap.add_argument("--list", action="store_true", help="print every public path")
    args = ap.parse_args()

    path = args.json or build(args.features, args.all_features)
    with open(path) as f:
        doc = json.load(f)
    modules = walk(doc)

    label = "all features" if args.all_features else (args.features or "default features")
    print(f"public items of ringwal {doc.get('crate_version') or ''} ({label})")
    print(f"{'module':<24} {'names':>6} {'assoc':>6}  by kind")
    total_names = total_assoc = 0
    for mod, rows in modules.items():
        names = len(rows)
        assoc = sum(r[2] for r in rows)
        total_names += names
        total_assoc += assoc
        kinds = collections.Counter(r[1] for r in rows)
        by_kind = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items(), key=lambda kv: -kv[1]))
        print(f"{mod:<24} {names:>6} {assoc:>6}  {by_kind}")
    print(f"{'total':<24} {total_names:>6} {total_assoc:>6}")
    if args.list:
        print()
        for mod, rows in modules.items():
            for name, kind, _ in sorted(rows):
                print(f"{mod}::{name}  ({kind})")


if __name__ == "__main__":
    main()
