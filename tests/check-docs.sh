#!/usr/bin/env bash
# Keeps the documentation honest where a machine can tell: every flag, file, test and metric
# that a page names in backticks must exist, and every relative link must lead somewhere.
#
#   tests/check-docs.sh --binary target/debug/kube-proxy-ipvs [FILE.md...]
#
# Without FILE, the pages tests/run.sh checks: README.md, CONTRIBUTING.md, deploy/README.md,
# vagrant/README.md and docs/*.md.
#
# What is checked, in backticked spans outside fenced code blocks (a span may run over a line
# break, as Markdown allows):
#   flags    a span that starts with `--` or with `kube-proxy-ipvs `: each `--name` in it must
#            be listed by the agent's --help (kube-proxy's own flags the agent accepts are too);
#            `--log-{text,json}-...` is expanded first. Other tools' command lines
#            (`ipvsadm -Ln`, `cargo test --workspace`) are not the agent's and are left alone.
#   files    a word with a slash that ends in an extension, or that starts with one of the
#            repository's top-level directories: it must exist (a glob must match something),
#            from the repository's root or from the document's own directory; an all-caps
#            last part (`fuzz-corpus/TARGET`) is a placeholder, and its directory is checked.
#   tests    a snake_case identifier of 4 or more words: some `fn NAME` in the repository's
#            Rust or Go sources must define it.
#   metrics  `kubeproxy_*`, `kube_proxy_ipvs_*`, `process_*`, `kubernetes_build_info`: the
#            baseline scrape (crates/agent/src/metrics/testdata/baseline.txt) or the metrics
#            source must name it (a name ending in `_` or `*` is a prefix; a histogram's
#            `_bucket`, `_sum` and `_count` series count as the histogram, and a counter's
#            `_total` may be left out of the source, which registers counters without it).
#   links    a Markdown link `[text](target)` that is not a URL or an anchor: its file (the
#            part before any `#`) must exist, from the document's own directory.
# Each problem is printed as FILE:LINE: what; the exit status is 1 when there is one.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)

binary=
docs=()
while [[ $# -gt 0 ]]; do
    case $1 in
        --binary) binary=$2; shift 2 ;;
        -h | --help) sed -n '2,28p' "$0"; exit 0 ;;
        -*) echo "check-docs: unknown argument $1" >&2; exit 2 ;;
        *) docs+=("$1"); shift ;;
    esac
done
if [[ -z $binary ]]; then
    echo "usage: tests/check-docs.sh --binary PATH [FILE.md...]" >&2
    exit 2
