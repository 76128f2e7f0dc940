#!/usr/bin/env bash
# Runs one scenario of the bench (fleet or storm) against the
# first release and against this checkout, one after the other on the same
# machine, and writes both side by side to OUT (report.md, results.json; the
# first release's whole results.json is under "compare").
#
#   bench/fleet/run.sh fleet                      # -> bench/results/fleet
#   bench/fleet/run.sh storm bench/results/storm  # extra bench flags may follow OUT
#
# The first release is checked out into a temporary git worktree (removed
# at the end; nothing from it is committed). This checkout's bench (the
# package bench/ and its command, cmd/scorerefresh-bench/main.go) is copied
# into it and built there with -tags oldrelease, which leaves out the
# scenarios the release cannot run (batched, plan): fleet and storm use only
# what both versions offer, plus the two app.Options hooks they measure
# through (bench/fleet/app-hooks.patch, applied to the temporary copy).
# OLD_REF overrides the release (default v0.1.0): any commit, to show a
# change's before and after side by side in one run.
set -euo pipefail

scenario=${1:?usage: bench/fleet/run.sh fleet|storm [OUT] [bench flags...]}
shift
out=bench/results/$scenario
if [[ $# -gt 0 && $1 != -* ]]; then
	out=$1
	shift
fi
old_ref=${OLD_REF:-v0.1.0}
root=$(git rev-parse --show-toplevel)
cd "$root"
mkdir -p "$out"
out=$(cd "$out" && pwd)

tmp=$(mktemp -d)
wt=$tmp/old
cleanup() {
	git -C "$root" worktree remove --force "$wt" >/dev/null 2>&1 || true
	rm -rf "$tmp"
}
trap cleanup EXIT

git -C "$root" worktree add --detach "$wt" "$old_ref" >/dev/null
rm -rf "$wt/cmd/scorerefresh-bench"
mkdir -p "$wt/cmd/scorerefresh-bench" "$wt/bench"
rm -f "$wt"/bench/*.go
cp "$root"/bench/*.go "$wt/bench/"
rm -f "$wt"/bench/*_test.go
cp "$root/cmd/scorerefresh-bench/main.go" "$wt/cmd/scorerefresh-bench/"
# Self-contained packages the bench reads the queue and draws with, which
# releases before v0.3.0 lack.
for pkg in queuestate pkg/svgchart; do
	if [[ ! -d $wt/$pkg ]]; then
		mkdir -p "$wt/$pkg"
		cp "$root/$pkg"/*.go "$wt/$pkg/"
		rm -f "$wt/$pkg"/*_test.go
	fi
done
# The hooks are in the service from v0.2.0 on; older releases get them here.
if ! grep -qs 'WrapRefresher' "$wt"/internal/app/app.go "$wt"/cmd/internal/app/app.go; then
	git -C "$wt" apply -3 "$root/bench/fleet/app-hooks.patch"
fi
# Releases before v0.3.0 kept the binaries' shared packages in cmd/internal;
# the copied bench imports them from internal/.
if [[ -d $wt/cmd/internal && ! -d $wt/internal ]]; then
	mv "$wt/cmd/internal" "$wt/internal"
	grep -rl 'scorerefresh/cmd/internal/' "$wt" --include='*.go' |
		xargs sed -i 's#scorerefresh/scorerefresh/cmd/internal/#scorerefresh/scorerefresh/internal/#g'
fi

echo "== $scenario on $old_ref"
(cd "$wt" && go run -tags oldrelease ./cmd/scorerefresh-bench -scenarios "$scenario" -label "$old_ref" -out "$tmp/old-results" "$@")

label="$(git rev-parse --abbrev-ref HEAD)@$(git rev-parse --short HEAD)"
echo "== $scenario on $label"
go run ./cmd/scorerefresh-bench -scenarios "$scenario" -label "$label" -compare "$tmp/old-results/results.json" -out "$out" "$@"
