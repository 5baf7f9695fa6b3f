package deviceplugin

import "github.com/dynmig/dynmig/kube"

// HealthAction is the action of the plugin's GPU health Events.
const HealthAction = kube.HealthAction
