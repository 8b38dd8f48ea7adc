// Command etcd is a thin wrapper around go.etcd.io/etcd/server/v3/etcdmain so
// that an etcd binary for envtest can be built from Go modules alone
// (`go install go.etcd.io/etcd/server/v3@...` is rejected because of the
// replace directives in etcd's own go.mod).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
