// Package charttest renders the Helm chart deploy/helm/dynmig with Helm's
// own Go engine (helm.sh/helm/v3 pkg/chart/loader, pkg/chartutil,
// pkg/engine) and checks the objects it makes, offline and without a helm
// binary. It is a module of its own so that the library's go.mod does not
// carry Helm's dependencies; run it with
//
//	cd deploy/helm/charttest && go test ./...
//
// [Render] is also what the e2e module may use to install the chart's
// objects into its test cluster.
package charttest
