# file: deviceplugin/plugin.go
# guard: a container's response hands every device it asked for (mutant: only the first)
s/^\t\tcresp, err := containerResponse(p\.cfg\.DeviceListStrategy, uuids) \/\/ devicelist\.go$/\t\tcresp, err := containerResponse(p.cfg.DeviceListStrategy, uuids[:1]) \/\/ devicelist.go/
