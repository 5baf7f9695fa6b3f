# file: deviceplugin/record.go
# guard: the recorded view gives a container its recorded devices (mutant: they are dropped)
s/^\t\tcase ok && !emitted\[a\.ContainerIndex\]:$/\t\tcase false \&\& ok \&\& !emitted[a.ContainerIndex]:/
