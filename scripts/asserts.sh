#!/usr/bin/env bash
# Assertion density per crate: non-test code lines, the assert!, assert_eq!,
# assert_ne! and debug_assert*! calls among them, and asserts per 100 lines.
#
#   scripts/asserts.sh          the working tree
#   scripts/asserts.sh REV      the tree of a commit (read with git show;
#                               nothing is checked out)
#
# What counts, as well as a line-based script can tell:
#
# - A code line is a line of a .rs file under the crate's src/ that is not
#   blank and not a comment (`//`, `///`, `//!`; doc tests are comments).
#   Block comments and string literals spanning lines count as code.
# - Test code is left out: an item (a `mod tests { ... }` block, a helper
#   function) under an attribute `#[cfg(test)]`, `#[cfg(all(test, ...))]`
#   or `#[test]` is skipped up to its closing brace, found by counting
#   braces outside string and char literals (raw strings are taken as
#   plain ones) and trailing comments; a `#[cfg(test)] mod
#   name;` declaration leaves out the file it names. `#[cfg(any(test,
#   ...))]` items are built without tests too, and count. The crates'
#   tests/ directories are not under src/, so never read.
# - An assert is a call of assert!, assert_eq!, assert_ne!, debug_assert!,
#   debug_assert_eq! or debug_assert_ne! on a code line, outside a
#   trailing comment (prop_assert! and other names ending in assert! are
#   not). `const _: () = assert!(...)` counts: it is checked too, at
#   compile time. The "debug" column is the debug_assert* share.
set -euo pipefail

root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
cd "$root"
rev=${1:-}
crates=(src platform/src raft/src cli/src otlp/src)

# The .rs files under a directory, at the revision or in the working tree.
files() {
    if [ -n "$rev" ]; then
        git ls-tree -r --name-only "$rev" -- "$1" | grep '\.rs$' || true
    else
        find "$1" -name '*.rs' -type f 2>/dev/null | sort
    fi
}

# One file's text.
content() {
    if [ -n "$rev" ]; then
        git show "$rev:$1"
    else
        cat "$1"
    fi
}

if [ -n "$rev" ]; then
    git rev-parse --verify --quiet "$rev^{commit}" >/dev/null || {
        echo "asserts.sh: no commit $rev" >&2
        exit 2
    }
fi

# Per file, prints "count CODE_LINES ASSERTS DEBUG_ASSERTS" and, for each
# `#[cfg(test)] mod name;`, "exclude PATH" for the two files it may name.
count_file='
function strip(s,    out, i, c, n, q) {
    # Drop string and char literals and a trailing // comment, so that
    # braces and assert names inside them are not counted.
    out = ""; n = length(s); q = ""
    for (i = 1; i <= n; i++) {
        c = substr(s, i, 1)
        if (q != "") {
            if (c == "\\") { i++; continue }
            if (c == q) q = ""
            continue
        }
        if (c == "\"") { q = c; continue }
        if (c == "/" && substr(s, i + 1, 1) == "/") break
        # A char literal: quote, one char or an escape, quote. A lifetime
        # (quote, name, no closing quote) is left alone.
        if (c == "'\''" && substr(s, i + 2, 1) == "'\''") { i += 2; continue }
        if (c == "'\''" && substr(s, i + 1, 1) == "\\") {
            i += 2
            while (i < n && substr(s, ++i, 1) != "'\''") {}
            continue
        }
        out = out c
    }
    return out
}
function asserts(s, debug,    n, re) {
    re = debug ? "(^|[^A-Za-z0-9_])debug_assert(_eq|_ne)?!" \
               : "(^|[^A-Za-z0-9_])(debug_)?assert(_eq|_ne)?!"
    n = 0
    while (match(s, re)) { n++; s = substr(s, RSTART + RLENGTH) }
    return n
}
# Skip the item starting or going on at `code`: up to the brace closing
# its block, or up to its `;` if it has none.
function skip(code,    opens) {
    opens = gsub(/\{/, "{", code)
    depth += opens - gsub(/\}/, "}", code)
    if (opens) opened = 1
    if ((opened && depth <= 0) || (!opened && code ~ /;[ \t]*$/)) skipping = 0
}
BEGIN { pending = 0; skipping = 0; depth = 0; opened = 0 }
{
    line = $0
    sub(/^[ \t]+/, "", line)
    if (line == "" || line ~ /^\/\//) next
    code = strip(line)
    if (skipping) { skip(code); next }
    # A test-only attribute: cfg(test), cfg(all(test, ...)), #[test];
    # not cfg(any(test, ...)) nor cfg(not(test)).
    if (line ~ /^#\[test\]/ || (line ~ /^#\[cfg\(/ && line ~ /[(, ]test[,)]/ \
        && line !~ /^#\[cfg\(any\(/ && line !~ /not\(test\)/)) {
        pending = 1
        next
    }
    if (pending) {
        if (line ~ /^#\[/) next
        pending = 0
        if (match(line, /^(pub(\([a-z]+\))? )?mod [A-Za-z0-9_]+;/)) {
            name = line
            sub(/^(pub(\([a-z]+\))? )?mod /, "", name)
            sub(/;.*/, "", name)
            print "exclude " dir name ".rs"
            print "exclude " dir name "/mod.rs"
            next
        }
        depth = 0; opened = 0; skipping = 1
        skip(code)
        next
    }
    lines++
    all += asserts(code, 0)
    debug += asserts(code, 1)
}
END { print "count " lines + 0, all + 0, debug + 0 }
'

printf '%-14s %8s %8s %8s %9s\n' crate lines asserts debug "per 100"
total_lines=0
total_asserts=0
total_debug=0
for crate in "${crates[@]}"; do
    mapfile -t list < <(files "$crate")
    # The directory a file's child modules live in: its own for mod.rs,
    # lib.rs and main.rs, else one named after it.
    declare -A excluded=()
    declare -A counts=()
    for f in "${list[@]}"; do
        case "$(basename "$f")" in
            mod.rs | lib.rs | main.rs) dir="$(dirname "$f")/" ;;
            *) dir="${f%.rs}/" ;;
        esac
        while read -r kind a b c; do
            if [ "$kind" = exclude ]; then
                excluded[$a]=1
            else
                counts[$f]="$a $b $c"
            fi
        done < <(content "$f" | awk -v dir="$dir" "$count_file")
    done
    lines=0
    asserts=0
    debug=0
    for f in "${list[@]}"; do
        [ -n "${excluded[$f]:-}" ] && continue
        read -r l a d <<<"${counts[$f]}"
        lines=$((lines + l))
        asserts=$((asserts + a))
        debug=$((debug + d))
    done
    unset excluded counts
    total_lines=$((total_lines + lines))
    total_asserts=$((total_asserts + asserts))
    total_debug=$((total_debug + debug))
    awk -v c="$crate" -v l="$lines" -v a="$asserts" -v d="$debug" \
        'BEGIN { printf "%-14s %8d %8d %8d %9.2f\n", c, l, a, d, l ? 100 * a / l : 0 }'
done
awk -v l="$total_lines" -v a="$total_asserts" -v d="$total_debug" \
    'BEGIN { printf "%-14s %8d %8d %8d %9.2f\n", "total", l, a, d, l ? 100 * a / l : 0 }'
