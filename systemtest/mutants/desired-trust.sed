# file: reservation/desired.go
# guard: the desired-set trust rule (a record on a pod that requests no device owns nothing)
s/^\t\tif len(reasons) > 0 && !pod\.RequestsDevices() && listed\[pod\.UID\] == 1 && pod\.UID != "" {$/\t\tif false \&\& len(reasons) > 0 \&\& !pod.RequestsDevices() \&\& listed[pod.UID] == 1 \&\& pod.UID != "" {/
