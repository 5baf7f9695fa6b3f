package backend

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/dynmig/dynmig/internal/wiring/cli"
	"github.com/dynmig/dynmig/realize"
)

// HealthCheckFlags defines -disable-healthchecks and -enable-healthchecks
// on fs, whose defaults are the environment variables NVIDIA's device
// plugin reads ($DP_DISABLE_HEALTHCHECKS, $DP_ENABLE_HEALTHCHECKS) with
// their meaning ([realize.ParseHealthChecks]). Call the returned func after
// fs.Parse; it returns the checks, or a [*cli.FlagError] naming the flag
// whose entry [realize.ParseHealthChecks] refused (its Err is the
// [*realize.HealthChecksError]).
func HealthCheckFlags(fs *flag.FlagSet) func() (realize.HealthChecks, error) {
	disable := fs.String("disable-healthchecks", os.Getenv(realize.EnvDisableHealthChecks),
		`GPU health checks to disable, as NVIDIA's device plugin: "all" or "xids" (no Xid marks a GPU unhealthy; with nothing enabled, no health watch runs), or comma-separated Xids to ignore besides the application Xids 13,31,43,45,68,109 (default $`+realize.EnvDisableHealthChecks+`)`)
	enable := fs.String("enable-healthchecks", os.Getenv(realize.EnvEnableHealthChecks),
		`comma-separated Xids that mark a GPU unhealthy even when disabled or application Xids, or "all" (default $`+realize.EnvEnableHealthChecks+`)`)
	return func() (realize.HealthChecks, error) {
		checks, err := realize.ParseHealthChecks(*disable, *enable)
		var he *realize.HealthChecksError
		if !errors.As(err, &he) {
			return checks, err
		}
		flag, value := "disable-healthchecks", *disable
		if he.Setting == realize.EnvEnableHealthChecks {
			flag, value = "enable-healthchecks", *enable
		}
		return checks, &cli.FlagError{Flag: flag, Value: value, Err: err,
			Reason: fmt.Sprintf(`entry %d %q is not an Xid (a decimal number), "all" or "xids"`, he.Index+1, he.Entry)}
	}
}
