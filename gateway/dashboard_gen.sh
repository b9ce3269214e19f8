#!/bin/sh
# Regenerates the page constant in gateway/dashboard.c from
# gateway/dashboard.html: every line becomes one C string literal, between
# the BEGIN/END GENERATED PAGE markers (the rest of dashboard.c is kept).
# Run it after editing the page, then commit both files.
# tests/test_dashboard.c checks that the served page equals the .html file.
set -eu
cd "$(dirname "$0")"
tmp=$(mktemp dashboard.c.XXXXXX)
trap 'rm -f "$tmp"' EXIT
LC_ALL=C awk '
FNR == NR {
    # Character by character: gsub replacement escapes differ between awks.
    s = ""
    for (i = 1; i <= length($0); i++) {
        c = substr($0, i, 1)
        if (c == "\\" || c == "\"")
            c = "\\" c
        else if (c == "\t")
            c = "\\t"
        else if (c == "?" && substr($0, i + 1, 1) == "?")
            c = "?\\"   # "?\?": no trigraphs in -std=c11
        s = s c
    }
    page[n++] = "    \"" s "\\n\""
    next
}
/BEGIN GENERATED PAGE/ {
    print
    for (i = 0; i < n; i++)
        print page[i]
    skip = 1
    next
}
/END GENERATED PAGE/ { skip = 0 }
!skip { print }
' dashboard.html dashboard.c >"$tmp"
grep -q 'END GENERATED PAGE' "$tmp" || { echo "markers missing" >&2; exit 1; }
mv "$tmp" dashboard.c
trap - EXIT
