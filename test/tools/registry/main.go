// Command registry is the CNCF distribution registry (github.com/distribution/distribution/v3)
// with the filesystem and in-memory storage drivers only, for the image
// tests: they push dualca's image index and chart to it and pull them back.
// Upstream's cmd/registry also links the Azure, GCS and S3 drivers, the
// proxy cache and the token authentication, none of which a test on
// 127.0.0.1 uses, and which would double the build.
//
// Usage is upstream's: registry serve CONFIG.yml.
package main

import (
	"os"

	"github.com/distribution/distribution/v3/registry"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
)

func main() {
	if err := registry.RootCmd.Execute(); err != nil {
		os.Exit(1)
	}
}
