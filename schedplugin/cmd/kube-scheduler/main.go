// Command kube-scheduler is the upstream kube-scheduler with dynmig's
// framework plugin registered as "DynMIG" (schedplugin.Name). Enable it in
// a profile of the KubeSchedulerConfiguration passed with --config; see
// deploy/scheduler-plugin in the repository.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"github.com/dynmig/dynmig/schedplugin"
)

func main() {
	cmd := app.NewSchedulerCommand(app.WithPlugin(schedplugin.Name, schedplugin.Factory(schedplugin.Options{})))
	os.Exit(cli.Run(cmd))
}
