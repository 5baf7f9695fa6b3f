# file: deviceplugin/record.go
# guard: the recorded view keeps a container's requested devices that no recorded device stands for (mutant: a container with any recorded device has only those)
s/^\t\tcase ok \&\& (hasDevice(devs, a\.DeviceIndex) || !requested(pod, a)):$/\t\tcase ok:/