fi
# Paths given are the caller's; the checks run from the repository's root.
binary=$(realpath "$binary")
for i in "${!docs[@]}"; do docs[i]=$(realpath "${docs[i]}"); done
cd "$repo"
[[ ${#docs[@]} -gt 0 ]] || docs=(README.md CONTRIBUTING.md deploy/README.md vagrant/README.md docs/*.md)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# What exists: the agent's flags, the functions the sources define, the metrics' source text.
"$binary" --help >"$work/help"
grep -oE -- '--[a-z0-9][a-z0-9-]*' "$work/help" | sort -u >"$work/flags"
if [[ $(wc -l <"$work/flags") -lt 20 ]]; then
    echo "check-docs: $binary --help lists almost no flags" >&2
    exit 1
fi
# The repository's files: git's (tracked and new, not ignored), or all but target/ without git.
repo_files() {
    if git rev-parse --git-dir >/dev/null 2>&1; then
        git ls-files --cached --others --exclude-standard
    else
        find . -path ./target -prune -o -path ./.git -prune -o -type f -print | sed 's|^\./||'
    fi
}
repo_files >"$work/files"
# Files git still lists but the tree no longer has are left out; grep's status is not the
# test of success (a batch without a match is not an error): the count below is.
grep -E '\.(rs|go)$' "$work/files" | while read -r f; do [[ -f $f ]] && printf '%s\0' "$f"; done |
    xargs -0 grep -hoE '\bfn [A-Za-z_][A-Za-z0-9_]*|\bfunc [A-Za-z_][A-Za-z0-9_]*' >"$work/fns.all" || true
awk '{print $2}' "$work/fns.all" | sort -u >"$work/fns"
if [[ $(wc -l <"$work/fns") -lt 100 ]]; then
    echo "check-docs: found almost no fn in the repository's sources" >&2
    exit 1
fi
cat crates/agent/src/metrics/testdata/baseline.txt crates/agent/src/metrics/*.rs \
    crates/agent/src/metrics/tests/*.rs >"$work/metrics"
top_dirs=$(awk -F/ 'NF > 1 {print $1}' "$work/files" | sort -u | paste -sd'|')

# file<TAB>line<TAB>span, for every backticked span outside fenced code.
spans() {
    perl -e '
        for my $file (@ARGV) {
            open(my $in, "<", $file) or die "$file: $!\n";
            my ($fence, $open, $start) = (0, "", 0);
            while (my $text = <$in>) {
                chomp $text;
                if ($text =~ /^\s*(```|~~~)/) { $fence = !$fence; $open = ""; next; }
                next if $fence;
                if ($open ne "") {
                    # A span that began on an earlier line: it ends here, or goes on.
                    if ($text =~ s/^([^`]*)`//) {
                        print "$file\t$start\t$open $1\n";
                        $open = "";
                    } else {
                        $open .= " $text";
                        next;
                    }
                }
                while ($text =~ s/^[^`]*`([^`]*)`//) { print "$file\t$.\t$1\n"; }
                if ($text =~ /`([^`]*)$/) { ($open, $start) = ($1, $.); }
            }
            close $in;
        }
    ' "$@"
}

# Brace lists expanded once: `--log-{text,json}-split-stream` gives both flags.
expand_braces() {
    perl -ne 'chomp; if (/^(.*?)\{([^{}]*,[^{}]*)\}(.*)$/) { print "$1$_$3\n" for split /,/, $2 } else { print "$_\n" }'
}

spans "${docs[@]}" >"$work/spans"

problems=0
problem() {
    printf '%s:%s: %s\n' "$1" "$2" "$3"
    problems=$((problems + 1))
}

while IFS=$'\t' read -r file line span; do
    dir=$(dirname "$file")

    # Flags.
    if [[ $span == --* || $span == "kube-proxy-ipvs "* ]]; then
        while read -r flag; do
            [[ -n $flag ]] || continue
            grep -qxF -- "$flag" "$work/flags" ||
                problem "$file" "$line" "flag $flag is not in the agent's --help"
        done < <(grep -oE -- '--[a-z0-9{][a-z0-9,{}-]*' <<<"$span" | expand_braces)
    fi

    # Files.
    read -ra words <<<"$span"
    for word in "${words[@]}"; do
        word=${word%[.,:;)]}
        word=${word#(}
        # Not a path: absolute (the node's, not ours), a URL, a variable, an assignment.
        [[ $word == */* && $word != /* && $word != *://* && $word != *'$'* && $word != *=* ]] || continue
        # What a build or a test run writes (target/RELIABILITY.md) is absent from a fresh clone.
        [[ $word == target/* ]] && continue
        # Outside the repository (`../shared/...`): a reader's machine, which a clone may lack.
        if [[ $word == ../* ]]; then
            inside=
            for base in . "$dir"; do
                [[ $(realpath -m "$base/$word") == "$repo"/* ]] && inside=1
            done
            [[ -n $inside ]] || continue
        fi
        if [[ $word =~ ^($top_dirs)/ || $word =~ /[^/]*[A-Za-z0-9_]\.[a-z]{1,5}$ ]]; then
            # A placeholder last (`fuzz-corpus/TARGET`): its directory must exist.
            [[ ${word##*/} =~ ^[A-Z][A-Z_]*$ ]] && word=${word%/*}/
            found=
            for base in . "$dir"; do
                if [[ $word == *[*?[]* ]]; then
                    compgen -G "$base/$word" >/dev/null && found=1 && break
                elif [[ -e $base/$word ]]; then
                    found=1 && break
                fi
            done
            [[ -n $found ]] || problem "$file" "$line" "file $word does not exist"
        fi
    done

    # Metrics.
    metric_span=
    while read -r metric; do
        [[ -n $metric ]] || continue
        metric_span=1
        name=${metric%\*}
        if [[ $name == "$metric" ]]; then
            grep -qE "(^|[^a-z_])${name}([^a-z0-9_]|$)" "$work/metrics" && continue
            base=$(sed -E 's/_(bucket|sum|count)$//' <<<"$name")
            grep -qE "(^|[^a-z_])${base}([^a-z0-9_]|$)" "$work/metrics" && continue
            counter=${name%_total}
            [[ $counter != "$name" ]] && grep -qE "(^|[^a-z_])${counter}([^a-z0-9_]|$)" "$work/metrics" && continue
        else
            grep -qE "(^|[^a-z_])${name}" "$work/metrics" && continue
        fi
        problem "$file" "$line" "metric $metric is neither in the baseline scrape nor in the metrics source"
    done < <(grep -oE '\b(kubeproxy_[a-z0-9_]*\*?|kube_proxy_ipvs_[a-z0-9_]*\*?|rest_client_[a-z0-9_]*\*?|process_[a-z0-9_]*\*?|kubernetes_build_info)' <<<"$span" || true)

    # Tests.
    if [[ -z $metric_span && $span =~ ^[a-z][a-z0-9]*(_[a-z0-9]+){3,}$ ]]; then
        grep -qxF -- "$span" "$work/fns" ||
            problem "$file" "$line" "test $span: no fn of that name in the repository"
    fi
done <"$work/spans"

# Links: file<TAB>line<TAB>target, for every inline link outside fenced code.
perl -e '
    for my $file (@ARGV) {
        open(my $in, "<", $file) or die "$file: $!\n";
        my $fence = 0;
        while (my $text = <$in>) {
            if ($text =~ /^\s*(```|~~~)/) { $fence = !$fence; next; }
            next if $fence;
            $text =~ s/`[^`]*`//g;
            while ($text =~ /\]\(([^()\s]+)\)/g) { print "$file\t$.\t$1\n"; }
        }
        close $in;
    }
' "${docs[@]}" >"$work/links"
while IFS=$'\t' read -r file line target; do
    [[ $target == *://* || $target == mailto:* || $target == \#* ]] && continue
    path=${target%%#*}
    [[ -e $(dirname "$file")/$path ]] || problem "$file" "$line" "link $target leads to no file"
done <"$work/links"

if [[ $problems -gt 0 ]]; then
    echo "check-docs: $problems problem(s) in ${docs[*]}" >&2
    exit 1
fi
echo "check-docs: ok (${docs[*]}: flags, files, tests and metrics they name exist)"
