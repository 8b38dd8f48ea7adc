// Pins Traefik v3, the gateway of test/gateways that reads Kubernetes
// itself (its CRD provider). Nothing here is compiled: tools.mk builds
// ./cmd/traefik inside the downloaded github.com/traefik/traefik/v3 module,
// with that module's own go.mod and go.sum, because `go install` rejects it
// for its replace directives (one of them a directory inside the module).
// The web UI's embed needs no placeholder: the module ships webui/static
// with a file in it. The suite installs Traefik's CRDs from the same module
// directory. This file is the single place the version lives, and go.sum
// makes the download verified without asking the checksum database.
//
// v3.6.12, not the newest v3.7: v3.7's forks of go-http-auth and several of
// its DNS providers' SDKs are versions the Go module proxy refuses here
// (403), so v3.7 cannot be built from the proxy; v3.6.12's module graph
// resolves entirely.
//
// Do not run `go mod tidy` here: no package imports traefik, so tidy
// would drop the requirement.
module github.com/dualca/dualca/test/tools/traefik

go 1.26.8

require github.com/traefik/traefik/v3 v3.6.12
