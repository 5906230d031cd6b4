#!/usr/bin/env bash
# scripts/tools.sh: tool binaries the tests need, built from the Go module proxy.
#
#   scripts/tools.sh helm   install Helm (HELM_VERSION below) unless the cached binary is that
#                           version already, then print the binary's path on stdout
#
# Binaries live in ${POSTLINE_CACHE:-$HOME/.cache/postline}/bin, the cache scripts/stack.sh uses,
# so they survive a fresh clone. Progress and errors go to stderr; stdout is only the path, so
# callers can run `helm="$(scripts/tools.sh helm)"`. Concurrent callers (parallel test packages)
# wait on a lock instead of building the same binary twice.
set -euo pipefail

HELM_VERSION=v3.22.0
HELM_MODULE=helm.sh/helm/v3

BIN="${POSTLINE_CACHE:-$HOME/.cache/postline}/bin"

# module_version prints the main module version that `go version -m` records in a Go binary, or
# nothing when the file is missing or not a Go binary. Helm's own `helm version` needs release
# ldflags to report its version, so the build info is the reliable source.
module_version() {
	local binary="$1" module="$2"
	[[ -x "$binary" ]] || return 0
	go version -m "$binary" 2>/dev/null | awk -v m="$module" '$1 == "mod" && $2 == m { print $3 }'
}

install_helm() {
	local helm="$BIN/helm"
	mkdir -p "$BIN"
	exec 9>"$BIN/.helm.lock"
	flock 9
	if [[ "$(module_version "$helm" "$HELM_MODULE")" != "$HELM_VERSION" ]]; then
		echo "tools.sh: installing $HELM_MODULE/cmd/helm@$HELM_VERSION into $BIN" >&2
		# go install refuses to replace a file it did not build.
		rm -f "$helm"
		GOBIN="$BIN" go install "$HELM_MODULE/cmd/helm@$HELM_VERSION" >&2
		local got
		got="$(module_version "$helm" "$HELM_MODULE")"
		if [[ "$got" != "$HELM_VERSION" ]]; then
			echo "tools.sh: $helm reports ${got:-no version}, want $HELM_VERSION" >&2
			exit 1
		fi
	fi
	flock -u 9
	echo "$helm"
}

case "${1:-}" in
helm) install_helm ;;
*)
	echo "usage: scripts/tools.sh helm" >&2
	exit 2
	;;
esac
