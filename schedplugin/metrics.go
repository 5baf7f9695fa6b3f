package schedplugin

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// MetricStaleClaims is the counter of node claims found past the lock
// timeout, the extender's dynmig_scheduler_stale_claims_total: each
// claim counts once, when it is reported with a [StaleClaimReason] event.
// kube-scheduler serves it on its own /metrics.
const MetricStaleClaims = "dynmig_scheduler_stale_claims_total"

// staleClaims is shared by every profile's plugin: kube-scheduler's
// metrics live in one process-wide registry.
var staleClaims = metrics.NewCounter(&metrics.CounterOpts{
	Name:           MetricStaleClaims,
	Help:           "MIG pods bound to a node whose reservation was not realized within the lock timeout.",
	StabilityLevel: metrics.ALPHA,
})

var registerMetrics sync.Once

// registerMetricsOnce registers the plugin's metrics with kube-scheduler's
// registry (legacyregistry) the first time a plugin is built.
func registerMetricsOnce() {
	registerMetrics.Do(func() { legacyregistry.MustRegister(staleClaims) })
}
