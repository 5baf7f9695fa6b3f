# file: deviceplugin/select.go
# guard: the device plugin refuses a candidate the kubelet already admitted
s/^\tif kube\.Admitted(pod) {$/\tif false \&\& kube.Admitted(pod) {/
