// Package cli holds what every dynmig binary shares: the common flags
// (-version, -log-format, -log-level, -v), the slog logger they configure
// with client-go's klog output routed into it, the build's version, and
// the operations HTTP server (/healthz, /readyz, /metrics).
//
// Flags are registered on a caller's flag.FlagSet ([Register]) and read
// after it is parsed ([Flags.Logger], [Flags.Version]). [Parse] parses a
// binary's arguments and returns the exit code every dynmig binary uses
// (0 for -h, 64 for a usage error, as migctl); nothing here exits.
//
// A binary checks its own flags in the check [Flags.Start] runs, after
// parsing and before any logger, cluster connection or hardware exists:
// [Required], [NotNegative] and [FlagError] name the flag as the operator
// typed it, never a Go identifier, and [ReportUsage] prints every problem,
// one a line. [SetUsage] opens -h with one sentence saying what the binary
// is.
//
// klog is process-wide state: [Flags.Logger] points klog at the logger it
// returns (klog.SetSlogLogger) and sets klog's verbosity to -v, so the
// logs of client-go and of the component share one format and one
// stream. A klog V(n) record becomes a slog record at level -n, which the
// handler keeps when -v is at least n.
//
// The version is the main module's version and VCS revision from
// runtime/debug.ReadBuildInfo. Builds without VCS stamping (go build
// -buildvcs=false, or a source tree without .git, as in an image build)
// set them with the linker: -X github.com/dynmig/dynmig/internal/wiring/cli.version=V
// and -X github.com/dynmig/dynmig/internal/wiring/cli.revision=R, which win over
// the build info.
//
// The operations server answers /healthz with 200 while the process
// serves, /readyz with 200 once the component's readiness check passes
// (503 and the reason before, with the failing API server requests of
// the component's [APIMonitor]), and /metrics from the component's
// Prometheus registry. It runs until the context given to [ServeOps] is
// done; the function returned waits for it to stop.
package cli
