// Package controlplane tells the tests, the demo and the e2e harness where
// the kube-apiserver and etcd binaries are: $KUBEBUILDER_ASSETS when set,
// else the repository's bin, where `make control-plane` builds them.
package controlplane

import (
	"errors"
	"os"
	"path/filepath"
)

// Assets is the directory holding kube-apiserver and etcd, for
// envtest.Environment.BinaryAssetsDirectory.
func Assets() (string, error) {
	if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
		return d, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "bin"), nil
}

// RepoRoot is the nearest directory at or above the working directory that
// holds a go.mod: the repository, for anything run by go test or go run
// from inside it.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}
