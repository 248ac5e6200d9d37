// Package check holds the tests of the repository's packaging: the Dockerfile at the
// repository's root and the Kubernetes manifests in deploy/kubernetes. It is a module
// of its own so that the Kubernetes API types it decodes the manifests into stay out
// of the product's go.mod. Run it with `make manifests` (part of `make test`), or
// `go -C deploy/kubernetes/check test ./...`.
//
// What it checks, and how:
//
//   - Every YAML document under deploy/kubernetes decodes strictly into its API type
//     (k8s.io/api, the Prometheus Operator's PodMonitor, kustomize's Kustomization;
//     cert-manager's Issuer and Certificate into minimal structs of this package):
//     an unknown or misspelt field, a duplicate key or a wrong type fails.
//   - Each kustomization renders (kustomize's own library, as `kubectl apply -k`), and
//     its output decodes strictly too. The rules the manifests' comments state are
//     checked on that output (rules_test.go).
//   - The Dockerfile's claims that need no Docker engine (dockerfile_test.go), and its
//     `go build` command line, run as written, makes a static binary.
//   - That binary knows every FANOUT_* variable the manifests give the sidecar, starts
//     with them, and answers the probes' gRPC health checks on the admin port
//     (sidecar_test.go).
package check
