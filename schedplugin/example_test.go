package schedplugin_test

import (
	"time"

	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"github.com/dynmig/dynmig/schedplugin"
)

// A kube-scheduler command with DynMIG registered, as cmd/kube-scheduler
// builds it; the profile's pluginConfig args override the options. Run it
// with cli.Run(cmd) and --config naming a KubeSchedulerConfiguration that
// enables DynMIG (schedplugin/deploy/kube-scheduler-config.yaml).
func ExampleFactory() {
	cmd := app.NewSchedulerCommand(app.WithPlugin(schedplugin.Name,
		schedplugin.Factory(schedplugin.Options{LockTimeout: 3 * time.Minute})))
	_ = cmd
}
