// Command ocibuild builds dualca's container image without a Docker daemon,
// from Go modules alone (github.com/google/go-containerregistry), and pushes
// it: `make image` and `make push` run it, and so do the image tests.
//
//	ocibuild build -out bin/image -version V -revision R -created EPOCH -source URL
//	ocibuild push -layout bin/image/oci -ref REGISTRY/dualca:V
//
// build cross-compiles a static dualca (CGO off, -trimpath) for each
// platform, puts it alone on an empty base (no shell, no CA store: dualca
// trusts the API server through its ServiceAccount), runs it as 65532, and
// writes one image index into an OCI image layout at OUT/oci, with an SPDX
// SBOM per platform (OUT/sbom/OS-ARCH.spdx.json) that is also in the layout
// as an OCI 1.1 artifact whose subject is that platform's image. Every
// timestamp is the -created epoch (the commit's), so the same commit gives
// the same digest on any machine. The last line it prints is the index
// digest, sha256:<64 hex>.
//
// push copies the index and its SBOMs from the layout to a registry (the
// Docker credential helpers and config give the credentials) and prints
// the pushed reference by digest last.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "ocibuild:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: ocibuild build|push [flags]")
	}
	switch args[0] {
	case "build":
		return buildCommand(ctx, args[1:])
	case "push":
		return pushCommand(ctx, args[1:])
	default:
		return fmt.Errorf("unknown command %q: want build or push", args[0])
	}
}
