#!/usr/bin/env bash
# scripts/fuzz.sh (make fuzz): run every fuzz target in the module, one after another.
#
#   scripts/fuzz.sh [FUZZTIME] [PACKAGES...]     e.g. scripts/fuzz.sh 2m ./job
#
# FUZZTIME is a go test -fuzztime value, 30s by default (or $FUZZTIME); PACKAGES default to ./...
# Targets are found, not listed here: a package whose test files declare "func Fuzz" is asked with
# `go test -list '^Fuzz'`, so a target added anywhere runs without editing this script. go test
# fuzzes one target of one package per call. New failing inputs land in the package's
# testdata/fuzz/<Target>/, where plain `go test` replays them from then on.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

GO="${GO:-go}"
FUZZTIME="${1:-${FUZZTIME:-30s}}"
shift || true
PKGS=("$@")
[[ ${#PKGS[@]} -gt 0 ]] || PKGS=(./...)

# Only packages with a fuzz function in their tests are compiled for -list: CPU is shared.
mapfile -t candidates < <("$GO" list -e -f '{{.ImportPath}} {{.Dir}}' "${PKGS[@]}" |
	while read -r pkg dir; do
		if grep -lqs '^func Fuzz' "$dir"/*_test.go; then
			printf '%s\n' "$pkg"
		fi
	done)

ran=0
failed=()
for pkg in "${candidates[@]}"; do
	# A package whose tests do not build counts as failed, rather than being skipped.
	if ! listed="$("$GO" test -list '^Fuzz' "$pkg")"; then
		failed+=("$pkg (go test -list failed)")
		continue
	fi
	mapfile -t targets < <(grep '^Fuzz' <<<"$listed" || true)
	for target in "${targets[@]}"; do
		printf 'fuzz: %s %s for %s\n' "$pkg" "$target" "$FUZZTIME" >&2
		ran=$((ran + 1))
		# Keep going: one failing target should not hide the others.
		"$GO" test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" "$pkg" || failed+=("$pkg $target")
	done
done
if [[ $ran -eq 0 ]]; then
	echo "fuzz: no fuzz targets found in ${PKGS[*]}" >&2
	exit 1
fi
if [[ ${#failed[@]} -gt 0 ]]; then
	printf 'fuzz: %d of %d targets failed:\n' "${#failed[@]}" "$ran" >&2
	printf '  %s\n' "${failed[@]}" >&2
	exit 1
fi
printf 'fuzz: %d targets passed\n' "$ran" >&2
