// This go.mod only marks the module's root. Each supported Kubernetes
// version has its module file in versions/ (written by modfile.sh), and
// test/tools/tools.mk builds main.go with -modfile=versions/<version>.mod.
module github.com/dualca/dualca/test/tools/kube-apiserver

go 1.26.8
