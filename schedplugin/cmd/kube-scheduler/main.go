// Command kube-scheduler is the upstream kube-scheduler with dynmig's
// framework plugin registered as "DynMIG" (schedplugin.Name). Enable it in
// a profile of the KubeSchedulerConfiguration passed with --config; see
// schedplugin/deploy in the repository, or the Helm chart's
// scheduler.mode plugin.
//
// --version prints the Kubernetes version it is built from; the log's
// first line names dynmig's build (the image's version and revision).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	dcli "github.com/dynmig/dynmig/internal/wiring/cli"
	"github.com/dynmig/dynmig/schedplugin"
)

func main() {
	klog.InfoS("DynMIG scheduler plugin", "build", dcli.BuildVersion().String())
	cmd := app.NewSchedulerCommand(app.WithPlugin(schedplugin.Name, schedplugin.Factory(schedplugin.Options{})))
	os.Exit(cli.Run(cmd))
}
