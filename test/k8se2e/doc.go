// Package k8se2e holds the integration tests of the Kubernetes source
// against a real kube-apiserver (internal/apiserver) and real packets between
// network namespaces (internal/netns):
//
//   - TestIntegrationDeployManifests creates every object under deploy/ on
//     the API server with strict field validation, so the server itself
//     validates the DaemonSet, the RBAC objects and the example policies.
//   - TestIntegrationAPIServerToKernel runs `nftpolicy run --kubeconfig`
//     with a ServiceAccount token bound to deploy/rbac.yaml's ClusterRole
//     under --authorization-mode=RBAC, and drives it through the API:
//     pods and pod IPs (status subresource), policies, namespace and pod
//     labels; after each write it measures the time until the kernel's
//     table changes and then probes the pods with real packets. It restarts
//     the API server and shows that the daemon keeps enforcing and then
//     catches up.
//   - TestIntegrationAPIServerDown stops the API server under a running
//     daemon: /readyz turns 503 naming the API server and the error, the
//     table and the packets stay as they were, the failure is logged once
//     rather than per retry; after a restart (same etcd) /readyz is 200
//     again by itself and a policy created then is programmed.
//
// They need root, the internal/netns tools, and the binaries of
// hack/tools/build.sh; without them they skip, or fail when $CI is set.
package k8se2e
