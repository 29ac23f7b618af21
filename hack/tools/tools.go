//go:build tools

// Package tools pins the programs that hack/tools/build.sh builds.
package tools

import (
	_ "go.etcd.io/etcd/server/v3/etcdmain"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
