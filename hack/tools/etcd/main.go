// Command etcd is the etcd server, built from go.etcd.io/etcd/server/v3 for
// internal/apiserver (upstream's own main, in the go.etcd.io/etcd/v3 root module,
// is exactly this call).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
