#!/usr/bin/env bash
# align.sh -- raise the modules a tool shares with the product module to the
# product's versions, so that a fresh clone compiles each shared package
# once: the Go build cache keys a compiled package by its module's version,
# its dependencies' and the build flags, and the Makefile builds the
# product and its tests with the tools' flags (CGO_ENABLED=0, -trimpath).
# Only what the product has at a newer version is raised; a tool ahead of
# the product keeps its own. Only the modules whose packages the product
# compiles count: the others could share nothing.
#
#     test/tools/align.sh certmanager helm kube-apiserver/versions/v1.37.2.mod
#
# A directory aligns its go.mod; a .mod file of kube-apiserver/versions,
# that modfile (modfile.sh runs it on each file it writes). Run it after
# bumping the product's modules; the tools are rebuilt when their go.mod
# changes (kube-apiserver: remove bin/k8s/<version>).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
export GOWORK=off GOFLAGS=-mod=mod

# above A B: whether semantic version A is above B. A pre-release (a
# pseudo-version among them) is below its release; two pre-releases of one
# release compare as text, which orders pseudo-versions by their time.
above() {
	local a=${1#v} b=${2#v} ar br
	ar=${a%%[-+]*} br=${b%%[-+]*}
	if [[ $ar != "$br" ]]; then
		[[ $(printf '%s\n%s\n' "$ar" "$br" | sort -t. -k1,1n -k2,2n -k3,3n | tail -n1) == "$ar" ]]
		return
	fi
	local ap=${a#"$ar"} bp=${b#"$br"}
	ap=${ap%%+*} bp=${bp%%+*}
	if [[ -z $ap || -z $bp ]]; then
		[[ -z $ap && -n $bp ]]
		return
	fi
	[[ $ap > $bp ]]
}

# The modules whose packages the product and its tests compile, module
# version, one a line: those alone can share compiled packages.
product=$(cd "$root" && GOFLAGS=-mod=readonly go list -deps -test -f '{{with .Module}}{{if not .Main}}{{.Path}} {{.Version}}{{end}}{{end}}' ./... | sort -u)

for target in "$@"; do
	if [[ $target == *.mod ]]; then
		dir=$root/test/tools/$(dirname "$(dirname "$target")")
		modflag=-modfile=$root/test/tools/$target
	else
		dir=$root/test/tools/$target
		modflag=
	fi
	cd "$dir"
	ups=()
	while read -r path version; do
		want=$(awk -v m="$path" '$1 == m { print $2 }' <<<"$product")
		[[ -n $want && $want != "$version" ]] || continue
		if above "$want" "$version"; then
			ups+=("$path@$want")
		fi
	done < <(go list $modflag -m -f '{{if not .Main}}{{.Path}} {{with .Replace}}{{.Version}}{{else}}{{.Version}}{{end}}{{end}}' all)
	if ((${#ups[@]})); then
		echo "$target: ${ups[*]}"
		go get $modflag "${ups[@]}"
		go mod tidy $modflag
	else
		echo "$target: aligned"
	fi
done
