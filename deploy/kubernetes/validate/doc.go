// Package validate holds the offline checks of deploy/kubernetes and
// deploy/compose (go test in this directory; `make test-deploy`): every
// kustomize overlay rendered in-process and each object decoded strictly
// into its Kubernetes type (KEDA's against its CRD's OpenAPI schema), every
// flag, variable, port, probe path and metric name they use checked against
// the ordercast binary built from this checkout, and the compose file loaded
// by compose-spec's loader. A module of its own, so that the Kubernetes and
// compose libraries stay out of the runtime's module graph.
package validate
