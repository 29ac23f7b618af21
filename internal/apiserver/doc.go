// Package apiserver runs a real etcd and kube-apiserver on 127.0.0.1 for
// integration tests, from the binaries that hack/tools/build.sh builds.
//
// # What it starts
//
// Start generates, in a temporary directory, a CA and a serving certificate
// for 127.0.0.1, a service-account signing key, and a static token file with
// one admin token (group system:masters). It then starts
//
//	etcd --data-dir DIR/etcd --listen-client-urls http://127.0.0.1:P ... --unsafe-no-fsync
//	kube-apiserver --bind-address 127.0.0.1 --secure-port Q --etcd-servers http://127.0.0.1:P
//	    --token-auth-file DIR/tokens.csv --service-account-{issuer,key-file,signing-key-file} ...
//	    --authorization-mode AlwaysAllow (RBAC with Options.RBAC)
//	    --endpoint-reconciler-type none --disable-admission-plugins ServiceAccount
//
// and returns once /readyz answers 200. The endpoint reconciler is off
// because loopback cannot be the address of the kubernetes Service, and the
// ServiceAccount admission plugin is off so that pods can be created in a
// namespace before its controller-made default ServiceAccount exists (no
// controller manager runs). The TokenRequest API works, so a test can mint
// a ServiceAccount token (Server.ServiceAccountToken) and prove an RBAC role.
//
// # Binaries
//
// Start looks for kube-apiserver and etcd in $NFTPOLICY_TOOLS_BIN, else in
// hack/tools/bin of the repository around the working directory. StartTest
// skips a test when they are missing, and fails it when $CI is set.
package apiserver
