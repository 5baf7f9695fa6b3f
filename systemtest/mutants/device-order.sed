# file: deviceplugin/plugin.go
# guard: a container's response lists its devices in the record's device order (mutant: reversed)
s/^\t\tuuids\[i\] = d\.Runtime\.MIGUUID$/\t\tuuids[len(uuids)-1-i] = d.Runtime.MIGUUID/
