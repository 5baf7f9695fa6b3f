# file: deviceplugin/record.go
# guard: the checkpoint's recorded hand-outs are applied after a restart (overlay)
s/^\t\tcase ok && d\.GPUUUID == a\.GPUUUID && d\.Profile == a\.Profile && d\.Placement == a\.Placement:$/\t\tcase false \&\& ok \&\& d.GPUUUID == a.GPUUUID \&\& d.Profile == a.Profile \&\& d.Placement == a.Placement:/
